//! The one interface between the policy engine and a device.
//!
//! The simulator implements it with a timing model; gmux-cuda's `CudaDevice` implements it
//! with the CUDA driver's VMM calls (`cuMemCreate`, `cuMemMap`, `cuMemSetAccess`,
//! `cuMemUnmap`, `cuMemRelease`) and copies on two dedicated streams.

use crate::memory::{ChunkId, Tier};

/// Physical GPU memory backing one extent of one or more chunks (a
/// `CUmemGenericAllocationHandle` on the real device).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PhysChunk(pub u64);

/// A recorded event: completes when everything before it on its stream has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Event(pub u64);

/// The mover's two copy streams, so that eviction and population run full-duplex.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CopyStream {
    /// Device → host and host → disk.
    Evict,
    /// Disk → host and host → device.
    Populate,
}

/// Operations gmux needs from a device. Every call is asynchronous where the device allows:
/// calls queue work, and [`Device::flush`] issues what is queued.
pub trait Device {
    /// Error type; its message must name the failing call.
    type Error: std::fmt::Display;
    /// An application stream, as far as ordering goes: work on one stream runs in order.
    type Stream: Copy + Eq + std::fmt::Debug;
    /// A mark after application work (a CUDA event recorded after a released command).
    type Fence: Copy;

    /// Creates physical memory for `chunks` consecutive chunks.
    fn create_chunk(&mut self, chunks: u32) -> Result<PhysChunk, Self::Error>;
    /// Creates pinned host memory for one chunk that can be mapped at a chunk's address
    /// like GPU memory (commands then reach it over the link).
    fn create_host_chunk(&mut self) -> Result<PhysChunk, Self::Error>;
    /// Returns physical memory to the driver.
    fn release_chunk(&mut self, phys: PhysChunk) -> Result<(), Self::Error>;
    /// Maps `phys` (made for `chunks` chunks) at the virtual addresses of chunks
    /// `first..first + chunks` and grants access, once `phys` is no longer used elsewhere.
    fn map(&mut self, first: ChunkId, chunks: u32, phys: PhysChunk) -> Result<(), Self::Error>;
    /// Unmaps the mapping of chunks `first..first + chunks` once the copies out of it
    /// issued so far are done; its physical memory stays alive for reuse.
    fn unmap(&mut self, first: ChunkId, chunks: u32) -> Result<(), Self::Error>;
    /// Copies `chunk`'s data from tier `from` to tier `to` on `stream`; [`Tier::Gpu`] is
    /// the chunk's address, whichever memory is mapped there.
    fn copy(&mut self, stream: CopyStream, chunk: ChunkId, from: Tier, to: Tier) -> Result<(), Self::Error>;
    /// Records an event on `stream`.
    fn record(&mut self, stream: CopyStream) -> Result<Event, Self::Error>;
    /// Makes later work on `stream` wait for `event`.
    fn wait(&mut self, stream: CopyStream, event: Event) -> Result<(), Self::Error>;
    /// Records only `keep` of the populate-stream events recorded since the last flush
    /// (nothing waits for the others); applies at the next flush.
    fn keep_events(&mut self, keep: &[Event]);
    /// Makes the next flush's eviction copies wait for application work `after`.
    fn evict_after(&mut self, after: &[Self::Fence]);
    /// Issues the calls queued since the last flush.
    fn flush(&mut self) -> Result<(), Self::Error>;
    /// Whether `event` has completed (an event that was never recorded has).
    fn is_done(&mut self, event: Event) -> bool;
    /// Forgets `event`; work already waiting for it is unaffected.
    fn drop_event(&mut self, event: Event);
    /// Completes, without waiting, what finished copies allow (unmaps after evictions).
    fn reclaim(&mut self) -> Result<(), Self::Error>;
    /// Waits for every copy issued so far, then completes what waited for them.
    fn synchronize(&mut self) -> Result<(), Self::Error>;
    /// Forgets a freed chunk, which is no longer mapped: its host copy goes.
    fn forget(&mut self, chunk: ChunkId);
}
