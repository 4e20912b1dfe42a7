//! `standin_app` run directly against the CPU stand-in of the CUDA driver (no interposer):
//! the application and the stand-in agree, and the stand-in catches bad device accesses.

mod common;

use common::{number, run_fail, run_ok, Sandbox};

const MIB: u64 = 1 << 20;

fn oversub_args(seed: u64) -> Vec<String> {
    let args = format!("oversub --total {} --buffers 12 --ops 300 --seed {seed} --streams 3", 24 * MIB);
    args.split(' ').map(str::to_owned).collect()
}

#[test]
fn oversub_model_matches() {
    let sb = Sandbox::new("oversub", 128 * MIB);
    let r = run_ok(&mut sb.app(oversub_args(1)));
    assert!(r.stdout.contains("oversub: 12 buffers, 300 ops"), "{}", r.describe());
    assert_eq!(number(&r.stdout, "checksum mismatches: "), 0, "{}", r.describe());
}

#[test]
fn oversub_model_matches_with_random_delays() {
    let sb = Sandbox::new("oversub-delay", 128 * MIB);
    let r = run_ok(sb.app(oversub_args(2)).env("GMUX_STANDIN_DELAY_US", "300"));
    assert_eq!(number(&r.stdout, "checksum mismatches: "), 0, "{}", r.describe());
}

#[test]
fn oversub_beyond_device_memory_runs_out() {
    let sb = Sandbox::new("oversub-oom", 16 * MIB);
    let r = run_fail(&mut sb.app(oversub_args(1)));
    assert!(r.stderr.contains("cuMemAlloc failed: CUresult 2"), "{}", r.describe());
}

#[test]
fn sync_semantics() {
    let sb = Sandbox::new("sync", 64 * MIB);
    let r = run_ok(&mut sb.app(["sync"]));
    let n = number(&r.stdout, "sync: all ");
    assert!(n >= 6 && r.stdout.contains("checks passed"), "{}", r.describe());
}

#[test]
fn info_reports_the_device_size_and_ranges() {
    let sb = Sandbox::new("info", 96 * MIB);
    let total = (96 * MIB).to_string();
    let r = run_ok(&mut sb.app(["info", "--total", &total]));
    assert_eq!(number(&r.stdout, "total "), 96 * MIB, "{}", r.describe());
    assert_eq!(number(&r.stdout, " size "), 5 * MIB + 100, "{}", r.describe());
    assert_eq!(number(&r.stdout, "memory_type "), 2, "{}", r.describe());
    let free = number(&r.stdout, "free ");
    assert_eq!(free, 96 * MIB - 6 * MIB, "one 5 MiB + 100 B allocation takes three 2 MiB chunks");
    // A wrong total is caught.
    run_fail(&mut sb.app(["info", "--total", "1000"]));
}

#[test]
fn dlsym_direct() {
    let sb = Sandbox::new("dlsym", 64 * MIB);
    let r = run_ok(&mut sb.app(["dlsym-direct"]));
    assert_eq!(number(&r.stdout, "mismatches: "), 0, "{}", r.describe());
}

#[test]
fn procaddr_per_thread_default_streams() {
    let sb = Sandbox::new("ptsz", 64 * MIB);
    let r = run_ok(sb.app(["procaddr-ptsz"]).env("GMUX_STANDIN_DELAY_US", "200"));
    assert!(r.stdout.contains("procaddr-ptsz: 2 threads"), "{}", r.describe());
    assert_eq!(number(&r.stdout, "mismatches: "), 0, "{}", r.describe());
}

#[test]
fn extra_params_and_launch_ex() {
    let sb = Sandbox::new("extra", 64 * MIB);
    let r = run_ok(&mut sb.app(["extra-params"]));
    assert!(r.stdout.contains("extra-params: all 4 checks passed"), "{}", r.describe());
}

const SIGABRT: i32 = 6;

/// `fault-unmapped --mode MODE` must abort with one stderr line containing all of `parts`.
fn assert_aborts(mode: &str, parts: &[&str]) {
    let sb = Sandbox::new(&format!("fault-{mode}"), 64 * MIB);
    let r = run_fail(&mut sb.app(["fault-unmapped", "--mode", mode]));
    assert_eq!(r.signal(), Some(SIGABRT), "{}", r.describe());
    let line = r.stderr.lines().find(|l| l.starts_with("cuda-standin: ")).unwrap_or_default();
    assert!(parts.iter().all(|p| line.contains(p)), "expected a line with {parts:?}:\n{}", r.describe());
    assert!(!r.stdout.contains("no fault detected"), "{}", r.describe());
}

#[test]
fn kernel_on_reserved_but_unmapped_memory_aborts() {
    assert_aborts("launch", &["cuda-standin: add touched unmapped device address 0x7e", "(reserved but not mapped)"]);
}

#[test]
fn kernel_on_memory_without_access_aborts() {
    assert_aborts("noaccess", &["cuda-standin: add touched unmapped device address 0x7e", "(mapped without access)"]);
}

#[test]
fn copy_to_unmapped_memory_aborts() {
    assert_aborts("copy", &["cuda-standin: cuMemcpyHtoD_v2 touched unmapped device address 0x7e", "(reserved but not mapped)"]);
}

#[test]
fn copy_from_freed_memory_aborts() {
    assert_aborts("stale", &["cuda-standin: cuMemcpyDtoH_v2 touched unmapped device address 0x7e", "(not reserved)"]);
}
