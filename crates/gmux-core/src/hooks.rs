//! Policy hook points (gpu_ext): a program advises, the core keeps final authority.
//! The planner calls the memory hooks; what one returns is validated here: a hook may
//! reorder eviction candidates but never drop or invent one, and prefetch advice is
//! followed only where it evicts nothing needed sooner. The arbiter calls the scheduling
//! hooks, and keeps what they answer within the bounds a user could set.

use crate::evict::Forecast;
use crate::memory::{ChunkId, Memory};
use crate::tenant::TenantId;
use crate::Nanos;

/// What an eviction hook is told of a candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// The chunk.
    pub chunk: ChunkId,
    /// Its owner.
    pub tenant: TenantId,
    /// The access stamp of its last use (the planner's clock).
    pub last_use: u64,
    /// Its next use in the timeline's forecast, or [`Forecast::NEVER`].
    pub next_use: u64,
    /// Chunks its tenant holds in GPU memory.
    pub resident: u64,
}

/// Memory hooks: activate, access, evict_prepare, prefetch.
pub trait MemoryHooks {
    /// A chunk became resident for `tenant`.
    fn activate(&mut self, _chunk: ChunkId, _tenant: TenantId) {}
    /// A command touched `chunk` of `tenant` at access stamp `stamp`.
    fn access(&mut self, _chunk: ChunkId, _tenant: TenantId, _stamp: u64) {}
    /// Whether [`MemoryHooks::access`] does anything: a process's runtime, which keeps
    /// recency per allocation, calls it for each chunk of a command's allocations only
    /// for hooks that do.
    fn tracks_access(&self) -> bool {
        false
    }
    /// Whether [`MemoryHooks::evict_prepare`] reorders: the planner builds candidate
    /// lists only for hooks that do.
    fn reorders(&self) -> bool {
        false
    }
    /// May reorder the candidates of a plan for `requester`, first evicted first.
    fn evict_prepare(&mut self, _requester: TenantId, _candidates: &mut [Candidate]) {}
    /// Chunks of `tenant` worth populating after its predicted working set; the planner
    /// brings them in only where that evicts nothing needed sooner.
    fn prefetch(&mut self, _tenant: TenantId) -> Vec<ChunkId> {
        Vec::new()
    }
}

/// The hooks that do nothing: the built-in policies alone decide.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoHooks;
impl MemoryHooks for NoHooks {}

/// What `task_init` is told of a process joining a tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Joining {
    /// The tenant (new if it had no process).
    pub tenant: TenantId,
    /// Whether the tenant had no process before this one.
    pub new_tenant: bool,
    /// The user the process runs as.
    pub uid: u32,
    /// The priority it asked for.
    pub priority: i32,
    /// The tenant's `compute.timeslice`.
    pub timeslice: Nanos,
    /// Processes of all tenants before this one.
    pub processes: u32,
    /// GPU memory all processes hold.
    pub held: u64,
    /// The budget (`u64::MAX`: none).
    pub budget: u64,
    /// The tenant's name, its first [`NAME_BYTES`] bytes, zero-padded.
    pub name: [u8; NAME_BYTES],
    /// The name's whole length in bytes: over [`NAME_BYTES`], `name` holds its start.
    pub name_len: u32,
}

/// How much of a tenant's name scheduling programs see (Linux's `comm` is as short).
pub const NAME_BYTES: usize = 16;

/// The first [`NAME_BYTES`] bytes of `name`, zero-padded.
pub fn short_name(name: &str) -> [u8; NAME_BYTES] {
    let mut out = [0; NAME_BYTES];
    let n = name.len().min(NAME_BYTES);
    out[..n].copy_from_slice(&name.as_bytes()[..n]);
    out
}

/// What `task_init` answers: the process joins or is refused, and the tenant's priority
/// and slice (`None`: as asked). The arbiter keeps the priority within the daemon's
/// range and the slice within `compute.timeslice`'s.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Admission {
    /// Refuse the process.
    pub refuse: bool,
    /// The tenant's priority.
    pub priority: Option<i32>,
    /// The tenant's `compute.timeslice`.
    pub timeslice: Option<Nanos>,
}

/// What `admission` is told of a job that waits to run: one an application marked
/// (`gmux.job`), begun and not yet admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobAsk {
    /// The tenant of the process that marked it.
    pub tenant: TenantId,
    /// The process.
    pub pid: u32,
    /// The job's number in that process.
    pub job: u64,
    /// Its kind's name, the first [`NAME_BYTES`] bytes, zero-padded.
    pub kind: [u8; NAME_BYTES],
    /// Its kind's estimated length (0: none yet).
    pub estimate: Nanos,
    /// How long it has waited since it began.
    pub waited: Nanos,
    /// Jobs running in every process that marks jobs, this one included.
    pub running: u32,
    /// Of those, jobs admitted.
    pub admitted: u32,
    /// The shortest estimated length among the admitted running jobs (`u64::MAX`: none
    /// runs; a job of no estimate counts as [`crate::sched::dispatch::UNKNOWN_NS`]).
    pub shortest: Nanos,
}

/// Scheduling hooks: task_init, task_destroy, timeslice, admission.
pub trait SchedHooks: Send {
    /// The time of the decision being made (before the others at each decision).
    fn clock(&mut self, _now: Nanos) {}
    /// A process is joining a tenant.
    fn task_init(&mut self, _j: &Joining) -> Admission {
        Admission::default()
    }
    /// A tenant's last process left.
    fn task_destroy(&mut self, _tenant: TenantId) {}
    /// The slice of `tenant`'s next turn: `slice` as the arbiter made it (stretched by
    /// the switch cost `switch_cost` where known); the answer is kept between 1 µs and
    /// the longer of `slice` and the daemon's `--max-timeslice`.
    fn timeslice(&mut self, _tenant: TenantId, slice: Nanos, _switch_cost: Option<Nanos>) -> Nanos {
        slice
    }
    /// Whether `admission` decides anything: the dispatcher asks only then.
    fn admits(&self) -> bool {
        false
    }
    /// Whether the job `job` may run now (`false`: it waits, and is asked again at the
    /// dispatcher's next decision). An admitted job is not asked again. gmux keeps the
    /// final say ([`crate::sched::dispatch::admit`]).
    fn admission(&mut self, _job: &JobAsk) -> bool {
        true
    }
}

impl SchedHooks for NoHooks {}

/// Runs `evict_prepare` on `order` (the built-in policy's) for a plan of `requester`, and
/// keeps the hook's order only if it is a permutation of it. Returns whether the hook's
/// order was taken.
pub fn evict_order(hooks: &mut dyn MemoryHooks, mem: &Memory, forecast: &Forecast, requester: TenantId, order: &mut [ChunkId]) -> bool {
    if !hooks.reorders() {
        return false;
    }
    let mut cands: Vec<Candidate> = order
        .iter()
        .map(|&c| {
            let ch = mem.chunk(c);
            Candidate { chunk: c, tenant: ch.tenant, last_use: ch.last_use, next_use: forecast.next_use(c), resident: mem.usage(ch.tenant).chunks[0] }
        })
        .collect();
    hooks.evict_prepare(requester, &mut cands);
    let mut a: Vec<ChunkId> = order.to_vec();
    let mut b: Vec<ChunkId> = cands.iter().map(|c| c.chunk).collect();
    a.sort_unstable();
    b.sort_unstable();
    if a != b {
        return false;
    }
    for (o, c) in order.iter_mut().zip(&cands) {
        *o = c.chunk;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Capacities;
    use crate::CHUNK_BYTES;

    struct Reverse;
    impl MemoryHooks for Reverse {
        fn reorders(&self) -> bool {
            true
        }
        fn evict_prepare(&mut self, _: TenantId, c: &mut [Candidate]) {
            c.reverse();
        }
    }
    struct Forges;
    impl MemoryHooks for Forges {
        fn reorders(&self) -> bool {
            true
        }
        fn evict_prepare(&mut self, _: TenantId, c: &mut [Candidate]) {
            c[0].chunk = c[1].chunk;
        }
    }

    #[test]
    fn reorder_is_kept_a_forged_candidate_is_refused() {
        let mut mem = Memory::new(Capacities::default());
        mem.allocate(TenantId(0), 3 * CHUNK_BYTES).expect("allocated");
        let f = Forecast::default();
        let mut c = vec![ChunkId(0), ChunkId(1), ChunkId(2)];
        assert!(evict_order(&mut Reverse, &mem, &f, TenantId(0), &mut c));
        assert_eq!(c, vec![ChunkId(2), ChunkId(1), ChunkId(0)]);
        assert!(!evict_order(&mut Forges, &mem, &f, TenantId(0), &mut c));
        assert_eq!(c, vec![ChunkId(2), ChunkId(1), ChunkId(0)]);
        assert!(!evict_order(&mut NoHooks, &mem, &f, TenantId(0), &mut c), "no hook, no call");
    }
}
