//! The process's gmux state: its device memory (a [`TenantMemory`] over the CUDA driver),
//! the address ranges of its allocations and its in-flight commands, behind one lock.
//!
//! Commands are released in the application's call, in its order, so CUDA's ordering
//! across streams is kept; what makes them safe is the residency invariant: before a
//! command is released every chunk of its working set is resident or on its way on the
//! populate stream, which the command's stream then waits for on the GPU.

use crate::config::config;
use crate::cuda::*;
use crate::driver::CudaError;
use crate::inflight::{Inflight, StreamKey};
use crate::predict::Layouts;
use crate::vmem::{Region, Vmem};
use gmux_core::idhash::{IdMap, IdSet};
use gmux_core::size::format_size;
use gmux_core::{AllocId, CHUNK_BYTES};
use gmux_cuda::device::CudaDevice;
use gmux_runtime::{Settings, TenantMemory};
use std::collections::HashMap;

pub use gmux_runtime::{Span, WorkingSet};

mod addresses;
mod freeing;
mod report;
use report::note_spill;
pub mod packs;

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

impl From<gmux_runtime::Error<CudaError>> for ShimError {
    fn from(e: gmux_runtime::Error<CudaError>) -> Self {
        match e {
            gmux_runtime::Error::Device(e) => ShimError::Cuda(e),
            // The device of the work that ran out of room is the current context's.
            gmux_runtime::Error::NoRoom { need, room } => crate::agent::over_grant(crate::devices::current().unwrap_or(0), need, room),
            gmux_runtime::Error::Unknown(_) | gmux_runtime::Error::ZeroBytes => ShimError::Invalid(CUDA_ERROR_INVALID_VALUE),
        }
    }
}

/// The shim's state.
pub struct Shim {
    /// The process's device memory.
    pub memory: TenantMemory<CudaDevice>,
    /// Address ranges of allocations.
    pub vmem: Vmem,
    /// Small allocations in shared chunks.
    pub packs: packs::Packs,
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
    managed: HashMap<CUdeviceptr, u64>,
    /// Allocations freed in stream order, waiting for their commands.
    pending: freeing::Pending,
    /// Freed ranges kept for reuse.
    recycled: freeing::Recycled,
    /// Allocations CUDA graphs may use at every launch, never freed.
    graph_memory: std::collections::HashSet<CUdeviceptr>,
    /// Allocations whose contents point into other allocations.
    refs: IdMap<AllocId, IdSet<AllocId>>,
    /// The same for slots of packs, by the slot's address.
    slot_refs: HashMap<CUdeviceptr, IdSet<AllocId>>,
    /// Allocations that pointers uploaded into memory outside gmux point to, by the
    /// address they were uploaded to.
    global_refs: HashMap<CUdeviceptr, Vec<AllocId>>,
    /// The device's memory as the driver reported it at start.
    device_total: u64,
    ctx: CUcontext,
    ordinal: CUdevice,
}

// SAFETY: the context handle is process-global; all access goes through the lock.
unsafe impl Send for Shim {}

pub use crate::devices::{existing, shim};

impl Shim {
    /// The state of device `dev`, whose context is the calling thread's current one.
    pub(crate) fn new(dev: usize) -> Result<Shim, CUresult> {
        let gmux_cuda::context::Current { ctx, ordinal, free, total } = gmux_cuda::context::current()?;
        debug_assert_eq!(ordinal as usize, dev);
        let cfg = config();
        let headroom = (512u64 << 20).min(free / 8);
        let usable = free.saturating_sub(headroom) / CHUNK_BYTES * CHUNK_BYTES;
        let gpu = gmux_cuda::gpus::uuid_of(ordinal)
            .map_err(|r| crate::log!(Warn, "cannot read the UUID of device {ordinal} (CUDA error {r}); the daemon takes this process for its GPU's"))
            .ok();
        let grant = crate::agent::attach(dev, gpu).map_err(|why| crate::devices::unserved(dev, &why))?;
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
        let mut device = CudaDevice::new(ordinal, cfg.mover, cfg.host_block).map_err(|e| {
            crate::log!(Error, "{e}");
            e.code
        })?;
        device.strict_unmap = cfg.strict_unmap;
        device.sync_before_evict = cfg.debug.sync_before;
        device.run_chunks = cfg.debug.run.unwrap_or(gmux_cuda::device::RUN_CHUNKS);
        let by = if grant.is_some() { format!(" (gmuxd's grant to tenant {:?})", cfg.tenant) } else { String::new() };
        crate::log!(Info, "virtualizing device memory: limit {}{by}, device {} of {} free", format_size(limit), ordinal, format_size(free));
        let settings = Settings {
            history_opt: cfg.history_opt,
            prefetch: cfg.prefetch,
            extent_chunks: cfg.extent_chunks,
            all_events: cfg.debug.all_events,
            sync_after: cfg.debug.sync_after,
        };
        let mut memory = TenantMemory::new(device, limit, settings);
        crate::policy::attach_own(&mut memory, dev);
        Ok(Shim {
            memory,
            vmem: Vmem::owned_by(dev),
            packs: packs::Packs::default(),
            inflight: Inflight::default(),
            layouts: Layouts::default(),
            graphs: Default::default(),
            app_vmm: Default::default(),
            managed: HashMap::new(),
            pending: Default::default(),
            recycled: Default::default(),
            graph_memory: Default::default(),
            refs: IdMap::default(),
            slot_refs: HashMap::new(),
            global_refs: HashMap::new(),
            device_total: total,
            ctx,
            ordinal,
        })
    }

    /// The memory limit in bytes.
    pub fn limit(&self) -> u64 {
        self.memory.limit()
    }

    /// The device's memory as the driver reported it at start.
    pub fn device_total(&self) -> u64 {
        self.device_total
    }

    /// The part of the limit that gmux memory may occupy: the limit less managed memory.
    pub fn room(&self) -> u64 {
        self.memory.room()
    }

    /// Bytes of managed memory allocated.
    pub fn managed_bytes(&self) -> u64 {
        self.managed.values().sum()
    }

    /// Whether `ptr` is a managed allocation's address.
    pub fn is_managed(&self, ptr: CUdeviceptr) -> bool {
        self.managed.contains_key(&ptr)
    }

    /// Counts the managed allocation of `bytes` at `ptr` against the limit (`None`: it
    /// was freed).
    pub fn set_managed(&mut self, ptr: CUdeviceptr, bytes: Option<u64>) {
        match bytes {
            Some(b) => self.managed.insert(ptr, b),
            None => self.managed.remove(&ptr),
        };
        self.memory.set_outside(self.managed_bytes());
    }

    /// The context gmux serves.
    pub fn ctx(&self) -> CUcontext {
        self.ctx
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> CUdevice {
        self.ordinal
    }

    /// The device, as [`crate::devices`] numbers it (its ordinal).
    pub fn device(&self) -> usize {
        self.ordinal as usize
    }

    /// An address for `bytes`, no memory taken until first use: a slot of a pack for a
    /// small allocation, else a range of its own; `on`: the stream of a `cuMemAllocAsync`.
    pub fn alloc(&mut self, bytes: u64, on: Option<StreamKey>) -> Result<CUdeviceptr, ShimError> {
        if bytes == 0 {
            return Err(ShimError::Invalid(CUDA_ERROR_INVALID_VALUE));
        }
        if bytes > packs::PACKED_MAX {
            return self.alloc_range(bytes, on);
        }
        if let Some(p) = self.packs.place(bytes) {
            return Ok(p);
        }
        let pack = self.alloc_range(CHUNK_BYTES, None)?;
        self.packs.add(pack);
        Ok(self.packs.place(bytes).expect("an empty pack holds any packed size"))
    }

    /// Reserves an address range for `bytes` of an allocation of its own (one freed
    /// before where one fits, `on` that stream too: see [`Shim::reuse`]).
    fn alloc_range(&mut self, bytes: u64, on: Option<StreamKey>) -> Result<CUdeviceptr, ShimError> {
        if let Some(base) = self.reuse(bytes, on)? {
            return Ok(base);
        }
        self.trim_recycled(bytes)?;
        let reserved = bytes.div_ceil(CHUNK_BYTES) * CHUNK_BYTES;
        let base = gmux_cuda::vm::reserve(reserved)?;
        if let Err(e) = self.back(base, bytes, false) {
            let _ = gmux_cuda::vm::release(base, reserved);
            return Err(e);
        }
        crate::log!(Debug, "alloc {} at {base:#x}", format_size(bytes));
        Ok(base)
    }

    /// Makes the reserved range at `base` (2 MiB aligned, whole chunks) gmux memory of
    /// `bytes`, backed on first use; `app`: the application reserved it.
    pub fn back(&mut self, base: CUdeviceptr, bytes: u64, app: bool) -> Result<AllocId, ShimError> {
        let id = self.memory.allocate(bytes)?;
        let a = self.memory.alloc(id).expect("just allocated");
        let (first, count) = (a.first, a.count);
        self.memory.dev.register(first, count, base);
        self.vmem.insert(Region { base, bytes, reserved: count as u64 * CHUNK_BYTES, alloc: id, app, alias: false });
        Ok(id)
    }

    /// The allocation that `ptr` falls in as the program sees it: a slot of a pack, or a
    /// range of its own (in a pack's free space: none).
    pub fn region_of(&self, ptr: CUdeviceptr) -> Option<Region> {
        if !self.packs.is_pack_address(ptr) {
            return self.vmem.find(ptr).copied();
        }
        let s = self.packs.find(ptr)?;
        let pack = self.vmem.find(s.pack)?;
        Some(Region { base: s.base, bytes: s.bytes, reserved: packs::slot_len(s.bytes), ..*pack })
    }

    /// The buffer id the driver would give the allocation of `r` (from [`Shim::region_of`]):
    /// unique among live allocations, a slot's from its address.
    pub fn buffer_id(&self, r: &Region) -> u64 {
        match self.packs.find(r.base) {
            Some(s) if s.base == r.base => (1 << 63) | r.base,
            _ => r.alloc.0 as u64 + 1,
        }
    }

    /// The history signature of a command running `kind` (a kernel's handle, or a
    /// constant per kind of operation) over `ws`; 0 when no history is kept
    /// (`GMUX_EVICT=lru`), so that no launch pays for it.
    pub fn signature(&self, kind: u64, ws: &WorkingSet) -> u64 {
        self.memory.signature(kind, ws)
    }

    /// Makes `ws` resident for a command on stream `on` (`None`: the caller waits on the
    /// host) whose signature is `sig`, within the daemon's grant; evictions wait on the
    /// GPU for every command released so far. Returns the events the command must wait
    /// for. A working set over the limit is an error here: the driver's checks of memory
    /// (graph nodes, pointer attributes) want device memory, not host memory mapped in
    /// place ([`Shim::prepare_command`]).
    pub fn prepare(&mut self, ws: &WorkingSet, on: Option<StreamKey>, sig: u64) -> Result<Vec<CUevent>, ShimError> {
        self.make_resident(ws, on, sig, false)
    }

    /// [`Shim::prepare`] for a command about to be released: a working set over the limit
    /// runs with the excess mapped on the host (`GMUX_OVERSIZE=host`, the default).
    pub fn prepare_command(&mut self, ws: &WorkingSet, on: Option<StreamKey>, sig: u64) -> Result<Vec<CUevent>, ShimError> {
        self.make_resident(ws, on, sig, true)
    }

    fn make_resident(&mut self, ws: &WorkingSet, on: Option<StreamKey>, sig: u64, spill: bool) -> Result<Vec<CUevent>, ShimError> {
        let live;
        let ws = if self.room_for(ws)? {
            live = self.memory.live_part(ws);
            &live
        } else {
            ws
        };
        let dev = self.device();
        let Shim { memory, inflight, .. } = self;
        let events = match memory.prepare(ws, on, sig, || crate::agent::granted(dev), || inflight.newest()) {
            Err(gmux_runtime::Error::NoRoom { need, room }) if spill && crate::config::config().oversize == crate::config::Oversize::Host => {
                let ShimError::TooBig { need, limit } = crate::agent::over_grant(dev, need, room) else {
                    return Err(crate::agent::over_grant(dev, need, room));
                };
                let events = memory.prepare_spilled(ws, on, sig, || inflight.newest())?;
                note_spill(need, limit, memory.stats.spilled);
                events
            }
            r => r?,
        };
        self.log_plan();
        let mut waits = Vec::with_capacity(events.len());
        for e in events {
            waits.extend(self.memory.dev.cu_event(e)?);
        }
        Ok(waits)
    }

    /// Writes the newest plan's phase times to the debug log, once.
    pub(crate) fn log_plan(&mut self) {
        if let Some(t) = self.memory.last_plan.take() {
            crate::log!(
                Debug,
                "{:.3}: plan of {} moves: planned in {:.2} ms, queued in {:.2} ms, issued in {:.2} ms, applied in {:.2} ms",
                crate::log::stamp(),
                t.moves,
                t.plan_ms,
                t.issue_ms,
                t.flush_ms,
                t.apply_ms
            );
        }
    }

    /// Records a released command: in-flight tracking, recency of its allocations and
    /// the history. Returns the event to wait for, without the lock, when its stream has
    /// more commands in flight than allowed.
    pub fn released(&mut self, stream: CUstream, ptsz: bool, ws: &WorkingSet, sig: u64) -> Result<Option<CUevent>, ShimError> {
        static HISTORY: crate::profile::Entry = crate::profile::Entry::new("(bookkeeping:history)");
        static INFLIGHT: crate::profile::Entry = crate::profile::Entry::new("(bookkeeping:in-flight)");
        static REAP: crate::profile::Entry = crate::profile::Entry::new("(bookkeeping:reap)");
        let mut laps = crate::profile::Laps::start();
        let allocs = self.memory.released(ws, sig);
        laps.lap(&HISTORY);
        let dev = self.device();
        if crate::agent::attached(dev) && self.inflight.idle() {
            crate::agent::notice(dev, crate::agent::Notice { busy: true, ..self.notice() });
        }
        // The grant's bound, at most what the dispatcher asks of a process that marks jobs.
        let bound = crate::agent::inflight_bound(dev);
        let bound = crate::jobs::dispatcher_bound(dev).map_or(bound, |b| bound.min(b as usize));
        let wait = self.inflight.released(stream, ptsz, &allocs, bound)?;
        laps.lap(&INFLIGHT);
        self.memory.dev.reap(false)?;
        laps.lap(&REAP);
        Ok(wait)
    }

    /// Whether commands are in flight, and the counters of the next report, from what
    /// this state holds (no device call).
    pub fn notice(&self) -> crate::agent::Notice {
        crate::agent::Notice { busy: !self.inflight.idle(), commands: self.memory.stats.commands, finished: self.inflight.done() }
    }

    /// Resident bytes.
    pub fn resident(&self) -> u64 {
        self.memory.resident()
    }

    /// Whether allocation `a` is still allocated.
    pub fn is_live(&self, a: AllocId) -> bool {
        self.memory.is_live(a)
    }

    /// Bytes the application has allocated through gmux.
    pub fn allocated(&self) -> u64 {
        self.memory.allocated()
    }
}
