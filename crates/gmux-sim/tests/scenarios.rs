//! The shipped scenarios, run with numeric expectations.

use gmux_sim::{load_scenario, run, Report, Row};
use std::path::Path;

fn report(name: &str, duration: Option<&str>) -> Report {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios").join(format!("{name}.toml"));
    let mut s = load_scenario(&path).unwrap();
    if let Some(d) = duration {
        s.file.duration = d.into();
    }
    let r = run(&s, &mut |_| {}).unwrap();
    for row in &r.results {
        assert_eq!(row.violations, 0, "{name}: {} {} ran a command with a chunk missing", row.system, row.variant);
    }
    r
}

fn row<'a>(r: &'a Report, system: &str, variant: &str, sub: Option<f64>) -> &'a Row {
    r.results
        .iter()
        .find(|x| x.system == system && x.variant == variant && x.subscription == sub)
        .unwrap_or_else(|| panic!("no row {system} {variant} {sub:?}"))
}

#[test]
fn msched_micro_gmux_fits_and_um_collapses() {
    let r = report("msched-micro", Some("4s"));
    let t = |s: &str, sub: f64| row(&r, s, "", Some(sub)).throughput_norm.unwrap();
    assert!(t("gmux-exact", 100.0) >= 0.99, "gmux-exact at 100%: {}", t("gmux-exact", 100.0));
    assert_eq!(row(&r, "gmux-exact", "", Some(100.0)).bytes_h2d, 0, "nothing migrates when everything fits");
    assert!(t("um", 100.0) >= 0.95, "um at 100%: {}", t("um", 100.0));
    for sub in [150.0, 200.0, 300.0] {
        assert!(t("um", sub) <= 0.25, "um must collapse past 100% (MSched Fig. 6): {} at {sub}%", t("um", sub));
        assert!(t("gmux-exact", sub) > 2.0 * t("um", sub), "gmux-exact vs um at {sub}%");
        let exact = row(&r, "gmux-exact", "", Some(sub));
        let ideal = row(&r, "ideal", "", Some(sub));
        assert!(ideal.bytes_h2d <= exact.bytes_h2d, "OPT bound moves no more than gmux at {sub}%");
        let ratio = exact.throughput_norm.unwrap() / ideal.throughput_norm.unwrap();
        assert!(ratio >= 0.95, "gmux-exact at {ratio:.3} of ideal at {sub}%");
    }
}

#[test]
fn priority_keeps_rt_p99_near_alone_while_be_progresses() {
    let r = report("priority", None);
    let alone = row(&r, "gmux-exact", "alone", None).p99_ms.unwrap();
    let prio = row(&r, "gmux-exact", "priority", Some(100.0));
    let rr = row(&r, "gmux-exact", "rr", Some(100.0));
    assert!(prio.p99_ms.unwrap() <= 1.2 * alone, "RT P99 {} vs alone {alone}", prio.p99_ms.unwrap());
    assert!(rr.p99_ms.unwrap() > 2.0 * prio.p99_ms.unwrap(), "round robin should hurt RT: {:?}", rr.p99_ms);
    assert!(prio.be_tasks_per_s.unwrap() > 1.0, "BE starves: {:?}", prio.be_tasks_per_s);
    assert!(prio.bytes_h2d > 0, "the scenario must be under memory pressure");
}

#[test]
fn paella_srpt_deficit_halves_short_job_p99() {
    let r = report("paella-mix", None);
    let fifo = row(&r, "gmux-exact", "fifo", None).p99_ms.unwrap();
    let srpt = row(&r, "gmux-exact", "srpt-deficit", None).p99_ms.unwrap();
    assert!(srpt * 2.0 <= fifo, "SRPT+deficit P99 {srpt} ms vs FIFO {fifo} ms");
    // Without a deficit bound, shortest-job-first favours the short jobs further; round
    // robin over clients lands between FIFO and SRPT.
    let sjf = row(&r, "gmux-exact", "sjf", None).p99_ms.unwrap();
    let rr = row(&r, "gmux-exact", "rr", None).p99_ms.unwrap();
    assert!(sjf <= srpt, "SJF P99 {sjf} ms vs SRPT+deficit {srpt} ms");
    assert!(rr * 2.0 <= fifo && rr >= srpt, "round robin P99 {rr} ms between SRPT+deficit {srpt} and FIFO {fifo}");
}

/// gmuxd's release policies over processes (the daemon's `Releaser`): holding the long
/// jobs' processes while short jobs run cuts the short jobs' tail well below native time
/// slicing; FIFO over jobs does not.
#[test]
fn gmuxd_release_srpt_deficit_cuts_the_short_jobs_tail_under_native() {
    let r = report("gmuxd-release", None);
    let native = row(&r, "native", "time slicing", None).p99_ms.unwrap();
    let srpt = row(&r, "gmuxd", "release srpt-deficit", None).p99_ms.unwrap();
    let fifo = row(&r, "gmuxd", "release fifo", None).p99_ms.unwrap();
    assert!(srpt * 3.0 <= native, "srpt-deficit P99 {srpt} ms vs native {native} ms");
    assert!(fifo > 2.0 * srpt, "FIFO P99 {fifo} ms vs srpt-deficit {srpt} ms");
}

#[test]
fn gmt_tiers_reuse_beats_tier_order_and_two_tier() {
    let r = report("gmt-tiers", None);
    let t = |v: &str| row(&r, "gmux-exact", v, Some(100.0)).throughput_norm.unwrap();
    assert!(t("reuse") > 1.5 * t("tier-order"), "reuse {} vs tier-order {}", t("reuse"), t("tier-order"));
    assert!(t("reuse") > 1.5 * t("two-tier"), "reuse {} vs two-tier {}", t("reuse"), t("two-tier"));
    let disk = |v: &str| row(&r, "gmux-exact", v, Some(100.0)).bytes_disk_read;
    assert!(disk("reuse") < disk("tier-order"), "reuse must serve part of the scan from the host tier");
    assert_eq!(row(&r, "gmux-exact", "two-tier", Some(100.0)).bytes_d2h, 0, "2-tier drops clean chunks, never copies them out");
}

#[test]
fn every_scenario_loads() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            load_scenario(&p).unwrap_or_else(|e| panic!("{e}"));
            n += 1;
        }
    }
    assert!(n >= 5, "expected the five shipped scenarios, found {n}");
}

#[test]
fn bad_scenarios_are_refused_with_the_fix() {
    let dir = std::env::temp_dir().join(format!("gmux-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        ("duration = \"1s\"\n", "no [[tenant]]"),
        ("duration = \"1s\"\nsystems=[\"magic\"]\n[[tenant]]\nname=\"a\"\nworkload={kind=\"vecadd\",footprint=\"1G\"}\n", "unknown system"),
        ("duration = \"1s\"\nsystems=[\"um\"]\n[[tenant]]\nname=\"a\"\nworkload={kind=\"vecadd\",footprint=\"1G\"}\n", "gpu budget missing"),
        ("duration = \"1s\"\ngpu=\"lots\"\n[[tenant]]\nname=\"a\"\nworkload={kind=\"vecadd\",footprint=\"1G\"}\n", "bad size"),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let p = dir.join(format!("{i}.toml"));
        std::fs::write(&p, text).unwrap();
        let msg = load_scenario(&p).unwrap_err().to_string();
        assert!(msg.contains(want), "case {i}: {msg}");
    }
    let msg = load_scenario(Path::new("/nonexistent/x.toml")).unwrap_err().to_string();
    assert!(msg.contains("check the path"), "{msg}");
}

/// The daemon's own arbiter over per-process runtimes: nothing moves when everything
/// fits, and over the budget the processes never hold more than it together (the run
/// fails otherwise) while the switches move memory.
#[test]
fn gmuxd_runs_the_real_decisions_within_the_budget() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/msched-micro.toml");
    let mut s = load_scenario(&path).unwrap();
    s.file.duration = "3s".into();
    s.file.systems = vec!["in-hbm".into(), "gmuxd".into()];
    s.file.subscriptions = vec![100.0, 300.0];
    let r = run(&s, &mut |_| {}).unwrap();
    let fits = row(&r, "gmuxd", "", Some(100.0));
    assert!(fits.throughput_norm.unwrap() >= 0.98, "gmuxd at 100%: {:?}", fits.throughput_norm);
    assert_eq!(fits.bytes_h2d, 0, "nothing migrates when everything fits");
    let over = row(&r, "gmuxd", "", Some(300.0));
    let t = over.throughput_norm.unwrap();
    assert!((0.1..0.9).contains(&t), "gmuxd at 300%: {t}");
    assert!(over.bytes_h2d > 16 << 30, "switches bring memory in: {} B", over.bytes_h2d);
}

/// `processes = true` applies dispatchers: without any, the file is refused with the fix.
#[test]
fn processes_without_dispatchers_is_refused() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/gmuxd-release.toml");
    let mut s = load_scenario(&path).unwrap();
    assert_eq!(s.file.validate(), Ok(()));
    s.file.dispatchers.clear();
    let e = s.file.validate().unwrap_err();
    assert!(e.contains("processes = true applies dispatchers as gmuxd does: add dispatchers = [...]"), "{e}");
}
