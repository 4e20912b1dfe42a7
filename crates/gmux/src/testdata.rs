//! A hand-made report for the tests: 2 systems × 3 subscriptions, `um` modelled.

use gmux_sim::{Report, Row};

const GIB: u64 = 1 << 30;

/// A plain row with no optional data.
pub fn row(system: &str, variant: &str, modelled: bool, sub: f64, tput: f64) -> Row {
    Row { modelled, throughput_norm: Some(tput), ..Row::new(system, variant, Some(sub), 10.0) }
}

/// gmux-exact/tier-order and um (modelled) at 100, 150 and 200 %.
pub fn report() -> Report {
    let mut results = Vec::new();
    for (i, (sub, exact, um)) in [(100.0, 1.0, 0.9874), (150.0, 0.95, 0.5), (200.0, 0.875, 0.25)].into_iter().enumerate() {
        let mut g = row("gmux-exact", "tier-order", false, sub, exact);
        g.bytes_h2d = i as u64 * 3 * GIB + GIB / 2;
        g.bytes_d2h = i as u64 * GIB;
        results.push(g);
        results.push(row("um", "", true, sub, um));
    }
    Report { scenario: "oversub".into(), description: "throughput as GPU memory is oversubscribed".into(), results }
}
