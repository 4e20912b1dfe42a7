//! What a tenant's memory does for the daemon: keep within its grant (evicting its own
//! chunks, OPT order over its forecast), bring in its next slice's working set when it
//! is switched in, and report its state and forecast.

use crate::{Error, TenantMemory};
use gmux_core::device::Device;
use gmux_core::idhash::IdSet;
use gmux_core::planner::{Plan, Request};
use gmux_core::protocol::ShimReport;
use gmux_core::{AllocId, ChunkId, Tier, CHUNK_BYTES};

/// Most bytes one step of a shrink or a fill moves, so that the application's commands
/// (which need the same memory) and the daemon's reports interleave with it.
pub const STEP_BYTES: u64 = 512 << 20;

impl<D: Device> TenantMemory<D> {
    /// Sets the memory limit to `cap` and issues the eviction of at most one step of own
    /// chunks towards it, after the application work `after()` names. Returns whether
    /// more must go.
    pub fn shrink_step(&mut self, cap: u64, after: impl FnOnce() -> Vec<D::Fence>) -> Result<bool, Error<D::Error>> {
        let cap = cap / CHUNK_BYTES * CHUNK_BYTES;
        self.set_limit(cap);
        let after = after();
        let resident = self.mem.usage(self.tenant).chunks[0];
        let most = (cap / CHUNK_BYTES).max(resident.saturating_sub(STEP_BYTES / CHUNK_BYTES));
        if resident > most {
            self.sync_ticks();
            let (forecast, _) = self.forecast(None, &[]);
            let plan = self.planner.shrink(&self.mem, &self.tenants, self.tenant, most, &[], &forecast);
            self.execute(&plan, &after, |_| false, None)?;
        } else {
            // Spare physical memory over the new cap goes too.
            self.execute(&Plan::default(), &after, |_| false, None)?;
        }
        self.set_limit(cap);
        if self.held() > cap.max(self.resident()) {
            // The step's victims left spare physical memory; release it within the cap.
            self.execute(&Plan::default(), &after, |_| false, None)?;
        }
        Ok(self.mem.usage(self.tenant).chunks[0] > cap / CHUNK_BYTES)
    }

    /// Brings in one step of the allocations the next slice uses (`whole`: all of them),
    /// in first-use order, within the limit and without evicting anything the forecast
    /// needs sooner: [`STEP_BYTES`], rounded up to the end of an extent so that each
    /// extent arrives whole (mapped with one handle). Every stream waits for what it
    /// brings in. Returns `None` when nothing is missing, else whether anything is left
    /// that fits.
    pub fn fill_step(&mut self, whole: bool, after: impl FnOnce() -> Vec<D::Fence>) -> Result<Option<bool>, Error<D::Error>> {
        let allocs = if whole { self.allocs().collect() } else { self.next_slice() };
        // Over the room left, the plan evicts own chunks that the forecast uses later (what
        // the last slice left behind), never any used sooner.
        let step = (STEP_BYTES / CHUNK_BYTES) as usize;
        let missing = allocs.iter().flat_map(|a| self.mem.alloc(*a).expect("live allocation").chunks()).filter(|c| !self.mem.is_resident(*c));
        let need = one_step(missing, step, |c| self.mem.extent(c).0);
        if need.is_empty() {
            return Ok(None);
        }
        self.sync_ticks();
        let (forecast, _) = self.forecast(None, &[]);
        let pinned = |_: ChunkId| false;
        let req = Request { tenant: self.tenant, need: &need, required: 0, pinned: &pinned };
        let plan = self.planner.plan(&self.mem, &self.tenants, &req, &forecast);
        let more = plan.covered == need.len() && !plan.moves.is_empty();
        let after = if plan.moves.iter().any(|m| matches!(m, gmux_core::planner::Move::Evict { .. })) { after() } else { Vec::new() };
        self.execute(&plan, &after, |_| false, None)?;
        Ok(Some(more))
    }

    /// Allocations the next slice uses, in first-use order: the history's forecast
    /// ([`TenantMemory::forecast_slice`]), then those used over the last horizon's worth of
    /// commands that the forecast leaves out, the least recently used first. What the
    /// agent fills by, and the report's `want`.
    pub fn next_slice(&self) -> Vec<AllocId> {
        let horizon = self.slice_horizon();
        let mut slice = self.forecast_slice();
        let forecast: IdSet<AllocId> = slice.iter().copied().collect();
        let mut recent: Vec<(u64, AllocId)> = self.used_within(horizon).filter(|(a, _)| !forecast.contains(a)).map(|(a, t)| (t, a)).collect();
        recent.sort_unstable();
        slice.extend(recent.into_iter().map(|(_, a)| a));
        slice
    }

    /// The history's forecast alone: the allocations first used within the slice horizon
    /// (the most commands the process released in one of its last three slots), in
    /// first-use order; every allocation without a forecast.
    pub fn forecast_slice(&self) -> Vec<AllocId> {
        let horizon = self.slice_horizon();
        self.forecast_ahead().into_iter().filter(|(_, ahead)| *ahead < horizon).map(|(a, _)| a).collect()
    }

    /// Live allocations used in the last `horizon` commands released, each with its last
    /// use. What a process used over its last slice is a floor under the forecast of its
    /// next one: a forecast falls short where the program does something it has not done
    /// at that point before. (Measured on the traces of three transformers decoders: at
    /// the first commands of each `generate` call, the forecast over a slice held 0–200
    /// MiB of the 3.4 GiB the slice used; what the last slice used held all of it.)
    fn used_within(&self, horizon: usize) -> impl Iterator<Item = (AllocId, u64)> + '_ {
        let since = self.tick.saturating_sub(u64::try_from(horizon).unwrap_or(u64::MAX));
        self.alloc_tick.iter().filter(move |(a, t)| **t > since && self.is_live(**a)).map(|(a, t)| (*a, *t))
    }

    /// Commands the next slice is forecast to run: the most the process released in one of
    /// its last three slots; before its first slice (or never sliced: all tenants fit), no
    /// bound. Not a median or a mean: a slot that waited for memory released fewer
    /// commands, and a horizon that shrank with it would forecast less, keep less and make
    /// the next slot wait again.
    fn slice_horizon(&self) -> usize {
        largest_slice(&self.stats.slices)
    }

    /// Live allocations the forecast uses, in first-use order, each with how many
    /// commands ahead it is first used; every allocation at 0 without a forecast.
    fn forecast_ahead(&self) -> Vec<(AllocId, usize)> {
        match self.history.after_last() {
            Some(order) => order.into_iter().filter(|(a, _)| self.is_live(*a)).collect(),
            None => self.allocs().map(|a| (a, 0)).collect(),
        }
    }

    /// The state the daemon divides memory by. `blocked`: bytes a command waits to have
    /// resident; `busy`: commands are in flight; `finished`: commands seen finished.
    pub fn report(&mut self, blocked: u64, busy: bool, finished: u64) -> ShimReport {
        let wants = self.wants();
        self.report_with(wants, blocked, busy, finished)
    }

    /// What the forecast wants, the costly part of a report: it walks the history.
    pub fn wants(&self) -> Wants {
        // The next slice's allocations, and with them the whole period's.
        let bytes = |a: &AllocId| self.mem.alloc(*a).expect("live").count as u64 * CHUNK_BYTES;
        let slice = self.next_slice();
        let mut whole: IdSet<AllocId> = slice.iter().copied().collect();
        whole.extend(self.forecast_ahead().into_iter().map(|(a, _)| a));
        Wants { slice: slice.iter().map(bytes).sum(), period: whole.iter().map(bytes).sum() }
    }

    /// [`TenantMemory::report`] with `wants` computed earlier (a report between two
    /// forecasts: the counters are current, the forecast is as recent as `wants`).
    pub fn report_with(&mut self, wants: Wants, blocked: u64, busy: bool, finished: u64) -> ShimReport {
        self.settle();
        let Wants { slice: want, period } = wants;
        let usage = self.mem.usage(self.tenant);
        let m = self.stats.moved;
        ShimReport {
            held: self.held(),
            resident: usage.bytes(Tier::Gpu),
            allocated: self.allocated(),
            swapped: usage.bytes(Tier::Host) + usage.bytes(Tier::Disk),
            want,
            period,
            blocked,
            commands: self.stats.commands,
            bytes_h2d: m.populated * CHUNK_BYTES,
            bytes_d2h: m.evicted * CHUNK_BYTES,
            busy,
            waiting: false,
            finished,
            grant: 0,
            largest: self.stats.largest_need,
            launches_held_ns: 0,
            prepare_ns: self.stats.prepare_ns,
        }
    }
}

/// Bytes the forecast wants: the next slice's allocations, and the whole period's (the
/// report's `want` and `period`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Wants {
    /// The next slice's.
    pub slice: u64,
    /// The whole period's, the next slice's included.
    pub period: u64,
}

/// The largest of the known slices (0: unknown); no bound without any.
fn largest_slice(slices: &[u64]) -> usize {
    match slices.iter().copied().max() {
        None | Some(0) => usize::MAX,
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
    }
}

/// The first `step` of `chunks`, and the rest of the extent (named by `extent_of`) that
/// the last of them is in.
fn one_step(chunks: impl Iterator<Item = ChunkId>, step: usize, extent_of: impl Fn(ChunkId) -> ChunkId) -> Vec<ChunkId> {
    let mut need: Vec<ChunkId> = Vec::new();
    for c in chunks {
        if need.len() >= step && need.last().is_none_or(|&l| extent_of(l) != extent_of(c)) {
            break;
        }
        need.push(c);
    }
    need
}

#[cfg(test)]
mod tests {
    use super::{largest_slice, one_step};
    use gmux_core::ChunkId;

    #[test]
    fn slots_slowed_by_paging_do_not_shorten_the_horizon() {
        assert_eq!(largest_slice(&[0, 0, 0]), usize::MAX, "never sliced: no bound");
        assert_eq!(largest_slice(&[8, 0, 0]), 8);
        assert_eq!(largest_slice(&[400, 1700, 500]), 1700, "slow slots before and after a full one");
        assert_eq!(largest_slice(&[16, 16, 4]), 16);
    }

    /// Extents of 4 chunks: a step of 6 ends inside the second extent and takes all of it.
    #[test]
    fn a_step_ends_at_the_end_of_an_extent() {
        let extent_of = |c: ChunkId| ChunkId(c.0 / 4 * 4);
        let ids = |v: Vec<ChunkId>| v.into_iter().map(|c| c.0).collect::<Vec<_>>();
        assert_eq!(ids(one_step((0..20).map(ChunkId), 6, extent_of)), (0..8).collect::<Vec<_>>());
        assert_eq!(ids(one_step((0..20).map(ChunkId), 8, extent_of)), (0..8).collect::<Vec<_>>(), "a step that ends an extent stops there");
        assert_eq!(ids(one_step([1, 2, 9, 13].into_iter().map(ChunkId), 2, extent_of)), vec![1, 2], "the second chunk ends the step in its extent");
        assert_eq!(ids(one_step([1, 2, 3, 9].into_iter().map(ChunkId), 2, extent_of)), vec![1, 2, 3]);
        assert_eq!(ids(one_step((0..3).map(ChunkId), 6, extent_of)), vec![0, 1, 2]);
    }
}
