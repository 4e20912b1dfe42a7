//! The real device behind gmux-core's [`Device`] trait: VMM mappings, two copy streams
//! and the pinned host pool.
//!
//! Calls are queued and run at [`CudaDevice::flush`], which first maps every incoming
//! chunk and grants access with one `cuMemSetAccess` per contiguous run (one call per
//! chunk would cost 32 µs each), then issues copies and events in the plan's order.
//! Everything after that is ordered on the GPU, not by the host:
//! - an eviction copy waits for the application's last command on that chunk
//!   ([`CudaDevice::evict_after`]);
//! - a physical chunk handed from an eviction to a population stays mapped at both
//!   addresses for a while; the population waits on the GPU for the eviction copy, and
//!   the old address is unmapped later, once that copy is done (`cuMemUnmap` is a host
//!   call, so waiting for it would stall the pipeline).

use crate::config::MoverMode;
use crate::cuda::*;
use crate::driver::{check, CudaError};
use crate::hostpool::HostPool;
use gmux_core::device::{CommandId, CopyStream, Device, Event, PhysChunk};
use gmux_core::{ChunkId, Tier, CHUNK_BYTES};
use std::collections::HashMap;
use std::ffi::c_void;

const CHUNK: usize = CHUNK_BYTES as usize;

/// A queued device call.
#[derive(Debug, Clone, Copy)]
enum Op {
    Map(ChunkId, PhysChunk),
    Unmap(ChunkId),
    Copy(CopyStream, ChunkId, Tier, Tier),
    Record(CopyStream, Event),
    Wait(CopyStream, Event),
}

/// An address whose `cuMemUnmap` waits for an eviction copy out of it.
#[derive(Debug)]
struct PendingUnmap {
    va: CUdeviceptr,
    phys: u64,
    done: CUevent,
}

/// Byte counters of the mover.
#[derive(Debug, Default, Clone, Copy)]
pub struct Traffic {
    /// Bytes copied device → host.
    pub d2h: u64,
    /// Bytes copied host → device.
    pub h2d: u64,
    /// `cuMemSetAccess` calls.
    pub set_access_calls: u64,
}

/// The CUDA implementation of [`Device`].
pub struct CudaDevice {
    ordinal: i32,
    mode: MoverMode,
    streams: [CUstream; 2],
    chunk_va: Vec<CUdeviceptr>,
    mapped: HashMap<ChunkId, u64>,
    pending_unmap: Vec<PendingUnmap>,
    /// Eviction copy after which a physical chunk's old contents are dead.
    phys_free_after: HashMap<u64, CUevent>,
    /// Application event an eviction copy must wait for.
    evict_after: HashMap<ChunkId, CUevent>,
    host: HostPool,
    slot: HashMap<ChunkId, usize>,
    events: HashMap<u64, CUevent>,
    next_event: u64,
    ops: Vec<Op>,
    /// Bytes moved so far.
    pub traffic: Traffic,
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
            mapped: HashMap::new(),
            pending_unmap: Vec::new(),
            phys_free_after: HashMap::new(),
            evict_after: HashMap::new(),
            host: HostPool::new(host_block),
            slot: HashMap::new(),
            events: HashMap::new(),
            next_event: 0,
            ops: Vec::new(),
            traffic: Traffic::default(),
        })
    }

    /// Tells the device where chunks `first..first+count` live: consecutive 2 MiB from `base`.
    pub fn register(&mut self, first: ChunkId, count: u32, base: CUdeviceptr) {
        let end = first.0 as usize + count as usize;
        if self.chunk_va.len() < end {
            self.chunk_va.resize(end, 0);
        }
        for i in 0..count as usize {
            self.chunk_va[first.0 as usize + i] = base + (i * CHUNK) as u64;
        }
    }

    /// Forgets a freed chunk: its host slot returns to the pool. It must be unmapped.
    pub fn forget(&mut self, c: ChunkId) {
        if let Some(s) = self.slot.remove(&c) {
            self.host.give(s);
        }
        self.evict_after.remove(&c);
        if let Some(va) = self.chunk_va.get_mut(c.0 as usize) {
            *va = 0;
        }
    }

    /// Makes the eviction copy of `c` wait for `after` (the application's last command on it).
    pub fn evict_after(&mut self, c: ChunkId, after: CUevent) {
        self.evict_after.insert(c, after);
    }

    /// The CUDA event behind `e`.
    pub fn cu_event(&self, e: Event) -> Option<CUevent> {
        self.events.get(&e.0).copied()
    }

    /// Destroys `e` (work already waiting on it is unaffected).
    pub fn drop_event(&mut self, e: Event) {
        if let Some(ev) = self.events.remove(&e.0) {
            crate::real!(cuEventDestroy_v2(ev));
        }
    }

    /// Bytes of pinned host memory held.
    pub fn pinned_bytes(&self) -> u64 {
        self.host.pinned_bytes()
    }

    /// Waits for every copy issued so far and unmaps what waits for them.
    pub fn synchronize(&mut self) -> Result<(), CudaError> {
        for s in self.streams {
            check(crate::real!(cuStreamSynchronize(s)), "cuStreamSynchronize")?;
        }
        self.reap(true)
    }

    /// Runs the queued calls: maps, batched access, then copies and events in order.
    pub fn flush(&mut self) -> Result<(), CudaError> {
        if self.ops.is_empty() {
            return Ok(());
        }
        let ops = std::mem::take(&mut self.ops);
        self.reap(false)?;
        let mut runs: Vec<(CUdeviceptr, usize)> = Vec::new();
        for op in &ops {
            if let Op::Map(c, p) = *op {
                let va = self.va(c);
                self.settle_unmap(|u| u.va == va)?;
                check(crate::real!(cuMemMap(va, CHUNK, 0, p.0, 0)), "cuMemMap")?;
                self.mapped.insert(c, p.0);
                match runs.last_mut() {
                    Some((start, len)) if *start + *len as u64 == va => *len += CHUNK,
                    _ => runs.push((va, CHUNK)),
                }
            }
        }
        runs.sort_unstable();
        let desc = CUmemAccessDesc {
            location: CUmemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: self.ordinal },
            flags: CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        let mut merged: Vec<(CUdeviceptr, usize)> = Vec::new();
        for (va, len) in runs {
            match merged.last_mut() {
                Some((s, l)) if *s + *l as u64 == va => *l += len,
                _ => merged.push((va, len)),
            }
        }
        for (va, len) in merged {
            check(crate::real!(cuMemSetAccess(va, len, &desc, 1)), "cuMemSetAccess")?;
            self.traffic.set_access_calls += 1;
        }
        match self.mode {
            MoverMode::Pipelined => ops.iter().try_for_each(|op| self.issue(*op)),
            MoverMode::Sequential => {
                let evicting = |op: &Op| matches!(op, Op::Unmap(_) | Op::Copy(CopyStream::Evict, ..) | Op::Record(CopyStream::Evict, _));
                ops.iter().filter(|op| evicting(op)).try_for_each(|op| self.issue(*op))?;
                let all_out = self.new_event(CopyStream::Evict)?;
                check(crate::real!(cuStreamWaitEvent(self.streams[1], all_out, 0)), "cuStreamWaitEvent")?;
                crate::real!(cuEventDestroy_v2(all_out));
                ops.iter().filter(|op| !evicting(op)).try_for_each(|op| self.issue(*op))
            }
        }
    }

    fn issue(&mut self, op: Op) -> Result<(), CudaError> {
        match op {
            Op::Map(_, p) => {
                if let Some(ev) = self.phys_free_after.remove(&p.0) {
                    check(crate::real!(cuStreamWaitEvent(self.streams[1], ev, 0)), "cuStreamWaitEvent")?;
                }
            }
            Op::Unmap(c) => {
                let phys = self.mapped.remove(&c).expect("unmap of a chunk the mover mapped");
                let done = self.new_event(CopyStream::Evict)?;
                self.pending_unmap.push(PendingUnmap { va: self.va(c), phys, done });
                self.phys_free_after.insert(phys, done);
            }
            Op::Copy(stream, c, from, to) => self.copy_now(stream, c, from, to)?,
            Op::Record(stream, e) => {
                let ev = self.new_event(stream)?;
                self.events.insert(e.0, ev);
            }
            Op::Wait(stream, e) => {
                if let Some(ev) = self.cu_event(e) {
                    check(crate::real!(cuStreamWaitEvent(self.streams[stream as usize], ev, 0)), "cuStreamWaitEvent")?;
                }
            }
        }
        Ok(())
    }

    fn copy_now(&mut self, stream: CopyStream, c: ChunkId, from: Tier, to: Tier) -> Result<(), CudaError> {
        let s = self.streams[stream as usize];
        let va = self.va(c);
        match (from, to) {
            (Tier::Gpu, Tier::Host) => {
                if let Some(ev) = self.evict_after.remove(&c) {
                    check(crate::real!(cuStreamWaitEvent(s, ev, 0)), "cuStreamWaitEvent")?;
                }
                let slot = match self.slot.get(&c) {
                    Some(&s) => s,
                    None => {
                        let s = self.host.take()?;
                        self.slot.insert(c, s);
                        s
                    }
                };
                check(crate::real!(cuMemcpyDtoHAsync_v2(slot as *mut c_void, va, CHUNK, s)), "cuMemcpyDtoHAsync")?;
                self.traffic.d2h += CHUNK_BYTES;
            }
            (Tier::Host, Tier::Gpu) => {
                let slot = *self.slot.get(&c).expect("population of a chunk that was never evicted");
                check(crate::real!(cuMemcpyHtoDAsync_v2(va, slot as *const c_void, CHUNK, s)), "cuMemcpyHtoDAsync")?;
                self.traffic.h2d += CHUNK_BYTES;
            }
            _ => return Err(CudaError { call: "the disk tier (not available in the shim yet)", code: CUDA_ERROR_NOT_SUPPORTED }),
        }
        Ok(())
    }

    fn new_event(&mut self, stream: CopyStream) -> Result<CUevent, CudaError> {
        let mut ev = std::ptr::null_mut();
        check(crate::real!(cuEventCreate(&mut ev, CU_EVENT_DISABLE_TIMING)), "cuEventCreate")?;
        check(crate::real!(cuEventRecord(ev, self.streams[stream as usize])), "cuEventRecord")?;
        Ok(ev)
    }

    /// Unmaps the addresses whose eviction copies are done (all of them if `wait`).
    fn reap(&mut self, wait: bool) -> Result<(), CudaError> {
        let mut keep = Vec::new();
        for u in std::mem::take(&mut self.pending_unmap) {
            let ready = wait || crate::real!(cuEventQuery(u.done)) == CUDA_SUCCESS;
            if ready {
                self.finish_unmap(u)?;
            } else {
                keep.push(u);
            }
        }
        self.pending_unmap = keep;
        Ok(())
    }

    /// Waits for and completes the pending unmaps that `pick` selects.
    fn settle_unmap(&mut self, pick: impl Fn(&PendingUnmap) -> bool) -> Result<(), CudaError> {
        let (now, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending_unmap).into_iter().partition(|u| pick(u));
        self.pending_unmap = rest;
        for u in now {
            check(crate::real!(cuEventSynchronize(u.done)), "cuEventSynchronize")?;
            self.finish_unmap(u)?;
        }
        Ok(())
    }

    fn finish_unmap(&mut self, u: PendingUnmap) -> Result<(), CudaError> {
        check(crate::real!(cuMemUnmap(u.va, CHUNK)), "cuMemUnmap")?;
        if self.phys_free_after.get(&u.phys) == Some(&u.done) {
            self.phys_free_after.remove(&u.phys);
        }
        crate::real!(cuEventDestroy_v2(u.done));
        Ok(())
    }

    fn va(&self, c: ChunkId) -> CUdeviceptr {
        let va = self.chunk_va.get(c.0 as usize).copied().unwrap_or(0);
        assert!(va != 0, "gmux: chunk {} has no address (freed or never registered)", c.0);
        va
    }
}

impl Device for CudaDevice {
    type Error = CudaError;

    fn create_chunk(&mut self) -> Result<PhysChunk, CudaError> {
        let prop = CUmemAllocationProp::device(self.ordinal);
        let mut h = 0;
        check(crate::real!(cuMemCreate(&mut h, CHUNK, &prop, 0)), "cuMemCreate")?;
        Ok(PhysChunk(h))
    }

    fn release_chunk(&mut self, phys: PhysChunk) -> Result<(), CudaError> {
        self.flush()?;
        self.settle_unmap(|u| u.phys == phys.0)?;
        self.phys_free_after.remove(&phys.0);
        check(crate::real!(cuMemRelease(phys.0)), "cuMemRelease")
    }

    fn map(&mut self, chunk: ChunkId, phys: PhysChunk) -> Result<(), CudaError> {
        self.ops.push(Op::Map(chunk, phys));
        Ok(())
    }

    fn unmap(&mut self, chunk: ChunkId) -> Result<(), CudaError> {
        self.ops.push(Op::Unmap(chunk));
        Ok(())
    }

    fn copy(&mut self, stream: CopyStream, chunk: ChunkId, from: Tier, to: Tier) -> Result<(), CudaError> {
        self.ops.push(Op::Copy(stream, chunk, from, to));
        Ok(())
    }

    fn record(&mut self, stream: CopyStream) -> Result<Event, CudaError> {
        self.next_event += 1;
        let e = Event(self.next_event);
        self.ops.push(Op::Record(stream, e));
        Ok(e)
    }

    fn wait(&mut self, stream: CopyStream, event: Event) -> Result<(), CudaError> {
        self.ops.push(Op::Wait(stream, event));
        Ok(())
    }

    fn release_command(&mut self, _cmd: CommandId, _after: &[Event]) -> Result<(), CudaError> {
        Ok(())
    }
}
