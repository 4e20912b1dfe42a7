//! The real device behind gmux-core's [`Device`] trait: VMM mappings, two copy streams
//! and the pinned host pool.
//!
//! Calls are queued and run at [`CudaDevice::flush`], which first maps every incoming
//! extent and grants access with one `cuMemSetAccess` per contiguous run, then issues
//! copies and events in the plan's order. Granting access and unmapping cost per
//! mapping, not per byte (measured on an H100, per 2 MiB: 29 µs and 18 µs with 2 MiB
//! handles, 1.9 µs and 1.2 µs with 32 MiB ones), and granting access costs 10–30 times
//! more while copies keep the link busy both ways (0.4–1 ms per handle,
//! `gpu/handoff_probe.py`), so the mover maps whole extents with one handle each
//! (`GMUX_LOG=debug` prints these times for every flush). A fill step of the daemon's
//! agent maps outside the process's state lock instead, so that the application's
//! launches do not wait for the driver (`defer.rs`).
//! Everything after that is ordered on the GPU, not by the host:
//! - eviction copies wait for the application's commands released before them
//!   ([`CudaDevice::evict_after_all`]) and for the populations of earlier flushes;
//! - a physical chunk handed from an eviction to a population stays mapped at both
//!   addresses for a while; the population waits on the GPU for the eviction copy, and
//!   the old address is unmapped later, once that copy is done (`cuMemUnmap` is a host
//!   call, so waiting for it would stall the pipeline). The one host wait: new physical
//!   memory waits for the unmaps of memory released while still mapped, which the driver
//!   frees only then ([`Device::create_chunk`]), so that the device never holds more
//!   than the limit.

use crate::cuda::*;
use crate::driver::{check, CudaError};
use crate::hostpool::HostPool;
use crate::stream::StreamKey;
use gmux_core::device::{CopyStream, Device, Event, PhysChunk};
use gmux_core::{ChunkId, Tier, CHUNK_BYTES};
use std::collections::{HashMap, HashSet};

mod alias;
mod defer;
mod flush;
mod peers;
pub use peers::{add_peer, peers, MAX_PEERS};

/// How the mover orders its two directions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoverMode {
    /// Eviction and population overlap (full duplex).
    Pipelined,
    /// All evictions finish before any population starts.
    Sequential,
}

static SYNC_BEFORE_EVICTIONS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// From now on, every device in the process waits on the host for all work of its context
/// before a plan that evicts (after a panic in gmux, whose bookkeeping may be incomplete).
pub fn sync_before_evictions() {
    SYNC_BEFORE_EVICTIONS.store(true, std::sync::atomic::Ordering::Relaxed);
}
mod unmap;
pub use alias::Span;
pub use defer::MapBatch;
use flush::CallTimes;
use unmap::PendingUnmap;

const CHUNK: usize = CHUNK_BYTES as usize;

/// Most chunks merged into one copy (32 MiB): large copies run near link speed, and the
/// other direction still starts after the first run.
pub const RUN_CHUNKS: usize = 16;

/// A queued device call.
#[derive(Debug, Clone, Copy)]
enum Op {
    /// First chunk, chunks, physical memory.
    Map(ChunkId, u32, PhysChunk),
    /// First chunk and chunks of a mapping.
    Unmap(ChunkId, u32),
    Copy(CopyStream, ChunkId, Tier, Tier),
    Record(CopyStream, Event),
    Wait(CopyStream, Event),
}

/// The CUDA implementation of [`Device`].
pub struct CudaDevice {
    ordinal: i32,
    mode: MoverMode,
    streams: [CUstream; 2],
    chunk_va: Vec<CUdeviceptr>,
    /// A chunk's other addresses: where the application mapped its allocation again
    /// ([`CudaDevice::alias`]). Its memory is mapped at each; copies use `chunk_va`.
    aliases: HashMap<ChunkId, Vec<CUdeviceptr>>,
    /// Physical memory and length in chunks of each mapping, by its first chunk.
    mapped: HashMap<ChunkId, (u64, u32)>,
    pending_unmap: Vec<PendingUnmap>,
    pending_vas: HashSet<CUdeviceptr>,
    /// Physical memory released while still mapped (its unmap waits for its eviction
    /// copy): the driver frees it only at the unmap.
    released_mapped: HashSet<u64>,
    /// Physical memory on the host ([`Device::create_host_chunk`]), not counted as the
    /// device's.
    host_phys: HashSet<u64>,
    /// A flush is running in the middle of a plan's issue ([`Device::create_chunk`]).
    mid_plan: bool,
    /// Population events such a flush recorded before the plan said which it keeps.
    early_events: Vec<u64>,
    /// How many pending unmaps share each eviction event.
    event_refs: HashMap<usize, usize>,
    /// Populate-stream events to record at the next flush (`None`: all).
    keep: Option<HashSet<u64>>,
    /// Unmap evicted addresses at once (`GMUX_UNMAP=strict`), so that a command touching
    /// memory outside its predicted working set faults instead of reading stale data.
    pub strict_unmap: bool,
    /// The host waits for all work of the context before a plan that evicts
    /// (`GMUX_DEBUG=sync-before`).
    pub sync_before_evict: bool,
    /// Most chunks merged into one copy (`GMUX_DEBUG=runN`; default [`RUN_CHUNKS`]).
    pub run_chunks: usize,
    /// Eviction copy after which a physical chunk's old contents are dead.
    phys_free_after: HashMap<u64, CUevent>,
    /// Application events the next flush's eviction copies wait for.
    evict_wait: Vec<CUevent>,
    /// The populate stream's last work of earlier flushes, which the next eviction copies
    /// wait for: a prefetched chunk may be evicted before any command used it, and its
    /// copy out (and unmap) must follow its copy in.
    populated: Option<CUevent>,
    host: HostPool,
    slot: HashMap<ChunkId, usize>,
    events: HashMap<u64, CUevent>,
    next_event: u64,
    ops: Vec<Op>,
    times: CallTimes,
    /// The next flush that maps device memory defers ([`CudaDevice::defer_next_mapping`]).
    defer_next: bool,
    /// A flush waiting for its mappings ([`CudaDevice::complete_deferred`]).
    deferred: Option<defer::Deferred>,
    /// The error of a deferred flush's mappings, which every later call returns.
    failed: Option<CudaError>,
}

// SAFETY: CUDA handles may be used from any thread; the shim serializes all access.
unsafe impl Send for CudaDevice {}

impl CudaDevice {
    /// Creates the two copy streams (non-blocking, so the application's legacy stream
    /// never waits for them implicitly) in the current context.
    pub fn new(ordinal: i32, mode: MoverMode, host_block: u64) -> Result<Self, CudaError> {
        let mut streams = [std::ptr::null_mut(); 2];
        for s in &mut streams {
            check(crate::real!(cuStreamCreate(s, CU_STREAM_NON_BLOCKING)), "cuStreamCreate")?;
        }
        Ok(CudaDevice {
            ordinal,
            mode,
            streams,
            chunk_va: Vec::new(),
            aliases: HashMap::new(),
            mapped: HashMap::new(),
            pending_unmap: Vec::new(),
            pending_vas: HashSet::new(),
            released_mapped: HashSet::new(),
            host_phys: HashSet::new(),
            mid_plan: false,
            early_events: Vec::new(),
            event_refs: HashMap::new(),
            keep: None,
            strict_unmap: false,
            sync_before_evict: false,
            run_chunks: RUN_CHUNKS,
            phys_free_after: HashMap::new(),
            evict_wait: Vec::new(),
            populated: None,
            host: HostPool::new(host_block),
            slot: HashMap::new(),
            events: HashMap::new(),
            next_event: 0,
            ops: Vec::new(),
            times: CallTimes::default(),
            defer_next: false,
            deferred: None,
            failed: None,
        })
    }

    /// Tells the device where chunks `first..first+count` live: consecutive 2 MiB from `base`.
    pub fn register(&mut self, first: ChunkId, count: u32, base: CUdeviceptr) {
        self.complete_or_log();
        let end = first.0 as usize + count as usize;
        if self.chunk_va.len() < end {
            self.chunk_va.resize(end, 0);
        }
        for i in 0..count as usize {
            self.chunk_va[first.0 as usize + i] = base + (i * CHUNK) as u64;
        }
    }

    /// Bytes of pinned host memory held.
    pub fn pinned_bytes(&self) -> u64 {
        self.host.pinned_bytes()
    }

    /// Bytes of one pinned host block.
    pub fn host_block(&self) -> u64 {
        self.host.block_bytes()
    }

    /// Adds a host block pinned by [`crate::hostpool::pin_block`].
    pub fn add_host_block(&mut self, base: usize) {
        self.host.add(base);
    }

    /// A new event after every eviction copy issued so far (the caller destroys it).
    pub fn evictions_done(&mut self) -> Result<CUevent, CudaError> {
        self.complete_deferred()?;
        self.new_event(CopyStream::Evict)
    }

    /// A new event after every population copy issued so far (the caller destroys it).
    pub fn populations_done(&mut self) -> Result<CUevent, CudaError> {
        self.complete_deferred()?;
        self.new_event(CopyStream::Populate)
    }

    fn slot_for(&mut self, c: ChunkId) -> Result<usize, CudaError> {
        if let Some(&s) = self.slot.get(&c) {
            return Ok(s);
        }
        let s = self.host.take()?;
        self.slot.insert(c, s);
        Ok(s)
    }

    fn new_event(&mut self, stream: CopyStream) -> Result<CUevent, CudaError> {
        let mut ev = std::ptr::null_mut();
        check(crate::real!(cuEventCreate(&mut ev, CU_EVENT_DISABLE_TIMING)), "cuEventCreate")?;
        check(crate::real!(cuEventRecord(ev, self.streams[stream as usize])), "cuEventRecord")?;
        Ok(ev)
    }

    /// Grants the peers ([`peers`]) access to every mapping made before the newest of
    /// them joined (the mappings of a deferred flush get theirs when it completes).
    pub fn grant_peers(&mut self) -> Result<(), CudaError> {
        let deferred: HashSet<CUdeviceptr> = self.deferred.as_ref().map(|d| d.mapped_at()).unwrap_or_default();
        let runs = self
            .mapped
            .iter()
            .flat_map(|(c, (_, n))| self.addresses(*c).into_iter().map(move |va| (va, *n as usize * CHUNK)))
            .filter(|(va, _)| !deferred.contains(va))
            .collect();
        self.grant(runs)
    }

    fn addresses(&self, c: ChunkId) -> Vec<CUdeviceptr> {
        let mut v = vec![self.va(c)];
        v.extend(self.aliases.get(&c).into_iter().flatten());
        v
    }

    fn va(&self, c: ChunkId) -> CUdeviceptr {
        let va = self.chunk_va.get(c.0 as usize).copied().unwrap_or(0);
        assert!(va != 0, "gmux: chunk {} has no address (freed or never registered)", c.0);
        va
    }
}

impl Device for CudaDevice {
    type Error = CudaError;
    type Stream = StreamKey;
    type Fence = CUevent;

    /// New physical memory waits until what was released before it is freed, so that the
    /// device never holds more than the limit: memory released while still mapped goes
    /// only at its unmap, after its eviction copy. The plan so far is flushed first when
    /// such an unmap is still queued in it.
    fn create_chunk(&mut self, chunks: u32) -> Result<PhysChunk, CudaError> {
        self.complete_deferred()?;
        if !self.released_mapped.is_empty() {
            if self.mapped.values().any(|(p, _)| self.released_mapped.contains(p)) {
                self.mid_plan = true;
                let flushed = self.flush();
                self.mid_plan = false;
                flushed?;
            }
            let released = std::mem::take(&mut self.released_mapped);
            self.settle_unmap(|u| released.contains(&u.phys))?;
        }
        let prop = CUmemAllocationProp::device(self.ordinal);
        let mut h = 0;
        check(crate::real!(cuMemCreate(&mut h, chunks as usize * CHUNK, &prop, 0)), "cuMemCreate")?;
        Ok(PhysChunk(h))
    }

    /// Pinned host memory (`cuMemCreate` at location `HOST`, 2 MiB), which the device
    /// reaches over the link once mapped and granted like its own.
    fn create_host_chunk(&mut self) -> Result<PhysChunk, CudaError> {
        self.complete_deferred()?;
        let prop = CUmemAllocationProp::host();
        let mut h = 0;
        check(crate::real!(cuMemCreate(&mut h, CHUNK, &prop, 0)), "cuMemCreate (host memory for a command over the limit)")?;
        self.host_phys.insert(h);
        Ok(PhysChunk(h))
    }

    /// Releases at once: the driver frees the memory when its last mapping goes, which
    /// for an evicted handle is the deferred unmap after its eviction copy (the next
    /// [`Device::create_chunk`] waits for it).
    fn release_chunk(&mut self, phys: PhysChunk) -> Result<(), CudaError> {
        self.complete_deferred()?;
        self.phys_free_after.remove(&phys.0);
        let on_host = self.host_phys.remove(&phys.0);
        let mapped = self.mapped.values().any(|(p, _)| *p == phys.0) || self.pending_unmap.iter().any(|u| u.phys == phys.0);
        if mapped && !on_host {
            self.released_mapped.insert(phys.0);
        }
        check(crate::real!(cuMemRelease(phys.0)), "cuMemRelease")
    }

    fn map(&mut self, first: ChunkId, chunks: u32, phys: PhysChunk) -> Result<(), CudaError> {
        self.complete_deferred()?;
        self.ops.push(Op::Map(first, chunks, phys));
        Ok(())
    }

    fn unmap(&mut self, first: ChunkId, chunks: u32) -> Result<(), CudaError> {
        self.complete_deferred()?;
        self.ops.push(Op::Unmap(first, chunks));
        Ok(())
    }

    fn copy(&mut self, stream: CopyStream, chunk: ChunkId, from: Tier, to: Tier) -> Result<(), CudaError> {
        self.complete_deferred()?;
        self.ops.push(Op::Copy(stream, chunk, from, to));
        Ok(())
    }

    fn record(&mut self, stream: CopyStream) -> Result<Event, CudaError> {
        self.complete_deferred()?;
        self.next_event += 1;
        let e = Event(self.next_event);
        self.ops.push(Op::Record(stream, e));
        Ok(e)
    }

    fn wait(&mut self, stream: CopyStream, event: Event) -> Result<(), CudaError> {
        self.complete_deferred()?;
        self.ops.push(Op::Wait(stream, event));
        Ok(())
    }

    /// Records only `keep` of the populate-stream events queued so far; events a flush
    /// in the middle of the plan recorded already are destroyed unless kept.
    fn keep_events(&mut self, keep: &[Event]) {
        self.complete_or_log();
        let keep: HashSet<u64> = keep.iter().map(|e| e.0).collect();
        for id in std::mem::take(&mut self.early_events) {
            if !keep.contains(&id) {
                if let Some(ev) = self.events.remove(&id) {
                    crate::real!(cuEventDestroy_v2(ev));
                }
            }
        }
        self.keep = Some(keep);
    }

    /// With `sync_before_evict`, or after [`sync_before_evictions`], the host first waits for all
    /// work of the context (narrows a search for an ordering bug).
    fn evict_after(&mut self, after: &[CUevent]) {
        self.complete_or_log();
        if self.sync_before_evict || SYNC_BEFORE_EVICTIONS.load(std::sync::atomic::Ordering::Relaxed) {
            let r = crate::real!(cuCtxSynchronize());
            if r != CUDA_SUCCESS {
                crate::log!(Warn, "cuCtxSynchronize before an eviction failed with {r}");
            }
        }
        self.evict_wait.extend_from_slice(after);
    }

    /// Runs the queued calls: maps every incoming chunk with batched access, then the
    /// eviction stream's copies, then the population stream's, each in plan order with
    /// neighbouring chunks merged into one copy (up to [`RUN_CHUNKS`]).
    fn flush(&mut self) -> Result<(), CudaError> {
        self.complete_deferred()?;
        self.issue_queued()
    }

    /// A deferred population's event is not done until its flush completes; none is
    /// after a deferred flush failed.
    fn is_done(&mut self, e: Event) -> bool {
        if self.is_deferred(e) || self.failed.is_some() {
            return false;
        }
        self.events.get(&e.0).is_none_or(|ev| crate::real!(cuEventQuery(*ev)) == CUDA_SUCCESS)
    }

    /// Destroys `e`'s CUDA event.
    fn drop_event(&mut self, e: Event) {
        if self.is_deferred(e) {
            self.complete_or_log();
        }
        if let Some(ev) = self.events.remove(&e.0) {
            crate::real!(cuEventDestroy_v2(ev));
        }
    }

    /// Unmaps the addresses whose eviction copies are done.
    fn reclaim(&mut self) -> Result<(), CudaError> {
        self.complete_deferred()?;
        self.reap(false)
    }

    fn synchronize(&mut self) -> Result<(), CudaError> {
        self.complete_deferred()?;
        for s in self.streams {
            check(crate::real!(cuStreamSynchronize(s)), "cuStreamSynchronize")?;
        }
        self.reap(true)
    }

    /// Its host slot returns to the pool.
    fn forget(&mut self, c: ChunkId) {
        self.complete_or_log();
        if let Some(s) = self.slot.remove(&c) {
            self.host.give(s);
        }
        if let Some(va) = self.chunk_va.get_mut(c.0 as usize) {
            *va = 0;
        }
        self.aliases.remove(&c);
    }
}
