//! Clients as separate processes, as under gmuxd: each serves its jobs one at a time in
//! arrival order and marks each; the GPU time-slices the processes the daemon's release
//! policy lets run, modelled as one kernel each in turn. The policy is gmux-core's
//! [`Releaser`], the code gmuxd runs, decided at every job mark and every millisecond;
//! without one (`native`), every process runs.

use crate::dispatch::{arrivals, DispatchOutcome, JobSpec};
use gmux_core::sched::dispatch::{DispatchPolicy, Jobs, Process, Release, Releaser};
use gmux_core::{Nanos, TenantId};
use std::collections::VecDeque;

/// How often gmuxd decides again while a job runs.
const TICK_NS: f64 = 1e6;

/// One client's process.
#[derive(Default)]
struct Proc {
    /// Arrived jobs not begun: (job, arrival).
    queue: VecDeque<(u64, f64)>,
    /// The job it serves: (job, arrival, kernels done).
    current: Option<(u64, f64, u32)>,
    jobs: Jobs,
    held: bool,
}

/// Runs clients' jobs as processes until `duration_ns` under `policy` (`None`: nothing
/// held, the driver's time slicing alone).
pub fn run(clients: &[(String, JobSpec)], policy: Option<DispatchPolicy>, duration_ns: f64, seed: u64) -> DispatchOutcome {
    let arrivals = arrivals(clients, duration_ns, seed);
    let mut releaser = policy.map(Releaser::new);
    let mut procs: Vec<Proc> = clients.iter().map(|_| Proc::default()).collect();
    let mut latencies = vec![Vec::new(); clients.len()];
    let (mut next_arrival, mut t, mut decided, mut turn) = (0, 0.0, f64::NEG_INFINITY, 0);
    while t < duration_ns {
        let mut marked = false;
        while next_arrival < arrivals.len() && arrivals[next_arrival].0 <= t {
            let (a, c) = arrivals[next_arrival];
            procs[c].queue.push_back((next_arrival as u64, a));
            next_arrival += 1;
        }
        for (c, p) in procs.iter_mut().enumerate() {
            if p.current.is_none() {
                if let Some((job, a)) = p.queue.pop_front() {
                    let spec = &clients[c].1;
                    let expected = (spec.kernels as f64 * spec.kernel_us * 1e3) as Nanos;
                    p.jobs.begin(job, &clients[c].0, expected, t as Nanos).expect("one job at a time");
                    p.current = Some((job, a, 0));
                    marked = true;
                }
            }
        }
        if let Some(r) = releaser.as_mut().filter(|_| marked || t - decided >= TICK_NS) {
            let mut view: Vec<Process<'_>> = procs.iter_mut().enumerate().map(|(c, p)| Process { client: TenantId(c as u32), jobs: &mut p.jobs }).collect();
            let releases = r.decide(&mut view, t as Nanos);
            for (p, r) in procs.iter_mut().zip(releases) {
                p.held = r == Release::Hold;
            }
            decided = t;
        }
        // The next process in turn that may run a kernel.
        let n = procs.len();
        let Some(c) = (0..n).map(|k| (turn + k) % n).find(|&c| procs[c].current.is_some() && !procs[c].held) else {
            match arrivals.get(next_arrival) {
                Some(&(a, _)) if procs.iter().all(|p| p.current.is_none()) => t = a,
                // Held with nothing to run: the next decision (the release policy always
                // lets one run; this only passes time).
                _ if procs.iter().any(|p| p.current.is_some()) => t = (decided + TICK_NS).max(t + 1.0),
                Some(&(a, _)) => t = a,
                None => break,
            }
            continue;
        };
        turn = c + 1;
        let spec = &clients[c].1;
        t += spec.kernel_us * 1e3;
        let p = &mut procs[c];
        let (job, arrival, done) = p.current.as_mut().expect("runs a job");
        *done += 1;
        if *done == spec.kernels {
            let (job, arrival) = (*job, *arrival);
            p.jobs.end(job, t as Nanos).expect("began");
            p.current = None;
            if t <= duration_ns {
                latencies[c].push(t - arrival);
            }
            decided = f64::NEG_INFINITY;
        }
    }
    DispatchOutcome { latencies_ns: latencies, elapsed_ns: t.min(duration_ns) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Arrivals;

    fn mix() -> Vec<(String, JobSpec)> {
        let jobs = |kernels, kernel_us, rate| JobSpec { kernels, kernel_us, arrivals: Arrivals::Lognormal { rate, sigma: 1.0 } };
        vec![("short".into(), jobs(4, 250.0, 200.0)), ("long".into(), jobs(40, 500.0, 20.0))]
    }

    fn p99(v: &[f64]) -> f64 {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[(v.len() * 99 / 100).min(v.len() - 1)]
    }

    #[test]
    fn srpt_deficit_shortens_the_short_jobs_tail_and_everyone_finishes_jobs() {
        let native = run(&mix(), None, 5e9, 7);
        let srpt = run(&mix(), Some(DispatchPolicy::SrptDeficit { threshold: 100.0 }), 5e9, 7);
        let (n, s) = (p99(&native.latencies_ns[0]), p99(&srpt.latencies_ns[0]));
        assert!(s * 1.5 < n, "short P99: native {:.2} ms, srpt-deficit {:.2} ms", n / 1e6, s / 1e6);
        assert!(
            srpt.latencies_ns[1].len() * 10 >= native.latencies_ns[1].len() * 5,
            "long jobs finished: {} of native's {}",
            srpt.latencies_ns[1].len(),
            native.latencies_ns[1].len()
        );
        // Alone, a short job takes its four kernels: 1 ms.
        assert!(srpt.latencies_ns[0].iter().all(|l| *l >= 1e6 - 1.0));
    }
}
