//! The daemon's state, free of sockets and clocks: tenants, their processes and what
//! they reported (as far as it is believed, `trust.rs`), and what a daemon before this one
//! left (`recovery.rs`). [`Arbiter::decide`] (`decide.rs`) is called on every event (a
//! report, a process joining or dying, a knob set, a slice ending) and returns the grants
//! that changed. What a daemon after it must know goes into [`Arbiter::journal`].

use crate::hbm::{all_fit, divide, Claim};
use crate::knobs::GroupStat;
use crate::pressure::{Pressure, StallMark};
use crate::protocol::{Fill, Grant, ShimReport};
use crate::sched::{Policy, Scheduler, TenantView};
use crate::size::format_size;
use crate::{Nanos, TenantId, Tenants, CHUNK_BYTES};
use event::Notice;
use record::{Entry, Settings};
use slot::Slot;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// How a time-sliced switch moves memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Switch {
    /// MSched: the next tenant starts at once and brings in its forecast working set
    /// while the others evict in the background, in OPT order across tenants.
    Msched,
    /// Baseline (TGS / PipeSwitch style): every other tenant evicts all it holds, then
    /// the next one brings in all of its memory before it runs.
    Whole,
}

impl Switch {
    /// Its name, as `--switch` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Switch::Msched => "msched",
            Switch::Whole => "whole",
        }
    }

    /// Parses `msched` or `whole`.
    pub fn parse(s: &str) -> Result<Switch, String> {
        match s {
            "msched" => Ok(Switch::Msched),
            "whole" => Ok(Switch::Whole),
            _ => Err(format!("unknown switch {s:?}: use msched or whole")),
        }
    }
}

/// Why a process does not answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Silence {
    /// Its grants wait for it to read them.
    NotReading,
    /// It is stopped (SIGSTOP, a debugger).
    Stopped,
}

/// Unfinished commands per stream allowed to a tenant gated by a higher priority, so
/// that its in-flight work drains fast when the higher class wakes.
pub const GATED_INFLIGHT: u32 = 2;

fn round_up(bytes: u64) -> u64 {
    bytes.div_ceil(CHUNK_BYTES).saturating_mul(CHUNK_BYTES)
}

/// One registered process.
#[derive(Debug)]
pub struct Proc {
    /// Its pid (from `SO_PEERCRED`).
    pub pid: u32,
    /// Its start time (0: unknown), which tells it from a later process of the same pid.
    pub start: u64,
    /// Its tenant.
    pub tenant: TenantId,
    /// Its last report, as far as it was believable ([`trust::believable`]).
    pub report: ShimReport,
    /// One of its reports was not believed (and logged).
    pub doubted: bool,
    /// It has not read its grants for a while (stuck): it gets no turns.
    pub unresponsive: bool,
    /// It is stopped (SIGSTOP, a debugger): it gets no turns.
    pub stopped: bool,
    /// The last grant sent to it.
    pub sent: Option<Grant>,
    /// Largest cap among the grants sent since the newest one it has applied (its own
    /// included): what it may be holding before its next report.
    pub exposure: u64,
    /// Sequence number of its first grant (after the last one of a previous daemon).
    pub first_seq: u64,
    /// What it had waited for memory at the last decision ([`crate::pressure`]).
    pub stall: StallMark,
}

impl Proc {
    /// What it may be holding: what it reported, or up to [`Proc::exposure`] if more.
    pub fn may_hold(&self) -> u64 {
        self.report.held.max(self.exposure)
    }

    /// What it may be holding of its own allocations: as [`Proc::may_hold`], but never
    /// more than it reported allocated. A grant larger than its memory is not memory
    /// it holds, so a smaller one later takes nothing from it.
    pub fn may_occupy(&self) -> u64 {
        self.report.held.max(self.exposure.min(self.report.allocated))
    }
}

/// Counters of a tenant's processes that have exited.
#[derive(Debug, Default, Clone, Copy)]
struct Past {
    commands: u64,
    bytes_h2d: u64,
    bytes_d2h: u64,
    launches_held_ns: u64,
}

impl Past {
    /// Adds what a process's counters grew by from `before` to `now`.
    fn add(&mut self, now: &ShimReport, before: &ShimReport) {
        self.commands = self.commands.saturating_add(now.commands.saturating_sub(before.commands));
        self.bytes_h2d = self.bytes_h2d.saturating_add(now.bytes_h2d.saturating_sub(before.bytes_h2d));
        self.bytes_d2h = self.bytes_d2h.saturating_add(now.bytes_d2h.saturating_sub(before.bytes_d2h));
        self.launches_held_ns = self.launches_held_ns.saturating_add(now.launches_held_ns.saturating_sub(before.launches_held_ns));
    }
}

/// The daemon's state.
pub struct Arbiter {
    /// The budget, the policy and the rest of the daemon's settings.
    pub settings: Settings,
    /// Tenants and their knobs.
    pub tenants: Tenants,
    sched: Box<dyn Scheduler>,
    procs: BTreeMap<u64, Proc>,
    /// The connections of each tenant with a process.
    members: BTreeMap<TenantId, BTreeSet<u64>>,
    /// Processes that died while their connection is still open: their tenant and last
    /// counters, so that reports still in the connection when the process died count.
    departed: BTreeMap<u64, (TenantId, ShimReport)>,
    /// Switches and slice starts since the server last took them (`--verbose`).
    pub events: Vec<String>,
    /// Switches and slot ends since the server last took them, for those who watch
    /// ([`event`]).
    pub notices: Vec<Notice>,
    /// Each tenant's `gmem.events`.
    mem_events: HashMap<TenantId, mem_events::Counter>,
    /// Each tenant's memory pressure, and when it was last brought up to date.
    pressure: HashMap<TenantId, Pressure>,
    pressure_at: Nanos,
    past: HashMap<TenantId, Past>,
    running: Option<Slot>,
    /// Each tenant's switch cost, averaged over its slots ([`Slot::switch_cost`]).
    switch_costs: HashMap<TenantId, Nanos>,
    /// Time of the decision being made.
    now: Nanos,
    /// Most GPU memory all processes together reported holding at once.
    pub peak_held: u64,
    /// Processes of a previous daemon, by pid, that may hold memory under its grants and
    /// have not registered again: their start time and tenant ([`Arbiter::restore`]).
    awaited: BTreeMap<u32, (u64, String)>,
    /// Changes to keep for a daemon after this one, since the server last took them.
    pub journal: Vec<Entry>,
    /// The scheduling hooks ([`crate::hooks::SchedHooks`]): a loaded policy's, or none.
    pub sched_hooks: Box<dyn crate::hooks::SchedHooks>,
}

impl Arbiter {
    /// A daemon with no tenants, this budget, policy and switch, and the default timeslice
    /// and priority ceiling.
    pub fn new(hbm: Option<u64>, host: Option<u64>, policy: Policy, switch: Switch) -> Self {
        Arbiter::with(&Settings {
            hbm,
            host,
            policy,
            switch,
            timeslice: crate::knobs::DEFAULT_TIMESLICE,
            max_timeslice: crate::knobs::DEFAULT_MAX_TIMESLICE,
            max_priority: 0,
            always_slice: false,
            gpu: None,
        })
    }

    /// A daemon with no tenants and these settings.
    pub fn with(s: &Settings) -> Self {
        Arbiter {
            settings: s.clone(),
            tenants: Tenants::default(),
            sched: s.policy.build(),
            procs: BTreeMap::new(),
            members: BTreeMap::new(),
            departed: BTreeMap::new(),
            events: Vec::new(),
            now: 0,
            peak_held: 0,
            past: HashMap::new(),
            running: None,
            switch_costs: HashMap::new(),
            notices: Vec::new(),
            pressure: HashMap::new(),
            mem_events: HashMap::new(),
            pressure_at: 0,
            awaited: BTreeMap::new(),
            journal: Vec::new(),
            sched_hooks: Box::new(crate::hooks::NoHooks),
        }
    }

    /// Registers process `pid` of tenant `name` (created on first use) as connection `conn`,
    /// unchecked: what a socket sends goes through [`Arbiter::admit`].
    pub fn join(&mut self, conn: u64, pid: u32, name: &str, priority: i32) -> TenantId {
        let id = self.tenants.find(name).unwrap_or_else(|_| {
            let id = self.tenants.add(name).expect("name is new");
            self.tenants.get_mut(id).limits.timeslice = self.settings.timeslice;
            id
        });
        if !self.members.contains_key(&id) {
            self.tenants.get_mut(id).priority = priority;
        }
        self.forget_member(conn);
        self.departed.remove(&conn);
        self.members.entry(id).or_default().insert(conn);
        self.procs.insert(
            conn,
            Proc {
                pid,
                start: 0,
                tenant: id,
                report: ShimReport::default(),
                doubted: false,
                unresponsive: false,
                stopped: false,
                sent: None,
                stall: StallMark::default(),
                exposure: 0,
                first_seq: 1,
            },
        );
        id
    }

    /// Removes connection `conn` from its tenant's members.
    fn forget_member(&mut self, conn: u64) {
        let Some(t) = self.procs.get(&conn).map(|p| p.tenant) else { return };
        if let Some(m) = self.members.get_mut(&t) {
            m.remove(&conn);
            if m.is_empty() {
                self.members.remove(&t);
            }
        }
    }

    /// The processes of tenant `t`, by connection.
    fn procs_of(&self, t: TenantId) -> impl Iterator<Item = (u64, &Proc)> {
        self.members.get(&t).into_iter().flatten().filter_map(|c| self.procs.get(c).map(|p| (*c, p)))
    }

    /// Takes a process's report as far as it is believable ([`trust::believable`]).
    /// Returns what was not believed, the first time for a process.
    pub fn report(&mut self, conn: u64, r: ShimReport) -> Option<String> {
        if let Some((t, last)) = self.departed.get_mut(&conn) {
            // Sent before the process died, read after: only its counters still matter.
            self.past.entry(*t).or_default().add(&r, last);
            last.commands = last.commands.max(r.commands);
            last.bytes_h2d = last.bytes_h2d.max(r.bytes_h2d);
            last.bytes_d2h = last.bytes_d2h.max(r.bytes_d2h);
            last.launches_held_ns = last.launches_held_ns.max(r.launches_held_ns);
            return None;
        }
        let budget = self.settings.hbm.unwrap_or(u64::MAX);
        let mut doubt = None;
        if let Some(p) = self.procs.get_mut(&conn) {
            let (r, why) = trust::believable(p, r, budget);
            if why.is_some() && !p.doubted {
                p.doubted = true;
                doubt = why;
            }
            p.report = r;
            if p.sent.is_some_and(|g| g.seq == r.grant) {
                p.exposure = p.sent.map_or(0, |g| g.cap);
            }
        }
        let held = self.procs.values().map(|p| p.report.held).fold(0, u64::saturating_add);
        self.peak_held = self.peak_held.max(held);
        doubt
    }

    /// Marks whether the process on `conn` is silent for reason `why`; returns whether
    /// that changed. A tenant none of whose processes answer gets no turns and no memory
    /// ahead of the others (what it holds stays counted: it cannot give it back now).
    pub fn set_silent(&mut self, conn: u64, why: Silence, silent: bool) -> bool {
        let Some(p) = self.procs.get_mut(&conn) else { return false };
        let flag = match why {
            Silence::NotReading => &mut p.unresponsive,
            Silence::Stopped => &mut p.stopped,
        };
        std::mem::replace(flag, silent) != silent
    }

    /// Whether some process of `t` answers (reads its grants and is not stopped).
    pub fn responsive(&self, t: TenantId) -> bool {
        self.procs_of(t).any(|(_, p)| !p.unresponsive && !p.stopped)
    }

    /// Whether every process of `t` is stopped.
    pub fn stopped(&self, t: TenantId) -> bool {
        self.procs_of(t).all(|(_, p)| p.stopped)
    }

    /// What all processes together may be holding by now: each what it holds, or up to
    /// the largest cap sent to it since the newest one it has applied (the cap a shim
    /// applies lags the newest sent), added up.
    pub fn exposure(&self) -> u64 {
        self.procs.values().map(|p| p.may_hold().max(p.sent.map_or(0, |g| g.cap))).fold(0, u64::saturating_add)
    }

    /// The tenant of the process on `conn`.
    pub fn tenant_of_conn(&self, conn: u64) -> Option<TenantId> {
        self.procs.get(&conn).map(|p| p.tenant)
    }

    /// The newest connection of live process `pid`, and its tenant.
    pub fn conn_of_pid(&self, pid: u32) -> Option<(u64, TenantId)> {
        self.procs.iter().filter(|(_, p)| p.pid == pid).max_by_key(|(c, _)| **c).map(|(c, p)| (*c, p.tenant))
    }

    /// Bytes of GPU memory the process on `conn` last reported holding.
    pub fn usage_of_conn(&self, conn: u64) -> u64 {
        self.procs.get(&conn).map_or(0, |p| p.report.held)
    }

    /// The policy's name.
    pub fn policy_name(&self) -> &'static str {
        self.sched.name()
    }

    /// Forgets a process that exited or disconnected; its memory no longer counts. Until
    /// [`Arbiter::closed`], reports still read from its connection add to its tenant's
    /// counters. Returns its pid and tenant name.
    pub fn leave(&mut self, conn: u64) -> Option<(u32, String)> {
        self.forget_member(conn);
        let p = self.procs.remove(&conn)?;
        if !self.procs.values().any(|q| q.pid == p.pid) {
            self.journal.push(Entry::Leave { pid: p.pid });
        }
        self.departed.insert(conn, (p.tenant, p.report));
        self.past.entry(p.tenant).or_default().add(&p.report, &ShimReport::default());
        if !self.members.contains_key(&p.tenant) {
            if self.running.is_some_and(|r| r.tenant == p.tenant) {
                self.running = None;
            }
            self.sched_hooks.task_destroy(p.tenant);
        }
        Some((p.pid, self.tenants.get(p.tenant).name.clone()))
    }

    /// Connection `conn` is closed: nothing more comes from it.
    pub fn closed(&mut self, conn: u64) {
        self.departed.remove(&conn);
    }

    /// Tenants with at least one process, in id order.
    pub fn live(&self) -> Vec<TenantId> {
        self.members.keys().copied().collect()
    }

    /// Pids of a tenant's processes.
    pub fn pids(&self, t: TenantId) -> Vec<u32> {
        self.procs_of(t).map(|(_, p)| p.pid).collect()
    }

    /// Sum of a tenant's processes' reports (counters include exited processes).
    pub fn usage(&self, t: TenantId) -> ShimReport {
        let past = self.past.get(&t).copied().unwrap_or_default();
        let mut u = ShimReport {
            commands: past.commands,
            bytes_h2d: past.bytes_h2d,
            bytes_d2h: past.bytes_d2h,
            launches_held_ns: past.launches_held_ns,
            ..Default::default()
        };
        for (_, p) in self.procs_of(t) {
            let r = &p.report;
            let add = |a: &mut u64, b: u64| *a = a.saturating_add(b);
            add(&mut u.held, r.held);
            add(&mut u.resident, r.resident);
            add(&mut u.allocated, r.allocated);
            add(&mut u.swapped, r.swapped);
            add(&mut u.want, r.want.max(r.blocked));
            add(&mut u.period, r.period.max(r.want).max(r.blocked));
            add(&mut u.blocked, r.blocked);
            add(&mut u.commands, r.commands);
            add(&mut u.bytes_h2d, r.bytes_h2d);
            add(&mut u.bytes_d2h, r.bytes_d2h);
            add(&mut u.finished, r.finished);
            add(&mut u.launches_held_ns, r.launches_held_ns);
            u.largest = u.largest.max(r.largest);
            u.busy |= r.busy;
            u.waiting |= r.waiting;
        }
        u
    }

    /// `ggroup.stat` of a tenant.
    pub fn stat(&self, t: TenantId) -> GroupStat {
        let u = self.usage(t);
        GroupStat { submitted: u.commands, finished: u.finished, bytes_h2d: u.bytes_h2d, bytes_d2h: u.bytes_d2h, switches: self.tenants.get(t).stat.switches }
    }

    /// `gmem.events` of a tenant.
    pub fn mem_events(&self, t: TenantId) -> mem_events::MemEvents {
        self.mem_events.get(&t).map(|c| c.counts).unwrap_or_default()
    }

    /// `gmem.pressure` of a tenant.
    pub fn pressure(&self, t: TenantId) -> Pressure {
        self.pressure.get(&t).copied().unwrap_or_default()
    }

    /// Brings every live tenant's pressure up to `now` from its processes' reports.
    fn tick_pressure(&mut self, now: Nanos) {
        let dt = now.saturating_sub(self.pressure_at);
        if dt == 0 {
            return;
        }
        self.pressure_at = now;
        let mut stalls: BTreeMap<TenantId, Vec<Nanos>> = BTreeMap::new();
        for p in self.procs.values_mut() {
            let running = p.sent.is_some_and(|g| g.run);
            stalls.entry(p.tenant).or_default().push(p.stall.stall(&p.report, running, dt));
        }
        for t in self.members.keys() {
            self.pressure.entry(*t).or_default();
        }
        for (t, p) in &mut self.pressure {
            p.add(stalls.get(t).map_or(&[][..], Vec::as_slice), dt);
        }
    }

    /// Whether tenant `t`'s processes were last granted to run.
    pub fn running_now(&self, t: TenantId) -> bool {
        self.procs_of(t).any(|(_, p)| p.sent.is_some_and(|g| g.run))
    }

    /// The tenant in its slot and that slot's slice (time-sliced mode).
    pub fn running(&self) -> Option<(TenantId, Nanos)> {
        self.running.map(|r| (r.tenant, r.slice))
    }

    /// When the running tenant's slice ends (time-sliced mode).
    pub fn slice_end(&self) -> Option<Nanos> {
        self.running.map(|r| r.ends())
    }
}

mod decide;
pub mod event;
pub mod mem_events;
pub mod record;
mod recovery;
pub mod slot;
mod trust;
pub use trust::{is_gpu_uuid, Hello, Sender, MAX_GPU, MAX_NAME};

#[cfg(test)]
mod hook_tests;
#[cfg(test)]
mod tests;
