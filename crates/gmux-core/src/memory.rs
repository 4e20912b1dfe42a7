//! Chunks, allocations and tiers: where every byte of every tenant is.
//!
//! Every allocation is split into [`CHUNK_BYTES`] chunks. A chunk is in exactly one
//! [`Place`]; the table keeps per-tier and per-tenant accounting and refuses any move
//! that would exceed a tier's capacity. Chunks are grouped into extents: aligned runs of
//! up to [`Memory::set_extent`] chunks of one allocation that the planner evicts
//! together and the mover backs with one physical handle (the driver's mapping cost is
//! per handle, not per byte).

use crate::error::CoreError;
use crate::size::{chunks_for, CHUNK_BYTES};
use crate::tenant::TenantId;
use serde::{Deserialize, Serialize};

/// Index of a chunk. Ids are never reused within one [`Memory`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ChunkId(pub u32);

/// Index of an allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AllocId(pub u32);

/// A storage tier, fastest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Tier {
    /// GPU memory (HBM).
    Gpu,
    /// Pinned host memory.
    Host,
    /// Spill file on local SSD.
    Disk,
}

impl Tier {
    /// All tiers, fastest first.
    pub const ALL: [Tier; 3] = [Tier::Gpu, Tier::Host, Tier::Disk];

    fn index(self) -> usize {
        self as usize
    }
}

/// Where a chunk's data lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Place {
    /// Never touched: no physical memory, contents are zero.
    Unbacked,
    /// In a tier.
    In(Tier),
}

impl Place {
    /// Resident in GPU memory.
    pub const GPU: Place = Place::In(Tier::Gpu);
    /// In the pinned host pool.
    pub const HOST: Place = Place::In(Tier::Host);
    /// In the spill file.
    pub const DISK: Place = Place::In(Tier::Disk);
}

/// One 2 MiB chunk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chunk {
    /// Owner.
    pub tenant: TenantId,
    /// Allocation it belongs to.
    pub alloc: AllocId,
    /// Where its data is.
    pub place: Place,
    /// A clean copy is on disk, so eviction may drop it instead of writing (GMT).
    pub disk_copy: bool,
    /// Tick of the last access (for LRU and tie-breaks).
    pub last_use: u64,
}

/// One allocation: a contiguous run of chunk ids.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alloc {
    /// Owner.
    pub tenant: TenantId,
    /// Size the application asked for.
    pub bytes: u64,
    /// First chunk.
    pub first: ChunkId,
    /// Number of chunks.
    pub count: u32,
}

impl Alloc {
    /// The chunk holding byte `offset` of this allocation.
    pub fn chunk_at(&self, offset: u64) -> ChunkId {
        ChunkId(self.first.0 + (offset / CHUNK_BYTES).min(self.count as u64 - 1) as u32)
    }

    /// The chunks covering `[offset, offset + len)`, clamped to the allocation.
    pub fn chunks_in(&self, offset: u64, len: u64) -> impl Iterator<Item = ChunkId> {
        let first = (offset / CHUNK_BYTES).min(self.count as u64);
        let end = (offset.saturating_add(len)).div_ceil(CHUNK_BYTES).min(self.count as u64);
        let base = self.first.0;
        (first..end.max(first)).map(move |i| ChunkId(base + i as u32))
    }

    /// All chunks.
    pub fn chunks(&self) -> impl Iterator<Item = ChunkId> {
        let base = self.first.0;
        (0..self.count).map(move |i| ChunkId(base + i))
    }
}

/// Capacity of each tier in bytes; `None` is unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Capacities {
    /// GPU-memory budget (the HBM budget).
    pub gpu: Option<u64>,
    /// Host-tier budget.
    pub host: Option<u64>,
    /// Disk-tier budget.
    pub disk: Option<u64>,
}

impl Capacities {
    /// Capacity of `tier` in chunks; `None` is unlimited.
    pub fn chunks(&self, tier: Tier) -> Option<u64> {
        let bytes = match tier {
            Tier::Gpu => self.gpu,
            Tier::Host => self.host,
            Tier::Disk => self.disk,
        };
        bytes.map(|b| b / CHUNK_BYTES)
    }
}

/// Per-tenant chunk counts by tier.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Chunks in each tier, indexed by [`Tier`].
    pub chunks: [u64; 3],
}

impl Usage {
    /// Bytes held in `tier`.
    pub fn bytes(&self, tier: Tier) -> u64 {
        self.chunks[tier.index()] * CHUNK_BYTES
    }
}

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
        let ch = self.chunk(c).clone();
        if ch.place == Place::In(to) {
            return Ok(());
        }
        let takes_space = !(to == Tier::Disk && ch.disk_copy);
        if takes_space && self.free_chunks(to) == Some(0) {
            return Err(CoreError::OutOfBudget { what: format!("{to:?} tier"), need: CHUNK_BYTES, free: 0 });
        }
        if let Place::In(from) = ch.place {
            if !(from == Tier::Disk) {
                self.count(ch.tenant, from, -1);
            }
        }
        if takes_space {
            self.count(ch.tenant, to, 1);
        }
        let m = self.chunks[c.0 as usize].as_mut().expect("live");
        m.place = Place::In(to);
        if to == Tier::Disk {
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
            if let Place::In(t) = ch.place {
                if t != Tier::Disk {
                    used.chunks[t.index()] += 1;
                    u.chunks[t.index()] += 1;
                }
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
        if let Place::In(t) = ch.place {
            if t != Tier::Disk {
                self.count(ch.tenant, t, -1);
            }
        }
        if ch.disk_copy {
            self.count(ch.tenant, Tier::Disk, -1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: TenantId = TenantId(0);

    #[test]
    fn allocation_is_split_into_chunks() {
        let mut m = Memory::new(Capacities::default());
        let a = m.allocate(T, 5 << 20).unwrap();
        let al = m.alloc(a).unwrap().clone();
        assert_eq!(al.count, 3);
        assert_eq!(al.chunks_in(3 << 20, 2 << 20).collect::<Vec<_>>(), vec![ChunkId(1), ChunkId(2)]);
        assert_eq!(al.chunk_at(5 << 20), ChunkId(2));
        assert!(m.chunks().all(|(_, c)| c.place == Place::Unbacked));
    }

    #[test]
    fn extents_are_aligned_runs_within_one_allocation() {
        let mut m = Memory::new(Capacities::default());
        m.allocate(T, 3 * CHUNK_BYTES).unwrap();
        m.allocate(T, 37 * CHUNK_BYTES).unwrap();
        assert_eq!(m.extent(ChunkId(2)), (ChunkId(2), 1), "extent 1 is the chunk itself");
        m.set_extent(16);
        assert_eq!(m.extent(ChunkId(0)), (ChunkId(0), 3));
        assert_eq!(m.extent(ChunkId(2)), (ChunkId(0), 3));
        assert_eq!(m.extent(ChunkId(3)), (ChunkId(3), 16));
        assert_eq!(m.extent(ChunkId(18)), (ChunkId(3), 16));
        assert_eq!(m.extent(ChunkId(19)), (ChunkId(19), 16));
        assert_eq!(m.extent(ChunkId(35)), (ChunkId(35), 5), "the allocation's tail is a short extent");
        assert_eq!(m.extent(ChunkId(39)), (ChunkId(35), 5));
    }

    #[test]
    fn capacity_is_enforced() {
        let mut m = Memory::new(Capacities { gpu: Some(2 * CHUNK_BYTES), ..Default::default() });
        let a = m.allocate(T, 3 * CHUNK_BYTES).unwrap();
        m.relocate(ChunkId(0), Tier::Gpu).unwrap();
        m.relocate(ChunkId(1), Tier::Gpu).unwrap();
        assert!(matches!(m.relocate(ChunkId(2), Tier::Gpu), Err(CoreError::OutOfBudget { .. })));
        m.relocate(ChunkId(0), Tier::Host).unwrap();
        m.relocate(ChunkId(2), Tier::Gpu).unwrap();
        assert_eq!(m.usage(T).bytes(Tier::Gpu), 2 * CHUNK_BYTES);
        assert_eq!(m.usage(T).bytes(Tier::Host), CHUNK_BYTES);
        m.check().unwrap();
        m.free(a).unwrap();
        assert_eq!(m.used_chunks(Tier::Gpu), 0);
        assert_eq!(m.used_chunks(Tier::Host), 0);
        m.check().unwrap();
    }

    #[test]
    fn clean_disk_copy_is_dropped_not_rewritten() {
        let mut m = Memory::new(Capacities { disk: Some(2 * CHUNK_BYTES), ..Default::default() });
        m.allocate_on_disk(T, 2 * CHUNK_BYTES).unwrap();
        assert_eq!(m.free_chunks(Tier::Disk), Some(0));
        m.relocate(ChunkId(0), Tier::Gpu).unwrap();
        assert!(m.chunk(ChunkId(0)).disk_copy);
        m.relocate(ChunkId(0), Tier::Disk).unwrap();
        m.relocate(ChunkId(1), Tier::Gpu).unwrap();
        m.touch(ChunkId(1), 1, true);
        assert!(!m.chunk(ChunkId(1)).disk_copy);
        assert_eq!(m.free_chunks(Tier::Disk), Some(1));
        m.check().unwrap();
    }
}
