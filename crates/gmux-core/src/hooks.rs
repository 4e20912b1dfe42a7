//! Memory policy hook points (gpu_ext): a program advises, the core keeps final
//! authority. The planner calls them; what a hook returns is validated here: a hook may
//! reorder eviction candidates but never drop or invent one, and prefetch advice is
//! followed only where it evicts nothing needed sooner.

use crate::evict::Forecast;
use crate::memory::{ChunkId, Memory};
use crate::tenant::TenantId;

/// What an eviction hook is told of a candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// The chunk.
    pub chunk: ChunkId,
    /// Its owner.
    pub tenant: TenantId,
    /// The access stamp of its last use (the planner's clock).
    pub last_use: u64,
    /// Its next use in the timeline's forecast, or [`Forecast::NEVER`].
    pub next_use: u64,
}

/// Memory hooks: activate, access, evict_prepare, prefetch.
pub trait MemoryHooks {
    /// A chunk became resident for `tenant`.
    fn activate(&mut self, _chunk: ChunkId, _tenant: TenantId) {}
    /// A command touched `chunk` of `tenant` at access stamp `stamp`.
    fn access(&mut self, _chunk: ChunkId, _tenant: TenantId, _stamp: u64) {}
    /// Whether [`MemoryHooks::evict_prepare`] reorders: the planner builds candidate
    /// lists only for hooks that do.
    fn reorders(&self) -> bool {
        false
    }
    /// May reorder the candidates of a plan for `requester`, first evicted first.
    fn evict_prepare(&mut self, _requester: TenantId, _candidates: &mut [Candidate]) {}
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

/// Runs `evict_prepare` on `order` (the built-in policy's) for a plan of `requester`, and
/// keeps the hook's order only if it is a permutation of it. Returns whether the hook's
/// order was taken.
pub fn evict_order(hooks: &mut dyn MemoryHooks, mem: &Memory, forecast: &Forecast, requester: TenantId, order: &mut [ChunkId]) -> bool {
    if !hooks.reorders() {
        return false;
    }
    let mut cands: Vec<Candidate> = order
        .iter()
        .map(|&c| {
            let ch = mem.chunk(c);
            Candidate { chunk: c, tenant: ch.tenant, last_use: ch.last_use, next_use: forecast.next_use(c) }
        })
        .collect();
    hooks.evict_prepare(requester, &mut cands);
    let mut a: Vec<ChunkId> = order.to_vec();
    let mut b: Vec<ChunkId> = cands.iter().map(|c| c.chunk).collect();
    a.sort_unstable();
    b.sort_unstable();
    if a != b {
        return false;
    }
    for (o, c) in order.iter_mut().zip(&cands) {
        *o = c.chunk;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Capacities;
    use crate::CHUNK_BYTES;

    struct Reverse;
    impl MemoryHooks for Reverse {
        fn reorders(&self) -> bool {
            true
        }
        fn evict_prepare(&mut self, _: TenantId, c: &mut [Candidate]) {
            c.reverse();
        }
    }
    struct Forges;
    impl MemoryHooks for Forges {
        fn reorders(&self) -> bool {
            true
        }
        fn evict_prepare(&mut self, _: TenantId, c: &mut [Candidate]) {
            c[0].chunk = c[1].chunk;
        }
    }

    #[test]
    fn reorder_is_kept_a_forged_candidate_is_refused() {
        let mut mem = Memory::new(Capacities::default());
        mem.allocate(TenantId(0), 3 * CHUNK_BYTES).expect("allocated");
        let f = Forecast::default();
        let mut c = vec![ChunkId(0), ChunkId(1), ChunkId(2)];
        assert!(evict_order(&mut Reverse, &mem, &f, TenantId(0), &mut c));
        assert_eq!(c, vec![ChunkId(2), ChunkId(1), ChunkId(0)]);
        assert!(!evict_order(&mut Forges, &mem, &f, TenantId(0), &mut c));
        assert_eq!(c, vec![ChunkId(2), ChunkId(1), ChunkId(0)]);
        assert!(!evict_order(&mut NoHooks, &mem, &f, TenantId(0), &mut c), "no hook, no call");
    }
}
