//! The link to gmuxd (when `gmux run` registered the process): the daemon's grant (how
//! much GPU memory this process may hold, whether it may launch, what to bring in when
//! switched in), and the reports the daemon divides memory by.
//!
//! Two threads: a reader applies each grant at once (a pause closes the launch gate
//! before the next launch) and registers again when the daemon is lost ([`connect`]),
//! and a worker evicts down to the grant, fills after a switch-in and reports. Launches
//! wait at the gate outside the state lock, so the worker can always shrink a paused
//! process.

mod connect;
mod gate;
mod step;

use crate::config::config;
use crate::devices::MAX_DEVICES;
use crate::driver::OwnedEvent;
use crate::log::stamp;
use crate::state::ShimError;
use gmux_core::protocol::{Fill, FromShim, Grant, ShimReport, MAX_TRACE};
use gmux_core::size::format_size;
use gmux_runtime::switch::{Edge, Switch};
use std::cell::Cell;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub use connect::{link_changes, open_channel};
pub use gate::{gate, wait_grant};

/// How often the worker reports when nothing else wakes it.
const REPORT_EVERY: Duration = Duration::from_millis(20);

thread_local! {
    /// The worker's time without the state lock inside its current round (mapping a fill
    /// step's memory, waiting for a step's copies).
    static UNLOCKED: Cell<Duration> = const { Cell::new(Duration::ZERO) };
}

struct Link {
    grant: Grant,
    /// Bumped by every grant.
    generation: u64,
    /// Launches may proceed.
    open: bool,
    /// Bytes a command waits for beyond the cap.
    blocked: u64,
    /// Report at once.
    poke: bool,
    /// The application went busy or idle: what to tell the daemon ([`notice`]).
    notice: Option<Notice>,
    /// The daemon is gone: run on within the last grant until the next one registers this
    /// process again.
    lost: bool,
    /// Threads waiting at the gate.
    waiting: u32,
}

/// One device's link to its GPU's daemon.
struct Agent {
    /// The device ([`crate::devices`]).
    dev: usize,
    link: Mutex<Link>,
    /// `Link::open` and the grant's in-flight bound, readable on every launch without
    /// the lock.
    open: AtomicBool,
    inflight: AtomicU32,
    changed: Condvar,
    /// The connection's writing end (`None` while the daemon is lost).
    out: Mutex<Option<UnixStream>>,
    /// Nanoseconds the worker has held the state lock, which the application's launches
    /// wait for (reported as `launches_held_ns`).
    held_ns: AtomicU64,
}

static AGENTS: [OnceLock<Agent>; MAX_DEVICES] = [const { OnceLock::new() }; MAX_DEVICES];

fn agent(dev: usize) -> Option<&'static Agent> {
    AGENTS.get(dev)?.get()
}

/// Whether device `dev`'s memory is a tenant's of its GPU's gmuxd (one atomic load).
pub fn attached(dev: usize) -> bool {
    agent(dev).is_some()
}

impl Agent {
    fn lock(&self) -> std::sync::MutexGuard<'_, Link> {
        self.link.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens or closes the launch gate (with the link locked).
    fn set_open(&self, l: &mut Link, open: bool) {
        l.open = open;
        self.open.store(open, Ordering::Release);
        if open {
            self.changed.notify_all();
        }
    }

    /// Sends `msg`, unless the daemon is lost. A connection that fails is shut down: its
    /// reader then sees the daemon lost, and registers again.
    fn send(&self, msg: &FromShim) {
        let mut line = serde_json::to_string(msg).expect("serializable");
        line.push('\n');
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        if out.as_mut().is_some_and(|o| o.write_all(line.as_bytes()).is_err()) {
            if let Some(o) = out.take() {
                let _ = o.shutdown(std::net::Shutdown::Both);
            }
        }
    }

    /// The daemon is gone (called by the reader alone, which registers again next): the
    /// process runs on (its launches no longer wait for turns) within its last grant,
    /// which cannot grow until a daemon registers it again.
    fn lose(&self, why: &str) {
        self.out.lock().unwrap_or_else(|p| p.into_inner()).take();
        connect::link_changed();
        let mut l = self.lock();
        if !l.lost {
            crate::log!(
                Warn,
                "lost gmuxd ({why}); running on within the last grant of {} until a daemon serves {} again (`gmux daemon` starts one, as does the next process of this GPU under `gmux run`)",
                format_size(l.grant.cap),
                connect::socket(self.dev)
            );
        }
        l.lost = true;
        self.set_open(&mut l, true);
    }
}

/// The debug line of every grant taken (`scripts/gpu-tenants.sh restart` adds up the caps).
fn note(g: &Grant) {
    crate::log!(Debug, "agent {:.6}: grant {} cap {} run {}", stamp(), g.seq, g.cap, g.run);
}

/// Takes grant `g` at once: a pause closes the gate before the next launch.
fn apply(a: &Agent, g: Grant) {
    note(&g);
    let mut l = a.lock();
    l.grant = g;
    l.generation += 1;
    let open = g.run && (l.open || g.fill != Fill::Whole);
    a.set_open(&mut l, open);
    a.inflight.store(g.inflight, Ordering::Relaxed);
    a.changed.notify_all();
}

/// Registers device `dev`, of GPU `gpu`, with the daemon that `GMUX_DAEMON` names (a
/// directory of per-GPU sockets, or one daemon's socket) and returns its first grant
/// (`None`: no daemon is asked for). A process that cannot register its first device
/// stops with the reason and the fix; for a later device, `Err` says why.
pub fn attach(dev: usize, gpu: Option<String>) -> Result<Option<Grant>, String> {
    let Some(named) = config().daemon.as_ref() else { return Ok(None) };
    let d = connect::daemon(dev, named, gpu);
    let path = &d.socket;
    let (stream, reader, grant) = match connect::register(dev, path, d.gpu.clone(), None) {
        Ok(registered) => registered,
        Err(connect::Failed::Unreachable(why) | connect::Failed::Refused(why)) => {
            let why = format!("cannot register with gmuxd at {}: {why}", path.display());
            if crate::devices::in_use().next().is_some() {
                return Err(why);
            }
            crate::log::fatal(&format!("{why}; start it with `gmux daemon`, or run with `gmux run --standalone`"))
        }
    };
    let a = Agent {
        dev,
        link: Mutex::new(Link {
            grant,
            generation: 0,
            open: grant.run && grant.fill != Fill::Whole,
            blocked: 0,
            poke: true,
            notice: None,
            lost: false,
            waiting: 0,
        }),
        open: AtomicBool::new(grant.run && grant.fill != Fill::Whole),
        inflight: AtomicU32::new(grant.inflight),
        changed: Condvar::new(),
        out: Mutex::new(Some(stream)),
        held_ns: AtomicU64::new(0),
    };
    if AGENTS[dev].set(a).is_err() {
        return Ok(Some(grant));
    }
    std::thread::Builder::new()
        .name("gmux-agent-rx".into())
        .spawn(move || {
            crate::capture::relax_this_thread();
            connect::read_grants(dev, reader)
        })
        .expect("thread");
    std::thread::Builder::new()
        .name("gmux-agent".into())
        .spawn(move || {
            crate::capture::relax_this_thread();
            work(dev)
        })
        .expect("thread");
    crate::log!(Debug, "registered device {dev} with gmuxd as tenant {:?}: grant {}", config().tenant, format_size(grant.cap));
    note(&grant);
    Ok(Some(grant))
}

type StateGuard = crate::devices::Guard;

/// The profile's phases of an agent step ([`crate::profile`]).
static ACT: crate::profile::Entry = crate::profile::Entry::new("(agent:act)");
static FORECAST: crate::profile::Entry = crate::profile::Entry::new("(agent:forecast)");
static FORECAST_KEPT: crate::profile::Entry = crate::profile::Entry::new("(agent:forecast-kept)");
static REPORT: crate::profile::Entry = crate::profile::Entry::new("(agent:report)");

/// The worker of device `dev`: shrink to the grant, fill after a switch-in, report.
fn work(dev: usize) {
    let a = agent(dev).expect("attached");
    let mut seen = u64::MAX;
    let mut switch: Switch<OwnedEvent> = Switch::default();
    let mut ctx_set = false;
    let mut prepin_ok = true;
    // The last full step's report, and when that step began.
    let mut last: Option<ShimReport> = None;
    let mut stepped: Option<Instant> = None;
    let mut forecasts = step::Forecasts::default();
    loop {
        let (g, generation, blocked, light) = {
            let mut l = a.lock();
            let due = stepped.map_or(Duration::ZERO, |at| REPORT_EVERY.saturating_sub(at.elapsed()));
            if l.generation == seen && !l.poke && l.notice.is_none() && !due.is_zero() {
                l = a.changed.wait_timeout(l, due).unwrap_or_else(|p| p.into_inner()).0;
            }
            // Only news that the application went busy or idle, between two full reports:
            // the last report says so with the counters the application handed over,
            // without a step under the state lock, which its launches would wait for (a
            // decoder synchronizes every few milliseconds).
            let fresh = stepped.is_some_and(|at| at.elapsed() < REPORT_EVERY);
            let light = l.notice.filter(|_| !l.poke && l.generation == seen && fresh);
            l.poke = false;
            l.notice = None;
            (l.grant, l.generation, (l.blocked, l.waiting > 0), light)
        };
        if let Some((mut report, n)) = last.zip(light) {
            (report.busy, report.commands, report.finished) = (n.busy, report.commands.max(n.commands), report.finished.max(n.finished));
            (report.blocked, report.waiting) = blocked;
            report.launches_held_ns = a.held_ns.load(Ordering::Relaxed);
            a.send(&FromShim::Report(report));
            continue;
        }
        seen = generation;
        let mut guard = crate::devices::on(dev);
        let locked = Instant::now();
        stepped = Some(locked);
        UNLOCKED.set(Duration::ZERO);
        // A notice set before the state was taken is older than this step's report, which
        // must not be overridden by it.
        a.lock().notice = None;
        let Some(st) = guard.as_mut() else {
            (last, forecasts) = (None, step::Forecasts::default());
            continue;
        };
        let traces = crate::policy::attach(&mut st.memory, dev);
        if !ctx_set {
            gmux_cuda::context::set_current(st.ctx());
            ctx_set = true;
        }
        if let Some(edge) = switch.observe(g.run, st.memory.stats.commands) {
            crate::log!(Debug, "agent {:.3}: {} with {} resident", stamp(), if g.run { "switched in" } else { "paused" }, format_size(st.resident()));
            if let Edge::Out { released } = edge {
                st.memory.slot_ended(released);
            }
        }
        let mut view = st.memory.view(g.cap, g.fill, generation);
        if let Some(limit) = switch.raise(&view) {
            st.set_limit(limit);
            view.limit = limit;
        }
        let action = switch.next(&view);
        let step;
        let mut laps = crate::profile::Laps::start();
        (guard, step) = step::act(a, guard, &mut switch, action, &view);
        laps.lap(&ACT);
        let st = guard.as_mut().expect("created");
        let (wants, made) = forecasts.wants(&st.memory, generation, blocked.0 > 0 || blocked.1);
        laps.lap(if made { &FORECAST } else { &FORECAST_KEPT });
        let mut report = st.report(blocked.0, wants);
        laps.lap(&REPORT);
        report.waiting = blocked.1;
        report.grant = g.seq;
        let held = u64::try_from(locked.elapsed().saturating_sub(UNLOCKED.get()).as_nanos()).unwrap_or(u64::MAX);
        if crate::profile::on() {
            static STEP: crate::profile::Entry = crate::profile::Entry::new("(agent:step-held)");
            STEP.add_ns(held);
        }
        report.launches_held_ns = a.held_ns.fetch_add(held, Ordering::Relaxed).saturating_add(held);
        // With nothing else to do, pin host memory ahead of need, so that no eviction
        // waits for the pinning (0.2 s per GiB).
        let prepin = if matches!(step, Ok(false)) && prepin_ok { st.host_short() } else { None };
        drop(guard);
        if let Some(bytes) = prepin {
            match crate::hostpool::pin_block(bytes) {
                Ok(base) => {
                    if let Some(st) = crate::devices::on(dev).as_mut() {
                        st.memory.dev.add_host_block(base);
                    }
                    a.lock().poke = true;
                }
                // The process is exiting.
                Err(e) if e.code == crate::cuda::CUDA_ERROR_DEINITIALIZED => return,
                Err(e) => {
                    crate::log!(Warn, "pinning host memory ahead of evictions failed ({e}); evictions pin as they go");
                    prepin_ok = false;
                }
            }
        }
        match &step {
            // The process is exiting: the driver is shutting down under the worker.
            Err(e) if e.code == crate::cuda::CUDA_ERROR_DEINITIALIZED => return,
            Err(e) => crate::log!(Error, "evicting or filling for the daemon failed: {e}"),
            Ok(_) => {}
        }
        last = Some(report);
        a.send(&FromShim::Report(report));
        for (policy, mut text) in traces {
            if text.len() > MAX_TRACE {
                let cut = (0..=MAX_TRACE).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
                text.truncate(cut);
            }
            a.send(&FromShim::Trace { policy, text });
        }
        for m in crate::policy::snapshots(dev, false) {
            a.send(&m);
        }
        if matches!(step, Ok(true)) {
            a.lock().poke = true;
        }
    }
}

/// The error for a working set of `need` bytes of device `dev` over the limit `limit`:
/// wait for the grant when a daemon may still grant it (this one, or the next after it
/// is lost), else too big.
pub fn over_grant(dev: usize, need: u64, limit: u64) -> ShimError {
    let Some(a) = agent(dev) else { return ShimError::TooBig { need, limit } };
    let most = a.lock().grant.most;
    if need <= most {
        ShimError::Wait { need }
    } else {
        ShimError::TooBig { need, limit: most.max(limit) }
    }
}

/// Device `dev`'s current grant in bytes, when registered with a daemon (the last one's
/// while it is lost).
pub fn granted(dev: usize) -> Option<u64> {
    Some(agent(dev)?.lock().grant.cap)
}

/// Most unfinished commands per stream of device `dev`: the daemon's setting, else
/// `GMUX_INFLIGHT`.
pub fn inflight_bound(dev: usize) -> usize {
    match agent(dev).map(|a| a.inflight.load(Ordering::Relaxed)) {
        Some(n) if n > 0 => n as usize,
        _ => config().inflight,
    }
}

/// At exit: a last report of each device, so that the daemons' counters include every
/// command.
pub fn farewell() {
    for dev in crate::devices::in_use() {
        let Some(a) = agent(dev) else { continue };
        crate::log!(Debug, "agent {:.6}: exit", stamp());
        let report = crate::devices::try_on(dev).and_then(|mut g| {
            let st = g.as_mut()?;
            let wants = st.memory.wants();
            Some(st.report(0, wants))
        });
        if let Some(mut report) = report {
            report.launches_held_ns = a.held_ns.load(Ordering::Relaxed);
            a.send(&FromShim::Report(report));
        }
        // The policies' maps need no state lock.
        for m in crate::policy::snapshots(dev, true) {
            a.send(&m);
        }
    }
}

/// A change the application's thread saw, with the counters it holds: the process went
/// busy (a command released with none in flight) or idle (a synchronize).
#[derive(Debug, Clone, Copy)]
pub struct Notice {
    /// Commands are in flight.
    pub busy: bool,
    /// Commands released so far.
    pub commands: u64,
    /// Commands known finished so far.
    pub finished: u64,
}

/// Tells device `dev`'s daemon of `n` at once: by the last report with these counters,
/// without a step under the state lock unless one is due.
pub fn notice(dev: usize, n: Notice) {
    if let Some(a) = agent(dev) {
        a.lock().notice = Some(n);
        a.changed.notify_all();
    }
}

/// Asks device `dev`'s worker for a full step now.
pub fn poke(dev: usize) {
    if let Some(a) = agent(dev) {
        a.lock().poke = true;
        a.changed.notify_all();
    }
}
