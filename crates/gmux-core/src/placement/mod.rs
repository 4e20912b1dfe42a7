//! Tier placement of chunks evicted from GPU memory (GMT §2.1).
//!
//! When the planner evicts a chunk from GPU memory, a [`Placement`] decides whether it
//! stays (short reuse), goes to the pinned host tier (medium reuse) or to the disk tier
//! (long reuse; a clean chunk with a disk copy is then simply dropped).

mod random;
mod reuse;
mod tier_order;

pub use random::RandomPlacement;
pub use reuse::ReusePlacement;
pub use tier_order::{TierOrder, TwoTier};

use crate::memory::{ChunkId, Memory, Place};
use serde::{Deserialize, Serialize};

/// Where an eviction candidate from GPU memory should go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Short reuse: keep it in GPU memory and pick another victim.
    Keep,
    /// Medium reuse: the pinned host tier.
    Host,
    /// Long reuse: the disk tier (a drop when a clean disk copy exists).
    Disk,
}

/// A placement policy. Receives every access so it can learn reuse behaviour.
pub trait Placement {
    /// Fixed name (`tier-order`, `random`, `reuse`, `two-tier`).
    fn name(&self) -> &'static str;
    /// `chunk` was accessed (one call per chunk per command).
    fn on_access(&mut self, chunk: ChunkId, mem: &Memory);
    /// Where the GPU-memory victim `chunk` goes; `host_full` says the host tier has no free chunk.
    fn place(&mut self, chunk: ChunkId, mem: &Memory, host_full: bool) -> Decision;
    /// Removes from the policy's host list and returns the host-tier chunk to demote to
    /// disk to make room, or `None` to send the victim to disk instead. Each call within
    /// one plan must return a different chunk.
    fn host_victim(&mut self, mem: &Memory) -> Option<ChunkId>;
    /// `chunk` moved from `from` to `to` (keeps the policy's own lists in step).
    fn on_move(&mut self, chunk: ChunkId, from: Place, to: Place);
}

/// Placement policies by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlacementKind {
    /// Every victim to host; host victims (CLOCK) to disk.
    TierOrder,
    /// Victim to host or disk at random.
    Random,
    /// By predicted remaining reuse distance (VTD sampling, OLS, 3-state Markov history).
    Reuse,
    /// No host tier: victims go straight to disk (the BaM-like 2-tier baseline).
    TwoTier,
}

impl PlacementKind {
    /// A fresh policy; `seed` makes `random` deterministic.
    pub fn build(self, seed: u64) -> Box<dyn Placement> {
        match self {
            PlacementKind::TierOrder => Box::new(TierOrder::default()),
            PlacementKind::Random => Box::new(RandomPlacement::new(seed)),
            PlacementKind::Reuse => Box::new(ReusePlacement::default()),
            PlacementKind::TwoTier => Box::new(TwoTier),
        }
    }
}
