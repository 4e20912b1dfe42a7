//! `gmux bench daemon-scale`: the daemon's decisions with many tenants, on the CPU. Joins,
//! a decision after each report, `gmux ps` and leaves, timed with N tenants of one
//! process each, all busy and together over the budget (so that they take turns).

use crate::Failure;
use gmux_core::arbiter::{Arbiter, Hello, Sender, Switch};
use gmux_core::protocol::{ShimReport, PROTOCOL};
use gmux_core::sched::Policy;
use gmuxd::ctl::{self, Request};
use gmuxd::server::Peer;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;

/// Arguments of `gmux bench daemon-scale`.
#[derive(Debug, clap::Args)]
pub struct ScaleArgs {
    /// Tenants, one process each.
    #[arg(long, default_value_t = 1000)]
    tenants: usize,
    /// Reports, each followed by a decision, to time.
    #[arg(long, default_value_t = 500)]
    reports: usize,
    /// Scheduling policy.
    #[arg(long, default_value = "rr", value_parser = Policy::parse)]
    policy: Policy,
    /// Where to write the results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// What was timed, in milliseconds.
#[derive(Debug, Serialize)]
struct Results {
    tenants: usize,
    policy: String,
    join_all_ms: f64,
    decide_p50_ms: f64,
    decide_p99_ms: f64,
    decide_max_ms: f64,
    ps_ms: f64,
    leave_all_ms: f64,
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Runs the benchmark.
pub fn run(a: &ScaleArgs) -> Result<(), Failure> {
    if a.tenants == 0 || a.reports == 0 {
        return Err(Failure::Usage("--tenants and --reports must be at least 1".into()));
    }
    const G: u64 = 1 << 30;
    let mut d = Arbiter::new(Some(16 * G), None, a.policy, Switch::Msched);
    let busy = |i: u64| ShimReport { want: 64 << 20, period: 64 << 20, allocated: 64 << 20, commands: i, finished: i, busy: true, ..Default::default() };
    let mut now = 0u64;
    let t0 = Instant::now();
    for c in 0..a.tenants as u64 {
        let who = Sender { pid: 1000 + c as u32, uid: 1000, admin: true, start: 0 };
        d.admit(c, who, &Hello { version: PROTOCOL, tenant: &format!("t{c}"), priority: 0, high: None, resume: None, gpu: None }).map_err(Failure::Runtime)?;
        d.report(c, busy(0));
        now += 1_000_000;
        d.decide(now);
    }
    let join_all_ms = ms(t0);
    let mut times = Vec::with_capacity(a.reports);
    for k in 0..a.reports as u64 {
        let c = k * 7919 % a.tenants as u64;
        now += 1_000_000;
        let t = Instant::now();
        d.report(c, busy(k + 1));
        d.decide(now);
        times.push(ms(t));
    }
    times.sort_by(f64::total_cmp);
    let t = Instant::now();
    let ps = ctl::answer(&mut d, &Request::Ps { json: false }, Peer { pid: 1, uid: 0 }, 0, &gmuxd::status::no_jobs);
    let ps_ms = ms(t);
    if !ps.ok || ps.text.lines().count() < a.tenants {
        return Err(Failure::Runtime(format!("gmux ps listed {} lines for {} tenants", ps.text.lines().count(), a.tenants)));
    }
    let t0 = Instant::now();
    for c in 0..a.tenants as u64 {
        d.leave(c);
        now += 1_000_000;
        d.decide(now);
    }
    let r = Results {
        tenants: a.tenants,
        policy: d.policy_name().into(),
        join_all_ms,
        decide_p50_ms: quantile(&times, 0.5),
        decide_p99_ms: quantile(&times, 0.99),
        decide_max_ms: *times.last().expect("at least one"),
        ps_ms,
        leave_all_ms: ms(t0),
    };
    println!("gmux bench daemon-scale: {} tenants, policy {}, {} reports", r.tenants, r.policy, a.reports);
    println!("{:<34} {:>10}", "what", "ms");
    for (what, v) in [
        ("all join (each: join, decide)", r.join_all_ms),
        ("a report and its decision, p50", r.decide_p50_ms),
        ("a report and its decision, p99", r.decide_p99_ms),
        ("a report and its decision, max", r.decide_max_ms),
        ("gmux ps", r.ps_ms),
        ("all leave (each: leave, decide)", r.leave_all_ms),
    ] {
        println!("{what:<34} {v:>10.3}");
    }
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&r).expect("serializable"))
            .map_err(|e| Failure::Runtime(format!("cannot write {}: {e}", p.display())))?;
    }
    Ok(())
}
