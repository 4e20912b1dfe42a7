//! Paella's kernel dispatcher (§6): which job's next kernel is released now.
//!
//! [`SrptDeficit`] releases the kernel of the job with the shortest estimated remaining
//! time unless a client's deficit counter shows it was starved past a threshold;
//! [`RemainingEstimator`] learns the remaining-time estimate online.

use crate::size::Nanos;
use crate::tenant::TenantId;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// A job with a kernel ready to be released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobView {
    /// Job id (unique among ready jobs).
    pub job: u64,
    /// The client (tenant) that submitted it.
    pub client: TenantId,
    /// When the job arrived.
    pub arrival: Nanos,
    /// Estimated remaining processing time.
    pub remaining: Nanos,
}

/// A kernel-granular release policy.
pub trait Dispatcher {
    /// Fixed name (`fifo`, `srpt-deficit`).
    fn name(&self) -> &'static str;
    /// Index in `ready` of the job whose next kernel is released now (`None` when
    /// `ready` is empty); updates the state as if that kernel was dispatched.
    fn pick(&mut self, ready: &[JobView]) -> Option<usize>;
}

/// Index of the oldest job among `candidates` (ties by job id).
fn oldest<'a>(candidates: impl Iterator<Item = (usize, &'a JobView)>) -> Option<usize> {
    candidates.min_by_key(|(_, j)| (j.arrival, j.job)).map(|(i, _)| i)
}

/// First come, first served: the oldest job (ties by job id).
#[derive(Debug, Clone, Copy, Default)]
pub struct Fifo;

impl Dispatcher for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }

    fn pick(&mut self, ready: &[JobView]) -> Option<usize> {
        oldest(ready.iter().enumerate())
    }
}

/// Shortest remaining processing time, bounded by per-client deficit counters.
///
/// With `n` distinct clients among the ready jobs, dispatching a kernel of client `c`
/// lowers `deficit[c]` by `1 - 1/n` and raises every other present client's by `1/n`;
/// absent clients keep theirs. While some present client's deficit exceeds the
/// threshold, the oldest job of the present client with the highest deficit (ties by
/// client id) goes first; otherwise the job with the least remaining time (ties:
/// oldest, then job id). While every client keeps a ready job no deficit passes
/// `threshold + 1`; clients that come and go can overshoot that slightly (three clients
/// absent at `threshold + 1/2` that return together reach `threshold + 7/6`).
#[derive(Debug, Clone, Default)]
pub struct SrptDeficit {
    threshold: f64,
    deficit: BTreeMap<TenantId, f64>,
}

impl SrptDeficit {
    /// A dispatcher that forces fairness once a deficit exceeds `threshold`.
    pub fn new(threshold: f64) -> SrptDeficit {
        SrptDeficit { threshold, deficit: BTreeMap::new() }
    }

    /// The deficit counter of `client` (0 until it has been present at a pick).
    pub fn deficit(&self, client: TenantId) -> f64 {
        self.deficit.get(&client).copied().unwrap_or(0.0)
    }

    fn choose(&self, ready: &[JobView], present: &BTreeSet<TenantId>) -> Option<usize> {
        let starved = present.iter().map(|&c| (c, self.deficit(c))).filter(|&(_, d)| d > self.threshold).max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)));
        match starved {
            Some((client, _)) => oldest(ready.iter().enumerate().filter(|(_, j)| j.client == client)),
            None => ready.iter().enumerate().min_by_key(|(_, j)| (j.remaining, j.arrival, j.job)).map(|(i, _)| i),
        }
    }
}

impl Dispatcher for SrptDeficit {
    fn name(&self) -> &'static str {
        "srpt-deficit"
    }

    fn pick(&mut self, ready: &[JobView]) -> Option<usize> {
        let present: BTreeSet<TenantId> = ready.iter().map(|j| j.client).collect();
        let index = self.choose(ready, &present)?;
        let share = 1.0 / present.len() as f64;
        for &c in &present {
            let delta = if c == ready[index].client { share - 1.0 } else { share };
            *self.deficit.entry(c).or_insert(0.0) += delta;
        }
        Some(index)
    }
}

/// The dispatch policies by name.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DispatchPolicy {
    /// `fifo`: oldest job first.
    Fifo,
    /// `srpt-deficit`: shortest remaining time, fair past `threshold`.
    SrptDeficit {
        /// Deficit above which the most starved client goes first.
        threshold: f64,
    },
}

impl DispatchPolicy {
    /// A fresh dispatcher for this policy.
    pub fn build(self) -> Box<dyn Dispatcher> {
        match self {
            DispatchPolicy::Fifo => Box::new(Fifo),
            DispatchPolicy::SrptDeficit { threshold } => Box::new(SrptDeficit::new(threshold)),
        }
    }
}

/// Identifies a kernel within a job kind, e.g. a hash of its symbol name (Paella
/// distinguishes kernels by their location in the shared library).
pub type KernelId = u64;

/// What one kernel did in one finished job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelRecord {
    /// Which kernel.
    pub kernel: KernelId,
    /// How many times it ran in the job.
    pub count: u64,
    /// Total time of those runs.
    pub time: Nanos,
}

#[derive(Debug, Clone, Default)]
struct Profile {
    jobs: u64,
    kernels: BTreeMap<KernelId, (u64, Nanos)>,
}

/// Paella's remaining-time estimate, learned online per job kind.
///
/// A job kind is a string key (e.g. the model name): jobs of one kind run the same
/// code. For each kind and kernel `k` it keeps `avgCount_k` (runs per finished job,
/// counting 0 for jobs where `k` did not run) and `avgTime_k` (time per run), and
/// estimates `remaining = Σ_k max(0, avgCount_k - count_k) * avgTime_k`.
#[derive(Debug, Clone, Default)]
pub struct RemainingEstimator {
    kinds: BTreeMap<String, Profile>,
}

impl RemainingEstimator {
    /// Adds a finished job of `kind` with its per-kernel counts and total times.
    pub fn record(&mut self, kind: &str, kernels: &[KernelRecord]) {
        let profile = self.kinds.entry(kind.to_string()).or_default();
        profile.jobs += 1;
        for k in kernels {
            let (count, time) = profile.kernels.entry(k.kernel).or_insert((0, 0));
            *count += k.count;
            *time += k.time;
        }
    }

    /// Remaining time of a running job of `kind` whose kernels have run `ran`
    /// `(kernel, count so far)` times; `None` before any job of `kind` finished.
    pub fn estimate(&self, kind: &str, ran: &[(KernelId, u64)]) -> Option<Nanos> {
        let profile = self.kinds.get(kind)?;
        let remaining: f64 = profile
            .kernels
            .iter()
            .filter(|(_, (count, _))| *count > 0)
            .map(|(kernel, &(count, time))| {
                let avg_count = count as f64 / profile.jobs as f64;
                let avg_time = time as f64 / count as f64;
                let done: u64 = ran.iter().filter(|(k, _)| k == kernel).map(|(_, c)| c).sum();
                (avg_count - done as f64).max(0.0) * avg_time
            })
            .sum();
        Some(remaining.round() as Nanos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn job(job: u64, client: u32, arrival: Nanos, remaining: Nanos) -> JobView {
        JobView { job, client: TenantId(client), arrival, remaining }
    }

    #[test]
    fn fifo_picks_oldest_then_lowest_id() {
        let ready = [job(4, 0, 30, 1), job(9, 1, 10, 50), job(2, 2, 10, 90)];
        assert_eq!(Fifo.pick(&ready), Some(2));
        assert_eq!(Fifo.pick(&ready[..2]), Some(1));
        assert_eq!(Fifo.pick(&[]), None);
    }

    #[test]
    fn srpt_picks_shortest() {
        let mut d = SrptDeficit::new(10.0);
        let ready = [job(1, 0, 0, 500), job(2, 1, 5, 20), job(3, 2, 1, 20), job(4, 0, 9, 300)];
        assert_eq!(d.pick(&ready), Some(2));
        assert!((d.deficit(TenantId(2)) + 2.0 / 3.0).abs() < 1e-12);
        assert!((d.deficit(TenantId(0)) - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(d.pick(&[]), None);
    }

    #[test]
    fn deficit_forces_the_starved_client() {
        let mut d = SrptDeficit::new(1.0);
        let ready = [job(1, 0, 0, 1_000), job(2, 0, 3, 900), job(3, 1, 7, 10)];
        let picks: Vec<usize> = (0..6).map(|_| d.pick(&ready).unwrap()).collect();
        assert_eq!(picks, [2, 2, 2, 0, 2, 0]);
        assert_eq!(d.deficit(TenantId(0)), 1.0);
        assert_eq!(d.deficit(TenantId(0)) + d.deficit(TenantId(1)), 0.0);
        assert_eq!(d.deficit(TenantId(7)), 0.0);
    }

    #[test]
    fn policy_builds_by_name() {
        assert_eq!(DispatchPolicy::Fifo.build().name(), "fifo");
        let d = DispatchPolicy::SrptDeficit { threshold: 2.0 }.build();
        assert_eq!(d.name(), "srpt-deficit");
    }

    #[test]
    fn estimator_follows_paella_formula() {
        let mut e = RemainingEstimator::default();
        assert_eq!(e.estimate("resnet", &[]), None);
        e.record("resnet", &[KernelRecord { kernel: 1, count: 2, time: 20 }, KernelRecord { kernel: 2, count: 1, time: 100 }]);
        e.record("resnet", &[KernelRecord { kernel: 1, count: 4, time: 40 }, KernelRecord { kernel: 2, count: 1, time: 300 }]);
        e.record("bert", &[KernelRecord { kernel: 1, count: 1, time: 7 }]);
        // kernel 1: avgCount 3, avgTime 10; kernel 2: avgCount 1, avgTime 200.
        assert_eq!(e.estimate("resnet", &[]), Some(3 * 10 + 200));
        assert_eq!(e.estimate("resnet", &[(1, 1)]), Some(2 * 10 + 200));
        assert_eq!(e.estimate("resnet", &[(1, 5), (2, 1)]), Some(0));
        assert_eq!(e.estimate("resnet", &[(2, 1), (9, 4)]), Some(30));
        e.record("resnet", &[KernelRecord { kernel: 1, count: 3, time: 30 }]);
        // kernel 2 absent in the third job: avgCount 2/3.
        assert_eq!(e.estimate("resnet", &[(1, 3)]), Some(133));
    }

    proptest! {
        #[test]
        fn deficit_never_exceeds_threshold_plus_one(
            seed in any::<u64>(),
            clients in 2u32..6,
            threshold in prop::sample::select(vec![0.0, 0.5, 1.0, 2.0, 5.0]),
        ) {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut d = SrptDeficit::new(threshold);
            let mut next = 0u64;
            let mut jobs: Vec<JobView> = Vec::new();
            for step in 0..2_000u64 {
                for c in 0..clients {
                    while !jobs.iter().any(|j| j.client.0 == c) || rng.gen_bool(0.05) {
                        next += 1;
                        jobs.push(job(next, c, step, rng.gen_range(1..100_000)));
                    }
                }
                let i = d.pick(&jobs).unwrap();
                jobs[i].remaining = jobs[i].remaining.saturating_sub(rng.gen_range(0..5_000));
                if jobs[i].remaining == 0 {
                    jobs.swap_remove(i);
                }
                for c in 0..clients {
                    let deficit = d.deficit(TenantId(c));
                    prop_assert!(deficit <= threshold + 1.0 + 1e-9, "client {} deficit {} at step {}", c, deficit, step);
                }
            }
        }
    }
}
