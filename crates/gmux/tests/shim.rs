//! `libgmux.so` on the CPU stand-in of the CUDA driver (no GPU): `standin_app` run under
//! the real CLI, `gmux run --mem-limit SIZE -- standin_app ...`. The stand-in aborts on any
//! access to device memory that is not mapped with access, so a chunk the shim failed to
//! bring back before a kernel or a copy ends the run; the app checks every byte it reads
//! against a host model; the shim's exit summary (`GMUX_LOG=info`) and the stand-in's
//! call counters give the numbers asserted on.

mod common;

use common::summary::{assert_no_shim_complaints, summary, Summary};
use common::{gmux_bin, number, run_within, Ran, Sandbox};
use std::process::Command;
use std::time::Duration;

const MIB: u64 = 1 << 20;
const CHUNK: u64 = 2 * MIB;
/// Device memory of the stand-in: the shim keeps 512 MiB of the device's free memory as
/// headroom and lowers a limit above the rest, so this stays well above limit + 512 MiB.
const DEVICE: u64 = 1 << 30;
/// Longest any one run may take before it is killed as hung.
const PATIENCE: Duration = Duration::from_secs(60);

/// Runs `cmd` and requires exit status 0.
fn ok(cmd: &mut Command) -> Ran {
    let r = run_within(cmd, PATIENCE);
    assert!(r.status.success(), "expected success:\n{}", r.describe());
    r
}

fn oversub_args(total: u64, seed: u64, extra: &[&str]) -> Vec<String> {
    let args = format!("oversub --total {total} --buffers 40 --ops 800 --seed {seed} --streams 4");
    args.split(' ').map(str::to_owned).chain(extra.iter().map(|s| s.to_string())).collect()
}

/// `oversub` over three times the limit: every read-back matches the model, the shim
/// evicted and populated, and never held more than the limit.
fn oversubscribed(name: &str, seed: u64, env: &[(&str, &str)]) -> (Ran, Summary) {
    let sb = Sandbox::new(name, DEVICE);
    let mut cmd = sb.gmux(Some("16M"), oversub_args(48 * MIB, seed, &["--counters"]));
    cmd.envs(env.iter().copied());
    let r = ok(&mut cmd);
    assert!(r.stdout.contains("oversub: 40 buffers, 800 ops"), "{}", r.describe());
    assert_eq!(number(&r.stdout, "checksum mismatches: "), 0, "{}", r.describe());
    let s = summary(&r);
    assert_eq!(s.limit, (16 * MIB) as f64, "{s:?}\n{}", r.describe());
    assert!(s.evicted > 0 && s.populated > 0, "no eviction at 3x the limit: {s:?}\n{}", r.describe());
    assert!(s.peak_resident <= (16 * MIB) as f64, "peak resident above the limit: {s:?}\n{}", r.describe());
    // Physical memory the device held at once, released memory still mapped included.
    assert!(number(&r.stdout, "peak_live=") <= 16 * MIB, "the device held more than the limit:\n{}", r.describe());
    assert!(s.commands >= 800, "{s:?}\n{}", r.describe());
    assert_no_shim_complaints(&r);
    (r, s)
}

#[test]
fn oversubscription_keeps_every_byte() {
    oversubscribed("oversub", 1, &[]);
}

#[test]
fn oversubscription_with_random_delays() {
    oversubscribed("oversub-delay", 2, &[("GMUX_STANDIN_DELAY_US", "200")]);
}

#[test]
fn oversubscription_with_the_sequential_mover() {
    oversubscribed("oversub-seq", 3, &[("GMUX_MOVER", "sequential")]);
}

/// Weights read from two streams with no event between them: stream B's read waits for
/// the population that stream A's read caused. The stand-in's random delays hold the
/// population back long enough that a read not waiting for it sees another chunk's data.
/// LRU eviction, so that the weights leave and come back every round (OPT from the
/// history would learn to keep them).
#[test]
fn a_population_for_one_stream_is_awaited_by_another() {
    let sb = Sandbox::new("shared-read", DEVICE);
    let mut cmd = sb.gmux(Some("16M"), ["shared-read", "--bytes", "4M", "--rounds", "12"]);
    let r = ok(cmd.env("GMUX_STANDIN_DELAY_US", "3000").env("GMUX_EVICT", "lru"));
    assert!(r.stdout.contains("shared-read: 12 rounds, mismatches: 0"), "{}", r.describe());
    let line = r.stderr.lines().find(|l| l.starts_with("gmux: limit ")).expect("summary");
    assert!(number(line, "waits for others' populations ") >= 12, "each round's read on stream B waits: {line}");
    let s = summary(&r);
    assert!(s.populated >= 12 * 2, "the weights come back every round: {s:?}");
    assert_no_shim_complaints(&r);
}

#[test]
fn a_limit_above_the_footprint_never_evicts() {
    let sb = Sandbox::new("oversub-fits", DEVICE);
    let r = ok(&mut sb.gmux(Some("128M"), oversub_args(48 * MIB, 1, &[])));
    assert_eq!(number(&r.stdout, "checksum mismatches: "), 0, "{}", r.describe());
    let s = summary(&r);
    assert_eq!((s.evicted, s.populated), (0, 0), "{s:?}\n{}", r.describe());
    assert!(s.created > 0 && s.peak_resident <= (128 * MIB) as f64, "{s:?}\n{}", r.describe());
    assert_no_shim_complaints(&r);
}

/// Physical chunks are reused from eviction to population, and access is set once per
/// contiguous run of chunks, not per chunk. The counters are read after the ops, before
/// the final read-backs and frees.
#[test]
fn physical_chunks_are_reused_and_access_is_batched() {
    let (r, s) = oversubscribed("counters", 4, &[]);
    let line = r.stdout.lines().find(|l| l.starts_with("counters: ")).unwrap_or_else(|| panic!("no counters line:\n{}", r.describe()));
    let c = |k: &str| number(line, &format!("{k}="));
    let (creates, maps, set_access, releases, live, freed) = (c("creates"), c("maps"), c("set_access"), c("releases"), c("live"), c("freed_chunks"));
    let limit_chunks = 16 * MIB / CHUNK;
    assert!(live <= 16 * MIB, "{live} bytes of physical memory live, above the limit:\n{line}");
    // Handles span one chunk or more (an extent), so live handles hold at least a chunk each.
    assert!((creates - releases) * CHUNK <= live, "{line}");
    // Handles are released when the program frees their allocation, or when spares of
    // the wrong length must make room; the others carry evicted data's replacement.
    assert!(releases <= freed + limit_chunks, "released more handles than the program freed plus the limit:\n{line}");
    assert!(creates <= 2 * limit_chunks + freed, "cuMemCreate called far beyond the limit plus what was freed:\n{line}\n{s:?}");
    assert!(creates * 10 < s.populated, "chunks created per population? {line}\n{s:?}");
    assert!(set_access < maps, "cuMemSetAccess is not batched over contiguous runs:\n{line}");
}

/// Runs `standin_app ARGS` (space-separated) under `limit` with one shim variable set;
/// requires success and 0 mismatches.
fn ok_with(limit: &str, args: &str, var: &str, value: &str) -> Ran {
    let sb = Sandbox::new(&format!("{}-{value}", args.split(' ').next().unwrap_or("app")), DEVICE);
    let mut cmd = sb.gmux(Some(limit), args.split(' ').map(str::to_owned).collect::<Vec<_>>());
    let r = ok(cmd.env(var, value));
    assert_eq!(number(&r.stdout, "mismatches: "), 0, "{}", r.describe());
    r
}

/// Buffers of 2 to 50 MiB at 3× a 128 MiB limit: extents of 32 MiB move with
/// one mapping each, so the shim maps far fewer times than it moves chunks; with
/// `GMUX_EXTENT=2M` it maps about once per chunk. Every byte survives either way.
#[test]
fn extents_map_many_chunks_at_once() {
    let maps_per_chunk = |extent: &str| {
        let args = format!("oversub --total {} --buffers 16 --ops 60 --seed 3 --streams 2 --counters", 384 * MIB);
        let r = ok_with("128M", &args, "GMUX_EXTENT", extent);
        let line = r.stdout.lines().find(|l| l.starts_with("counters: ")).unwrap_or_else(|| panic!("no counters line:\n{}", r.describe()));
        let s = summary(&r);
        assert!(s.evicted > 0 && s.peak_resident <= (128 * MIB) as f64, "{s:?}");
        number(line, "maps=") as f64 / (s.populated + s.created) as f64
    };
    let (chunked, extents) = (maps_per_chunk("2M"), maps_per_chunk("32M"));
    assert!(chunked > 0.8, "2 MiB extents map once per chunk or so, got {chunked:.2}");
    assert!(extents < 0.5 * chunked, "32 MiB extents should map far less often: {extents:.2} vs {chunked:.2} maps per chunk moved");
}

/// A loop over 8 buffers of 4 MiB under a 20 MiB limit (room for 5): LRU evicts the
/// buffer the loop needs next, every time; OPT over the forecast from the process's own
/// history (the default) keeps most of the loop resident once it has seen it run.
#[test]
fn history_opt_moves_less_than_lru_on_a_loop() {
    let run = |evict: &str| {
        let r = ok_with("20M", &format!("loop --buffers 8 --bytes {} --rounds 12", 4 * MIB), "GMUX_EVICT", evict);
        let line = r.stderr.lines().find(|l| l.starts_with("gmux: limit ")).expect("summary").to_string();
        let plans = number(&line, "plans ");
        (summary(&r).populated, number(&line, &format!("plans {plans} (")), line)
    };
    let (lru, lru_forecasts, _) = run("lru");
    let (opt, opt_forecasts, line) = run("opt");
    assert_eq!(lru_forecasts, 0, "GMUX_EVICT=lru never uses the history");
    assert!(opt_forecasts > 0, "the loop's repeats give forecasts: {line}");
    assert!(lru >= 11 * 8 * 2, "LRU brings back all 8 buffers every round after the first: {lru} chunks");
    assert!(opt * 10 <= lru * 6, "OPT from history populated {opt} chunks, LRU {lru}: {line}");
}

/// The same loop with prefetch (`GMUX_PREFETCH=4`) and slow stand-in copies: plans also
/// bring in what the next commands use, so fewer commands wait for memory; a command on
/// the same stream that uses prefetched memory waits for its population on the GPU (the
/// delays make a missing wait read stale data).
#[test]
fn prefetch_from_history_keeps_every_byte_and_stalls_less() {
    // The summary's `commands N (W waited for memory)`, and the summary line.
    let run = |prefetch: &str| {
        let sb = Sandbox::new(&format!("prefetch-{prefetch}"), DEVICE);
        let args = format!("loop --buffers 8 --bytes {} --rounds 12", 4 * MIB);
        let mut cmd = sb.gmux(Some("20M"), args.split(' ').map(str::to_owned).collect::<Vec<_>>());
        let r = ok(cmd.env("GMUX_PREFETCH", prefetch).env("GMUX_STANDIN_DELAY_US", "2000"));
        assert_eq!(number(&r.stdout, "mismatches: "), 0, "{}", r.describe());
        let line = r.stderr.lines().find(|l| l.starts_with("gmux: limit ")).expect("summary").to_string();
        (number(&line, &format!("commands {} (", number(&line, "commands "))), line)
    };
    let ((off, off_line), (on, on_line)) = (run("0"), run("4"));
    assert!(on * 10 <= off * 8, "prefetch should leave fewer commands waiting: {on} vs {off}\n{on_line}\n{off_line}");
    assert!(number(&on_line, "waits for others' populations ") > 0, "commands waited for prefetched memory: {on_line}");
}

#[test]
fn sync_semantics_under_gmux() {
    // `sync` uses one 4 KiB allocation: one chunk, the smallest limit there is.
    let sb = Sandbox::new("sync", DEVICE);
    let r = ok(&mut sb.gmux(Some("2M"), ["sync"]));
    let n = number(&r.stdout, "sync: all ");
    assert!(n >= 8 && r.stdout.contains("checks passed"), "{}", r.describe());
    let s = summary(&r);
    assert!(s.created == 1 && s.peak_resident <= CHUNK as f64 && s.commands > 0, "{s:?}\n{}", r.describe());
    assert_no_shim_complaints(&r);
}

#[test]
fn a_panic_inside_an_entry_point_never_reaches_the_program() {
    // After the driver ran the call: the program gets the driver's result and goes on.
    let sb = Sandbox::new("panic-after", DEVICE);
    let r = ok(sb.gmux(Some("2M"), ["sync"]).env("GMUX_DEBUG", "panic:cuStreamSynchronize"));
    assert!(r.stdout.contains("checks passed"), "{}", r.describe());
    let reports: Vec<&str> = r.stderr.lines().filter(|l| l.starts_with("gmux: internal error in cuStreamSynchronize")).collect();
    assert_eq!(reports.len(), 1, "one report per entry point:\n{}", r.describe());
    assert!(reports[0].contains("the driver's result 0") && reports[0].contains("safe mode"), "{}", reports[0]);

    // Before any driver call: the program gets CUDA_ERROR_UNKNOWN (999), not an abort.
    let sb = Sandbox::new("panic-before", DEVICE);
    let r = run_within(sb.gmux(Some("2M"), ["sync"]).env("GMUX_DEBUG", "panic:cuMemAlloc_v2"), PATIENCE);
    assert_eq!(r.status.code(), Some(1), "the app's own failure exit, not a signal:\n{}", r.describe());
    assert!(r.stderr.contains("gmux: internal error in cuMemAlloc_v2") && r.stderr.contains("CUDA_ERROR_UNKNOWN"), "{}", r.describe());
    assert!(r.stderr.contains("999"), "the app saw CUDA_ERROR_UNKNOWN:\n{}", r.describe());
}

#[test]
fn mem_get_info_reports_the_device_or_the_limit() {
    let sb = Sandbox::new("info", DEVICE);
    let limit = 40 * MIB;
    let bytes = 5 * MIB + 100;
    // By default: the device's size, less what the process allocated, even past the limit.
    let r = ok(&mut sb.gmux(Some("40M"), ["info", "--total", &DEVICE.to_string()]));
    assert_eq!(number(&r.stdout, "total "), DEVICE, "{}", r.describe());
    assert_eq!(number(&r.stdout, "free "), DEVICE - bytes, "free = device - bytes allocated:\n{}", r.describe());
    assert_eq!(number(&r.stdout, " size "), bytes, "{}", r.describe());
    assert_eq!(number(&r.stdout, "memory_type "), 2, "{}", r.describe());
    let base = r.stdout.split("base ").nth(1).and_then(|t| t.split_whitespace().next());
    let start = r.stdout.split("range_start ").nth(1).and_then(|t| t.split_whitespace().next());
    assert!(base.is_some() && base == start, "base and range start differ:\n{}", r.describe());
    assert_no_shim_complaints(&r);

    // GMUX_MEMINFO=limit: a device of the limit's size.
    let r = ok(sb.gmux(Some("40M"), ["info", "--total", &limit.to_string()]).env("GMUX_MEMINFO", "limit"));
    assert_eq!(number(&r.stdout, "total "), limit, "{}", r.describe());
    assert_eq!(number(&r.stdout, "free "), limit - bytes, "free = limit - bytes allocated:\n{}", r.describe());

    let r = run_within(sb.gmux(Some("40M"), ["info"]).env("GMUX_MEMINFO", "card"), PATIENCE);
    assert_ne!(r.status.code(), Some(0), "{}", r.describe());
    assert!(r.stderr.contains("GMUX_MEMINFO=card") && r.stderr.contains("`device`"), "{}", r.describe());
}

#[test]
fn dlsym_direct_under_eviction() {
    // Buffers of 1 MiB, 3 MiB + 12 B and 64 KiB: four chunks under a two-chunk limit.
    let sb = Sandbox::new("dlsym", DEVICE);
    let r = ok(&mut sb.gmux(Some("4M"), ["dlsym-direct"]));
    assert_eq!(number(&r.stdout, "mismatches: "), 0, "{}", r.describe());
    let s = summary(&r);
    assert!(s.evicted > 0 && s.populated > 0 && s.peak_resident <= (4 * MIB) as f64, "{s:?}\n{}", r.describe());
    assert_no_shim_complaints(&r);
}

#[test]
fn per_thread_default_streams_under_eviction() {
    // Two threads with one 1.5 MiB buffer each (too large to share a chunk), under a
    // one-chunk limit: every round of each thread evicts the other's.
    let sb = Sandbox::new("ptsz", DEVICE);
    let r = ok(sb.gmux(Some("2M"), ["procaddr-ptsz"]).env("GMUX_STANDIN_DELAY_US", "200"));
    assert!(r.stdout.contains("procaddr-ptsz: 2 threads, 10 rounds each"), "{}", r.describe());
    assert_eq!(number(&r.stdout, "mismatches: "), 0, "{}", r.describe());
    let s = summary(&r);
    assert!(s.evicted >= 10 && s.populated >= 10 && s.peak_resident <= CHUNK as f64, "{s:?}\n{}", r.describe());
    assert_no_shim_complaints(&r);
}

#[test]
fn extra_params_under_eviction() {
    // A 4 MiB ballast filled before each of the four launches pushes their buffers out of
    // the 4 MiB limit: each launch must find them in `extra` or in mix's struct parameter.
    let sb = Sandbox::new("extra", DEVICE);
    let r = ok(&mut sb.gmux(Some("4M"), ["extra-params", "--ballast", "4M"]));
    assert!(r.stdout.contains("extra-params: all 4 checks passed"), "{}", r.describe());
    let s = summary(&r);
    assert!(s.evicted >= 4 && s.populated >= 4 && s.peak_resident <= (4 * MIB) as f64, "{s:?}\n{}", r.describe());
    assert_no_shim_complaints(&r);
}

/// The line of advice gmux gives for a working set above the limit.
fn oversize_advice(r: &Ran) -> &str {
    let line = r.stderr.lines().find(|l| l.contains("raise --mem-limit")).unwrap_or_else(|| panic!("no advice:\n{}", r.describe()));
    assert!(line.starts_with("gmux: ") && line.contains("kernel add") && line.contains("6.0 MiB") && line.contains("4.0 MiB"), "{line}");
    line
}

#[test]
fn a_working_set_above_the_limit_runs_with_the_excess_mapped_on_the_host() {
    let sb = Sandbox::new("too-big", DEVICE);
    let r = ok(&mut sb.gmux(Some("4M"), ["too-big", "--bytes", "6M", "--check", "1"]));
    assert!(r.stdout.contains("launch result: 0") && r.stdout.contains("1572864 words checked"), "{}", r.describe());
    let warning = r.stderr.lines().find(|l| l.contains("runs from host memory")).unwrap_or_else(|| panic!("{}", r.describe()));
    assert!(warning.contains("6.0 MiB") && warning.contains("4.0 MiB") && warning.contains("GMUX_OVERSIZE=exit"), "{warning}");
    let s = summary(&r);
    assert!(s.peak_resident <= (4 * MIB) as f64, "{s:?}");
    assert!(r.stderr.contains("commands over the limit 1 (at most 2.0 MiB of one mapped on the host)"), "{}", r.describe());
}

#[test]
fn a_working_set_above_the_limit_ends_the_process_with_gmux_oversize_exit() {
    let sb = Sandbox::new("too-big", DEVICE);
    let r = run_within(sb.gmux(Some("4M"), ["too-big", "--bytes", "6M"]).env("GMUX_OVERSIZE", "exit"), PATIENCE);
    assert_eq!(r.status.code(), Some(86), "the oversize exit status:\n{}", r.describe());
    assert!(!r.stdout.contains("launch result"), "the program must not go on past the launch:\n{}", r.describe());
    assert!(oversize_advice(&r).contains("status 86"), "{}", r.describe());
}

#[test]
fn a_working_set_above_the_limit_is_an_error_with_gmux_oversize_error() {
    let sb = Sandbox::new("too-big", DEVICE);
    let r = ok(sb.gmux(Some("4M"), ["too-big", "--bytes", "6M"]).env("GMUX_OVERSIZE", "error"));
    assert_eq!(number(&r.stdout, "launch result: "), 2, "CUDA_ERROR_OUT_OF_MEMORY expected:\n{}", r.describe());
    oversize_advice(&r);
    let s = summary(&r);
    assert_eq!((s.evicted, s.populated), (0, 0), "{s:?}");
}

/// `gmux run [--mem-limit 8M] -- ARGS`, with the shim, and the same without gmux.
fn with_and_without(args: &[&str], limit: Option<&str>) -> (Ran, Ran) {
    let plain = run_within(Command::new(args[0]).args(&args[1..]), PATIENCE);
    let mut c = Command::new(gmux_bin());
    c.arg("run");
    if let Some(l) = limit {
        c.args(["--mem-limit", l]);
    }
    c.arg("--").args(args).env("GMUX_SHIM", common::shim_lib()).env("GMUX_LOG", "info").env_remove("LD_PRELOAD");
    (plain, run_within(&mut c, PATIENCE))
}

#[test]
fn a_program_without_cuda_is_untouched() {
    for (args, limit) in [(&["true"][..], Some("8M")), (&["sh", "-c", "exit 3"][..], Some("8M")), (&["sh", "-c", "echo out; exit 3"][..], None)] {
        let (plain, under) = with_and_without(args, limit);
        assert_eq!(under.status.code(), plain.status.code(), "{}\n{}", plain.describe(), under.describe());
        assert_eq!(under.stdout, plain.stdout, "{}", under.describe());
        assert_eq!(under.stderr, "", "{}", under.describe());
    }
}

#[test]
fn cli_errors_are_explained() {
    let shim = common::shim_lib();
    let gmux = |args: &[&str]| {
        let mut c = Command::new(gmux_bin());
        c.args(args).env("GMUX_SHIM", &shim).env_remove("LD_PRELOAD");
        c
    };
    let expect = |r: Ran, code: i32, text: &str| {
        assert_eq!(r.status.code(), Some(code), "{}", r.describe());
        assert!(r.stderr.starts_with("gmux: ") && r.stderr.contains(text), "expected {text:?}:\n{}", r.describe());
    };
    expect(run_within(&mut gmux(&["run", "--mem-limit", "1M", "--", "true"]), PATIENCE), 2, "below one 2 MiB chunk");
    expect(run_within(&mut gmux(&["run", "--", "/nonexistent/prog"]), PATIENCE), 1, "cannot run");
    let mut missing = gmux(&["run", "--", "true"]);
    missing.env("GMUX_SHIM", "/nonexistent");
    expect(run_within(&mut missing, PATIENCE), 1, "cannot find libgmux.so");
}

#[test]
fn the_launch_benchmark_pairs_native_and_gmux_runs() {
    let sb = Sandbox::new("bench-launch", DEVICE);
    let out = sb.dir.path().join("launch");
    let out_arg = out.display().to_string();
    let r = ok(&mut sb.gmux_cli(&["bench", "launch", "--launches", "1000", "--rounds", "2", "--mem-limit", "64M", "--out", &out_arg]));
    assert!(r.stdout.contains("2 rounds (native, then gmux), launching from CPU "), "{}", r.describe());
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("launch.json")).unwrap()).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.iter().map(|r| r["kernel"].as_str().unwrap()).collect::<Vec<_>>(), ["empty", "buffer"]);
    for row in rows {
        let num = |k: &str| row[k].as_f64().unwrap_or_else(|| panic!("{k} in {row}"));
        assert!(num("native_us") > 0.0 && num("gmux_us") > 0.0, "{row}");
        assert!(num("added_min_us") <= num("added_us") && num("added_us") <= num("added_max_us"), "{row}");
        assert!(num("added_across_us").is_finite() && num("native_floor_us").is_finite(), "{row}");
    }
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 8, "2 rounds of 2 kernels, native and under gmux: {v}");
    for run in runs.iter().map(|r| &r["run"]) {
        assert_eq!(run["device"], "gmux CUDA stand-in (CPU)", "{v}");
        assert!(run["direct_us"].as_f64().is_some_and(|d| d > 0.0), "{run}");
    }
}

/// With `--dispatch`, gmux's child is a tenant of the benchmark's own daemon and marks a
/// job, so that its launches look at the dispatcher's word; a policy the daemon does not
/// know fails with the daemon's reason.
#[test]
fn the_launch_benchmark_measures_a_tenant_that_marks_a_job_under_a_dispatcher() {
    let sb = Sandbox::new("bench-launch-dispatch", DEVICE);
    let out = sb.dir.path().join("launch");
    let out_arg = out.display().to_string();
    let args = ["bench", "launch", "--launches", "1000", "--rounds", "1", "--mem-limit", "64M", "--out", &out_arg, "--dispatch"];
    let r = ok(&mut sb.gmux_cli(&[&args[..], &["srpt-deficit"]].concat()));
    assert!(r.stdout.contains("a tenant of a daemon with --dispatch srpt-deficit, marking a job"), "{}", r.describe());
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("launch.json")).unwrap()).unwrap();
    assert_eq!(v["dispatch"], "srpt-deficit");
    assert_eq!(v["runs"].as_array().map(Vec::len), Some(4), "1 round of 2 kernels, native and under gmux: {v}");
    let log = std::fs::read_to_string(out.join("launch.daemon.log")).unwrap();
    assert!(log.contains("\"bench-launch\""), "the child never joined the daemon:\n{log}");
    let bad = sb.gmux_cli(&[&args[..], &["sooner"]].concat()).output().unwrap();
    assert!(!bad.status.success());
    let log = std::fs::read_to_string(out.join("launch.daemon.log")).unwrap();
    assert!(log.contains("sooner"), "{log}");
}

/// `GMUX_DEBUG=profile` prints at exit, per entry point, its calls and where their time
/// went: the 800 commands of `oversub` appear with their counts, costliest first.
#[test]
fn the_profile_counts_every_call_of_each_entry_point() {
    let r = ok_with("16M", "oversub --total 50331648 --buffers 40 --ops 800 --seed 3 --streams 4", "GMUX_DEBUG", "profile");
    let rows: Vec<Vec<&str>> = r.stderr.lines().filter_map(|l| l.strip_prefix("profile: ")).map(|l| l.split_whitespace().collect()).collect();
    assert!(rows.len() > 4 && rows[0][0] == "a" && rows[1][0] == "entry", "no profile table:\n{}", r.describe());
    let calls = |name: &str| rows.iter().find(|c| c[0] == name).map_or(0, |c| c[1].parse::<u64>().expect("calls"));
    let own_ms: Vec<f64> = rows[2..].iter().map(|c| c[2].parse().expect("ms")).collect();
    assert!(own_ms.windows(2).all(|w| w[0] >= w[1]), "not costliest first:\n{}", r.stderr);
    let launches = calls("cuLaunchKernel");
    assert!(launches > 0, "{}", r.stderr);
    // Every launch is timed through each phase of a command.
    for phase in ["device", "gate", "lock", "working-set", "residency", "driver", "bookkeeping"] {
        assert!(calls(&format!("(command:{phase})")) >= launches, "{phase}:\n{}", r.stderr);
    }
    // The driver call's phase is the driver's time, none of it gmux's.
    let driver = rows.iter().find(|c| c[0] == "(command:driver)").expect("driver phase");
    assert!(driver[2] == "0.0" && driver[4].parse::<f64>().expect("ms") > 0.0, "{driver:?}");
    // The daemon's agent stepped, and each step's phases were timed (the table may be
    // printed while a last step is between two of them).
    let steps = calls("(agent:step-held)");
    let near = |n: u64| n.abs_diff(steps) <= 1;
    let forecasts = calls("(agent:forecast)") + calls("(agent:forecast-kept)");
    assert!(steps > 0 && near(forecasts) && near(calls("(agent:report)")), "{}", r.stderr);
}

/// The calls `GMUX_DEBUG=profile`'s table in `stderr` counts for entry or phase `name`.
fn profiled_calls(stderr: &str, name: &str) -> Option<u64> {
    stderr.lines().filter_map(|l| l.strip_prefix("profile: ")).find_map(|l| {
        let c: Vec<&str> = l.split_whitespace().collect();
        (c[0] == name).then(|| c[1].parse::<u64>().expect("calls"))
    })
}

/// A forecast walks the history under the state lock, which the application's launches
/// wait for: between two grants, with no command waiting for memory, one serves the
/// agent's steps for 100 ms (its steps report every 20 ms).
#[test]
fn a_forecast_serves_the_agent_steps_after_it() {
    let r = ok_with("1G", "loop --buffers 100 --bytes 64K --rounds 400 --sync-every 50", "GMUX_DEBUG", "profile");
    let calls = |name: &str| profiled_calls(&r.stderr, name);
    let (made, kept) = (calls("(agent:forecast)").unwrap_or(0), calls("(agent:forecast-kept)").unwrap_or(0));
    assert!(made > 0 && made + kept >= 10, "{made} forecasts made and {kept} kept: too few steps to tell\n{}", r.describe());
    assert!(made * 2 <= made + kept, "{made} forecasts made and {kept} kept: most steps forecast anew\n{}", r.stderr);
}

/// A process that synchronizes often (a decoder, after every step) goes idle and busy
/// again each time; the daemon hears of each change from the last report, not from a
/// step of the agent under the state lock, which the process's launches would wait for.
/// Before, the agent stepped once or twice per synchronize.
#[test]
fn going_busy_and_idle_does_not_step_the_agent() {
    let r = ok_with("1G", "loop --buffers 100 --bytes 64K --rounds 100 --sync-every 5", "GMUX_DEBUG", "profile");
    let calls = |name: &str| profiled_calls(&r.stderr, name);
    let (syncs, steps) = (calls("cuStreamSynchronize").unwrap_or(0), calls("(agent:step-held)").unwrap_or(0));
    assert!(syncs >= 2000, "{syncs} synchronizes:\n{}", r.describe());
    assert!(steps > 0 && steps * 4 < syncs, "{steps} agent steps for {syncs} synchronizes:\n{}", r.stderr);
}
