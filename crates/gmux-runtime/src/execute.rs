//! The one sequence every plan runs through, and the populations it leaves under way.

use crate::{Error, TenantMemory};
use gmux_core::device::{Device, Event};
use gmux_core::planner::{Move, Plan};
use gmux_core::{AllocId, ChunkId};
use std::time::Instant;

/// Populations possibly still under way: the event after them, the allocations they
/// fill and the streams that already wait for them.
pub(crate) struct Landing<S> {
    id: Event,
    pub(crate) allocs: Vec<AllocId>,
    waited: Vec<S>,
}

/// Host time of one plan's phases, for the debug log.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlanTimes {
    /// Moves in the plan.
    pub moves: usize,
    /// Planning, ms.
    pub plan_ms: f64,
    /// Queuing the moves on the device, ms.
    pub issue_ms: f64,
    /// Issuing them (the device's flush), ms.
    pub flush_ms: f64,
    /// Applying the plan to the chunk table, ms.
    pub apply_ms: f64,
}

impl<D: Device> TenantMemory<D> {
    /// Runs `plan`: its evictions wait for the application work `after`, its moves are
    /// queued and flushed, and the chunk table follows. The populations of the chunks
    /// `own` selects land for stream `on`, which must wait for the event returned; the
    /// others (prefetches, fills) land for every stream.
    pub fn execute(&mut self, plan: &Plan, after: &[D::Fence], own: impl Fn(ChunkId) -> bool, on: Option<D::Stream>) -> Result<Option<Event>, Error<D::Error>> {
        // Evictions wait for every command released so far, not only for the last one
        // predicted to use the victim: a command that reaches memory outside its
        // predicted working set still finishes before that memory is copied out and its
        // physical chunk reused.
        if plan.moves.iter().any(|m| matches!(m, Move::Evict { .. } | Move::UnmapHost(_))) {
            self.dev.evict_after(after);
        }
        let issued = Instant::now();
        let ready = self.mover.issue(plan, &self.mem, &mut self.dev).map_err(Error::Device)?;
        let queued = Instant::now();
        let own_last = ready.iter().filter(|(c, _)| own(*c)).map(|(_, e)| *e).max();
        let last = ready.iter().map(|(_, e)| *e).max();
        if !self.settings.all_events {
            self.dev.keep_events(&own_last.into_iter().chain(last).collect::<Vec<_>>());
        }
        self.dev.flush().map_err(Error::Device)?;
        if self.settings.sync_after {
            self.dev.synchronize().map_err(Error::Device)?;
        }
        let flushed = Instant::now();
        let moved = self.planner.apply(&mut self.mem, plan).expect("a plan applies to the table it was made from");
        let (filled, fetched) = self.account(plan, &own);
        self.add_moved(moved);
        self.last_plan = Some(PlanTimes {
            moves: plan.moves.len(),
            plan_ms: 0.0,
            issue_ms: (queued - issued).as_secs_f64() * 1e3,
            flush_ms: (flushed - queued).as_secs_f64() * 1e3,
            apply_ms: flushed.elapsed().as_secs_f64() * 1e3,
        });
        if let Some(e) = own_last {
            self.land(e, filled, on);
        }
        if let Some(e) = last.filter(|e| Some(*e) != own_last) {
            self.land(e, fetched, None);
        }
        Ok(own_last)
    }

    /// Counts a plan's moves in the per-allocation missing chunks (a chunk mapped on the
    /// host is missing); returns the allocations it fills, split by `own`.
    fn account(&mut self, plan: &Plan, own: impl Fn(ChunkId) -> bool) -> (Vec<AllocId>, Vec<AllocId>) {
        let (mut filled, mut fetched): (Vec<AllocId>, Vec<AllocId>) = (Vec::new(), Vec::new());
        for m in &plan.moves {
            let (c, delta) = match *m {
                Move::Create(c) | Move::Populate { chunk: c, .. } => (c, -1i64),
                Move::MapHost(c) => (c, 0),
                Move::Evict { chunk, .. } => (chunk, 1),
                Move::Demote(_) | Move::UnmapHost(_) => continue,
            };
            let a = self.mem.chunk(c).alloc;
            if delta <= 0 {
                let into = if own(c) { &mut filled } else { &mut fetched };
                into.push(a);
            }
            let n = self.missing.entry(a).or_insert(0);
            *n = (*n as i64 + delta) as u32;
        }
        (filled, fetched)
    }

    /// Records populations under way into `allocs`, ready after `id`, that stream `by`
    /// already waits for.
    fn land(&mut self, id: Event, mut allocs: Vec<AllocId>, by: Option<D::Stream>) {
        allocs.sort_unstable();
        allocs.dedup();
        self.landing.push_back(Landing { id, allocs, waited: by.into_iter().collect() });
    }

    /// Forgets populations that have landed; returns whether any is still under way.
    pub fn settle(&mut self) -> bool {
        while let Some(l) = self.landing.front() {
            if !self.dev.is_done(l.id) {
                break;
            }
            let l = self.landing.pop_front().expect("front exists");
            self.dev.drop_event(l.id);
        }
        !self.landing.is_empty()
    }

    /// Events of populations still under way into any of `allocs` that stream `on` has
    /// not waited for. A device orders work only within a stream: the command that caused
    /// a population waits for it, but a command on another stream using the same memory
    /// (weights read from several streams, say) must wait too. They count as given to
    /// `on` only once the command has them ([`TenantMemory::given`]).
    pub(crate) fn landing_waits(&mut self, allocs: &[AllocId], on: Option<D::Stream>) -> Vec<Event> {
        if !self.settle() {
            return Vec::new();
        }
        let waited = |l: &Landing<D::Stream>| on.is_some_and(|k| l.waited.contains(&k));
        self.landing.iter().filter(|l| !waited(l) && l.allocs.iter().any(|a| allocs.contains(a))).map(|l| l.id).collect()
    }

    /// Notes that stream `on` waits for `events`, so that later commands on it need not.
    pub(crate) fn given(&mut self, events: &[Event], on: Option<D::Stream>) {
        let Some(k) = on.filter(|_| !events.is_empty()) else { return };
        for l in &mut self.landing {
            if events.contains(&l.id) && !l.waited.contains(&k) {
                l.waited.push(k);
                self.stats.waits_for_others += 1;
            }
        }
    }
}
