//! gmux-runtime: a tenant's memory in one process.
//!
//! [`TenantMemory`] holds the process's chunk table and moves its chunks between the GPU
//! and the host with gmux-core's planner and mover, over any [`Device`]: the shim runs
//! it over the CUDA driver. It keeps the residency invariant: before a command is
//! released, every chunk of its working set is resident or on its way, and the command
//! waits for the events [`TenantMemory::prepare`] returns.
//!
//! Every plan runs through one sequence, [`TenantMemory::execute`]: issue the moves,
//! flush the device, apply the plan to the table, count what landed.

mod execute;
mod prepare;
mod spill;
pub mod switch;
mod tenancy;
mod working_set;

#[cfg(test)]
mod spill_tests;
#[cfg(test)]
mod tests;

pub use execute::PlanTimes;
pub use tenancy::{Wants, STEP_BYTES};
pub use working_set::{Allocs, Span, WorkingSet};

use execute::Landing;
use gmux_core::device::Device;
use gmux_core::evict::{Eviction, Evictor};
use gmux_core::history::History;
use gmux_core::idhash::{IdMap, IdSet};
use gmux_core::memory::{Alloc, Capacities};
use gmux_core::mover::Mover;
use gmux_core::placement::PlacementKind;
use gmux_core::planner::{Moved, Planner};
use gmux_core::{AllocId, Memory, TenantId, Tenants, Tier, CHUNK_BYTES};
use std::collections::VecDeque;

/// Commands remembered for the forecast (a few iterations of a training loop).
const HISTORY_KEEP: usize = 1 << 16;
/// Most commands a forecast looks ahead.
const HISTORY_WINDOW: usize = 1 << 13;

/// How a runtime plans.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Evict in OPT order over the forecast from the process's own history where its
    /// recent commands ran before (LRU elsewhere); `false`: LRU always, no history kept.
    pub history_opt: bool,
    /// With a forecast, a plan also brings in what the next this many commands use, where
    /// that evicts nothing needed sooner (0: off).
    pub prefetch: usize,
    /// Chunks moved together with one physical handle.
    pub extent_chunks: u32,
    /// Record every populate event, not only the awaited ones (debugging).
    pub all_events: bool,
    /// Wait for the mover's copies after every plan (debugging).
    pub sync_after: bool,
}

/// Why memory could not be made resident or released.
#[derive(Debug)]
pub enum Error<E> {
    /// A device call failed.
    Device(E),
    /// A command needs `need` bytes resident at once; the limit leaves `room`.
    NoRoom {
        /// Bytes the command needs resident.
        need: u64,
        /// Bytes the limit leaves for this memory.
        room: u64,
    },
    /// The allocation is not live.
    Unknown(AllocId),
    /// An allocation of 0 bytes.
    ZeroBytes,
}

/// Totals for the exit summary and the daemon's reports.
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
    /// Largest bytes allocated at once: the program's footprint.
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
    /// Commands that ran with part of their working set mapped on the host.
    pub spilled: u64,
    /// The most bytes one such command had mapped on the host.
    pub largest_spill: u64,
    /// Nanoseconds the launches spent bringing their memory in: waiting for the
    /// daemon's grant, planning and issuing the moves.
    pub prepare_ns: u64,
    /// Commands released in each of the last three slots in which the daemon let the
    /// process run and it released any, newest first (0: no such slot yet); the largest is
    /// the horizon of the next slice's forecast.
    pub slices: [u64; 3],
}

/// One process's device memory: its allocations, where their chunks are, and the
/// populations still under way.
pub struct TenantMemory<D: Device> {
    mem: Memory,
    tenants: Tenants,
    tenant: TenantId,
    planner: Planner,
    mover: Mover,
    /// The device the chunks live on.
    pub dev: D,
    /// Chunks of each allocation not resident.
    missing: IdMap<AllocId, u32>,
    alloc_tick: IdMap<AllocId, u64>,
    tick: u64,
    limit: u64,
    /// Bytes counted against the limit that this memory does not move (managed memory).
    outside: u64,
    /// Bytes the application asked for, live allocations.
    allocated: u64,
    /// Allocations the application freed that are kept for reuse ([`TenantMemory::retire`]).
    retired: IdSet<AllocId>,
    /// Populations that may still be under way, oldest first.
    landing: VecDeque<Landing<D::Stream>>,
    /// Released commands, the forecast for OPT eviction.
    history: History,
    settings: Settings,
    /// Totals.
    pub stats: Stats,
    /// Host time of the newest plan's phases.
    pub last_plan: Option<PlanTimes>,
}

impl<D: Device> TenantMemory<D> {
    /// Empty memory on `dev` under a limit of `limit` bytes (whole chunks).
    pub fn new(dev: D, limit: u64, settings: Settings) -> Self {
        let mut tenants = Tenants::default();
        let tenant = tenants.add("self").expect("the first tenant of an empty set");
        let mut mem = Memory::new(Capacities { gpu: Some(limit), host: None, disk: Some(0) });
        mem.set_extent(settings.extent_chunks);
        TenantMemory {
            mem,
            tenants,
            tenant,
            planner: Planner::new(Evictor::new(Eviction::Lru), PlacementKind::TierOrder.build(0)),
            mover: Mover::default(),
            dev,
            missing: IdMap::default(),
            alloc_tick: IdMap::default(),
            tick: 0,
            limit: limit / CHUNK_BYTES * CHUNK_BYTES,
            outside: 0,
            allocated: 0,
            retired: IdSet::default(),
            landing: VecDeque::new(),
            history: History::new(HISTORY_KEEP, HISTORY_WINDOW),
            settings,
            stats: Stats::default(),
            last_plan: None,
        }
    }

    /// The memory limit in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The part of the limit this memory may occupy: the limit less what is counted
    /// outside it.
    pub fn room(&self) -> u64 {
        self.limit.saturating_sub(self.outside)
    }

    /// Sets the memory limit to `cap`. The chunk table's GPU capacity never drops below
    /// what is resident (plans must stay consistent with it); until the resident bytes
    /// are down to `cap`, commands evict one for one.
    pub fn set_limit(&mut self, cap: u64) {
        self.limit = cap;
        let used = self.resident();
        self.mem.set_gpu_capacity(Some(self.room().max(used)));
    }

    /// Sets the bytes counted against the limit that this memory does not move.
    pub fn set_outside(&mut self, bytes: u64) {
        self.outside = bytes;
        self.set_limit(self.limit);
    }

    /// Resident bytes.
    pub fn resident(&self) -> u64 {
        self.mem.usage(self.tenant).bytes(Tier::Gpu)
    }

    /// Physical GPU memory held, mapped or spare.
    pub fn held(&self) -> u64 {
        self.mover.held() * CHUNK_BYTES
    }

    /// Bytes the application asked for, all allocations.
    pub fn allocated(&self) -> u64 {
        self.allocated
    }

    /// Live allocations, oldest first.
    pub fn allocs(&self) -> impl Iterator<Item = AllocId> + '_ {
        self.mem.allocs().map(|(id, _)| id)
    }

    /// Allocation `a`, if live.
    pub fn alloc(&self, a: AllocId) -> Option<&Alloc> {
        self.mem.alloc(a).ok()
    }

    /// A new allocation of `bytes`, not resident until first use.
    pub fn allocate(&mut self, bytes: u64) -> Result<AllocId, Error<D::Error>> {
        let id = self.mem.allocate(self.tenant, bytes).map_err(|_| Error::ZeroBytes)?;
        let count = self.mem.alloc(id).expect("just allocated").count;
        self.missing.insert(id, count);
        self.allocated += bytes;
        self.stats.peak_allocated = self.stats.peak_allocated.max(self.allocated);
        Ok(id)
    }

    /// Keeps allocation `a`, which the application freed, for a later request of as many
    /// chunks: its chunks stay where they are, and its bytes no longer count as allocated.
    pub fn retire(&mut self, a: AllocId) -> Result<(), Error<D::Error>> {
        let bytes = self.mem.alloc(a).map_err(|_| Error::Unknown(a))?.bytes;
        if self.retired.insert(a) {
            self.allocated -= bytes;
        }
        Ok(())
    }

    /// Hands retired allocation `a` out again for a request of `bytes` (as many chunks).
    pub fn reuse(&mut self, a: AllocId, bytes: u64) -> Result<(), Error<D::Error>> {
        if !self.retired.remove(&a) {
            return Err(Error::Unknown(a));
        }
        self.mem.resize(a, bytes).map_err(|_| Error::Unknown(a))?;
        self.allocated += bytes;
        self.stats.peak_allocated = self.stats.peak_allocated.max(self.allocated);
        Ok(())
    }

    /// Frees allocation `a` once every copy of it is done. The caller has waited for the
    /// application's commands that use it.
    pub fn free(&mut self, a: AllocId) -> Result<(), Error<D::Error>> {
        let alloc = self.mem.alloc(a).map_err(|_| Error::Unknown(a))?.clone();
        self.dev.synchronize().map_err(Error::Device)?;
        for c in alloc.chunks() {
            self.mover.discard(c, &mut self.dev).map_err(Error::Device)?;
        }
        self.dev.flush().map_err(Error::Device)?;
        self.dev.synchronize().map_err(Error::Device)?;
        for c in alloc.chunks() {
            self.dev.forget(c);
        }
        let bytes = self.mem.free(a).expect("live allocation").bytes;
        if !self.retired.remove(&a) {
            self.allocated -= bytes;
        }
        self.missing.remove(&a);
        self.alloc_tick.remove(&a);
        for l in &mut self.landing {
            l.allocs.retain(|x| *x != a);
        }
        Ok(())
    }

    /// Whether allocation `a` is still allocated.
    pub fn is_live(&self, a: AllocId) -> bool {
        self.mem.alloc(a).is_ok()
    }

    /// Whether every chunk of `a` is resident.
    pub fn is_whole(&self, a: AllocId) -> bool {
        self.missing.get(&a).copied().unwrap_or(0) == 0
    }

    /// Makes `hooks` the planner's policy hooks (loaded policies, or
    /// [`gmux_core::hooks::NoHooks`]), between two plans.
    pub fn set_hooks(&mut self, hooks: Box<dyn gmux_core::hooks::MemoryHooks>) {
        self.planner.hooks = hooks;
    }

    /// Notes that the daemon paused the process after it released `released` commands in
    /// its slot: the largest of the last three such slots is the horizon of the next fill.
    /// A slot that released nothing says nothing about slices.
    pub fn slot_ended(&mut self, released: u64) {
        if released > 0 {
            self.stats.slices.rotate_right(1);
            self.stats.slices[0] = released;
        }
    }

    /// What the switch state machine sees of this memory under a grant of `cap` that asks
    /// for `fill`, the process's `generation`-th.
    pub fn view(&self, cap: u64, fill: gmux_core::protocol::Fill, generation: u64) -> switch::View {
        switch::View { cap, fill, generation, limit: self.limit, resident: self.resident(), held: self.held() }
    }

    fn add_moved(&mut self, m: Moved) {
        let s = &mut self.stats.moved;
        s.populated += m.populated;
        s.evicted += m.evicted;
        s.created += m.created;
        self.stats.peak_resident = self.stats.peak_resident.max(self.resident());
    }
}
