//! Chunks, allocations and tiers: where every byte of every tenant is.
//!
//! Every allocation is split into [`CHUNK_BYTES`](crate::size::CHUNK_BYTES) chunks. A
//! chunk is in exactly one [`Place`]; the table keeps per-tier and per-tenant accounting
//! and refuses any move that would exceed a tier's capacity. Chunks are grouped into
//! extents: aligned runs of up to [`Memory::set_extent`] chunks of one allocation that
//! the planner evicts together and the mover backs with one physical handle (the
//! driver's mapping cost is per handle, not per byte).

mod chunk;
mod table;
mod tier;

pub use chunk::{Alloc, AllocId, Chunk, ChunkId};
pub use table::Memory;
pub use tier::{Capacities, Place, Tier, Usage};

#[cfg(test)]
mod tests;
