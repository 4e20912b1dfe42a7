//! Memory policy hook points (gpu_ext): a program advises, the core keeps final
//! authority. The planner calls them; what a hook returns is validated here: a hook may
//! reorder eviction candidates but never drop or invent one, and prefetch advice is
//! followed only where it evicts nothing needed sooner.

use crate::memory::ChunkId;
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

/// The hooks that do nothing: the built-in policies alone decide.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoHooks;
impl MemoryHooks for NoHooks {}

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
    #[test]
    fn reorder_is_kept_loss_is_refused() {
        let mut c = vec![ChunkId(1), ChunkId(2), ChunkId(3)];
        assert!(evict_order(&mut Reverse, &mut c));
        assert_eq!(c, vec![ChunkId(3), ChunkId(2), ChunkId(1)]);
        assert!(!evict_order(&mut Drops, &mut c));
        assert_eq!(c, vec![ChunkId(3), ChunkId(2), ChunkId(1)]);
    }
}
