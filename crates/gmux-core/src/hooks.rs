//! Policy hook points (gpu_ext): programs advise, the core keeps final authority.
//!
//! Later issues load eBPF programs behind these traits. Whatever a hook returns is
//! validated here: a hook may reorder eviction candidates but never drop or invent one,
//! and may shorten or lengthen a timeslice only within the knob's bounds.

use crate::knobs::MAX_TIMESLICE;
use crate::memory::ChunkId;
use crate::size::Nanos;
use crate::tenant::TenantId;

/// Memory hooks: activate, access, evict_prepare, prefetch.
pub trait MemoryHooks {
    /// A chunk became resident for `tenant`.
    fn activate(&mut self, _chunk: ChunkId, _tenant: TenantId) {}
    /// A command touched `chunk`.
    fn access(&mut self, _chunk: ChunkId, _tenant: TenantId) {}
    /// May reorder eviction candidates (first is evicted first).
    fn evict_prepare(&mut self, _candidates: &mut Vec<ChunkId>) {}
    /// Chunks of `tenant` worth populating after its predicted working set; the planner
    /// brings them in only where that evicts nothing needed sooner.
    fn prefetch(&mut self, _tenant: TenantId) -> Vec<ChunkId> {
        Vec::new()
    }
}

/// Scheduling decisions a `task_init` hook may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskParams {
    /// Strict-priority class.
    pub priority: i32,
    /// Timeslice.
    pub timeslice: Nanos,
}

/// Scheduling hooks: task_init, task_destroy, timeslice.
pub trait SchedHooks {
    /// A tenant arrives; may change its parameters or reject it with a reason.
    fn task_init(&mut self, _tenant: TenantId, _params: &mut TaskParams) -> Result<(), String> {
        Ok(())
    }
    /// A tenant left.
    fn task_destroy(&mut self, _tenant: TenantId) {}
    /// The slice to give `tenant` now.
    fn timeslice(&mut self, _tenant: TenantId, default: Nanos) -> Nanos {
        default
    }
}

/// The hooks that do nothing: the built-in policies alone decide.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoHooks;
impl MemoryHooks for NoHooks {}
impl SchedHooks for NoHooks {}

/// Runs `evict_prepare` and keeps its order only if it is a permutation of the input.
///
/// Returns whether the hook's order was accepted.
pub fn evict_order(hooks: &mut dyn MemoryHooks, candidates: &mut Vec<ChunkId>) -> bool {
    let original = candidates.clone();
    hooks.evict_prepare(candidates);
    let mut a = original.clone();
    let mut b = candidates.clone();
    a.sort_unstable();
    b.sort_unstable();
    if a == b {
        true
    } else {
        *candidates = original;
        false
    }
}

/// Runs the `timeslice` hook and clamps its answer to 1 µs ..= [`MAX_TIMESLICE`].
pub fn timeslice(hooks: &mut dyn SchedHooks, tenant: TenantId, default: Nanos) -> Nanos {
    hooks.timeslice(tenant, default).clamp(1_000, MAX_TIMESLICE)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Reverse;
    impl MemoryHooks for Reverse {
        fn evict_prepare(&mut self, c: &mut Vec<ChunkId>) {
            c.reverse();
        }
    }
    struct Drops;
    impl MemoryHooks for Drops {
        fn evict_prepare(&mut self, c: &mut Vec<ChunkId>) {
            c.pop();
            c.push(ChunkId(999));
        }
    }
    struct Greedy;
    impl SchedHooks for Greedy {
        fn timeslice(&mut self, _: TenantId, _: Nanos) -> Nanos {
            u64::MAX
        }
    }

    #[test]
    fn reorder_is_kept_loss_is_refused() {
        let mut c = vec![ChunkId(1), ChunkId(2), ChunkId(3)];
        assert!(evict_order(&mut Reverse, &mut c));
        assert_eq!(c, vec![ChunkId(3), ChunkId(2), ChunkId(1)]);
        assert!(!evict_order(&mut Drops, &mut c));
        assert_eq!(c, vec![ChunkId(3), ChunkId(2), ChunkId(1)]);
    }

    #[test]
    fn timeslice_is_clamped() {
        assert_eq!(timeslice(&mut Greedy, TenantId(0), 5), MAX_TIMESLICE);
        assert_eq!(timeslice(&mut NoHooks, TenantId(0), 5), 1_000);
    }
}
