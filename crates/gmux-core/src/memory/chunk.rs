//! Chunk and allocation ids, and the records the table keeps for each.

use super::Place;
use crate::size::CHUNK_BYTES;
use crate::tenant::TenantId;
use serde::{Deserialize, Serialize};

/// Index of a chunk. Ids are never reused within one [`Memory`](super::Memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ChunkId(pub u32);

/// Index of an allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AllocId(pub u32);

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
