//! Tests of the benchmarks' processes, windows and daemon logs.

/// The mean slice per tenant in the window counts an unstretched slot at the
/// timeslice.
#[test]
fn the_slices_used_come_from_the_daemon_s_log() {
    let log = std::env::temp_dir().join(format!("gmux-slices-{}.log", std::process::id()));
    std::fs::write(
        &log,
        "gmuxd: serving x\n\
         gmuxd 1970-01-01T00:00:00.500Z: a started 5.0 ms after its switch (holds 1 GiB, wants 2 GiB); its slice is stretched to 900 ms (a switch costs 225.0 ms)\n\
         gmuxd 1970-01-01T00:00:01.000Z: a started 5.0 ms after its switch (holds 1 GiB, wants 2 GiB)\n\
         gmuxd 1970-01-01T00:00:01.300Z: a ran 10 commands in 205.0 ms\n\
         gmuxd 1970-01-01T00:00:01.400Z: b started 50.0 ms after its switch (holds 1 GiB, wants 2 GiB); its slice is stretched to 900 ms (a switch costs 225.0 ms)\n\
         gmuxd 1970-01-01T00:00:02.400Z: a started 40.0 ms after its switch (holds 1 GiB, wants 2 GiB); its slice is stretched to 600 ms (a switch costs 150.0 ms)\n",
    )
    .unwrap();
    let slice = super::slices_in_log(&log, 1.0, "200ms");
    assert_eq!((slice("a"), slice("b"), slice("c")), ("400000us".to_string(), "900000us".to_string(), "200ms".to_string()));
    let starts = super::slot_starts(&log);
    let waits: Vec<(&str, f64, Option<f64>)> = starts.iter().map(|s| (s.tenant.as_str(), s.wait_ms, s.stretched_ms)).collect();
    assert_eq!(waits, [("a", 5.0, Some(900.0)), ("a", 5.0, None), ("b", 50.0, Some(900.0)), ("a", 40.0, Some(600.0))]);
    std::fs::remove_file(&log).unwrap();
}

/// The window opens `settle` seconds after the last workload is ready, when that is
/// later than its start, and the workloads are told the same.
#[test]
fn the_window_opens_once_the_workloads_have_run_together_for_the_settle_time() {
    let ready = std::env::temp_dir().join(format!("gmux-settle-{}", std::process::id()));
    std::fs::create_dir_all(&ready).unwrap();
    std::fs::write(ready.join("1.ready"), "").unwrap();
    let marked = std::fs::metadata(ready.join("1.ready")).unwrap().modified().unwrap().duration_since(super::UNIX_EPOCH).unwrap().as_secs_f64();
    let w = super::Window { start: marked - 100.0, settle: 0.3, duration: 0.05 };
    let (opened, before, after) = super::measure_window(&ready, 1, std::time::Duration::from_secs(1), w, "test", super::unix_now, &mut || None);
    assert!((opened - (marked + 0.3)).abs() < 1e-6, "opened {opened}, the workload was ready at {marked}");
    assert!(before >= opened && after >= opened + 0.05, "measured at {before} and {after}");
    let args = super::window_args(w, &ready, 1, std::path::Path::new("r.json"));
    let settle = args.iter().position(|a| a == "--settle").map(|i| args[i + 1].as_str());
    assert_eq!(settle, Some("0.3"));
    std::fs::remove_dir_all(&ready).unwrap();
}

/// The interpreter is checked before any tenant starts: no PyTorch, or no GPU, is said
/// at once, with the fix.
#[test]
fn a_python_without_torch_or_a_gpu_is_refused_with_the_fix() {
    let dir = std::env::temp_dir().join(format!("gmux-python-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fake = |name: &str, code: i32, say: &str| {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\necho '{say}'\nexit {code}\n")).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        p.display().to_string()
    };
    let msg = |r: Result<(), crate::Failure>| r.unwrap_err().message().to_string();
    let no_torch = msg(super::check_python(&fake("notorch", 3, "No module named torch")));
    assert!(no_torch.contains("has no PyTorch (No module named torch)") && no_torch.contains("--python"), "{no_torch}");
    let no_gpu = msg(super::check_python(&fake("nogpu", 4, "")));
    assert!(no_gpu.contains("sees no GPU") && no_gpu.contains("nvidia-smi"), "{no_gpu}");
    assert!(super::check_python(&fake("fine", 0, "")).is_ok());
    let missing = msg(super::check_python("/nonexistent/python"));
    assert!(missing.contains("cannot run the interpreter") && missing.contains("--python PATH"), "{missing}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A workload that exits before it is ready ends the wait at once, instead of after the
/// whole setup time.
#[test]
fn a_workload_that_exits_during_its_setup_ends_the_wait_at_once() {
    let ready = std::env::temp_dir().join(format!("gmux-exited-{}", std::process::id()));
    std::fs::create_dir_all(&ready).unwrap();
    let mut asked = 0;
    let mut exited = || {
        asked += 1;
        (asked >= 3).then(|| "lp (exit status: 1)".to_string())
    };
    let t0 = std::time::Instant::now();
    let r = super::ready_at(&ready, 2, std::time::Duration::from_secs(60), &mut exited);
    assert_eq!(r, Err(super::NotReady::Exited("lp (exit status: 1)".into())));
    assert!(t0.elapsed() < std::time::Duration::from_secs(5), "waited {:?}", t0.elapsed());
    let mut child = std::process::Command::new("sh").args(["-c", "exit 3"]).spawn().unwrap();
    let _ = child.wait();
    let mut children = vec![("hp".to_string(), child)];
    assert_eq!(super::Lab::first_exited(&mut children).as_deref(), Some("hp (exit status: 3)"));
    std::fs::remove_dir_all(&ready).unwrap();
}

/// The stalled time is the `some` line's total, in µs, not the `full` one's.
#[test]
fn the_stalled_time_is_the_some_total() {
    let text = "some avg10=63.21 avg60=15.35 avg300=3.28 total=10000000\nfull avg10=12.64 avg60=3.07 avg300=0.66 total=2000000";
    assert_eq!(super::pressure_total(text), Some(10_000_000));
    assert_eq!(super::pressure_total("full avg10=0.00 avg60=0.00 avg300=0.00 total=5"), None);
}
