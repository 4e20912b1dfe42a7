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
//! (`GMUX_LOG=debug` prints these times for every flush).
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

use crate::config::MoverMode;
use crate::cuda::*;
use crate::driver::{check, CudaError};
use crate::hostpool::HostPool;
use gmux_core::device::{CommandId, CopyStream, Device, Event, PhysChunk};
use gmux_core::{ChunkId, Tier, CHUNK_BYTES};
use std::collections::{HashMap, HashSet};
use std::ffi::c_void;

mod alias;
pub use alias::Span;

const CHUNK: usize = CHUNK_BYTES as usize;

/// Most chunks merged into one copy (32 MiB): large copies run near link speed, and the
/// other direction still starts after the first run.
pub const RUN_CHUNKS: usize = 16;

/// Consecutive chunks whose device and host addresses are both contiguous: one copy.
#[derive(Debug, Default)]
struct Run {
    va: CUdeviceptr,
    slot: usize,
    len: usize,
    waits: Vec<CUevent>,
    unmaps: Vec<(ChunkId, u32)>,
}

impl Run {
    fn extends(&self, va: CUdeviceptr, slot: usize) -> bool {
        let most = crate::config::config().debug.run.unwrap_or(RUN_CHUNKS);
        self.len > 0 && self.len < most * CHUNK && self.va + self.len as u64 == va && self.slot + self.len == slot
    }
}

/// Sorted address ranges with touching neighbours joined.
fn merge(sorted: Vec<(CUdeviceptr, usize)>) -> Vec<(CUdeviceptr, usize)> {
    let mut out: Vec<(CUdeviceptr, usize)> = Vec::new();
    for (va, len) in sorted {
        match out.last_mut() {
            Some((s, l)) if *s + *l as u64 == va => *l += len,
            _ => out.push((va, len)),
        }
    }
    out
}

/// Makes `stream` wait for each distinct event of `waits`, which it empties.
fn wait_all(stream: CUstream, waits: &mut Vec<CUevent>) -> Result<(), CudaError> {
    waits.sort_unstable();
    waits.dedup();
    for w in waits.drain(..) {
        check(crate::real!(cuStreamWaitEvent(stream, w, 0)), "cuStreamWaitEvent")?;
    }
    Ok(())
}

fn unsupported() -> CudaError {
    CudaError { call: "a disk-tier copy (the disk tier is not in the shim yet)", code: CUDA_ERROR_NOT_SUPPORTED }
}

/// Host time spent in the driver's VMM and copy calls, for the debug log of a flush.
#[derive(Debug, Default)]
struct CallTimes {
    /// (calls, seconds) for `cuMemMap`, `cuMemSetAccess`, `cuMemUnmap`, copies, and host
    /// waits for eviction copies before an address is mapped again.
    t: [(u32, f64); 5],
}

#[derive(Clone, Copy)]
enum Call {
    Map,
    Access,
    Unmap,
    Copy,
    Settle,
}

impl CallTimes {
    fn time<T>(&mut self, c: Call, f: impl FnOnce() -> T) -> T {
        let t = std::time::Instant::now();
        let r = f();
        let e = &mut self.t[c as usize];
        e.0 += 1;
        e.1 += t.elapsed().as_secs_f64();
        r
    }

    fn take(&mut self) -> String {
        let names = ["map", "access", "unmap", "copy", "settle"];
        let s = names
            .iter()
            .zip(self.t)
            .filter(|(_, (n, _))| *n > 0)
            .map(|(name, (n, secs))| format!("{name} {n}× {:.1} ms", secs * 1e3))
            .collect::<Vec<_>>()
            .join(", ");
        self.t = Default::default();
        s
    }
}

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

/// A mapping whose `cuMemUnmap` waits for the eviction copies out of it.
#[derive(Debug)]
struct PendingUnmap {
    va: CUdeviceptr,
    bytes: usize,
    phys: u64,
    done: CUevent,
}

impl PendingUnmap {
    fn holds(&self, va: CUdeviceptr) -> bool {
        va >= self.va && va < self.va + self.bytes as u64
    }
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
            mid_plan: false,
            early_events: Vec::new(),
            event_refs: HashMap::new(),
            keep: None,
            strict_unmap: false,
            phys_free_after: HashMap::new(),
            evict_wait: Vec::new(),
            populated: None,
            host: HostPool::new(host_block),
            slot: HashMap::new(),
            events: HashMap::new(),
            next_event: 0,
            ops: Vec::new(),
            times: CallTimes::default(),
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
        if let Some(va) = self.chunk_va.get_mut(c.0 as usize) {
            *va = 0;
        }
        self.aliases.remove(&c);
    }

    /// Makes the next flush's eviction copies wait for `after` (application work).
    pub fn evict_after_all(&mut self, after: CUevent) {
        self.evict_wait.push(after);
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
        self.new_event(CopyStream::Evict)
    }

    /// A new event after every population copy issued so far (the caller destroys it).
    pub fn populations_done(&mut self) -> Result<CUevent, CudaError> {
        self.new_event(CopyStream::Populate)
    }

    /// Waits for every copy issued so far and unmaps what waits for them.
    pub fn synchronize(&mut self) -> Result<(), CudaError> {
        for s in self.streams {
            check(crate::real!(cuStreamSynchronize(s)), "cuStreamSynchronize")?;
        }
        self.reap(true)
    }

    /// Records only `keep` of the populate-stream events queued so far (the others have no
    /// waiter); applies to the next flush.
    pub fn keep_events(&mut self, keep: &[Event]) {
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

    /// Runs the queued calls: maps every incoming chunk with batched access, then the
    /// eviction stream's copies, then the population stream's, each in plan order with
    /// neighbouring chunks merged into one copy (up to [`RUN_CHUNKS`]).
    ///
    /// Mapping comes first because granting access is the costly step (about 37 µs per
    /// chunk on an H100) and costs twice as much while copies run: page tables are
    /// written through the copy engines the mover's copies occupy.
    pub fn flush(&mut self) -> Result<(), CudaError> {
        if self.ops.is_empty() {
            self.keep = None;
            return Ok(());
        }
        let ops = std::mem::take(&mut self.ops);
        let t0 = std::time::Instant::now();
        self.reap(false)?;
        self.map_all(&ops)?;
        let t1 = std::time::Instant::now();
        self.evict_pass(&ops)?;
        if self.mode == MoverMode::Sequential {
            let all_out = self.new_event(CopyStream::Evict)?;
            check(crate::real!(cuStreamWaitEvent(self.streams[1], all_out, 0)), "cuStreamWaitEvent")?;
            crate::real!(cuEventDestroy_v2(all_out));
        }
        self.populate_pass(&ops)?;
        self.keep = None;
        crate::log!(
            Debug,
            "flush of {} ops: mapped in {:.2} ms, copies issued in {:.2} ms; driver calls since the last flush: {}",
            ops.len(),
            (t1 - t0).as_secs_f64() * 1e3,
            t1.elapsed().as_secs_f64() * 1e3,
            self.times.take()
        );
        Ok(())
    }

    fn map_all(&mut self, ops: &[Op]) -> Result<(), CudaError> {
        let mut runs: Vec<(CUdeviceptr, usize)> = Vec::new();
        for op in ops {
            if let Op::Map(c, n, p) = *op {
                let bytes = n as usize * CHUNK;
                for va in self.addresses(c) {
                    self.settle_at(va, bytes)?;
                    check(self.times.time(Call::Map, || crate::real!(cuMemMap(va, bytes, 0, p.0, 0))), "cuMemMap")?;
                    runs.push((va, bytes));
                }
                self.mapped.insert(c, (p.0, n));
            }
        }
        self.grant(runs)
    }

    /// Grants this device access to the mapped ranges `runs`, one call per contiguous run.
    fn grant(&mut self, mut runs: Vec<(CUdeviceptr, usize)>) -> Result<(), CudaError> {
        runs.sort_unstable();
        let desc =
            CUmemAccessDesc { location: CUmemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: self.ordinal }, flags: CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        for (va, len) in merge(runs) {
            check(self.times.time(Call::Access, || crate::real!(cuMemSetAccess(va, len, &desc, 1))), "cuMemSetAccess")?;
        }
        Ok(())
    }

    /// Finishes the pending unmaps of `bytes` from `va`, so that the range can be mapped.
    fn settle_at(&mut self, va: CUdeviceptr, bytes: usize) -> Result<(), CudaError> {
        for at in (va..va + bytes as u64).step_by(CHUNK) {
            if self.pending_vas.contains(&at) {
                self.settle_unmap(|u| u.holds(at))?;
            }
        }
        Ok(())
    }

    /// Eviction copies and the unmaps that wait for them.
    fn evict_pass(&mut self, ops: &[Op]) -> Result<(), CudaError> {
        let mut app = std::mem::take(&mut self.evict_wait);
        wait_all(self.streams[CopyStream::Evict as usize], &mut app)?;
        if ops.iter().any(|op| matches!(op, Op::Copy(CopyStream::Evict, ..) | Op::Unmap(..))) {
            if let Some(ev) = self.populated.take() {
                check(crate::real!(cuStreamWaitEvent(self.streams[CopyStream::Evict as usize], ev, 0)), "cuStreamWaitEvent")?;
                crate::real!(cuEventDestroy_v2(ev));
            }
        }
        let mut run = Run::default();
        for op in ops {
            match *op {
                Op::Copy(CopyStream::Evict, c, Tier::Gpu, Tier::Host) => {
                    let (va, slot) = (self.va(c), self.slot_for(c)?);
                    if !run.extends(va, slot) {
                        self.end_evict_run(&mut run)?;
                        run = Run { va, slot, ..Run::default() };
                    }
                    run.len += CHUNK;
                }
                Op::Copy(CopyStream::Evict, ..) => return Err(unsupported()),
                // The mover unmaps a mapping right after the copy of its last chunk, so
                // the run's copy is the last one out of it; the copies before are ahead
                // of it on the same stream.
                Op::Unmap(c, n) if run.len > 0 => run.unmaps.push((c, n)),
                Op::Unmap(c, n) => {
                    self.end_evict_run(&mut run)?;
                    run.unmaps.push((c, n));
                    self.end_evict_run(&mut run)?;
                }
                _ => {}
            }
        }
        self.end_evict_run(&mut run)
    }

    fn end_evict_run(&mut self, run: &mut Run) -> Result<(), CudaError> {
        let s = self.streams[CopyStream::Evict as usize];
        wait_all(s, &mut run.waits)?;
        if run.len > 0 {
            check(self.times.time(Call::Copy, || crate::real!(cuMemcpyDtoHAsync_v2(run.slot as *mut c_void, run.va, run.len, s))), "cuMemcpyDtoHAsync")?;
        }
        if !run.unmaps.is_empty() {
            let done = self.new_event(CopyStream::Evict)?;
            let mut unmaps = Vec::new();
            for (c, n) in run.unmaps.drain(..) {
                let (phys, mapped_n) = self.mapped.remove(&c).expect("unmap of a mapping the mover made");
                assert_eq!(n, mapped_n, "gmux: unmap of part of a mapping (chunk {})", c.0);
                unmaps.extend(self.addresses(c).into_iter().map(|va| PendingUnmap { va, bytes: n as usize * CHUNK, phys, done }));
                self.phys_free_after.insert(phys, done);
            }
            self.event_refs.insert(done as usize, unmaps.len());
            for u in unmaps {
                self.pending_vas.extend((u.va..u.va + u.bytes as u64).step_by(CHUNK));
                self.pending_unmap.push(u);
            }
            if self.strict_unmap {
                self.settle_unmap(|u| u.done == done)?;
            }
        }
        *run = Run::default();
        Ok(())
    }

    /// Population copies, each after the evictions out of its physical chunk, and the
    /// events that commands wait for.
    fn populate_pass(&mut self, ops: &[Op]) -> Result<(), CudaError> {
        let mut run = Run::default();
        let mut waits: Vec<CUevent> = Vec::new();
        for op in ops {
            match *op {
                Op::Map(_, _, p) => waits.extend(self.phys_free_after.remove(&p.0)),
                Op::Copy(CopyStream::Populate, c, Tier::Host, Tier::Gpu) => {
                    let va = self.va(c);
                    let slot = *self.slot.get(&c).expect("population of a chunk that was never evicted");
                    if !run.extends(va, slot) {
                        self.end_populate_run(&mut run)?;
                        run = Run { va, slot, ..Run::default() };
                    }
                    run.len += CHUNK;
                    run.waits.append(&mut waits);
                }
                Op::Copy(CopyStream::Populate, ..) => return Err(unsupported()),
                Op::Record(stream, e) => {
                    let wanted = stream == CopyStream::Evict || self.keep.as_ref().is_none_or(|k| k.contains(&e.0));
                    if wanted {
                        self.end_populate_run(&mut run)?;
                        run.waits.append(&mut waits);
                        self.end_populate_run(&mut run)?;
                        let ev = self.new_event(stream)?;
                        self.events.insert(e.0, ev);
                        if self.mid_plan && stream == CopyStream::Populate {
                            self.early_events.push(e.0);
                        }
                    }
                }
                Op::Wait(stream, e) => {
                    self.end_populate_run(&mut run)?;
                    if let Some(ev) = self.cu_event(e) {
                        check(crate::real!(cuStreamWaitEvent(self.streams[stream as usize], ev, 0)), "cuStreamWaitEvent")?;
                    }
                }
                _ => {}
            }
        }
        run.waits.append(&mut waits);
        self.end_populate_run(&mut run)?;
        if ops.iter().any(|op| matches!(op, Op::Copy(CopyStream::Populate, ..) | Op::Map(..))) {
            // The event object may go as soon as the evict stream's wait on it is queued.
            let tail = self.new_event(CopyStream::Populate)?;
            if let Some(old) = self.populated.replace(tail) {
                crate::real!(cuEventDestroy_v2(old));
            }
        }
        Ok(())
    }

    fn end_populate_run(&mut self, run: &mut Run) -> Result<(), CudaError> {
        let s = self.streams[CopyStream::Populate as usize];
        wait_all(s, &mut run.waits)?;
        if run.len > 0 {
            check(self.times.time(Call::Copy, || crate::real!(cuMemcpyHtoDAsync_v2(run.va, run.slot as *const c_void, run.len, s))), "cuMemcpyHtoDAsync")?;
        }
        *run = Run::default();
        Ok(())
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

    /// Unmaps the addresses whose eviction copies are done (all of them if `wait`), so
    /// that an evicted address stops reaching its old physical chunk as soon as possible.
    /// The copies run in order on one stream, so the first unfinished one ends the scan.
    pub fn reap(&mut self, wait: bool) -> Result<(), CudaError> {
        if self.pending_unmap.is_empty() {
            return Ok(());
        }
        let pending = std::mem::take(&mut self.pending_unmap);
        let mut rest = pending.into_iter().peekable();
        while let Some(u) = rest.peek() {
            if !wait && crate::real!(cuEventQuery(u.done)) != CUDA_SUCCESS {
                break;
            }
            let u = rest.next().expect("peeked");
            self.finish_unmap(u)?;
        }
        self.pending_unmap = rest.collect();
        Ok(())
    }

    /// Waits for and completes the pending unmaps that `pick` selects.
    fn settle_unmap(&mut self, pick: impl Fn(&PendingUnmap) -> bool) -> Result<(), CudaError> {
        let (now, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending_unmap).into_iter().partition(|u| pick(u));
        self.pending_unmap = rest;
        for u in now {
            check(self.times.time(Call::Settle, || crate::real!(cuEventSynchronize(u.done))), "cuEventSynchronize")?;
            self.finish_unmap(u)?;
        }
        Ok(())
    }

    fn finish_unmap(&mut self, u: PendingUnmap) -> Result<(), CudaError> {
        check(self.times.time(Call::Unmap, || crate::real!(cuMemUnmap(u.va, u.bytes))), "cuMemUnmap")?;
        for at in (u.va..u.va + u.bytes as u64).step_by(CHUNK) {
            self.pending_vas.remove(&at);
        }
        if self.phys_free_after.get(&u.phys) == Some(&u.done) {
            self.phys_free_after.remove(&u.phys);
        }
        let refs = self.event_refs.entry(u.done as usize).or_insert(1);
        *refs -= 1;
        if *refs == 0 {
            self.event_refs.remove(&(u.done as usize));
            crate::real!(cuEventDestroy_v2(u.done));
        }
        Ok(())
    }

    /// Every address of chunk `c`: its own, then its aliases.
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

    /// New physical memory waits until what was released before it is freed, so that the
    /// device never holds more than the limit: memory released while still mapped goes
    /// only at its unmap, after its eviction copy. The plan so far is flushed first when
    /// such an unmap is still queued in it.
    fn create_chunk(&mut self, chunks: u32) -> Result<PhysChunk, CudaError> {
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

    /// Releases at once: the driver frees the memory when its last mapping goes, which
    /// for an evicted handle is the deferred unmap after its eviction copy (the next
    /// [`Device::create_chunk`] waits for it).
    fn release_chunk(&mut self, phys: PhysChunk) -> Result<(), CudaError> {
        self.phys_free_after.remove(&phys.0);
        let mapped = self.mapped.values().any(|(p, _)| *p == phys.0) || self.pending_unmap.iter().any(|u| u.phys == phys.0);
        if mapped {
            self.released_mapped.insert(phys.0);
        }
        check(crate::real!(cuMemRelease(phys.0)), "cuMemRelease")
    }

    fn map(&mut self, first: ChunkId, chunks: u32, phys: PhysChunk) -> Result<(), CudaError> {
        self.ops.push(Op::Map(first, chunks, phys));
        Ok(())
    }

    fn unmap(&mut self, first: ChunkId, chunks: u32) -> Result<(), CudaError> {
        self.ops.push(Op::Unmap(first, chunks));
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
