//! The `gmuxd` system: gmux as the daemon and the shim run it on a GPU. The daemon's own
//! decisions (gmux-core's [`Arbiter`]) grant memory and turns to processes that each
//! keep their memory with gmux-runtime's [`TenantMemory`](gmux_runtime::TenantMemory)
//! and carry out switches with its state machine, over one simulated device: the code
//! that decides on the GPU decides here.
//!
//! What is modelled rather than run: the socket (a report reaches the daemon at once, and
//! a grant the process), the GPU (one command at a time, each for its recorded duration
//! once its populations have landed), and the host threads (a process releases commands
//! up to the shim's in-flight bound and waits at the end of each task).

mod device;
mod process;

use crate::device::SimDevice;
use crate::engine::{Outcome, RunSpec};
use crate::workload::Command;
use device::ProcessDevice;
use gmux_core::arbiter::{Arbiter, Switch};
use gmux_core::AllocId;
use gmux_runtime::{Settings, WorkingSet};
use process::Process;
use std::cell::RefCell;
use std::rc::Rc;

/// The runtime's settings in the simulator, as the shim's defaults.
pub(crate) const SETTINGS: Settings = Settings { history_opt: true, prefetch: 0, extent_chunks: 64, all_events: false, sync_after: false };

/// The working set of `cmd`, whose allocations are `allocs` (by the trace's dense ids), as
/// the shim passes it to the runtime.
pub(crate) fn working_set(cmd: &Command, allocs: &[AllocId]) -> WorkingSet {
    let mut ids: Vec<AllocId> = cmd.ws.iter().map(|a| allocs[a.alloc]).collect();
    ids.sort_unstable();
    ids.dedup();
    WorkingSet::Allocs(ids.into())
}

/// How often a process reports when nothing else happens (the shim's agent).
const REPORT_EVERY_NS: f64 = 20e6;
/// Decisions the daemon makes at one instant before time moves on.
const ROUNDS_AT_ONCE: usize = 8;

/// Runs the tenants of `spec` under the daemon's decisions to the end of its duration.
pub fn run(spec: RunSpec) -> Result<Outcome, String> {
    let dev = Rc::new(RefCell::new(SimDevice::of_processes(spec.model.clone())));
    let mut arbiter = Arbiter::new(spec.caps.gpu, spec.caps.host, spec.policy, Switch::Msched);
    if let Some(t) = spec.tenants.first() {
        arbiter.settings.timeslice = t.timeslice;
    }
    let settings = SETTINGS;
    let mut setups = Vec::new();
    for (i, s) in spec.tenants.into_iter().enumerate() {
        let id = arbiter.join(i as u64 + 1, 1000 + i as u32, &s.name, s.priority);
        let t = arbiter.tenants.get_mut(id);
        t.limits.weight = s.weight.max(1);
        t.limits.timeslice = s.timeslice;
        t.limits.high = s.limit_high;
        t.limits.low = s.limit_low;
        setups.push(s.source);
    }
    let first = arbiter.decide(0);
    let mut procs = Vec::new();
    for (i, source) in setups.into_iter().enumerate() {
        let g = first.iter().find(|(c, _)| *c == i as u64 + 1).map(|(_, g)| *g).ok_or("the daemon granted a tenant nothing at start")?;
        procs.push(Process::new(ProcessDevice::new(dev.clone(), i as u32), source, settings.clone(), g)?);
    }
    let debug = std::env::var_os("GMUX_SIM_DEBUG").is_some();
    let mut sim = Sim { arbiter, debug, procs, now: 0.0, gpu_free: 0.0, until: spec.duration_ns };
    sim.main_loop()?;
    if let Some(budget) = spec.caps.gpu.filter(|b| sim.arbiter.peak_held > *b) {
        return Err(format!("the processes held {} B at once under gmuxd, over the budget of {budget} B", sim.arbiter.peak_held));
    }
    let mut out = Outcome { elapsed_ns: spec.duration_ns, ..Outcome::default() };
    for p in &sim.procs {
        if let Some(why) = &p.failed {
            return Err(format!("a tenant stopped under gmuxd: {why}"));
        }
        let (h2d, d2h) = p.bytes_moved();
        out.bytes_h2d += h2d;
        out.bytes_d2h += d2h;
    }
    if sim.debug {
        for p in &sim.procs {
            eprintln!("process: {:?}", p.stats());
        }
    }
    out.tenants = sim.procs.into_iter().map(|p| p.out).collect();
    Ok(out)
}

struct Sim {
    arbiter: Arbiter,
    /// `GMUX_SIM_DEBUG`: print the daemon's switches and slice starts.
    debug: bool,
    procs: Vec<Process>,
    now: f64,
    gpu_free: f64,
    until: f64,
}

impl Sim {
    fn main_loop(&mut self) -> Result<(), String> {
        while self.now < self.until {
            for _ in 0..ROUNDS_AT_ONCE {
                if !self.round()? {
                    break;
                }
            }
            let slice_end = self.arbiter.slice_end().map(|t| t as f64).filter(|t| *t > self.now);
            let next = self.procs.iter().filter_map(|p| p.next_event(self.now)).chain(slice_end).fold(self.now + REPORT_EVERY_NS, f64::min);
            self.now = next;
        }
        Ok(())
    }

    /// One round at the current instant: commands retire, agents step, commands are
    /// released, every process reports, and the daemon decides. Returns whether any grant
    /// changed.
    fn round(&mut self) -> Result<bool, String> {
        let now = self.now;
        for p in &mut self.procs {
            p.retire(now, self.until);
            p.agent(now)?;
            p.issue(now, &mut self.gpu_free)?;
        }
        for (i, p) in self.procs.iter_mut().enumerate() {
            self.arbiter.report(i as u64 + 1, p.report());
        }
        let grants = self.arbiter.decide(now as u64);
        if self.debug {
            for e in self.arbiter.events.drain(..) {
                eprintln!("{:.3} ms: {e}", now / 1e6);
            }
        } else {
            self.arbiter.events.clear();
        }
        self.arbiter.notices.clear();
        let changed = !grants.is_empty();
        for (conn, g) in grants {
            if let Some(p) = self.procs.get_mut(conn as usize - 1) {
                p.take(g);
            }
        }
        Ok(changed)
    }
}
