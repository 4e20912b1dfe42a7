//! What the daemon is doing, as data: the one snapshot that `gmux ps` prints as a table,
//! `gmux ps --json` as JSON and `/metrics` as Prometheus metrics. Its schema is
//! documented in docs/observability.md.

use gmux_core::arbiter::mem_events::MemEvents;
use gmux_core::arbiter::{Arbiter, Switch};
use gmux_core::pressure::Pressure;
use gmux_core::size::format_size;
use gmux_core::TenantId;
use serde::{Deserialize, Serialize};

/// The daemon and the tenants the asker may read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// The UUID of the GPU served (`None`: no process has said yet).
    #[serde(default)]
    pub gpu: Option<String>,
    /// GPU-memory budget in bytes (`None`: each process's free device memory).
    pub budget: Option<u64>,
    /// Host-tier budget in bytes (`None`: unlimited).
    pub host: Option<u64>,
    /// Scheduling policy: rr, priority or share.
    pub policy: String,
    /// How a time-sliced switch moves memory: msched or whole.
    pub switch: Switch,
    /// GPU memory the live tenants listed hold now, in bytes.
    pub held: u64,
    /// Most GPU memory all processes held at once since the daemon started, in bytes
    /// (only for the daemon's owner and root, who see every tenant).
    pub peak_held: Option<u64>,
    /// Bytes the live tenants listed hold in host memory (evicted), against `host`.
    pub swapped: u64,
    /// The tenant whose slot runs now, when time-sliced and readable by the asker.
    pub slice_owner: Option<String>,
    /// Live tenants, in the order they were made.
    pub tenants: Vec<TenantStatus>,
}

/// What one tenant runs as: its scheduling state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Its processes may release commands.
    Running,
    /// Waiting for its turn.
    Paused,
    /// `compute.freeze` is 1.
    Frozen,
    /// A process of it is stopped (SIGSTOP): it cannot answer.
    Stopped,
    /// A process of it has not answered the daemon in time.
    Unresponsive,
}

impl State {
    /// The word `gmux ps` prints.
    pub fn name(self) -> &'static str {
        match self {
            State::Running => "running",
            State::Paused => "paused",
            State::Frozen => "frozen",
            State::Stopped => "stopped",
            State::Unresponsive => "unresponsive",
        }
    }
}

/// One tenant: its knobs, its memory and its counters (which include exited processes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TenantStatus {
    /// Its name.
    pub name: String,
    /// Its number, as policy programs see it (`tenant` in their contexts).
    #[serde(default)]
    pub id: u32,
    /// Uid of the user who made it (`None`: made by the daemon's owner).
    pub uid: Option<u32>,
    /// Pids of its processes.
    pub pids: Vec<u32>,
    /// Strict-priority class.
    pub priority: i32,
    /// Scheduling state.
    pub state: State,
    /// GPU memory held, mapped or spare, in bytes (`gmem.current`).
    pub held: u64,
    /// Bytes of its chunks resident on the GPU.
    pub resident: u64,
    /// Bytes its next slice is forecast to use.
    pub want: u64,
    /// Bytes evicted to host memory (`gmem.swap.current`).
    pub swapped: u64,
    /// `gmem.limit.high` in bytes (`None`: max).
    pub limit_high: Option<u64>,
    /// `gmem.limit.low` in bytes.
    pub limit_low: u64,
    /// Commands released (`ggroup.stat` commands).
    pub commands: u64,
    /// Commands seen finished.
    pub finished: u64,
    /// Bytes copied host to device.
    pub bytes_h2d: u64,
    /// Bytes copied device to host.
    pub bytes_d2h: u64,
    /// Times it was switched in.
    pub switches: u64,
    /// Nanoseconds its agent held its launches to map and fill memory.
    pub launches_held_ns: u64,
    /// `gmem.pressure`: the share of time its commands waited for memory.
    pub pressure: Pressure,
    /// `gmem.events`: how often it met each memory boundary.
    pub gmem_events: MemEvents,
    /// The jobs its live processes mark through their serving channels (absent: none
    /// opened one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs: Option<JobsStatus>,
}

/// The jobs a tenant's applications mark (`gmux_job_begin`/`gmux_job_end`, or
/// `gmux.job` in Python).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobsStatus {
    /// Jobs begun and not ended.
    pub running: u64,
    /// Jobs ended.
    pub done: u64,
    /// Marks refused: a job begun twice, ended without a begin, or past the bounds (1,024
    /// running, 256 names per process).
    pub refused: u64,
    /// Per job name, the 32 with the most jobs ended.
    pub kinds: Vec<JobKindStatus>,
    /// A process of it keeps its queues shallow now, because a much shorter job runs
    /// elsewhere (`gmux daemon --dispatch shallow`, and the release policies).
    #[serde(default)]
    pub shallow: bool,
    /// A process of it is held now: another job goes first (`gmux daemon --dispatch
    /// fifo|sjf|rr|srpt-deficit`).
    #[serde(default)]
    pub held: bool,
}

/// The jobs of one name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobKindStatus {
    /// The name the application gave.
    pub name: String,
    /// Jobs ended.
    pub done: u64,
    /// Their mean time from begin to end, less the time their process was held, in
    /// milliseconds.
    pub mean_ms: f64,
    /// The longest, in milliseconds.
    pub max_ms: f64,
    /// The newest estimate the application gave, in milliseconds.
    pub expected_ms: Option<f64>,
    #[serde(skip)]
    total_ns: u64,
}

impl JobKindStatus {
    /// One process's jobs of a name.
    pub fn of(k: &gmux_core::sched::dispatch::JobKind) -> JobKindStatus {
        let mut s = JobKindStatus { name: k.name.clone(), done: 0, mean_ms: 0.0, max_ms: 0.0, expected_ms: None, total_ns: 0 };
        s.add(k);
        s
    }

    /// Adds another process's jobs of the same name.
    pub fn add(&mut self, k: &gmux_core::sched::dispatch::JobKind) {
        self.done += k.done;
        self.total_ns = self.total_ns.saturating_add(k.total_ns);
        self.mean_ms = if self.done == 0 { 0.0 } else { self.total_ns as f64 / self.done as f64 / 1e6 };
        self.max_ms = self.max_ms.max(k.max_ns as f64 / 1e6);
        if k.expected_ns > 0 {
            self.expected_ms = Some(k.expected_ns as f64 / 1e6);
        }
    }
}

/// The status of `d` with the tenants `visible` says the asker may read; `everyone` when
/// that is all of them (the daemon-wide peak is shown only then: totals never tell of a
/// tenant the asker may not read). `jobs` gives a tenant's marked jobs.
pub fn status(d: &Arbiter, visible: &dyn Fn(TenantId) -> bool, everyone: bool, jobs: Jobs<'_>) -> Status {
    let live = d.live();
    let tenants: Vec<TenantStatus> = live.iter().copied().filter(|t| visible(*t)).map(|t| TenantStatus { jobs: jobs(t), ..tenant(d, t) }).collect();
    let owner = live.iter().copied().find(|t| d.running_now(*t) && visible(*t));
    Status {
        gpu: d.settings.gpu.clone(),
        budget: d.settings.hbm,
        host: d.settings.host,
        policy: d.policy_name().into(),
        switch: d.settings.switch,
        held: tenants.iter().map(|t| t.held).fold(0, u64::saturating_add),
        peak_held: everyone.then_some(d.peak_held),
        swapped: tenants.iter().map(|t| t.swapped).fold(0, u64::saturating_add),
        slice_owner: owner.filter(|_| d.slice_end().is_some()).map(|t| d.tenants.get(t).name.clone()),
        tenants,
    }
}

/// The jobs a tenant's processes mark, from the serving channels.
pub type Jobs<'a> = &'a dyn Fn(TenantId) -> Option<JobsStatus>;

/// No jobs: for a status without serving channels.
pub fn no_jobs(_: TenantId) -> Option<JobsStatus> {
    None
}

fn tenant(d: &Arbiter, t: TenantId) -> TenantStatus {
    let k = d.tenants.get(t);
    let u = d.usage(t);
    let state = if k.limits.frozen {
        State::Frozen
    } else if d.stopped(t) {
        State::Stopped
    } else if !d.responsive(t) {
        State::Unresponsive
    } else if d.running_now(t) {
        State::Running
    } else {
        State::Paused
    };
    TenantStatus {
        id: t.0,
        name: k.name.clone(),
        uid: k.owner,
        pids: d.pids(t),
        priority: k.priority,
        state,
        held: u.held,
        resident: u.resident,
        want: u.want,
        swapped: u.swapped,
        limit_high: k.limits.high,
        limit_low: k.limits.low,
        commands: u.commands,
        finished: u.finished,
        bytes_h2d: u.bytes_h2d,
        bytes_d2h: u.bytes_d2h,
        switches: k.stat.switches,
        launches_held_ns: u.launches_held_ns,
        pressure: d.pressure(t),
        gmem_events: d.mem_events(t),
        jobs: None,
    }
}

/// The table `gmux ps` prints: a line on the budget, then one row per tenant.
pub fn table(s: &Status) -> String {
    let mut rows = vec![["TENANT", "PIDS", "PRIO", "STATE", "GMEM", "WANT", "SWAP", "HIGH", "LOW", "COMMANDS", "SWITCHES"].map(String::from).to_vec()];
    for t in &s.tenants {
        let pids: Vec<String> = t.pids.iter().map(u32::to_string).collect();
        rows.push(vec![
            t.name.clone(),
            pids.join(","),
            t.priority.to_string(),
            t.state.name().into(),
            format_size(t.held),
            format_size(t.want),
            format_size(t.swapped),
            t.limit_high.map_or("max".into(), format_size),
            format_size(t.limit_low),
            t.commands.to_string(),
            t.switches.to_string(),
        ]);
    }
    let widths: Vec<usize> = (0..rows[0].len()).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let budget = format!(
        "{}budget {}, policy {}, held {}{}, swapped {} of host {}",
        s.gpu.as_deref().map_or(String::new(), |g| format!("{g}: ")),
        s.budget.map_or("device".into(), format_size),
        s.policy,
        format_size(s.held),
        s.peak_held.map_or(String::new(), |p| format!(" (peak {})", format_size(p))),
        format_size(s.swapped),
        s.host.map_or("unlimited".into(), format_size)
    );
    let lines: Vec<String> =
        rows.iter().map(|r| r.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect::<Vec<_>>().join("  ").trim_end().to_string()).collect();
    format!("{budget}\n{}", lines.join("\n"))
}
