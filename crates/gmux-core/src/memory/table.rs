//! The chunk table of one GPU: allocation, residency moves and their accounting.

use super::{Alloc, AllocId, Capacities, Chunk, ChunkId, Place, Tier, Usage};
use crate::error::CoreError;
use crate::size::{chunks_for, CHUNK_BYTES};
use crate::tenant::TenantId;

/// The chunk table of one GPU.
#[derive(Debug, Clone, Default)]
pub struct Memory {
    caps: Capacities,
    chunks: Vec<Option<Chunk>>,
    allocs: Vec<Option<Alloc>>,
    used: Usage,
    per_tenant: Vec<Usage>,
    extent: u32,
}

impl Memory {
    /// An empty table with these tier capacities.
    pub fn new(caps: Capacities) -> Self {
        Memory { caps, ..Default::default() }
    }

    /// Tier capacities.
    pub fn capacities(&self) -> Capacities {
        self.caps
    }

    /// Changes the GPU-memory budget; chunks over it stay until a plan evicts them
    /// ([`crate::planner::Planner::shrink`]).
    pub fn set_gpu_capacity(&mut self, bytes: Option<u64>) {
        self.caps.gpu = bytes;
    }

    /// Sets the extent length in chunks (at least 1, the default).
    pub fn set_extent(&mut self, chunks: u32) {
        self.extent = chunks.max(1);
    }

    /// The extent length in chunks.
    pub fn extent_chunks(&self) -> u32 {
        self.extent.max(1)
    }

    /// The extent holding `c`: its first chunk and its length (the last extent of an
    /// allocation may be shorter).
    pub fn extent(&self, c: ChunkId) -> (ChunkId, u32) {
        let e = self.extent_chunks();
        let a = self.allocs[self.chunk(c).alloc.0 as usize].as_ref().expect("allocation of a live chunk");
        let start = (c.0 - a.first.0) / e * e;
        (ChunkId(a.first.0 + start), e.min(a.count - start))
    }

    /// Allocates `bytes` for `tenant`; chunks start [`Place::Unbacked`].
    pub fn allocate(&mut self, tenant: TenantId, bytes: u64) -> Result<AllocId, CoreError> {
        if bytes == 0 {
            return Err(CoreError::ZeroAlloc);
        }
        let count = chunks_for(bytes) as u32;
        let first = ChunkId(self.chunks.len() as u32);
        let alloc = AllocId(self.allocs.len() as u32);
        self.chunks.extend((0..count).map(|_| Some(Chunk { tenant, alloc, place: Place::Unbacked, disk_copy: false, last_use: 0 })));
        self.allocs.push(Some(Alloc { tenant, bytes, first, count }));
        self.usage_mut(tenant);
        Ok(alloc)
    }

    /// Allocates a data set whose contents start in the disk tier (clean copies), as GMT's inputs do.
    pub fn allocate_on_disk(&mut self, tenant: TenantId, bytes: u64) -> Result<AllocId, CoreError> {
        let need = chunks_for(bytes);
        let free = self.free_chunks(Tier::Disk);
        if free.is_some_and(|f| f < need) {
            return Err(CoreError::OutOfBudget { what: "disk tier".into(), need: need * CHUNK_BYTES, free: free.unwrap_or(0) * CHUNK_BYTES });
        }
        let id = self.allocate(tenant, bytes)?;
        let a = self.alloc(id)?.clone();
        for c in a.chunks() {
            let ch = self.chunks[c.0 as usize].as_mut().expect("fresh chunk");
            ch.place = Place::DISK;
            ch.disk_copy = true;
        }
        self.count(tenant, Tier::Disk, a.count as i64);
        Ok(id)
    }

    /// Frees an allocation, releasing every chunk wherever it is.
    pub fn free(&mut self, id: AllocId) -> Result<Alloc, CoreError> {
        let a = self.allocs.get_mut(id.0 as usize).and_then(Option::take).ok_or(CoreError::UnknownAlloc(id.0))?;
        for c in a.chunks() {
            let ch = self.chunks[c.0 as usize].take().expect("chunk of live allocation");
            self.uncount_chunk(&ch);
        }
        Ok(a)
    }

    /// Gives allocation `id` a new requested size within its chunks: the allocation is
    /// handed out again for a request of `bytes`.
    pub fn resize(&mut self, id: AllocId, bytes: u64) -> Result<(), CoreError> {
        let a = self.allocs.get_mut(id.0 as usize).and_then(Option::as_mut).ok_or(CoreError::UnknownAlloc(id.0))?;
        if bytes == 0 {
            return Err(CoreError::ZeroAlloc);
        }
        if chunks_for(bytes) != u64::from(a.count) {
            return Err(CoreError::OutOfBudget { what: format!("allocation {} reused", id.0), need: bytes, free: u64::from(a.count) * CHUNK_BYTES });
        }
        a.bytes = bytes;
        Ok(())
    }

    /// The allocation with this id.
    pub fn alloc(&self, id: AllocId) -> Result<&Alloc, CoreError> {
        self.allocs.get(id.0 as usize).and_then(Option::as_ref).ok_or(CoreError::UnknownAlloc(id.0))
    }

    /// Live allocations.
    pub fn allocs(&self) -> impl Iterator<Item = (AllocId, &Alloc)> {
        self.allocs.iter().enumerate().filter_map(|(i, a)| a.as_ref().map(|a| (AllocId(i as u32), a)))
    }

    /// The chunk with this id; panics if it was freed (a caller bug).
    pub fn chunk(&self, c: ChunkId) -> &Chunk {
        self.chunks[c.0 as usize].as_ref().expect("access to a freed chunk")
    }

    /// Whether `c` is live.
    pub fn is_live(&self, c: ChunkId) -> bool {
        self.chunks.get(c.0 as usize).is_some_and(Option::is_some)
    }

    /// Live chunks.
    pub fn chunks(&self) -> impl Iterator<Item = (ChunkId, &Chunk)> {
        self.chunks.iter().enumerate().filter_map(|(i, c)| c.as_ref().map(|c| (ChunkId(i as u32), c)))
    }

    /// Upper bound of chunk ids handed out so far (for dense side tables).
    pub fn id_bound(&self) -> usize {
        self.chunks.len()
    }

    /// Whether `c` is in GPU memory.
    pub fn is_resident(&self, c: ChunkId) -> bool {
        self.chunk(c).place == Place::GPU
    }

    /// Chunks in `tier`, all tenants.
    pub fn used_chunks(&self, tier: Tier) -> u64 {
        self.used.chunks[tier.index()]
    }

    /// Free chunks in `tier`; `None` when unlimited.
    pub fn free_chunks(&self, tier: Tier) -> Option<u64> {
        self.caps.chunks(tier).map(|cap| cap.saturating_sub(self.used.chunks[tier.index()]))
    }

    /// Usage of one tenant.
    pub fn usage(&self, t: TenantId) -> Usage {
        self.per_tenant.get(t.0 as usize).copied().unwrap_or_default()
    }

    /// Records an access at `tick`; a write invalidates the clean disk copy.
    pub fn touch(&mut self, c: ChunkId, tick: u64, write: bool) {
        let ch = self.chunks[c.0 as usize].as_mut().expect("touch of a freed chunk");
        ch.last_use = tick;
        if write && ch.disk_copy && ch.place != Place::DISK {
            ch.disk_copy = false;
            let t = ch.tenant;
            self.count(t, Tier::Disk, -1);
        }
    }

    /// Moves `c` to `to`, checking the destination tier's capacity.
    ///
    /// Moving to disk a chunk that has a clean disk copy takes no new disk space (a drop).
    pub fn relocate(&mut self, c: ChunkId, to: Tier) -> Result<(), CoreError> {
        self.relocate_to(c, Place::In(to))
    }

    /// Moves `c` to place `to` (not [`Place::Unbacked`]), checking the capacity of the
    /// tier that will hold its data.
    pub fn relocate_to(&mut self, c: ChunkId, to: Place) -> Result<(), CoreError> {
        let ch = self.chunk(c).clone();
        let Some(to_tier) = to.tier() else { return Err(CoreError::Unbacking(c.0)) };
        if ch.place == to {
            return Ok(());
        }
        let from_tier = ch.place.tier();
        let same_memory = from_tier == Some(to_tier);
        let takes_space = !(same_memory || to_tier == Tier::Disk && ch.disk_copy);
        if takes_space && self.free_chunks(to_tier) == Some(0) {
            return Err(CoreError::OutOfBudget { what: format!("{to_tier:?} tier"), need: CHUNK_BYTES, free: 0 });
        }
        if !same_memory {
            if let Some(from) = from_tier.filter(|t| *t != Tier::Disk) {
                self.count(ch.tenant, from, -1);
            }
        }
        if takes_space {
            self.count(ch.tenant, to_tier, 1);
        }
        let m = self.chunks[c.0 as usize].as_mut().expect("live");
        m.place = to;
        if to == Place::DISK {
            m.disk_copy = true;
        }
        Ok(())
    }

    /// Recomputes all accounting from the chunks and compares; `Err` names the first mismatch.
    pub fn check(&self) -> Result<(), String> {
        let mut used = Usage::default();
        let mut per: Vec<Usage> = vec![Usage::default(); self.per_tenant.len()];
        for (_, ch) in self.chunks() {
            let u = &mut per[ch.tenant.0 as usize];
            if let Some(t) = ch.place.tier().filter(|t| *t != Tier::Disk) {
                used.chunks[t.index()] += 1;
                u.chunks[t.index()] += 1;
            }
            if ch.place == Place::DISK && !ch.disk_copy {
                return Err("chunk on disk without a disk copy".into());
            }
            if ch.disk_copy {
                used.chunks[Tier::Disk.index()] += 1;
                u.chunks[Tier::Disk.index()] += 1;
            }
        }
        if used != self.used {
            return Err(format!("tier accounting {:?} != recomputed {:?}", self.used, used));
        }
        if per != self.per_tenant {
            return Err("per-tenant accounting differs from the chunks".into());
        }
        for tier in Tier::ALL {
            if let Some(cap) = self.caps.chunks(tier) {
                if used.chunks[tier.index()] > cap {
                    return Err(format!("{tier:?} holds {} chunks over its capacity {cap}", used.chunks[tier.index()]));
                }
            }
        }
        Ok(())
    }

    fn usage_mut(&mut self, t: TenantId) -> &mut Usage {
        let i = t.0 as usize;
        if self.per_tenant.len() <= i {
            self.per_tenant.resize(i + 1, Usage::default());
        }
        &mut self.per_tenant[i]
    }

    fn count(&mut self, t: TenantId, tier: Tier, delta: i64) {
        let i = tier.index();
        self.used.chunks[i] = self.used.chunks[i].checked_add_signed(delta).expect("tier count underflow");
        let u = self.usage_mut(t);
        u.chunks[i] = u.chunks[i].checked_add_signed(delta).expect("tenant count underflow");
    }

    fn uncount_chunk(&mut self, ch: &Chunk) {
        if let Some(t) = ch.place.tier().filter(|t| *t != Tier::Disk) {
            self.count(ch.tenant, t, -1);
        }
        if ch.disk_copy {
            self.count(ch.tenant, Tier::Disk, -1);
        }
    }
}
