//! Schedulers: policies that produce the [`Timeline`], and Paella's kernel dispatcher.
//!
//! Time-slice policies ([`Scheduler`]) decide which tenant owns the GPU next and for how
//! long; the kernel-granular [`dispatch::Dispatcher`] decides which job's next kernel is
//! released (Paella §6).

pub mod dispatch;
mod priority;
mod round_robin;
mod share;

pub use priority::StrictPriority;
pub use round_robin::RoundRobin;
pub use share::WeightedShare;

use crate::size::Nanos;
use crate::tenant::TenantId;
use crate::timeline::Timeline;
use serde::{Deserialize, Serialize};

/// What a scheduler sees of one tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantView {
    /// Which tenant.
    pub id: TenantId,
    /// Has commands waiting.
    pub ready: bool,
    /// `compute.freeze` is set: never scheduled.
    pub frozen: bool,
    /// Strict-priority class (larger first).
    pub priority: i32,
    /// Weighted-share weight (≥ 1).
    pub weight: u32,
    /// `compute.timeslice`.
    pub timeslice: Nanos,
}

impl TenantView {
    /// Ready and not frozen.
    pub fn runnable(&self) -> bool {
        self.ready && !self.frozen
    }
}

/// A time-slice policy.
pub trait Scheduler: Send {
    /// Fixed name (`rr`, `priority`, `share`).
    fn name(&self) -> &'static str;
    /// The next `len` slots over the runnable tenants (empty when none is runnable).
    /// Does not change state: calling it twice gives the same timeline.
    fn timeline(&self, tenants: &[TenantView], len: usize) -> Timeline;
    /// `tenant` ran for `ran`; advance the policy's state.
    fn charge(&mut self, tenant: TenantId, ran: Nanos);
}

/// The time-slice policies by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// `rr`: each runnable tenant in turn for its timeslice.
    #[serde(rename = "rr")]
    RoundRobin,
    /// `priority`: the highest runnable priority class runs; round robin inside a class.
    Priority,
    /// `share`: stride scheduling, time proportional to weight.
    Share,
}

impl Policy {
    /// A fresh scheduler for this policy.
    pub fn build(self) -> Box<dyn Scheduler> {
        match self {
            Policy::RoundRobin => Box::new(RoundRobin::default()),
            Policy::Priority => Box::new(StrictPriority::default()),
            Policy::Share => Box::new(WeightedShare::default()),
        }
    }

    /// Parses `rr`, `priority` or `share`.
    pub fn parse(s: &str) -> Result<Policy, String> {
        match s {
            "rr" => Ok(Policy::RoundRobin),
            "priority" => Ok(Policy::Priority),
            "share" => Ok(Policy::Share),
            _ => Err(format!("unknown policy {s:?}: use rr, priority or share")),
        }
    }
}
