//! The memory policies attached to one planner (a tenant's process, in the shim), as
//! gmux-core's memory hooks: each hook runs the programs attached to it, in load order,
//! and the tenant numbers they see are the daemon's.

use crate::hooks::PolicyHooks;
use crate::map::MapKind;
use gmux_core::hooks::{Candidate, MemoryHooks};
use gmux_core::{ChunkId, TenantId};

/// One attached policy.
pub struct AttachedPolicy {
    /// A number the holder gives it (the daemon's id, or one of its own).
    pub key: u64,
    /// Its name, for log lines.
    pub name: String,
    /// Its memory programs.
    pub hooks: PolicyHooks,
}

/// One map of an attached policy as [`AttachedMemory::snapshots`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapSnapshot {
    /// The policy's key ([`AttachedPolicy::key`]).
    pub policy: u64,
    /// The map's name.
    pub map: String,
    /// How many entries it holds (an array: how many are not zero).
    pub total: usize,
    /// Those entries, as many as the budget allowed: key and value bytes.
    pub entries: Vec<crate::map::Entry>,
}

/// Memory policies attached to one planner.
#[derive(Default)]
pub struct AttachedMemory {
    /// The tenant number the programs see for the planner's tenants (`None`: the planner's
    /// own numbers). A shim's planner holds one tenant, which the daemon numbers.
    pub tenant: Option<TenantId>,
    policies: Vec<AttachedPolicy>,
}

// SAFETY: the maps a policy's programs share (`Rc`) are reached only through that policy,
// and every policy moves with the set: all the clones of an `Rc` move between threads
// together, and the holder uses the set from one thread at a time (behind a lock).
unsafe impl Send for AttachedMemory {}

impl AttachedMemory {
    /// Whether no policy is attached.
    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }

    /// The attached policies, in load order.
    pub fn policies(&self) -> &[AttachedPolicy] {
        &self.policies
    }

    /// Attaches `p` after the others.
    pub fn push(&mut self, p: AttachedPolicy) {
        self.policies.push(p);
    }

    /// Detaches the policies `keep` rejects, and returns them.
    pub fn retain(&mut self, keep: impl Fn(u64) -> bool) -> Vec<AttachedPolicy> {
        let (kept, gone) = std::mem::take(&mut self.policies).into_iter().partition(|p| keep(p.key));
        self.policies = kept;
        gone
    }

    /// The trace lines written since the last call, each with its policy.
    pub fn take_traces(&mut self) -> Vec<(&AttachedPolicy, String)> {
        let mut lines = Vec::new();
        for (i, p) in self.policies.iter_mut().enumerate() {
            for prog in [&mut p.hooks.activate, &mut p.hooks.access, &mut p.hooks.evict_prepare, &mut p.hooks.prefetch].into_iter().flatten() {
                lines.extend(prog.take_traces().into_iter().map(|t| (i, t)));
            }
        }
        lines.into_iter().map(|(i, t)| (&self.policies[i], t)).collect()
    }

    /// What the attached policies' maps hold, ring buffers aside (reading takes their
    /// records): a hash map's entries, an array's that are not zero, each map's as many as
    /// `most(key size, value size)` gives.
    pub fn snapshots(&self, most: impl Fn(usize, usize) -> usize) -> Vec<MapSnapshot> {
        let mut out = Vec::new();
        for p in &self.policies {
            for (name, m) in p.hooks.maps.iter().filter(|(_, m)| m.def.kind != MapKind::RingBuf) {
                let (total, entries) = m.sample(most(m.def.key_size as usize, m.def.value_size as usize));
                out.push(MapSnapshot { policy: p.key, map: name.clone(), total, entries });
            }
        }
        out
    }

    fn seen(&self, t: TenantId) -> TenantId {
        self.tenant.unwrap_or(t)
    }
}

impl MemoryHooks for AttachedMemory {
    fn activate(&mut self, chunk: ChunkId, tenant: TenantId) {
        let t = self.seen(tenant);
        self.policies.iter_mut().for_each(|p| p.hooks.activate(chunk, t));
    }

    fn access(&mut self, chunk: ChunkId, tenant: TenantId, stamp: u64) {
        let t = self.seen(tenant);
        self.policies.iter_mut().for_each(|p| p.hooks.access(chunk, t, stamp));
    }

    fn tracks_access(&self) -> bool {
        self.policies.iter().any(|p| p.hooks.tracks_access())
    }

    fn reorders(&self) -> bool {
        self.policies.iter().any(|p| p.hooks.reorders())
    }

    fn evict_prepare(&mut self, requester: TenantId, candidates: &mut [Candidate]) {
        let Some(own) = self.tenant else {
            return self.policies.iter_mut().for_each(|p| p.hooks.evict_prepare(requester, candidates));
        };
        // A planner whose tenant is renumbered holds that one tenant: the programs see the
        // daemon's number, and the planner gets its own back.
        let Some(mine) = candidates.first().map(|c| c.tenant) else { return };
        candidates.iter_mut().for_each(|c| c.tenant = own);
        self.policies.iter_mut().for_each(|p| p.hooks.evict_prepare(own, candidates));
        candidates.iter_mut().for_each(|c| c.tenant = mine);
    }

    fn prefetch(&mut self, tenant: TenantId) -> Vec<ChunkId> {
        let t = self.seen(tenant);
        self.policies.iter_mut().flat_map(|p| p.hooks.prefetch(t)).collect()
    }
}
