//! Kernel-granular dispatch (Paella): jobs of many clients, one kernel released at a time
//! by gmux-core's dispatcher, on one simulated GPU.

use crate::workload::Arrivals;
use gmux_core::sched::dispatch::{DispatchPolicy, JobView, KernelKey, KernelRecord, RemainingEstimator};
use gmux_core::TenantId;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

/// A client's jobs: each a fixed sequence of kernels.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// Kernels per job.
    pub kernels: u32,
    /// Duration of each kernel, µs.
    pub kernel_us: f64,
    /// How jobs arrive.
    pub arrivals: Arrivals,
}

struct Job {
    id: u64,
    client: usize,
    arrival: f64,
    done: u32,
}

/// Per-client job latencies, ns.
pub struct DispatchOutcome {
    /// Latencies of finished jobs, per client.
    pub latencies_ns: Vec<Vec<f64>>,
    /// Simulated time covered.
    pub elapsed_ns: f64,
}

/// Every job's arrival before `duration_ns` (time, client), in time order.
pub(crate) fn arrivals(clients: &[(String, JobSpec)], duration_ns: f64, seed: u64) -> Vec<(f64, usize)> {
    let mut arrivals: Vec<(f64, usize)> = Vec::new();
    for (i, (_, spec)) in clients.iter().enumerate() {
        let mut rng = ChaCha8Rng::seed_from_u64(seed.wrapping_add(i as u64));
        let mut t = 0.0;
        loop {
            t += spec.arrivals.gap(&mut rng);
            if t >= duration_ns {
                break;
            }
            arrivals.push((t, i));
        }
    }
    arrivals.sort_by(|a, b| a.0.total_cmp(&b.0));
    arrivals
}

/// Runs clients' jobs until `duration_ns` under `policy`.
pub fn run(clients: &[(String, JobSpec)], policy: DispatchPolicy, duration_ns: f64, seed: u64) -> DispatchOutcome {
    let arrivals = arrivals(clients, duration_ns, seed);
    let mut est = RemainingEstimator::default();
    for (name, spec) in clients {
        let profile = [KernelRecord { kernel: KernelKey::code(0), count: spec.kernels as u64, time: (spec.kernels as f64 * spec.kernel_us * 1e3) as u64 }];
        est.record(name, &profile);
    }
    let mut dispatcher = policy.build();
    let mut latencies = vec![Vec::new(); clients.len()];
    let mut ready: Vec<Job> = Vec::new();
    let mut next_arrival = 0;
    let mut t = 0.0;
    while t < duration_ns {
        while next_arrival < arrivals.len() && arrivals[next_arrival].0 <= t {
            let (a, c) = arrivals[next_arrival];
            ready.push(Job { id: next_arrival as u64, client: c, arrival: a, done: 0 });
            next_arrival += 1;
        }
        if ready.is_empty() {
            match arrivals.get(next_arrival) {
                Some(&(a, _)) => {
                    t = a;
                    continue;
                }
                None => break,
            }
        }
        let views: Vec<JobView> = ready
            .iter()
            .map(|j| {
                let (name, spec) = &clients[j.client];
                let left = |done: u32| ((spec.kernels - done) as f64 * spec.kernel_us * 1e3) as u64;
                JobView {
                    job: j.id,
                    client: TenantId(j.client as u32),
                    arrival: j.arrival as u64,
                    remaining: est.estimate(name, &[(KernelKey::code(0), j.done as u64)]).unwrap_or(left(j.done)),
                    total: est.total(name).unwrap_or(left(0)),
                }
            })
            .collect();
        let i = dispatcher.pick(&views).expect("a ready job is picked");
        let spec = &clients[ready[i].client].1;
        t += spec.kernel_us * 1e3;
        ready[i].done += 1;
        if ready[i].done == spec.kernels {
            let j = ready.swap_remove(i);
            if t <= duration_ns {
                latencies[j.client].push(t - j.arrival);
            }
        }
    }
    DispatchOutcome { latencies_ns: latencies, elapsed_ns: t.min(duration_ns) }
}
