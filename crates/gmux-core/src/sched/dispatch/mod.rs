//! Paella's kernel dispatcher (§6): which job's next kernel is released now.
//!
//! [`SrptDeficit`] releases the kernel of the job with the shortest estimated remaining
//! time unless a client's deficit counter shows it was starved past a threshold;
//! [`Fifo`], [`Sjf`] and [`ClientRoundRobin`] are the policies it is compared with.
//! [`RemainingEstimator`] learns the time estimates online; [`Jobs`] keeps the jobs an
//! application marks. In gmuxd, a [`Releaser`] applies one of these policies to the
//! processes that mark jobs, and [`shallow_bounds`] is the simpler rule that only keeps
//! other processes' queues shallow while a short job runs. [`admit`] lets a scheduling
//! program hold jobs back (the `admission` hook), within gmux's bounds.

mod admit;
mod estimate;
mod jobs;
mod release;
mod shallow;
#[cfg(test)]
mod tests;

pub use admit::{admit, Candidate, ADMISSION_WAIT_MAX};
pub use estimate::{KernelId, KernelKey, KernelRecord, RemainingEstimator, MAX_KERNELS, MAX_KINDS};
pub use jobs::{JobKind, JobRefused, JobSizes, Jobs, Unadmitted, MAX_RUNNING, UNKNOWN_NS};
pub use release::{Process, Release, Releaser};
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

/// A release policy: which ready job goes next. The simulator asks it at every kernel
/// and charges each kernel as one unit to the job's client; gmuxd asks it at every job
/// mark and timer tick, and charges the milliseconds since to the clients it let run.
pub trait Dispatcher {
    /// Fixed name (`fifo`, `sjf`, `rr`, `srpt-deficit`).
    fn name(&self) -> &'static str;
    /// Index in `ready` of the job that goes next (`None` when `ready` is empty); the
    /// state is unchanged.
    fn choose(&self, ready: &[JobView]) -> Option<usize>;
    /// The clients `served` were served `amount` together (a kernel, or a time), while the
    /// other clients of `ready` waited; `served[0]` is the client of the job chosen.
    fn charge(&mut self, ready: &[JobView], served: &[TenantId], amount: f64);
    /// `client` has left: its state is dropped.
    fn forget(&mut self, _client: TenantId) {}
    /// Whether [`Dispatcher::choose`] chooses for fairness now, not by its order: the
    /// chosen job's client fell behind, and should run alone until it caught up.
    fn behind(&self, _ready: &[JobView]) -> bool {
        false
    }
    /// [`Dispatcher::choose`], then [`Dispatcher::charge`] of one unit: a kernel released.
    fn pick(&mut self, ready: &[JobView]) -> Option<usize> {
        let index = self.choose(ready)?;
        self.charge(ready, &[ready[index].client], 1.0);
        Some(index)
    }
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

    fn choose(&self, ready: &[JobView]) -> Option<usize> {
        oldest(ready.iter().enumerate())
    }

    fn charge(&mut self, _: &[JobView], _: &[TenantId], _: f64) {}
}

/// Shortest job first: the job with the least estimated total time (ties: oldest, then
/// job id), whatever it has run; a shorter job that arrives takes the next kernel.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sjf;

impl Dispatcher for Sjf {
    fn name(&self) -> &'static str {
        "sjf"
    }

    fn choose(&self, ready: &[JobView]) -> Option<usize> {
        least(ready, |j| j.total)
    }

    fn charge(&mut self, _: &[JobView], _: &[TenantId], _: f64) {}
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

    fn choose(&self, ready: &[JobView]) -> Option<usize> {
        let present: BTreeSet<TenantId> = ready.iter().map(|j| j.client).collect();
        let after = self.last.and_then(|l| present.range((std::ops::Bound::Excluded(l), std::ops::Bound::Unbounded)).next());
        let client = *after.or_else(|| present.first())?;
        oldest(ready.iter().enumerate().filter(|(_, j)| j.client == client))
    }

    fn charge(&mut self, _: &[JobView], served: &[TenantId], _: f64) {
        self.last = served.first().copied().or(self.last);
    }
}

/// Shortest remaining processing time, bounded by per-client deficit counters.
///
/// With `n` distinct clients among the ready jobs, serving `k` of them an amount `a` (one
/// kernel, or a time) together changes each present client's deficit by its fair share
/// less what it got: `a / n - a / k` for those served, `a / n` for the others (with one
/// served, Paella's `-(1 - 1/n)` and `+1/n`). A client with no ready job starts again from zero, as in
/// deficit round robin: the counters bound how long a client that keeps waiting is
/// passed over, and neither credit nor debt carries across its idle spells. While some
/// present client's deficit exceeds the threshold, the oldest job of the present client
/// with the highest deficit (ties by client id) goes first; otherwise the job with the
/// least remaining time (ties: oldest, then job id). With charges of one unit no
/// deficit passes `threshold + 1`.
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

    /// The present client that fell furthest past the threshold, if any.
    fn starved(&self, present: &BTreeSet<TenantId>) -> Option<(TenantId, f64)> {
        present.iter().map(|&c| (c, self.deficit(c))).filter(|&(_, d)| d > self.threshold).max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
    }

    fn choose_among(&self, ready: &[JobView], present: &BTreeSet<TenantId>) -> Option<usize> {
        match self.starved(present) {
            Some((client, _)) => oldest(ready.iter().enumerate().filter(|(_, j)| j.client == client)),
            None => least(ready, |j| j.remaining),
        }
    }
}

impl Dispatcher for SrptDeficit {
    fn name(&self) -> &'static str {
        "srpt-deficit"
    }

    fn choose(&self, ready: &[JobView]) -> Option<usize> {
        let present: BTreeSet<TenantId> = ready.iter().map(|j| j.client).collect();
        self.choose_among(ready, &present)
    }

    fn charge(&mut self, ready: &[JobView], served: &[TenantId], amount: f64) {
        let present: BTreeSet<TenantId> = ready.iter().map(|j| j.client).collect();
        self.deficit.retain(|c, _| present.contains(c));
        let served: BTreeSet<TenantId> = served.iter().copied().filter(|c| present.contains(c)).collect();
        if served.is_empty() {
            return;
        }
        let (fair, got) = (amount / present.len() as f64, amount / served.len() as f64);
        for &c in &present {
            let delta = if served.contains(&c) { fair - got } else { fair };
            *self.deficit.entry(c).or_insert(0.0) += delta;
        }
    }

    fn forget(&mut self, client: TenantId) {
        self.deficit.remove(&client);
    }

    fn behind(&self, ready: &[JobView]) -> bool {
        self.starved(&ready.iter().map(|j| j.client).collect()).is_some()
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
    pub fn build(self) -> Box<dyn Dispatcher + Send> {
        match self {
            DispatchPolicy::Fifo => Box::new(Fifo),
            DispatchPolicy::Sjf => Box::new(Sjf),
            DispatchPolicy::RoundRobin => Box::new(ClientRoundRobin::default()),
            DispatchPolicy::SrptDeficit { threshold } => Box::new(SrptDeficit::new(threshold)),
        }
    }
}
