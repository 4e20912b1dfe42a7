//! The discrete-event engine: tenants' command streams on one simulated GPU.
//!
//! The GPU runs one command at a time. Time-sliced systems follow gmux-core's
//! scheduler timeline; the gmux systems plan memory with gmux-core's planner at every
//! switch and execute the plan on the mover's lanes (full duplex, early start). The
//! demand-paging models fault chunks in on first use instead.

mod execute;
mod outcome;
mod slot;
mod spec;

pub use outcome::{Outcome, TenantOutcome};
pub use spec::{RunSpec, System, TenantSetup};

use crate::device::SimDevice;
use crate::workload::{Command, Source};
use gmux_core::evict::{Eviction, Evictor};
use gmux_core::mover::Mover;
use gmux_core::planner::Planner;
use gmux_core::sched::{RoundRobin, Scheduler};
use gmux_core::{AllocId, ChunkId, Memory, TenantId, Tenants};
use std::collections::VecDeque;

/// A command with its chunks resolved.
struct Queued {
    cmd: Command,
    exact: Vec<(ChunkId, bool)>,
    predicted: Vec<ChunkId>,
}

struct TenantRun {
    source: Box<dyn Source>,
    allocs: Vec<AllocId>,
    buf: VecDeque<Queued>,
    finished: bool,
    open_request: Option<f64>,
    out: TenantOutcome,
}

/// Longest forecast of one slot, in commands.
const MAX_SLOT_CMDS: usize = 4096;

struct Engine<'a> {
    spec: &'a RunSpec<'a>,
    mem: Memory,
    tenants: Tenants,
    runs: Vec<TenantRun>,
    planner: Planner,
    sched: Box<dyn Scheduler>,
    mover: Mover,
    dev: SimDevice,
    ready_at: Vec<f64>,
    now: f64,
    tick: u64,
    last: Option<TenantId>,
    out: Outcome,
}

/// Runs one configuration to its end.
pub fn run(mut spec: RunSpec) -> Result<Outcome, String> {
    if spec.system == System::Gmuxd {
        return crate::gmuxd::run(spec);
    }
    let setups = std::mem::take(&mut spec.tenants);
    let mut caps = spec.caps;
    if spec.system == System::InHbm {
        caps.gpu = None;
    }
    let mut mem = Memory::new(caps);
    let mut tenants = Tenants::default();
    let mut runs = Vec::new();
    for s in setups {
        let id = tenants.add(&s.name).map_err(|e| e.to_string())?;
        let t = tenants.get_mut(id);
        t.priority = s.priority;
        t.limits.weight = s.weight.max(1);
        t.limits.timeslice = s.timeslice;
        t.limits.high = s.limit_high;
        t.limits.low = s.limit_low;
        let mut allocs = Vec::new();
        for a in s.source.allocs() {
            let r = if a.on_disk { mem.allocate_on_disk(id, a.bytes) } else { mem.allocate(id, a.bytes) };
            allocs.push(r.map_err(|e| format!("tenant {}: {e}", s.name))?);
        }
        runs.push(TenantRun { source: s.source, allocs, buf: VecDeque::new(), finished: false, open_request: None, out: TenantOutcome::default() });
    }
    let eviction = if spec.system.demand_paged() { Eviction::Lru } else { spec.eviction };
    let placement = spec.placement.build(spec.seed);
    let sched: Box<dyn Scheduler> = if spec.system == System::Um { Box::new(RoundRobin::default()) } else { spec.policy.build() };
    let mut e = Engine {
        spec: &spec,
        mem,
        tenants,
        runs,
        planner: Planner::new(Evictor::new(eviction), placement),
        sched,
        mover: Mover::default(),
        dev: SimDevice::new(spec.model.clone()),
        ready_at: Vec::new(),
        now: 0.0,
        tick: 0,
        last: None,
        out: Outcome::default(),
    };
    e.main_loop()?;
    let mut out = std::mem::take(&mut e.out);
    out.elapsed_ns = e.now.min(spec.duration_ns).max(1.0);
    out.tenants = e.runs.into_iter().map(|r| r.out).collect();
    Ok(out)
}
