//! The scheduler's timeline: which tenant runs next, and for how long.
//!
//! MSched's "Rosetta Stone": the memory planner reads the same timeline the scheduler
//! will follow, and from it derives the global order of future accesses.

use crate::size::Nanos;
use crate::tenant::TenantId;
use serde::{Deserialize, Serialize};

/// One entry: `tenant` runs for up to `slice`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slot {
    /// Who runs.
    pub tenant: TenantId,
    /// For how long at most.
    pub slice: Nanos,
}

/// Ordered upcoming slots; the first is the one about to run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timeline {
    /// Slots in run order.
    pub slots: Vec<Slot>,
}

impl Timeline {
    /// The slot about to run.
    pub fn head(&self) -> Option<Slot> {
        self.slots.first().copied()
    }
}
