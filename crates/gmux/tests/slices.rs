//! Slices stretched to amortize their switch, through a real gmuxd and shims on the CPU
//! stand-in.

mod common;

use common::daemon::*;

/// The slices gmuxd's log says it stretched, in ms.
fn stretched(log: &str) -> Vec<f64> {
    log.lines().filter_map(|l| l.split("its slice is stretched to ").nth(1)?.split(" ms").next()?.parse().ok()).collect()
}

/// Two tenants over the budget whose switches take a while (each `cuMemMap` of the
/// stand-in takes 4 ms): gmuxd stretches their 20 ms slices to about four times the
/// switch, at most `--max-timeslice`; data still round-trips intact.
#[test]
fn slices_are_stretched_within_the_daemon_s_bound() {
    for (max, bound) in [(None, 1000.0), (Some("60ms"), 60.0)] {
        let mut flags = vec!["--hbm", "48M", "--timeslice", "20ms", "--verbose"];
        flags.extend(max.iter().flat_map(|m| ["--max-timeslice", *m]));
        let d = Daemon::start("slices", &flags);
        let env = [("GMUX_STANDIN_MAP_US", "4000")];
        let args = ["loop", "--buffers", "8", "--bytes", "4M", "--rounds", "120"];
        let (a, b) = (d.tenant_with("a", &env, &args), d.tenant_with("b", &env, &args));
        for out in [a.finish("a"), b.finish("b")] {
            assert!(out.contains("mismatches: 0"), "{out}");
        }
        let log = d.log();
        let slices = stretched(&log);
        assert!(!slices.is_empty(), "no slice was stretched (--max-timeslice {max:?}):\n{log}");
        assert!(slices.iter().all(|ms| *ms > 20.0 && *ms <= bound), "slices {slices:?} against a bound of {bound} ms:\n{log}");
    }
}
