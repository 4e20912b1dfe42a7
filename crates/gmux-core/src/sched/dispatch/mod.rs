//! Paella's kernel dispatcher (§6): which job's next kernel is released now.
//!
//! [`SrptDeficit`] releases the kernel of the job with the shortest estimated remaining
//! time unless a client's deficit counter shows it was starved past a threshold;
//! [`Fifo`], [`Sjf`] and [`ClientRoundRobin`] are the policies it is compared with.
//! [`RemainingEstimator`] learns the time estimates online; [`Jobs`] keeps the jobs an
//! application marks, and [`shallow_bounds`] keeps other processes' queues shallow while
//! a short job runs.

mod estimate;
mod jobs;
mod shallow;
#[cfg(test)]
mod tests;

pub use estimate::{KernelId, KernelKey, KernelRecord, RemainingEstimator, MAX_KERNELS, MAX_KINDS};
pub use jobs::{JobKind, JobRefused, JobSizes, Jobs, MAX_RUNNING};
pub use shallow::{shallow_bounds, SHALLOW, SHALLOW_RATIO};

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
    /// Estimated processing time of the whole job.
    pub total: Nanos,
}

/// A kernel-granular release policy.
pub trait Dispatcher {
    /// Fixed name (`fifo`, `sjf`, `rr`, `srpt-deficit`).
    fn name(&self) -> &'static str;
    /// Index in `ready` of the job whose next kernel is released now (`None` when
    /// `ready` is empty); updates the state as if that kernel was dispatched.
    fn pick(&mut self, ready: &[JobView]) -> Option<usize>;
}

/// Index of the oldest job among `candidates` (ties by job id).
fn oldest<'a>(candidates: impl Iterator<Item = (usize, &'a JobView)>) -> Option<usize> {
    candidates.min_by_key(|(_, j)| (j.arrival, j.job)).map(|(i, _)| i)
}

/// Index of the job in `ready` with the least `time` (ties: oldest, then job id).
fn least(ready: &[JobView], time: impl Fn(&JobView) -> Nanos) -> Option<usize> {
    ready.iter().enumerate().min_by_key(|(_, j)| (time(j), j.arrival, j.job)).map(|(i, _)| i)
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

/// Shortest job first: the job with the least estimated total time (ties: oldest, then
/// job id), whatever it has run; a shorter job that arrives takes the next kernel.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sjf;

impl Dispatcher for Sjf {
    fn name(&self) -> &'static str {
        "sjf"
    }

    fn pick(&mut self, ready: &[JobView]) -> Option<usize> {
        least(ready, |j| j.total)
    }
}

/// Round robin over clients, kernel by kernel: the oldest job of the next client with a
/// ready job after the one served last (by client id, wrapping).
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientRoundRobin {
    last: Option<TenantId>,
}

impl Dispatcher for ClientRoundRobin {
    fn name(&self) -> &'static str {
        "rr"
    }

    fn pick(&mut self, ready: &[JobView]) -> Option<usize> {
        let present: BTreeSet<TenantId> = ready.iter().map(|j| j.client).collect();
        let after = self.last.and_then(|l| present.range((std::ops::Bound::Excluded(l), std::ops::Bound::Unbounded)).next());
        let client = *after.or_else(|| present.first())?;
        self.last = Some(client);
        oldest(ready.iter().enumerate().filter(|(_, j)| j.client == client))
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
            None => least(ready, |j| j.remaining),
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
    /// `sjf`: least estimated total time first.
    Sjf,
    /// `rr`: clients in turn, a kernel each.
    #[serde(rename = "rr")]
    RoundRobin,
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
            DispatchPolicy::Sjf => Box::new(Sjf),
            DispatchPolicy::RoundRobin => Box::new(ClientRoundRobin::default()),
            DispatchPolicy::SrptDeficit { threshold } => Box::new(SrptDeficit::new(threshold)),
        }
    }
}
