//! The command path: make a command's working set resident, then record it as released.

use crate::{Error, TenantMemory, WorkingSet};
use gmux_core::device::{Device, Event};
use gmux_core::evict::{Eviction, Evictor, Forecast};
use gmux_core::history::signature;
use gmux_core::planner::{Plan, Request};
use gmux_core::{AllocId, ChunkId, Place, CHUNK_BYTES};
use std::borrow::Cow;
use std::collections::HashSet;
use std::time::Instant;

impl<D: Device> TenantMemory<D> {
    /// The allocations of `ws`.
    pub fn allocs_in<'a>(&self, ws: &'a WorkingSet) -> Cow<'a, [AllocId]> {
        match ws {
            WorkingSet::Allocs(a) => Cow::Borrowed(a),
            WorkingSet::Spans(s) => {
                let mut a: Vec<AllocId> = s.iter().map(|s| s.alloc).collect();
                a.sort_unstable();
                a.dedup();
                Cow::Owned(a)
            }
            WorkingSet::Tenant => Cow::Owned(self.allocs().collect()),
        }
    }

    /// `ws` without what has been freed since it was made.
    pub fn live_part(&self, ws: &WorkingSet) -> WorkingSet {
        match ws {
            WorkingSet::Allocs(a) => WorkingSet::Allocs(a.iter().copied().filter(|a| self.is_live(*a)).collect()),
            WorkingSet::Spans(s) => WorkingSet::Spans(s.iter().copied().filter(|s| self.is_live(s.alloc)).collect()),
            WorkingSet::Tenant => WorkingSet::Tenant,
        }
    }

    /// Bytes of the allocations of `ws` that are not resident (whole allocations: an
    /// upper bound for a working set of spans).
    pub fn absent_bytes(&self, ws: &WorkingSet) -> u64 {
        self.allocs_in(ws).iter().map(|a| u64::from(self.missing.get(a).copied().unwrap_or(0))).sum::<u64>() * CHUNK_BYTES
    }

    /// The chunks of `ws`, whose allocations are `allocs`.
    pub(crate) fn chunks_in(&self, ws: &WorkingSet, allocs: &[AllocId]) -> Vec<ChunkId> {
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
    /// constant per kind of operation) over `ws`; 0 when no history is kept, so that no
    /// command pays for it.
    pub fn signature(&self, kind: u64, ws: &WorkingSet) -> u64 {
        if !self.settings.history_opt {
            return 0;
        }
        signature(kind, &self.allocs_in(ws))
    }

    /// Whether a command over `ws` is a hit: every allocation of it resident and no
    /// population under way, so that [`TenantMemory::prepare`] would plan nothing and
    /// give no waits (the launch path's shortcut).
    pub fn is_hit(&mut self, ws: &WorkingSet) -> bool {
        match ws {
            WorkingSet::Allocs(a) => !self.settle() && a.iter().all(|a| self.is_whole(*a)),
            _ => false,
        }
    }

    /// Makes `ws` resident for a command on stream `on` (`None`: the caller waits on the
    /// host) whose signature is `sig`. Victims leave in OPT order where the history
    /// forecasts what follows this command, in LRU order elsewhere, after the application
    /// work `after()` names. A limit below `grant()` is raised to it first. Returns the
    /// events the command must wait for: its own plan's populations, and earlier ones into
    /// the same allocations that `on` has not waited for yet. Chunks of `ws` mapped on the
    /// host go back to the host tier first (their copies wait for `after()` too).
    pub fn prepare(
        &mut self,
        ws: &WorkingSet,
        on: Option<D::Stream>,
        sig: u64,
        grant: impl FnOnce() -> Option<u64>,
        after: impl FnMut() -> Vec<D::Fence>,
    ) -> Result<Vec<Event>, Error<D::Error>> {
        let waits = self.make_resident(ws, on, sig, grant, after)?;
        self.given(&waits, on);
        Ok(waits)
    }

    fn make_resident(
        &mut self,
        ws: &WorkingSet,
        on: Option<D::Stream>,
        sig: u64,
        grant: impl FnOnce() -> Option<u64>,
        after: impl FnMut() -> Vec<D::Fence>,
    ) -> Result<Vec<Event>, Error<D::Error>> {
        let allocs = self.allocs_in(ws);
        let allocs = allocs.as_ref();
        if allocs.iter().all(|a| self.is_whole(*a)) {
            return Ok(self.landing_waits(allocs, on));
        }
        let need = self.chunks_in(ws, allocs);
        if matches!(ws, WorkingSet::Spans(_)) && need.iter().all(|c| self.mem.is_resident(*c)) {
            return Ok(self.landing_waits(allocs, on));
        }
        let slow = Instant::now();
        let r = self.bring_in(need, allocs, on, sig, grant, after);
        self.stats.prepare_ns = self.stats.prepare_ns.saturating_add(u64::try_from(slow.elapsed().as_nanos()).unwrap_or(u64::MAX));
        r
    }

    /// [`Self::make_resident`] once some of `need`, the chunks of `allocs`, is not
    /// resident: waits for the grant, plans and issues the moves.
    fn bring_in(
        &mut self,
        mut need: Vec<ChunkId>,
        allocs: &[AllocId],
        on: Option<D::Stream>,
        sig: u64,
        grant: impl FnOnce() -> Option<u64>,
        mut after: impl FnMut() -> Vec<D::Fence>,
    ) -> Result<Vec<Event>, Error<D::Error>> {
        if let Some(cap) = grant().filter(|c| *c > self.limit) {
            self.set_limit(cap);
        }
        let required = need.len();
        let need_bytes = required as u64 * CHUNK_BYTES;
        self.stats.largest_need = self.stats.largest_need.max(need_bytes);
        let room = self.room();
        if need_bytes > room {
            return Err(Error::NoRoom { need: need_bytes, room });
        }
        let mut waits = self.landing_waits(allocs, on);
        if self.mover.host_mapped() > 0 {
            let back = gmux_core::spill::unmap_from_host(&self.mem, &need);
            if !back.moves.is_empty() {
                self.execute(&back, &after(), |_| false, on)?;
            }
        }
        let planning = Instant::now();
        self.sync_ticks();
        let (forecast, prefetch) = self.forecast(Some(sig), allocs);
        need.extend(prefetch.iter().flat_map(|a| self.mem.alloc(*a).expect("live allocation").chunks()));
        let plan = self.plan_for(&need, required, &forecast, &mut after, on)?;
        let plan_ms = planning.elapsed().as_secs_f64() * 1e3;
        if plan.covered < required {
            return Err(Error::NoRoom { need: need_bytes, room });
        }
        let after = if plan.moves.iter().any(|m| matches!(m, gmux_core::planner::Move::Evict { .. })) { after() } else { Vec::new() };
        let own: HashSet<ChunkId> = need[..required].iter().copied().collect();
        let landed = self.execute(&plan, &after, |c| own.contains(&c), on)?;
        if let Some(t) = &mut self.last_plan {
            t.plan_ms = plan_ms;
        }
        self.stats.waited += 1;
        waits.extend(landed);
        Ok(waits)
    }

    /// The plan that makes `need[..required]` resident, and what it can of the rest.
    /// Extents leave whole (their physical memory is one mapping), so where every extent
    /// that could leave holds a chunk of `need` (a working set over part of an extent,
    /// after a command over the limit, say), everything resident leaves first, its copies
    /// after the application work `after()` names, and the plan is made again.
    pub(crate) fn plan_for(
        &mut self,
        need: &[ChunkId],
        required: usize,
        forecast: &Forecast,
        after: &mut impl FnMut() -> Vec<D::Fence>,
        on: Option<D::Stream>,
    ) -> Result<Plan, Error<D::Error>> {
        let pinned = |_: ChunkId| false;
        let req = Request { tenant: self.tenant, need, required, pinned: &pinned };
        let plan = self.planner.plan(&self.mem, &self.tenants, &req, forecast);
        if plan.covered >= required || required as u64 * CHUNK_BYTES > self.room() {
            return Ok(plan);
        }
        let all_out = self.planner.shrink(&self.mem, &self.tenants, self.tenant, 0, &[], forecast);
        if all_out.moves.is_empty() {
            return Ok(plan);
        }
        self.execute(&all_out, &after(), |_| false, on)?;
        Ok(self.planner.plan(&self.mem, &self.tenants, &req, forecast))
    }

    /// The forecast after the command with signature `sig` that uses `own` (`None`: after
    /// the newest command released), with the planner's evictor set to match (OPT over
    /// the history's prediction, or LRU with no forecast), and the allocations worth
    /// prefetching: not resident, not `own`, first used within the prefetch horizon.
    pub(crate) fn forecast(&mut self, sig: Option<u64>, own: &[AllocId]) -> (Forecast, Vec<AllocId>) {
        self.stats.plans += 1;
        let predicted = match sig {
            _ if !self.settings.history_opt => None,
            Some(sig) => self.history.predict(sig),
            None => self.history.after_last(),
        };
        let Some(order) = predicted else {
            self.planner.evictor = Evictor::new(Eviction::Lru);
            return (Forecast::default(), Vec::new());
        };
        self.stats.forecast_plans += 1;
        self.planner.evictor = Evictor::new(Eviction::Opt);
        let live: Vec<(AllocId, usize)> = order.into_iter().filter(|(a, _)| self.is_live(*a)).collect();
        let forecast = Forecast::from_accesses(live.iter().flat_map(|(a, _)| self.mem.alloc(*a).expect("live").chunks()));
        let horizon = self.settings.prefetch;
        let prefetch = live.iter().filter(|(a, ahead)| *ahead < horizon && !self.is_whole(*a) && !own.contains(a)).map(|(a, _)| *a).collect();
        (forecast, prefetch)
    }

    /// Records a command released over `ws` with signature `sig`: the recency of its
    /// allocations and the history. Returns its allocations.
    pub fn released<'a>(&mut self, ws: &'a WorkingSet, sig: u64) -> Cow<'a, [AllocId]> {
        self.tick += 1;
        self.stats.commands += 1;
        let allocs = self.allocs_in(ws);
        if self.settings.history_opt {
            self.history.record(sig, &allocs);
        }
        for a in allocs.iter() {
            self.alloc_tick.insert(*a, self.tick);
        }
        if self.planner.hooks.tracks_access() {
            for a in allocs.iter() {
                let Ok(alloc) = self.mem.alloc(*a) else { continue };
                for c in alloc.chunks() {
                    self.planner.hooks.access(c, self.tenant, self.tick);
                }
            }
        }
        allocs
    }

    /// Gives resident chunks their allocation's last-use tick, for LRU.
    pub(crate) fn sync_ticks(&mut self) {
        let resident: Vec<(ChunkId, u64)> =
            self.mem.chunks().filter(|(_, ch)| ch.place == Place::GPU).map(|(c, ch)| (c, self.alloc_tick.get(&ch.alloc).copied().unwrap_or(0))).collect();
        for (c, t) in resident {
            self.mem.touch(c, t, false);
        }
    }
}
