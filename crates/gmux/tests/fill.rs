//! The agent's fill steps on the CPU stand-in: what a switched-in tenant's launches wait for.

mod common;

use common::daemon::*;

/// Milliseconds the stand-in spends in each `cuMemMap`.
const MAP_MS: u64 = 4;

/// Sums, over the lines of `text` that contain `tag`, the number before `unit` in the
/// part after `after`.
fn sum_after(text: &str, tag: &str, after: &str, unit: &str) -> f64 {
    text.lines().filter(|l| l.contains(tag)).filter_map(|l| l.split(after).nth(1)?.split(unit).next()?.trim().parse::<f64>().ok()).sum()
}

/// A fill step maps its new memory without the process's state lock, so the tenant's
/// launches do not wait out the driver's mapping calls (about 1 ms a handle on a GPU
/// whose link is busy): over the run, the time the agent held the launches is a small
/// part of the time it spent mapping.
#[test]
fn a_fill_step_maps_its_memory_while_the_tenant_launches() {
    // Unstretched slices, so that each tenant switches in, and fills, many times.
    let d = Daemon::start("fill-unlocked", &["--hbm", "48M", "--timeslice", "20ms", "--max-timeslice", "20ms", "--verbose"]);
    let env = [("GMUX_STANDIN_MAP_US", "4000"), ("GMUX_LOG", "debug")];
    let args = ["loop", "--buffers", "8", "--bytes", "4M", "--rounds", "120"];
    let a = d.tenant_with("a", &env, &args);
    let b = d.tenant_with("b", &env, &args);
    let (a, b) = (a.finish("a"), b.finish("b"));
    for out in [&a, &b] {
        assert!(out.contains("mismatches: 0"), "{out}");
    }
    let log = d.log();
    let (mut maps, mut held) = (0.0, 0.0);
    for (t, out) in [("a", &a), ("b", &b)] {
        // "agent …: mapped 8.0 MiB outside the lock in 8.31 ms (map 2× 8.0 ms, access 1× 0.0 ms)"
        let n = sum_after(out, "outside the lock", "(map ", "×");
        assert!(n >= 2.0, "{t}'s agent mapped {n} handles outside the lock:\n{out}");
        maps += n;
        let slots = log.lines().filter(|l| l.contains(&format!("{t} ran "))).count();
        assert!(slots >= 2, "{t} ran {slots} slots:\n{log}");
        held += sum_after(&log, &format!("{t} ran "), "held its launches ", " ms");
    }
    // Holding the lock through the mappings, the agents held the launches about 70% of
    // the mapping time here; without it, about 5%.
    let mapping = maps * MAP_MS as f64;
    assert!(held < mapping / 3.0, "the agents held their tenants' launches {held:.1} ms, against {mapping:.0} ms of mapping:\n{log}");
}
