//! The process's gmux state: the chunk table, the planner and mover of gmux-core, the
//! real device, address ranges and in-flight commands, behind one lock.
//!
//! Commands are released in the application's call, in its order, so CUDA's ordering
//! across streams is kept; what makes them safe is the residency invariant: before a
//! command is released every chunk of its working set is resident or on its way on the
//! populate stream, which the command's stream then waits for on the GPU.

use crate::backend::CudaDevice;
use crate::config::config;
use crate::cuda::*;
use crate::driver::{check, CudaError};
use crate::inflight::{Inflight, StreamKey};
use crate::predict::Layouts;
use crate::vmem::{Region, Vmem};
use gmux_core::evict::{Eviction, Evictor, Forecast};
use gmux_core::history::{signature, History};
use gmux_core::memory::Capacities;
use gmux_core::mover::Mover;
use gmux_core::placement::PlacementKind;
use gmux_core::planner::{Move, Moved, Planner, Request};
use gmux_core::size::format_size;
use gmux_core::{AllocId, ChunkId, Memory, TenantId, Tenants, CHUNK_BYTES};
use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

/// Why a command or allocation could not be served.
#[derive(Debug)]
pub enum ShimError {
    /// A CUDA call of gmux's own failed.
    Cuda(CudaError),
    /// The working set of one command is larger than the memory limit.
    TooBig { need: u64, limit: u64 },
    /// The working set is over this process's current grant from the daemon but within
    /// what it may be granted: the command waits for the grant to grow.
    Wait { need: u64 },
    /// A bad argument from the application (answered with this code, no message).
    Invalid(CUresult),
}

impl From<CudaError> for ShimError {
    fn from(e: CudaError) -> Self {
        ShimError::Cuda(e)
    }
}

/// What a command touches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkingSet {
    /// These allocations.
    Allocs(Vec<AllocId>),
    /// Byte ranges of allocations (a piece of a copy or memset streamed through the limit).
    Spans(Vec<Span>),
    /// Everything (a command gmux cannot analyse).
    Tenant,
}

/// `len` bytes from `offset` in an allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// The allocation.
    pub alloc: AllocId,
    /// First byte, from the allocation's start.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
}

/// Totals for the exit summary.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    /// Commands released.
    pub commands: u64,
    /// Commands that had to wait for migration.
    pub waited: u64,
    /// Chunk moves applied.
    pub moved: Moved,
    /// Largest resident bytes seen.
    pub peak_resident: u64,
    /// Largest bytes allocated through gmux at once: the program's footprint.
    pub peak_allocated: u64,
    /// Waits added for populations made for another command (on another stream, or
    /// prefetched).
    pub waits_for_others: u64,
    /// Plans made.
    pub plans: u64,
    /// Bytes the largest command that had to bring memory in needed resident at once.
    pub largest_need: u64,
    /// Plans that evicted in OPT order over a forecast.
    pub forecast_plans: u64,
    /// Commands released in each of the last three slots in which the daemon let the
    /// process run and it released any, newest first (0: no such slot yet); their median
    /// is the horizon of the next slice's forecast.
    pub slices: [u64; 3],
}

/// A plan's populations, possibly still under way: the event after them, the
/// allocations they fill and the streams that already wait for them.
struct Landing {
    id: gmux_core::device::Event,
    ready: CUevent,
    allocs: Vec<AllocId>,
    waited: Vec<StreamKey>,
}

/// The shim's state.
pub struct Shim {
    pub(crate) mem: Memory,
    pub(crate) tenants: Tenants,
    pub(crate) tenant: TenantId,
    pub(crate) planner: Planner,
    pub(crate) mover: Mover,
    /// The real device.
    pub dev: CudaDevice,
    /// Address ranges of allocations.
    pub vmem: Vmem,
    /// In-flight commands.
    pub inflight: Inflight,
    /// Kernel parameter layouts.
    pub layouts: Layouts,
    /// What each executable graph touches.
    pub graphs: crate::graph::Graphs,
    /// The application's own VMM handles.
    pub app_vmm: crate::appvmm::AppHandles,
    /// Managed allocations (`cuMemAllocManaged`), whole chunks each: the driver moves
    /// them, and they count against the limit as if always resident.
    pub(crate) managed: HashMap<CUdeviceptr, u64>,
    pub(crate) missing: HashMap<AllocId, u32>,
    /// Allocations whose contents point into other allocations.
    refs: HashMap<AllocId, std::collections::HashSet<AllocId>>,
    /// Allocations that pointers uploaded into memory outside gmux point to, by the
    /// address they were uploaded to.
    global_refs: HashMap<CUdeviceptr, Vec<AllocId>>,
    alloc_tick: HashMap<AllocId, u64>,
    tick: u64,
    pub(crate) limit: u64,
    /// The device's memory as the driver reported it at start.
    device_total: u64,
    ctx: CUcontext,
    ordinal: CUdevice,
    /// Populations that may still be under way, oldest first.
    landing: VecDeque<Landing>,
    /// Released commands, the forecast for OPT eviction.
    pub(crate) history: History,
    /// Totals.
    pub stats: Stats,
}

// SAFETY: the context handle is process-global; all access goes through the lock.
unsafe impl Send for Shim {}

static SHIM: Mutex<Option<Shim>> = Mutex::new(None);

/// Commands remembered for the forecast (a few iterations of a training loop).
const HISTORY_KEEP: usize = 1 << 16;
/// Most commands a forecast looks ahead.
const HISTORY_WINDOW: usize = 1 << 13;

/// The state, created on first use in the calling thread's current context.
pub fn shim() -> Result<MutexGuard<'static, Option<Shim>>, CUresult> {
    let mut g = SHIM.lock().unwrap_or_else(|p| p.into_inner());
    if g.is_none() {
        *g = Some(Shim::new()?);
    }
    Ok(g)
}

/// The state if it exists (no CUDA work happens otherwise).
pub fn existing() -> MutexGuard<'static, Option<Shim>> {
    SHIM.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shim {
    fn new() -> Result<Shim, CUresult> {
        let mut ctx = std::ptr::null_mut();
        let r = crate::real!(cuCtxGetCurrent(&mut ctx));
        if r != CUDA_SUCCESS || ctx.is_null() {
            return Err(if r == CUDA_SUCCESS { CUDA_ERROR_INVALID_CONTEXT } else { r });
        }
        let mut ordinal = 0;
        let r = crate::real!(cuCtxGetDevice(&mut ordinal));
        if r != CUDA_SUCCESS {
            return Err(r);
        }
        let (mut free, mut total) = (0usize, 0usize);
        let r = crate::real!(cuMemGetInfo_v2(&mut free, &mut total));
        if r != CUDA_SUCCESS {
            return Err(r);
        }
        let cfg = config();
        let headroom = (512u64 << 20).min(free as u64 / 8);
        let usable = (free as u64).saturating_sub(headroom) / CHUNK_BYTES * CHUNK_BYTES;
        let grant = crate::agent::attach();
        let limit = match cfg.mem_limit {
            _ if grant.is_some() => grant.map_or(0, |g| g.cap.min(usable) / CHUNK_BYTES * CHUNK_BYTES),
            Some(l) if l > usable => {
                crate::log!(
                    Warn,
                    "memory limit {} is more than the device has free ({} after {} headroom); using {}",
                    format_size(l),
                    format_size(usable),
                    format_size(headroom),
                    format_size(usable)
                );
                usable
            }
            Some(l) => l / CHUNK_BYTES * CHUNK_BYTES,
            None => usable,
        };
        if limit < CHUNK_BYTES && grant.is_none() {
            crate::log::fatal(&format!("memory limit {} is below one 2 MiB chunk; give --mem-limit at least 2M", format_size(limit)));
        }
        let mut dev = CudaDevice::new(ordinal, cfg.mover, cfg.host_block).map_err(|e| {
            crate::log!(Error, "{e}");
            e.code
        })?;
        dev.strict_unmap = cfg.strict_unmap;
        let mut tenants = Tenants::default();
        let tenant = tenants.add("self").expect("first tenant");
        let caps = Capacities { gpu: Some(limit), host: None, disk: Some(0) };
        let by = if grant.is_some() { format!(" (gmuxd's grant to tenant {:?})", cfg.tenant) } else { String::new() };
        crate::log!(Info, "virtualizing device memory: limit {}{by}, device {} of {} free", format_size(limit), ordinal, format_size(free as u64));
        let mut mem = Memory::new(caps);
        mem.set_extent(cfg.extent_chunks);
        Ok(Shim {
            mem,
            tenants,
            tenant,
            planner: Planner::new(Evictor::new(Eviction::Lru), PlacementKind::TierOrder.build(0)),
            mover: Mover::default(),
            dev,
            vmem: Vmem::default(),
            inflight: Inflight::default(),
            layouts: Layouts::default(),
            graphs: Default::default(),
            app_vmm: Default::default(),
            managed: HashMap::new(),
            missing: HashMap::new(),
            refs: HashMap::new(),
            global_refs: HashMap::new(),
            alloc_tick: HashMap::new(),
            tick: 0,
            limit,
            device_total: total as u64,
            ctx,
            ordinal,
            landing: VecDeque::new(),
            history: History::new(HISTORY_KEEP, HISTORY_WINDOW),
            stats: Stats::default(),
        })
    }

    /// The memory limit in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The device's memory as the driver reported it at start.
    pub fn device_total(&self) -> u64 {
        self.device_total
    }

    /// The part of the limit that gmux memory may occupy: the limit less managed memory.
    pub fn room(&self) -> u64 {
        self.limit.saturating_sub(self.managed_bytes())
    }

    /// Bytes of managed memory allocated.
    pub fn managed_bytes(&self) -> u64 {
        self.managed.values().sum()
    }

    /// The context gmux serves.
    pub fn ctx(&self) -> CUcontext {
        self.ctx
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> CUdevice {
        self.ordinal
    }

    /// Reserves an address range for `bytes`; no memory is taken until first use.
    pub fn alloc(&mut self, bytes: u64) -> Result<CUdeviceptr, ShimError> {
        if bytes == 0 {
            return Err(ShimError::Invalid(CUDA_ERROR_INVALID_VALUE));
        }
        let reserved = bytes.div_ceil(CHUNK_BYTES) * CHUNK_BYTES;
        let mut base = 0;
        check(crate::real!(cuMemAddressReserve(&mut base, reserved as usize, CHUNK_BYTES as usize, 0, 0)), "cuMemAddressReserve")?;
        if let Err(e) = self.back(base, bytes, false) {
            crate::real!(cuMemAddressFree(base, reserved as usize));
            return Err(e);
        }
        crate::log!(Debug, "alloc {} at {base:#x}", format_size(bytes));
        Ok(base)
    }

    /// Makes the reserved range at `base` (2 MiB aligned, whole chunks) gmux memory of
    /// `bytes`, backed on first use; `app`: the application reserved it.
    pub fn back(&mut self, base: CUdeviceptr, bytes: u64, app: bool) -> Result<AllocId, ShimError> {
        let id = self.mem.allocate(self.tenant, bytes).map_err(|_| ShimError::Invalid(CUDA_ERROR_INVALID_VALUE))?;
        let a = self.mem.alloc(id).expect("just allocated").clone();
        let reserved = a.count as u64 * CHUNK_BYTES;
        self.dev.register(a.first, a.count, base);
        self.vmem.insert(Region { base, bytes, reserved, alloc: id, app, alias: false });
        self.missing.insert(id, a.count);
        self.stats.peak_allocated = self.stats.peak_allocated.max(self.allocated());
        Ok(id)
    }

    /// Frees the allocation at `base` once no released command uses it; the addresses
    /// too, unless the application reserved them.
    pub fn free(&mut self, base: CUdeviceptr) -> Result<(), ShimError> {
        let r = match self.vmem.find(base) {
            Some(r) if r.base == base => *r,
            _ => return Err(ShimError::Invalid(CUDA_ERROR_INVALID_VALUE)),
        };
        if let Some(ev) = self.inflight.busy(r.alloc) {
            check(crate::real!(cuEventSynchronize(ev)), "cuEventSynchronize")?;
        }
        self.dev.synchronize()?;
        let a = self.mem.alloc(r.alloc).expect("region has an allocation").clone();
        for c in a.chunks() {
            self.mover.discard(c, &mut self.dev)?;
        }
        self.dev.flush()?;
        self.dev.synchronize()?;
        for c in a.chunks() {
            self.dev.forget(c);
        }
        self.mem.free(r.alloc).expect("live allocation");
        self.vmem.remove(base);
        self.missing.remove(&r.alloc);
        self.refs.remove(&r.alloc);
        self.global_refs.retain(|_, v| {
            v.retain(|a| *a != r.alloc);
            !v.is_empty()
        });
        for set in self.refs.values_mut() {
            set.remove(&r.alloc);
        }
        self.alloc_tick.remove(&r.alloc);
        self.inflight.forget(r.alloc);
        if !r.app {
            check(crate::real!(cuMemAddressFree(base, r.reserved as usize)), "cuMemAddressFree")?;
        }
        Ok(())
    }

    /// The allocations that any of `ptrs` points into, with the allocations they refer to
    /// (see [`Shim::add_refs`]). A pointer into the application's own mappings brings the
    /// mappings back to back with it that a buffer there may reach ([`Vmem::extent_of`]).
    pub fn allocs_of(&self, ptrs: &[CUdeviceptr]) -> Vec<AllocId> {
        let mut v = Vec::with_capacity(ptrs.len());
        for r in ptrs.iter().filter_map(|p| self.vmem.find(*p)) {
            if r.app {
                v.extend(self.vmem.extent_of(r.base).into_iter().map(|x| x.alloc));
            } else {
                v.push(r.alloc);
            }
        }
        self.with_referred(&mut v);
        v
    }

    /// The allocations that byte ranges `(start, len)` cross, with the allocations they
    /// refer to (see [`Shim::add_refs`]).
    pub fn allocs_over(&self, ranges: &[(CUdeviceptr, u64)]) -> Vec<AllocId> {
        let mut v: Vec<AllocId> = ranges.iter().flat_map(|&(p, n)| self.vmem.overlapping(p, n)).map(|r| r.alloc).collect();
        self.with_referred(&mut v);
        v
    }

    /// The parts of allocations that byte ranges `(start, len)` cover (a range may cross
    /// from one of the application's mappings into the next).
    pub fn spans_over(&self, ranges: &[(CUdeviceptr, u64)]) -> Vec<Span> {
        let mut spans = Vec::new();
        for &(start, len) in ranges {
            let end = start.saturating_add(len);
            for r in self.vmem.overlapping(start, len) {
                let (from, to) = (start.max(r.base), end.min(r.base + r.reserved));
                if from < to {
                    spans.push(Span { alloc: r.alloc, offset: from - r.base, len: to - from });
                }
            }
        }
        spans
    }

    fn with_referred(&self, v: &mut Vec<AllocId>) {
        let referred: Vec<AllocId> = v.iter().filter_map(|a| self.refs.get(a)).flatten().copied().collect();
        v.extend(referred);
        v.extend(self.global_refs.values().flatten().copied());
        v.sort_unstable();
        v.dedup();
    }

    /// Records that allocation `holder` now holds `ptrs` (pointers or tensor-map
    /// addresses uploaded into it): a command that reads `holder` may follow them, so
    /// their allocations join its working set from now on.
    ///
    /// A holder outside gmux memory (a module's `__device__` or `__constant__` variable,
    /// written with `cudaMemcpyToSymbol`) may be read by any kernel: its pointers join
    /// every command's working set until the holder is written again.
    pub fn add_refs(&mut self, holder: CUdeviceptr, ptrs: &[CUdeviceptr]) {
        let Some(h) = self.vmem.find(holder).map(|r| r.alloc) else {
            let found: Vec<AllocId> = ptrs.iter().filter_map(|p| self.vmem.find(*p)).map(|r| r.alloc).collect();
            if found.is_empty() {
                self.global_refs.remove(&holder);
            } else {
                crate::log!(Debug, "{} pointers uploaded to {holder:#x}, outside gmux memory, join every working set", found.len());
                self.global_refs.insert(holder, found);
            }
            return;
        };
        let found: Vec<AllocId> = ptrs.iter().filter_map(|p| self.vmem.find(*p)).map(|r| r.alloc).filter(|a| *a != h).collect();
        if !found.is_empty() {
            crate::log!(Debug, "{} pointers uploaded to {holder:#x} refer to other allocations", found.len());
            let set = self.refs.entry(h).or_default();
            set.extend(found);
        }
    }

    /// The allocations of `ws`.
    fn allocs_in<'a>(&self, ws: &'a WorkingSet) -> Cow<'a, [AllocId]> {
        match ws {
            WorkingSet::Allocs(a) => Cow::Borrowed(a),
            WorkingSet::Spans(s) => {
                let mut a: Vec<AllocId> = s.iter().map(|s| s.alloc).collect();
                a.sort_unstable();
                a.dedup();
                Cow::Owned(a)
            }
            WorkingSet::Tenant => Cow::Owned(self.vmem.regions().map(|r| r.alloc).collect()),
        }
    }

    /// The chunks of `ws`, whose allocations are `allocs`.
    fn chunks_in(&self, ws: &WorkingSet, allocs: &[AllocId]) -> Vec<ChunkId> {
        match ws {
            WorkingSet::Spans(spans) => {
                let mut c: Vec<ChunkId> = spans.iter().flat_map(|s| self.mem.alloc(s.alloc).expect("live allocation").chunks_in(s.offset, s.len)).collect();
                c.sort_unstable();
                c.dedup();
                c
            }
            _ => allocs.iter().flat_map(|a| self.mem.alloc(*a).expect("live allocation").chunks()).collect(),
        }
    }

    /// The history signature of a command running `kind` (a kernel's handle, or a
    /// constant per kind of operation) over `ws`; 0 when no history is kept
    /// (`GMUX_EVICT=lru`), so that no launch pays for it.
    pub fn signature(&self, kind: u64, ws: &WorkingSet) -> u64 {
        if !config().history_opt {
            return 0;
        }
        signature(kind, &self.allocs_in(ws))
    }

    /// Makes `ws` resident for a command on stream `on` (`None`: the caller waits on the
    /// host) whose signature is `sig`. Victims leave in OPT order where the history
    /// forecasts what follows this command, in LRU order elsewhere. Returns the events the
    /// command must wait for: its own plan's populations, and earlier ones into the same
    /// allocations that `on` has not waited for yet.
    pub fn prepare(&mut self, ws: &WorkingSet, on: Option<StreamKey>, sig: u64) -> Result<Vec<CUevent>, ShimError> {
        let allocs = self.allocs_in(ws);
        let allocs = allocs.as_ref();
        let mut waits = self.landing_waits(allocs, on);
        if allocs.iter().all(|a| self.missing.get(a).copied().unwrap_or(0) == 0) {
            return Ok(waits);
        }
        let mut need = self.chunks_in(ws, allocs);
        if matches!(ws, WorkingSet::Spans(_)) && need.iter().all(|c| self.mem.is_resident(*c)) {
            return Ok(waits);
        }
        if let Some(cap) = crate::agent::granted().filter(|c| *c > self.limit) {
            self.set_limit(cap);
        }
        let required = need.len();
        let need_bytes = required as u64 * CHUNK_BYTES;
        self.stats.largest_need = self.stats.largest_need.max(need_bytes);
        let room = self.room();
        if need_bytes > room {
            return Err(crate::agent::over_grant(need_bytes, room));
        }
        let t_plan = std::time::Instant::now();
        self.sync_ticks();
        let (forecast, prefetch) = self.forecast(Some(sig), allocs);
        need.extend(prefetch.iter().flat_map(|a| self.mem.alloc(*a).expect("live allocation").chunks()));
        let pinned = |_: ChunkId| false;
        let req = Request { tenant: self.tenant, need: &need, required, pinned: &pinned };
        let plan = self.planner.plan(&self.mem, &self.tenants, &req, &forecast);
        let plan_ms = t_plan.elapsed().as_secs_f64() * 1e3;
        if plan.covered < required {
            return Err(crate::agent::over_grant(need_bytes, room));
        }
        // Evictions wait for every command released so far, not only for the last one
        // predicted to use the victim: a command that reaches memory outside its
        // predicted working set still finishes before that memory is copied out and its
        // physical chunk reused.
        if plan.moves.iter().any(|m| matches!(m, Move::Evict { .. })) {
            if config().debug.sync_before || crate::api::guard::panicked() {
                check(crate::real!(cuCtxSynchronize()), "cuCtxSynchronize")?;
            }
            for ev in self.inflight.newest() {
                self.dev.evict_after_all(ev);
            }
        }
        let started = std::time::Instant::now();
        let ready = self.mover.issue(&plan, &self.mem, &mut self.dev)?;
        let issue_ms = started.elapsed().as_secs_f64() * 1e3;
        // The command waits for its own chunks only; prefetched ones land after them.
        let own: std::collections::HashSet<ChunkId> = need[..required].iter().copied().collect();
        let own_last = ready.iter().filter(|(c, _)| own.contains(c)).map(|(_, e)| *e).max();
        let last = ready.iter().map(|(_, e)| *e).max();
        if !config().debug.all_events {
            self.dev.keep_events(&own_last.into_iter().chain(last).collect::<Vec<_>>());
        }
        self.dev.flush()?;
        if config().debug.sync_after {
            self.dev.synchronize()?;
        }
        let flushed = std::time::Instant::now();
        let moved = self.planner.apply(&mut self.mem, &plan).expect("a plan applies to the table it was made from");
        crate::log!(
            Debug,
            "{:.3}: plan of {} moves: planned in {plan_ms:.2} ms, queued in {issue_ms:.2} ms, issued in {:.2} ms, applied in {:.2} ms",
            crate::log::stamp(),
            plan.moves.len(),
            (flushed - started).as_secs_f64() * 1e3 - issue_ms,
            flushed.elapsed().as_secs_f64() * 1e3
        );
        let (filled, fetched) = self.account(&plan, |c| own.contains(&c));
        self.add_moved(moved);
        self.stats.waited += 1;
        if let Some((id, ev)) = own_last.and_then(|e| self.dev.cu_event(e).map(|ev| (e, ev))) {
            self.land(id, ev, filled, on);
            waits.push(ev);
        }
        // Prefetched allocations: no stream has waited for them yet, this one included.
        if let Some((id, ev)) = last.filter(|e| Some(*e) != own_last).and_then(|e| self.dev.cu_event(e).map(|ev| (e, ev))) {
            self.land(id, ev, fetched, None);
        }
        Ok(waits)
    }

    /// Counts a plan's moves in the per-allocation missing chunks; returns the
    /// allocations it fills, split by `own`.
    pub(crate) fn account(&mut self, plan: &gmux_core::planner::Plan, own: impl Fn(ChunkId) -> bool) -> (Vec<AllocId>, Vec<AllocId>) {
        let (mut filled, mut fetched): (Vec<AllocId>, Vec<AllocId>) = (Vec::new(), Vec::new());
        for m in &plan.moves {
            let (c, delta) = match *m {
                Move::Create(c) | Move::Populate { chunk: c, .. } => (c, -1i64),
                Move::Evict { chunk, .. } => (chunk, 1),
                Move::Demote(_) => continue,
            };
            let a = self.mem.chunk(c).alloc;
            if delta < 0 {
                let into = if own(c) { &mut filled } else { &mut fetched };
                into.push(a);
            }
            let n = self.missing.entry(a).or_insert(0);
            *n = (*n as i64 + delta) as u32;
        }
        (filled, fetched)
    }

    /// Forgets populations that have landed; returns whether any is still under way.
    pub(crate) fn settle(&mut self) -> bool {
        while let Some(l) = self.landing.front() {
            if crate::real!(cuEventQuery(l.ready)) != CUDA_SUCCESS {
                break;
            }
            let l = self.landing.pop_front().expect("front exists");
            self.dev.drop_event(l.id);
        }
        !self.landing.is_empty()
    }

    /// Records populations under way into `allocs`, ready after `ev`, that stream `by`
    /// already waits for.
    pub(crate) fn land(&mut self, id: gmux_core::device::Event, ev: CUevent, mut allocs: Vec<AllocId>, by: Option<StreamKey>) {
        allocs.sort_unstable();
        allocs.dedup();
        self.landing.push_back(Landing { id, ready: ev, allocs, waited: by.into_iter().collect() });
    }

    /// Events of populations still under way into any of `allocs` that stream `on` has
    /// not waited for. CUDA orders work only within a stream: the command that caused a
    /// population waits for it, but a command on another stream using the same memory
    /// (weights read from several streams, say) must wait too.
    fn landing_waits(&mut self, allocs: &[AllocId], on: Option<StreamKey>) -> Vec<CUevent> {
        self.settle();
        let mut out = Vec::new();
        for l in &mut self.landing {
            if on.is_some_and(|k| l.waited.contains(&k)) || !l.allocs.iter().any(|a| allocs.contains(a)) {
                continue;
            }
            out.push(l.ready);
            l.waited.extend(on);
            self.stats.waits_for_others += 1;
        }
        out
    }

    /// The forecast after the command with signature `sig` that uses `own` (`None`: after
    /// the newest command released), with the
    /// planner's evictor set to match (OPT over the history's prediction, or LRU with no
    /// forecast), and the allocations worth prefetching: not resident, not `own`, first
    /// used within `GMUX_PREFETCH` commands.
    pub(crate) fn forecast(&mut self, sig: Option<u64>, own: &[AllocId]) -> (Forecast, Vec<AllocId>) {
        self.stats.plans += 1;
        let predicted = match sig {
            _ if !config().history_opt => None,
            Some(sig) => self.history.predict(sig),
            None => self.history.after_last(),
        };
        let Some(order) = predicted else {
            self.planner.evictor = Evictor::new(Eviction::Lru);
            return (Forecast::default(), Vec::new());
        };
        self.stats.forecast_plans += 1;
        self.planner.evictor = Evictor::new(Eviction::Opt);
        let live: Vec<(AllocId, usize)> = order.into_iter().filter(|(a, _)| self.mem.alloc(*a).is_ok()).collect();
        let forecast = Forecast::from_accesses(live.iter().flat_map(|(a, _)| self.mem.alloc(*a).expect("live").chunks()));
        let horizon = config().prefetch;
        let missing = |a: &AllocId| self.missing.get(a).copied().unwrap_or(0) > 0;
        let prefetch = live.iter().filter(|(a, ahead)| *ahead < horizon && missing(a) && !own.contains(a)).map(|(a, _)| *a).collect();
        (forecast, prefetch)
    }

    /// Records a released command: in-flight tracking, recency of its allocations and
    /// the history. Returns the event to wait for, without the lock, when its stream has
    /// more commands in flight than allowed.
    pub fn released(&mut self, stream: CUstream, ptsz: bool, ws: &WorkingSet, sig: u64) -> Result<Option<CUevent>, ShimError> {
        self.tick += 1;
        self.stats.commands += 1;
        let allocs = self.allocs_in(ws);
        let allocs = allocs.as_ref();
        if config().history_opt {
            self.history.record(sig, allocs);
        }
        for a in allocs {
            self.alloc_tick.insert(*a, self.tick);
        }
        if self.inflight.idle() {
            crate::agent::poke();
        }
        let wait = self.inflight.released(stream, ptsz, allocs, crate::agent::inflight_bound())?;
        self.dev.reap(false)?;
        Ok(wait)
    }

    /// Resident bytes.
    pub fn resident(&self) -> u64 {
        self.mem.usage(self.tenant).bytes(gmux_core::Tier::Gpu)
    }

    /// Whether allocation `a` is still allocated.
    pub fn is_live(&self, a: AllocId) -> bool {
        self.mem.alloc(a).is_ok()
    }

    /// Bytes the application has allocated through gmux.
    pub fn allocated(&self) -> u64 {
        self.vmem.allocated()
    }

    pub(crate) fn add_moved(&mut self, m: Moved) {
        let s = &mut self.stats.moved;
        s.populated += m.populated;
        s.evicted += m.evicted;
        s.created += m.created;
        self.stats.peak_resident = self.stats.peak_resident.max(self.resident());
    }

    /// Gives resident chunks their allocation's last-use tick, for LRU.
    pub(crate) fn sync_ticks(&mut self) {
        let resident: Vec<(ChunkId, u64)> = self
            .mem
            .chunks()
            .filter(|(_, ch)| ch.place == gmux_core::Place::GPU)
            .map(|(c, ch)| (c, self.alloc_tick.get(&ch.alloc).copied().unwrap_or(0)))
            .collect();
        for (c, t) in resident {
            self.mem.touch(c, t, false);
        }
    }

    /// The one-line summary printed at exit.
    pub fn summary(&self) -> String {
        let m = self.stats.moved;
        format!(
            "limit {}, allocated {}, peak allocated {}, peak resident {}, commands {} ({} waited for memory), evicted {} ({}), populated {} ({}), created {}, pinned host {}, streams {}, waits for others' populations {}, plans {} ({} in OPT order from history)",
            format_size(self.limit),
            format_size(self.allocated()),
            format_size(self.stats.peak_allocated),
            format_size(self.stats.peak_resident),
            self.stats.commands,
            self.stats.waited,
            m.evicted,
            format_size(m.evicted * CHUNK_BYTES),
            m.populated,
            format_size(m.populated * CHUNK_BYTES),
            m.created,
            format_size(self.dev.pinned_bytes()),
            self.inflight.streams(),
            self.stats.waits_for_others,
            self.stats.plans,
            self.stats.forecast_plans,
        )
    }
}

/// The state without blocking for long (for the exit summary): another thread may hold
/// it briefly (the daemon agent), or forever (a thread killed inside a call).
pub fn try_existing() -> Option<MutexGuard<'static, Option<Shim>>> {
    for _ in 0..200 {
        if let Ok(g) = SHIM.try_lock() {
            return Some(g);
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    None
}
