//! The discrete-event engine: tenants' command streams on one simulated GPU.
//!
//! The GPU runs one command at a time. Time-sliced systems follow gmux-core's
//! scheduler timeline; the gmux systems plan memory with gmux-core's planner at every
//! switch and execute the plan on the mover's lanes (full duplex, early start). The
//! demand-paging models fault chunks in on first use instead.

use crate::device::SimDevice;
use crate::model::DeviceModel;
use crate::workload::{Command, Source};
use gmux_core::evict::{Eviction, Evictor, Forecast};
use gmux_core::memory::{Capacities, Tier};
use gmux_core::mover::Mover;
use gmux_core::placement::PlacementKind;
use gmux_core::planner::{Move, Moved, Planner, Request};
use gmux_core::sched::{Policy, RoundRobin, Scheduler, TenantView};
use gmux_core::{AllocId, ChunkId, Memory, TenantId, Tenants, Timeline, CHUNK_BYTES};
use std::collections::VecDeque;

/// The systems compared, by their fixed names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    /// No oversubscription: unlimited GPU memory. The normalizer.
    InHbm,
    /// Demand paging with native fine-grained time slicing (modelled).
    Um,
    /// Demand paging under the scenario's software time slicing (modelled).
    XschedUm,
    /// gmux with allocation-granular working-set prediction.
    GmuxAlloc,
    /// gmux with exact working sets.
    GmuxExact,
}

impl System {
    /// The fixed name.
    pub fn name(self) -> &'static str {
        match self {
            System::InHbm => "in-hbm",
            System::Um => "um",
            System::XschedUm => "xsched-um",
            System::GmuxAlloc => "gmux-alloc",
            System::GmuxExact => "gmux-exact",
        }
    }

    fn demand_paged(self) -> bool {
        matches!(self, System::Um | System::XschedUm)
    }
}

/// One tenant of a run.
pub struct TenantSetup {
    /// Name.
    pub name: String,
    /// Its commands.
    pub source: Box<dyn Source>,
    /// Strict-priority class.
    pub priority: i32,
    /// Weighted-share weight.
    pub weight: u32,
    /// `compute.timeslice`, ns.
    pub timeslice: u64,
    /// `gmem.limit.high`, bytes.
    pub limit_high: Option<u64>,
    /// `gmem.limit.low`, bytes.
    pub limit_low: u64,
}

/// Everything one run needs.
pub struct RunSpec<'a> {
    /// Which system.
    pub system: System,
    /// Device constants.
    pub model: &'a DeviceModel,
    /// Tier capacities (GPU is ignored for in-hbm).
    pub caps: Capacities,
    /// Time-slice policy.
    pub policy: Policy,
    /// Eviction order for the gmux systems.
    pub eviction: Eviction,
    /// Tier placement of victims.
    pub placement: PlacementKind,
    /// Simulated time to cover, ns.
    pub duration_ns: f64,
    /// Tenants.
    pub tenants: Vec<TenantSetup>,
    /// Keep the executed access sequence (for the `ideal` bound).
    pub record_accesses: bool,
    /// Seed for randomized policies.
    pub seed: u64,
}

/// What a tenant achieved.
#[derive(Debug, Clone, Default)]
pub struct TenantOutcome {
    /// Tasks (or requests) finished.
    pub tasks: u64,
    /// Request latencies, ns (tenants with arrivals only).
    pub latencies_ns: Vec<f64>,
    /// Whether its commands arrive as requests.
    pub latency_critical: bool,
}

/// What a run measured.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Per tenant, in setup order.
    pub tenants: Vec<TenantOutcome>,
    /// Simulated time covered, ns.
    pub elapsed_ns: f64,
    /// GPU busy time running commands, ns.
    pub compute_ns: f64,
    /// Bytes host → device.
    pub bytes_h2d: u64,
    /// Bytes device → host.
    pub bytes_d2h: u64,
    /// Bytes read from disk.
    pub bytes_disk_read: u64,
    /// Bytes written to disk.
    pub bytes_disk_write: u64,
    /// Demand page faults.
    pub faults: u64,
    /// Commands released with a touched chunk not resident.
    pub violations: u64,
    /// Executed commands' chunks in order, when recorded.
    pub accesses: crate::ideal::Commands,
}

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
        t.weight = s.weight.max(1);
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

impl Engine<'_> {
    fn main_loop(&mut self) -> Result<(), String> {
        let n = self.runs.len();
        while self.now < self.spec.duration_ns {
            for t in 0..n {
                self.ensure(t, 1);
            }
            let views = self.views(self.now);
            let timeline = self.sched.timeline(&views, 2 * n);
            let Some(slot) = timeline.head() else {
                let next = self.runs.iter().filter_map(|r| r.buf.front()).filter_map(|q| q.cmd.arrival_ns).fold(f64::INFINITY, f64::min);
                if !next.is_finite() {
                    break;
                }
                self.now = next.max(self.now);
                continue;
            };
            self.run_slot(slot.tenant, slot.slice, &timeline)?;
        }
        Ok(())
    }

    fn views(&self, at: f64) -> Vec<TenantView> {
        self.tenants
            .ids()
            .map(|id| {
                let t = self.tenants.get(id);
                let native = self.spec.system == System::Um;
                TenantView {
                    id,
                    ready: self.runs[id.0 as usize].buf.front().is_some_and(|q| q.cmd.arrival_ns.is_none_or(|a| a <= at)),
                    frozen: t.limits.frozen,
                    priority: if native { 0 } else { t.priority },
                    weight: t.weight,
                    timeslice: if native { (self.spec.model.native_timeslice_us * 1e3) as u64 } else { t.limits.timeslice },
                }
            })
            .collect()
    }

    /// Buffers at least `k` commands of tenant `t` (fewer if its stream ends).
    fn ensure(&mut self, t: usize, k: usize) {
        let exact_prediction = self.spec.system != System::GmuxAlloc;
        while self.runs[t].buf.len() < k && !self.runs[t].finished {
            let Some(cmd) = self.runs[t].source.next() else {
                self.runs[t].finished = true;
                break;
            };
            let mut exact = Vec::new();
            let mut predicted = Vec::new();
            for a in &cmd.ws {
                let al = self.mem.alloc(self.runs[t].allocs[a.alloc]).expect("live allocation");
                exact.extend(al.chunks_in(a.offset, a.len).map(|c| (c, a.write)));
                if exact_prediction {
                    predicted.extend(al.chunks_in(a.offset, a.len));
                } else {
                    predicted.extend(al.chunks());
                }
            }
            dedup_keep_order(&mut predicted);
            self.runs[t].buf.push_back(Queued { cmd, exact, predicted });
        }
    }

    /// The global order of predicted accesses over the timeline, and where each command
    /// of the head slot starts in it (one entry past the last).
    fn forecast(&mut self, timeline: &Timeline) -> (Vec<ChunkId>, Vec<u64>) {
        let mut cursor = vec![0usize; self.runs.len()];
        let mut acc = Vec::new();
        let mut head = vec![0u64];
        for (j, slot) in timeline.slots.iter().enumerate() {
            let t = slot.tenant.0 as usize;
            let mut left = slot.slice as f64;
            let start = cursor[t];
            while left > 0.0 && cursor[t] - start < MAX_SLOT_CMDS {
                self.ensure(t, cursor[t] + 1);
                let Some(q) = self.runs[t].buf.get(cursor[t]) else { break };
                if q.cmd.arrival_ns.is_some_and(|a| a > self.now) {
                    break;
                }
                acc.extend_from_slice(&q.predicted);
                left -= q.cmd.duration_ns;
                cursor[t] += 1;
                if j == 0 {
                    head.push(acc.len() as u64);
                }
            }
        }
        (acc, head)
    }

    fn run_slot(&mut self, tenant: TenantId, slice: u64, timeline: &Timeline) -> Result<(), String> {
        let ti = tenant.0 as usize;
        let slot_start = self.now;
        let mut t = self.now;
        if self.last != Some(tenant) {
            t += self.spec.model.switch_us * 1e3;
            self.tenants.get_mut(tenant).stat.switches += 1;
            self.last = Some(tenant);
        }
        let gmux = !self.spec.system.demand_paged();
        let (mut forecast, head) = if gmux {
            let (acc, head) = self.forecast(timeline);
            let forecast = Forecast::from_accesses(acc);
            let mut need: Vec<ChunkId> = self.runs[ti].buf.iter().take(head.len() - 1).flat_map(|q| q.predicted.iter().copied()).collect();
            dedup_keep_order(&mut need);
            let first = self.runs[ti].buf.front().map_or(0, |q| q.predicted.len()).min(need.len());
            self.migrate(tenant, &need, first, &forecast, t)?;
            (forecast, head)
        } else {
            (Forecast::default(), Vec::new())
        };
        // gmux counts a slice in GPU time: waiting for a migration does not use it up.
        // The demand-paging models count wall time, as hardware time slicing does.
        let slot_end = t + slice as f64;
        let mut ran = 0.0;
        let mut executed = 0;
        while if gmux { ran < slice as f64 } else { t < slot_end } {
            self.ensure(ti, 1);
            let Some(q) = self.runs[ti].buf.front() else { break };
            if q.cmd.arrival_ns.is_some_and(|a| a > t) {
                break;
            }
            if executed > 0 && self.preempted(tenant, t) {
                break;
            }
            let start = if gmux {
                forecast.advance_to(head.get(executed).or(head.last()).copied().unwrap_or(0));
                let need = q.predicted.clone();
                if need.iter().any(|c| !self.mem.is_resident(*c)) && self.migrate(tenant, &need, need.len(), &forecast, t)? < need.len() {
                    return Err(self.stuck(tenant, &need));
                }
                need.iter().map(|c| self.ready_at[c.0 as usize]).fold(t, f64::max)
            } else {
                let chunks: Vec<ChunkId> = q.exact.iter().map(|(c, _)| *c).collect();
                t + self.fault_in(tenant, &chunks)?
            };
            if executed > 0 && start > t && self.preempted(tenant, start) {
                let arrival = self.first_arrival_above(tenant, start);
                t = arrival.max(t);
                break;
            }
            let q = self.runs[ti].buf.pop_front().expect("front exists");
            ran += q.cmd.duration_ns;
            t = self.execute(ti, q, start);
            executed += 1;
        }
        self.sched.charge(tenant, (t - slot_start).max(1.0) as u64);
        self.now = t.max(slot_start + 1.0);
        Ok(())
    }
}

impl Engine<'_> {
    /// Earliest arrival, at or before `by`, of a ready tenant with a higher priority than `cur`.
    fn first_arrival_above(&self, cur: TenantId, by: f64) -> f64 {
        let p = self.tenants.get(cur).priority;
        self.tenants
            .ids()
            .filter(|id| self.tenants.get(*id).priority > p)
            .filter_map(|id| self.runs[id.0 as usize].buf.front().map(|q| q.cmd.arrival_ns.unwrap_or(0.0)))
            .filter(|a| *a <= by)
            .fold(by, f64::min)
    }

    fn preempted(&self, cur: TenantId, at: f64) -> bool {
        if self.spec.policy != Policy::Priority || self.spec.system == System::Um {
            return false;
        }
        let p = self.tenants.get(cur).priority;
        self.views(at).iter().any(|v| v.runnable() && v.priority > p)
    }
}

impl Engine<'_> {
    /// Runs one command from `start`: checks the residency invariant, records accesses.
    fn execute(&mut self, ti: usize, q: Queued, start: f64) -> f64 {
        for &(c, write) in &q.exact {
            if !self.mem.is_resident(c) {
                self.out.violations += 1;
            }
            self.tick += 1;
            self.planner.access(&mut self.mem, c, self.tick, write);
        }
        if self.spec.record_accesses {
            self.out.accesses.push(q.exact.iter().map(|(c, _)| *c));
        }
        let end = start + q.cmd.duration_ns;
        self.out.compute_ns += q.cmd.duration_ns;
        let run = &mut self.runs[ti];
        let stat = &mut self.tenants.get_mut(TenantId(ti as u32)).stat;
        stat.submitted += 1;
        stat.finished += 1;
        if let Some(a) = q.cmd.arrival_ns {
            run.open_request = Some(a);
            run.out.latency_critical = true;
        }
        if q.cmd.task_end && end <= self.spec.duration_ns {
            run.out.tasks += 1;
            if let Some(a) = run.open_request.take() {
                run.out.latencies_ns.push(end - a);
            }
        }
        end
    }

    /// Plans and starts the migration that makes `need` resident, as far as the budgets
    /// allow; returns how much of `need` is covered (gmux systems).
    fn migrate(&mut self, tenant: TenantId, need: &[ChunkId], required: usize, forecast: &Forecast, at: f64) -> Result<usize, String> {
        let req = Request { tenant, need, required, pinned: &|_| false };
        let plan = self.planner.plan(&self.mem, &self.tenants, &req, forecast);
        self.dev.begin(at);
        let ready = self.mover.issue(&plan, &self.mem, &mut self.dev).map_err(|e| format!("mover bug: {e}"))?;
        self.dev.run_batch();
        let moved = self.planner.apply(&mut self.mem, &plan).map_err(|e| format!("planner bug: {e}"))?;
        self.account(tenant, moved);
        self.grow_ready();
        for (c, ev) in ready {
            self.ready_at[c.0 as usize] = self.dev.time(ev);
        }
        Ok(plan.covered)
    }

    /// Demand paging: faults the command's chunks in, evicting LRU; returns the stall, ns.
    fn fault_in(&mut self, tenant: TenantId, chunks: &[ChunkId]) -> Result<f64, String> {
        let plan =
            self.planner.plan(&self.mem, &self.tenants, &Request { tenant, need: chunks, required: chunks.len(), pinned: &|_| false }, &Forecast::default());
        if plan.covered < chunks.len() {
            return Err(self.stuck(tenant, chunks));
        }
        let m = self.spec.model;
        let faults_per_chunk = CHUNK_BYTES.div_ceil(m.um_fault_bytes);
        let mut stall = 0.0;
        for mv in &plan.moves {
            stall += match *mv {
                Move::Create(_) => (m.create_us + m.map_us + m.set_access_us) * 1e3,
                Move::Populate { from, .. } => {
                    self.out.faults += faults_per_chunk;
                    let disk = if from == Tier::Disk { DeviceModel::ns(CHUNK_BYTES, m.disk_read_gbps) } else { 0.0 };
                    disk + faults_per_chunk as f64 * m.um_fault_us * 1e3 + DeviceModel::ns(CHUNK_BYTES, m.h2d_gbps)
                }
                Move::Evict { chunk, to } => {
                    let write = to == Tier::Disk && !self.mem.chunk(chunk).disk_copy;
                    DeviceModel::ns(CHUNK_BYTES, m.d2h_gbps) + if write { DeviceModel::ns(CHUNK_BYTES, m.disk_write_gbps) } else { 0.0 }
                }
                Move::Demote(c) => {
                    if self.mem.chunk(c).disk_copy {
                        0.0
                    } else {
                        DeviceModel::ns(CHUNK_BYTES, m.disk_write_gbps)
                    }
                }
            };
        }
        let moved = self.planner.apply(&mut self.mem, &plan).map_err(|e| format!("planner bug: {e}"))?;
        self.account(tenant, moved);
        self.grow_ready();
        Ok(stall)
    }

    fn stuck(&self, tenant: TenantId, need: &[ChunkId]) -> String {
        let t = self.tenants.get(tenant);
        format!(
            "tenant {}: one command needs {} MiB but its gmem.limit.high and the GPU budget leave no room; raise gmem.limit.high or the GPU budget",
            t.name,
            (need.iter().collect::<std::collections::HashSet<_>>().len() as u64 * CHUNK_BYTES) >> 20
        )
    }

    /// Adds what an applied plan moved to the run's and the tenant's counters.
    fn account(&mut self, tenant: TenantId, moved: Moved) {
        let (h2d, d2h) = (moved.populated * CHUNK_BYTES, moved.evicted * CHUNK_BYTES);
        self.out.bytes_h2d += h2d;
        self.out.bytes_d2h += d2h;
        self.out.bytes_disk_read += moved.disk_reads * CHUNK_BYTES;
        self.out.bytes_disk_write += moved.disk_writes * CHUNK_BYTES;
        let stat = &mut self.tenants.get_mut(tenant).stat;
        stat.bytes_h2d += h2d;
        stat.bytes_d2h += d2h;
    }

    fn grow_ready(&mut self) {
        if self.ready_at.len() < self.mem.id_bound() {
            self.ready_at.resize(self.mem.id_bound(), 0.0);
        }
    }
}

fn dedup_keep_order(v: &mut Vec<ChunkId>) {
    let mut seen = std::collections::HashSet::with_capacity(v.len());
    v.retain(|c| seen.insert(*c));
}
