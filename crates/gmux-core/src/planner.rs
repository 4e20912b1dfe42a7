//! The memory planner: from a tenant's upcoming working set, the timeline's forecast and
//! the budgets, an ordered migration plan.
//!
//! The plan populates the needed chunks in first-use order (so that commands can start
//! as soon as their own chunks are in), each preceded by the evictions that make room
//! for it. Victims follow the [`Evictor`]'s order, filtered by the budgets:
//! - a tenant at its `gmem.limit.high` evicts only its own chunks;
//! - a tenant at or below its `gmem.limit.low` is never evicted by another's pressure;
//! - pinned chunks (touched by released, unfinished commands) are never evicted.
//!
//! A victim leaves with every other resident chunk of its extent ([`Memory::extent`]),
//! and only when all of them may leave. Where the victims go is the [`Placement`]'s
//! decision, asked once per extent.

use crate::evict::{Evictor, Forecast};
use crate::hooks::{self, MemoryHooks};
use crate::memory::{ChunkId, Memory, Place, Tier};
use crate::placement::{Decision, Placement};
use crate::tenant::{TenantId, Tenants};
use std::collections::{HashMap, HashSet};

/// One step of a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Move {
    /// Back a never-touched chunk with fresh GPU memory (no copy).
    Create(ChunkId),
    /// Copy a chunk into GPU memory from `from`.
    Populate { chunk: ChunkId, from: Tier },
    /// Copy a chunk out of GPU memory to `to` (a drop when `to` is disk and a clean copy is there).
    Evict { chunk: ChunkId, to: Tier },
    /// Move a host-tier chunk to disk to make room in the host tier.
    Demote(ChunkId),
    /// Give a chunk that is not in GPU memory host memory at its own addresses, its data
    /// copied in from the host tier when it has any ([`Place::HostMapped`]).
    MapHost(ChunkId),
    /// Copy a [`Place::HostMapped`] chunk back to the host tier and unmap it.
    UnmapHost(ChunkId),
}

/// What the planner needs to know about the request.
pub struct Request<'a> {
    /// The tenant about to run.
    pub tenant: TenantId,
    /// Chunks it will touch, in first-use order (repeats are ignored).
    pub need: &'a [ChunkId],
    /// `need[..required]` must be made resident (the next command); the rest is
    /// prefetch, planned only while it does not evict anything used sooner.
    pub required: usize,
    /// Chunks that must stay resident.
    pub pinned: &'a dyn Fn(ChunkId) -> bool,
}

/// An ordered migration plan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Moves in issue order.
    pub moves: Vec<Move>,
    /// `need[..covered]` is resident once the plan ran; less than `need.len()` when the
    /// budgets left no victim.
    pub covered: usize,
}

/// Byte and count totals of applied moves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Moved {
    /// Chunks copied into GPU memory.
    pub populated: u64,
    /// Chunks copied out of GPU memory.
    pub evicted: u64,
    /// Chunks dropped from GPU memory without a copy (a clean copy is on disk).
    pub dropped: u64,
    /// Chunks created.
    pub created: u64,
    /// Chunks read from disk.
    pub disk_reads: u64,
    /// Chunks written to disk.
    pub disk_writes: u64,
}

/// Most `Keep` answers a placement may give in one plan before victims are forced out.
const MAX_KEEPS: usize = 64;

/// The planner: eviction order plus tier placement.
pub struct Planner {
    /// Eviction order.
    pub evictor: Evictor,
    /// Tier placement of victims.
    pub placement: Box<dyn Placement>,
    /// Policy hooks (eBPF later).
    pub hooks: Box<dyn MemoryHooks>,
}

impl Planner {
    /// A planner with no hooks.
    pub fn new(evictor: Evictor, placement: Box<dyn Placement>) -> Self {
        Planner { evictor, placement, hooks: Box::new(hooks::NoHooks) }
    }

    /// Plans the moves that make `req.need` resident, in first-use order.
    pub fn plan(&mut self, mem: &Memory, tenants: &Tenants, req: &Request, forecast: &Forecast) -> Plan {
        let mut st = Budget::new(mem, tenants);
        let mut plan = Plan::default();
        let need_set: HashSet<ChunkId> = req.need.iter().copied().collect();
        let mut seen: HashSet<ChunkId> = HashSet::new();
        let mut victims: Option<Victims> = None;
        let mut keeps = 0;
        let advice: Vec<ChunkId> = self.hooks.prefetch(req.tenant).into_iter().filter(|c| mem.is_live(*c) && mem.chunk(*c).tenant == req.tenant).collect();
        for (i, &c) in req.need.iter().chain(&advice).enumerate() {
            if !seen.insert(c) || mem.chunk(c).place == Place::GPU {
                continue;
            }
            if mem.chunk(c).place == Place::HostMapped {
                // Its address holds host memory until an `UnmapHost` of an earlier plan.
                if i < req.required {
                    plan.covered = i;
                    self.commit(&mut victims, &plan);
                    return plan;
                }
                continue;
            }
            let owner = mem.chunk(c).tenant;
            while !st.room_for(owner) {
                let vs = victims.get_or_insert_with(|| Victims::new(self, mem, req, &need_set, forecast));
                let own_only = st.over_high(owner);
                let group = vs.next(mem, &st, owner, own_only);
                // A chunk brought in ahead never evicts one needed no later: for a hook's
                // advice, one the forecast needs no later; for the rest of `need` (fills),
                // also one the forecast says nothing of.
                let advised = i >= req.need.len();
                let prefetch_hurts = |v: ChunkId| {
                    let (victim, wanted) = (forecast.next_use(v), forecast.next_use(c));
                    i >= req.required && victim <= wanted && !(advised && victim == Forecast::NEVER)
                };
                let Some(group) = group.filter(|g| !g.iter().any(|v| prefetch_hurts(*v))) else {
                    plan.covered = i.min(req.need.len());
                    self.commit(&mut victims, &plan);
                    return plan;
                };
                let decision = match self.placement.place(group[0], mem, st.host_free == Some(0)) {
                    Decision::Keep if keeps < MAX_KEEPS => {
                        keeps += 1;
                        continue;
                    }
                    Decision::Keep => Decision::Host,
                    d => d,
                };
                for v in group {
                    let host_full = st.host_free == Some(0);
                    let to = match decision {
                        Decision::Host if host_full => match self.host_victim(mem, &need_set, &mut st.demoted) {
                            Some(h) => {
                                plan.moves.push(Move::Demote(h));
                                Tier::Host
                            }
                            None => Tier::Disk,
                        },
                        Decision::Host => Tier::Host,
                        _ => Tier::Disk,
                    };
                    if to == Tier::Host && !host_full {
                        st.host_free = st.host_free.map(|f| f - 1);
                    }
                    plan.moves.push(Move::Evict { chunk: v, to });
                    st.release(mem.chunk(v).tenant);
                }
            }
            plan.moves.push(match mem.chunk(c).place {
                Place::Unbacked => Move::Create(c),
                Place::In(from) => {
                    if from == Tier::Host {
                        st.host_free = st.host_free.map(|f| f + 1);
                    }
                    Move::Populate { chunk: c, from }
                }
                Place::HostMapped => unreachable!("skipped above"),
            });
            st.take(owner);
        }
        plan.covered = req.need.len();
        self.commit(&mut victims, &plan);
        plan
    }

    /// Plans the evictions that bring `tenant` down to `most` resident chunks, its own
    /// chunks in the evictor's order over `forecast` (what the tenant needs latest leaves
    /// first), whole extents at a time. `need` lists chunks that stay.
    pub fn shrink(&mut self, mem: &Memory, tenants: &Tenants, tenant: TenantId, most: u64, need: &[ChunkId], forecast: &Forecast) -> Plan {
        let st = Budget::new(mem, tenants);
        let mut plan = Plan::default();
        let mut held = mem.usage(tenant).chunks[0];
        if held <= most {
            return plan;
        }
        let pinned = |_: ChunkId| false;
        let req = Request { tenant, need, required: need.len(), pinned: &pinned };
        let need_set: HashSet<ChunkId> = need.iter().copied().collect();
        let mut victims = Some(Victims::new(self, mem, &req, &need_set, forecast));
        while held > most {
            let Some(group) = victims.as_mut().and_then(|v| v.next(mem, &st, tenant, true)) else { break };
            for v in group {
                plan.moves.push(Move::Evict { chunk: v, to: Tier::Host });
                held -= 1;
            }
        }
        plan.covered = need.len();
        self.commit(&mut victims, &plan);
        plan
    }

    /// Applies a plan to the chunk table and tells the policies. Fails only on a planner bug.
    pub fn apply(&mut self, mem: &mut Memory, plan: &Plan) -> Result<Moved, crate::CoreError> {
        let mut moved = Moved::default();
        for m in &plan.moves {
            let (c, to) = match *m {
                Move::MapHost(c) => (c, Place::HostMapped),
                Move::UnmapHost(c) => (c, Place::HOST),
                Move::Create(c) => {
                    moved.created += 1;
                    (c, Place::GPU)
                }
                Move::Populate { chunk, from } => {
                    moved.populated += 1;
                    moved.disk_reads += u64::from(from == Tier::Disk);
                    (chunk, Place::GPU)
                }
                Move::Evict { chunk, to } => {
                    let drop = to == Tier::Disk && mem.chunk(chunk).disk_copy;
                    moved.dropped += u64::from(drop);
                    moved.evicted += u64::from(!drop);
                    moved.disk_writes += u64::from(to == Tier::Disk && !drop);
                    (chunk, Place::In(to))
                }
                Move::Demote(c) => {
                    moved.disk_writes += u64::from(!mem.chunk(c).disk_copy);
                    (c, Place::DISK)
                }
            };
            let from = mem.chunk(c).place;
            mem.relocate_to(c, to)?;
            self.placement.on_move(c, from, to);
            if to == Place::GPU {
                self.evictor.on_resident(c);
                self.hooks.activate(c, mem.chunk(c).tenant);
            }
        }
        Ok(moved)
    }

    /// Records an access by a released command (LRU tick, CLOCK bit, GMT's VTD, hooks).
    pub fn access(&mut self, mem: &mut Memory, c: ChunkId, tick: u64, write: bool) {
        mem.touch(c, tick, write);
        self.evictor.on_access(c);
        self.placement.on_access(c, mem);
        self.hooks.access(c, mem.chunk(c).tenant, tick);
    }

    /// The placement's next host victim that is in host, not needed now and not already
    /// demoted by this plan.
    fn host_victim(&mut self, mem: &Memory, need: &HashSet<ChunkId>, demoted: &mut HashSet<ChunkId>) -> Option<ChunkId> {
        for _ in 0..MAX_KEEPS {
            let h = self.placement.host_victim(mem)?;
            if mem.is_live(h) && mem.chunk(h).place == Place::HOST && !need.contains(&h) && demoted.insert(h) {
                return Some(h);
            }
        }
        None
    }

    fn commit(&mut self, victims: &mut Option<Victims>, plan: &Plan) {
        if let Some(vs) = victims.take() {
            let evicted: Vec<ChunkId> = plan.moves.iter().filter_map(|m| if let Move::Evict { chunk, .. } = m { Some(*chunk) } else { None }).collect();
            self.evictor.commit(&vs.order, &evicted);
        }
    }
}

/// Budget state while a plan is being built.
struct Budget<'a> {
    tenants: &'a Tenants,
    gpu_free: Option<u64>,
    host_free: Option<u64>,
    per_tenant: HashMap<TenantId, u64>,
    demoted: HashSet<ChunkId>,
}

impl<'a> Budget<'a> {
    fn new(mem: &Memory, tenants: &'a Tenants) -> Self {
        let per_tenant = tenants.ids().map(|t| (t, mem.usage(t).chunks[0])).collect();
        Budget { tenants, gpu_free: mem.free_chunks(Tier::Gpu), host_free: mem.free_chunks(Tier::Host), per_tenant, demoted: HashSet::new() }
    }

    fn gpu(&self, t: TenantId) -> u64 {
        self.per_tenant.get(&t).copied().unwrap_or(0)
    }

    fn over_high(&self, t: TenantId) -> bool {
        let high = self.tenants.get(t).limits.high.map(|h| h / crate::CHUNK_BYTES);
        high.is_some_and(|h| self.gpu(t) >= h)
    }

    fn protected(&self, t: TenantId) -> bool {
        self.gpu(t) * crate::CHUNK_BYTES <= self.tenants.get(t).limits.low
    }

    fn room_for(&self, t: TenantId) -> bool {
        self.gpu_free != Some(0) && !self.over_high(t)
    }

    fn take(&mut self, t: TenantId) {
        self.gpu_free = self.gpu_free.map(|f| f - 1);
        *self.per_tenant.entry(t).or_default() += 1;
    }

    fn release(&mut self, t: TenantId) {
        self.gpu_free = self.gpu_free.map(|f| f + 1);
        *self.per_tenant.entry(t).or_default() -= 1;
    }
}

/// Eviction candidates in policy order, consumed by two forward-only cursors.
struct Victims {
    order: Vec<ChunkId>,
    own_order: Vec<ChunkId>,
    /// Chunks that may be evicted (resident, not needed, not pinned).
    eligible: HashSet<ChunkId>,
    taken: HashSet<ChunkId>,
    cursor: usize,
    own_cursor: usize,
}

impl Victims {
    fn new(p: &mut Planner, mem: &Memory, req: &Request, need: &HashSet<ChunkId>, forecast: &Forecast) -> Self {
        let mut order: Vec<ChunkId> = mem.chunks().filter(|(c, ch)| ch.place == Place::GPU && !need.contains(c) && !(req.pinned)(*c)).map(|(c, _)| c).collect();
        p.evictor.order(mem, &mut order, forecast, false);
        hooks::evict_order(p.hooks.as_mut(), mem, forecast, req.tenant, &mut order);
        let mut own_order: Vec<ChunkId> = order.iter().copied().filter(|c| mem.chunk(*c).tenant == req.tenant).collect();
        p.evictor.order(mem, &mut own_order, forecast, true);
        hooks::evict_order(p.hooks.as_mut(), mem, forecast, req.tenant, &mut own_order);
        let eligible = order.iter().copied().collect();
        Victims { order, own_order, eligible, taken: HashSet::new(), cursor: 0, own_cursor: 0 }
    }

    /// Next victims for a chunk of `owner`: its own when over its high limit, else anyone
    /// not protected by `gmem.limit.low`. The first chunk is the policy's pick, the rest
    /// the other resident chunks of its extent; an extent with a chunk that may not leave
    /// is skipped whole.
    fn next(&mut self, mem: &Memory, st: &Budget, owner: TenantId, own_only: bool) -> Option<Vec<ChunkId>> {
        let (list, cursor) = if own_only { (&self.own_order, &mut self.own_cursor) } else { (&self.order, &mut self.cursor) };
        while let Some(&c) = list.get(*cursor) {
            *cursor += 1;
            let t = mem.chunk(c).tenant;
            if self.taken.contains(&c) || (own_only && t != owner) || (t != owner && st.protected(t)) {
                continue;
            }
            let (first, len) = mem.extent(c);
            let mut group = vec![c];
            group.extend((first.0..first.0 + len).map(ChunkId).filter(|s| *s != c && mem.chunk(*s).place == Place::GPU));
            if group.iter().any(|s| !self.eligible.contains(s) || self.taken.contains(s)) {
                continue;
            }
            self.taken.extend(group.iter().copied());
            return Some(group);
        }
        None
    }
}
