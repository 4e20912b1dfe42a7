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

use crate::config::config;
use crate::log::stamp;
use crate::state::ShimError;
use gmux_core::protocol::{Fill, FromShim, Grant};
use gmux_core::size::format_size;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// How often the worker reports when nothing else wakes it.
const REPORT_EVERY: Duration = Duration::from_millis(20);

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
    /// The daemon is gone: run on within the last grant until the next one registers this
    /// process again.
    lost: bool,
    /// Threads waiting at the gate.
    waiting: u32,
}

struct Agent {
    link: Mutex<Link>,
    /// `Link::open` and the grant's in-flight bound, readable on every launch without
    /// the lock.
    open: AtomicBool,
    inflight: AtomicU32,
    changed: Condvar,
    /// The connection's writing end (`None` while the daemon is lost).
    out: Mutex<Option<UnixStream>>,
}

static AGENT: OnceLock<Agent> = OnceLock::new();

fn agent() -> Option<&'static Agent> {
    AGENT.get()
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
        let mut l = self.lock();
        if !l.lost {
            crate::log!(
                Warn,
                "lost gmuxd ({why}); running on within the last grant of {} until a daemon serves {} again (`gmux daemon`, or any `gmux run`, starts one)",
                format_size(l.grant.cap),
                config().daemon.as_ref().map_or(String::new(), |p| p.display().to_string())
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

/// Registers with the daemon at `GMUX_DAEMON` and returns its first grant. A process
/// that cannot register stops with the reason and the fix.
pub fn attach() -> Option<Grant> {
    let path = config().daemon.as_ref()?;
    let (stream, reader, grant) = connect::register(path, None).unwrap_or_else(|e| {
        let why = match e {
            connect::Failed::Unreachable(why) | connect::Failed::Refused(why) => why,
        };
        crate::log::fatal(&format!("cannot register with gmuxd at {}: {why}; start it with `gmux daemon`, or run with `gmux run --standalone`", path.display()))
    });
    let a = Agent {
        link: Mutex::new(Link { grant, generation: 0, open: grant.run && grant.fill != Fill::Whole, blocked: 0, poke: true, lost: false, waiting: 0 }),
        open: AtomicBool::new(grant.run && grant.fill != Fill::Whole),
        inflight: AtomicU32::new(grant.inflight),
        changed: Condvar::new(),
        out: Mutex::new(Some(stream)),
    };
    if AGENT.set(a).is_err() {
        return Some(grant);
    }
    std::thread::Builder::new()
        .name("gmux-agent-rx".into())
        .spawn(move || {
            crate::capture::relax_this_thread();
            connect::read_grants(reader)
        })
        .expect("thread");
    std::thread::Builder::new()
        .name("gmux-agent".into())
        .spawn(|| {
            crate::capture::relax_this_thread();
            work()
        })
        .expect("thread");
    crate::log!(Debug, "registered with gmuxd as tenant {:?}: grant {}", config().tenant, format_size(grant.cap));
    note(&grant);
    Some(grant)
}

/// The worker: shrink to the grant, fill after a switch-in, report.
fn work() {
    let a = agent().expect("attached");
    let mut seen = u64::MAX;
    let mut running = false;
    let mut filled_gen = u64::MAX;
    let mut commands_at_switch = 0;
    let mut ctx_set = false;
    // The event after the newest shrink step's copies, while they may be in flight.
    let mut evicting: Option<crate::cuda::CUevent> = None;
    // The same for the newest fill step of a paused tenant.
    let mut filling: Option<crate::cuda::CUevent> = None;
    let mut prepin_ok = true;
    loop {
        let (g, generation, blocked) = {
            let mut l = a.lock();
            if l.generation == seen && !l.poke {
                l = a.changed.wait_timeout(l, REPORT_EVERY).unwrap_or_else(|p| p.into_inner()).0;
            }
            l.poke = false;
            (l.grant, l.generation, (l.blocked, l.waiting > 0))
        };
        seen = generation;
        let mut guard = crate::state::existing();
        let Some(st) = guard.as_mut() else { continue };
        if !ctx_set {
            crate::real!(cuCtxSetCurrent(st.ctx()));
            ctx_set = true;
        }
        if g.run != running {
            running = g.run;
            if running {
                commands_at_switch = st.stats.commands;
            } else if st.stats.commands > commands_at_switch {
                // A slot in which nothing was released says nothing about slices.
                st.stats.slices.rotate_right(1);
                st.stats.slices[0] = st.stats.commands - commands_at_switch;
            }
            crate::log!(Debug, "agent {:.3}: {} with {} resident", stamp(), if running { "switched in" } else { "paused" }, format_size(st.resident()));
        }
        if g.cap > st.limit() && st.resident() <= g.cap {
            st.set_limit(g.cap);
        }
        let shrink = st.limit() > g.cap || st.resident() > g.cap || st.held() > g.cap.max(st.resident());
        let step = if shrink {
            let (t0, before) = (stamp(), st.resident());
            match st.shrink_to(g.cap) {
                Ok((more, done)) => {
                    crate::log!(
                        Debug,
                        "agent {t0:.3}: shrink step to {}: {} issued in {:.2} ms",
                        format_size(g.cap),
                        format_size(before - st.resident()),
                        (stamp() - t0) * 1e3
                    );
                    // One step's copies stay in flight while the next is issued, so the
                    // link never idles between steps: wait (without the lock) for the
                    // previous step's copies, or for this one's at the last step, then
                    // free what they evicted.
                    let wait = if more { evicting.replace(done) } else { Some(done) };
                    match wait {
                        Some(ev) => {
                            let t1 = stamp();
                            guard = wait_unlocked(guard, ev);
                            crate::log!(Debug, "agent {t1:.3}: waited {:.2} ms for a shrink step's copies", (stamp() - t1) * 1e3);
                            if let Some(e) = evicting.take().filter(|_| !more) {
                                // An earlier step's event: its copies are done too (one stream).
                                crate::real!(cuEventDestroy_v2(e));
                            }
                            let st = guard.as_mut().expect("created");
                            st.released_memory().map(|()| more || st.limit() != g.cap)
                        }
                        None => Ok(true),
                    }
                }
                Err(e) => Err(e),
            }
        } else if let Some(ev) = evicting.take() {
            // The grant grew back while a step was in flight.
            guard = wait_unlocked(guard, ev);
            guard.as_mut().expect("created").released_memory().map(|()| true)
        } else if (running || g.fill == Fill::Forecast) && g.fill != Fill::None && filled_gen != generation {
            // A paused tenant brings in its next slice ahead of its turn as far as its
            // grant allows (the daemon grants in the order of the timeline).
            let (t0, before) = (stamp(), st.resident());
            let more = match st.fill(g.fill == Fill::Whole) {
                Ok((more, Some(done))) => {
                    crate::log!(
                        Debug,
                        "agent {t0:.3}: fill step within {}: {} issued in {:.2} ms",
                        format_size(g.cap),
                        format_size(st.resident() - before),
                        (stamp() - t0) * 1e3
                    );
                    // A paused tenant keeps one step's copies in flight while it issues
                    // the next, and no more, so that they never queue far ahead of the
                    // running tenant's.
                    let prev = if running {
                        crate::real!(cuEventDestroy_v2(done));
                        filling.take()
                    } else {
                        filling.replace(done)
                    };
                    match prev {
                        Some(ev) if !running => guard = wait_unlocked(guard, ev),
                        Some(ev) => {
                            crate::real!(cuEventDestroy_v2(ev));
                        }
                        None => {}
                    }
                    Ok(more)
                }
                Ok((more, None)) => Ok(more),
                Err(e) => Err(e),
            };
            if !matches!(more, Ok(true)) {
                if let Some(ev) = filling.take() {
                    crate::real!(cuEventDestroy_v2(ev));
                }
                filled_gen = generation;
                if g.fill == Fill::Whole {
                    let mut l = a.lock();
                    let open = l.grant.run;
                    a.set_open(&mut l, open);
                    a.changed.notify_all();
                }
            }
            more
        } else {
            Ok(false)
        };
        let st = guard.as_mut().expect("created");
        let mut report = st.report(blocked.0);
        report.waiting = blocked.1;
        report.grant = g.seq;
        // With nothing else to do, pin host memory ahead of need, so that no eviction
        // waits for the pinning (0.2 s per GiB).
        let prepin = if matches!(step, Ok(false)) && prepin_ok { st.host_short() } else { None };
        drop(guard);
        if let Some(bytes) = prepin {
            match crate::hostpool::pin_block(bytes) {
                Ok(base) => {
                    if let Some(st) = crate::state::existing().as_mut() {
                        st.dev.add_host_block(base);
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
        a.send(&FromShim::Report(report));
        if matches!(step, Ok(true)) {
            a.lock().poke = true;
        }
    }
}

/// Waits for `ev` without the state lock (the application keeps launching meanwhile),
/// destroys it and takes the lock back.
fn wait_unlocked(guard: MutexGuard<'static, Option<crate::state::Shim>>, ev: crate::cuda::CUevent) -> MutexGuard<'static, Option<crate::state::Shim>> {
    drop(guard);
    crate::real!(cuEventSynchronize(ev));
    crate::real!(cuEventDestroy_v2(ev));
    crate::state::existing()
}

/// Waits while the daemon has paused this process (no-op when not registered).
pub fn gate() {
    let Some(a) = agent() else { return };
    if a.open.load(Ordering::Acquire) {
        return;
    }
    let mut l = a.lock();
    if !l.open {
        l.poke = true;
        a.changed.notify_all();
    }
    l.waiting += 1;
    let t0 = std::time::Instant::now();
    let mut told = Duration::ZERO;
    while !l.open {
        l = a.changed.wait_timeout(l, SAY_WAIT).unwrap_or_else(|p| p.into_inner()).0;
        if !l.open && t0.elapsed() >= told + SAY_WAIT {
            told = t0.elapsed();
            crate::log!(
                Warn,
                "waiting {:.0} s for a turn from gmuxd: tenant {:?} is frozen, or others run now; `gmux ps` shows who",
                told.as_secs_f64(),
                config().tenant
            );
        }
    }
    l.waiting -= 1;
}

/// How long a wait for the daemon goes before the process says what it waits for (and
/// again after each as long).
const SAY_WAIT: Duration = Duration::from_secs(5);

/// The error for a working set of `need` bytes over the limit `limit`: wait for the
/// grant when a daemon may still grant it (this one, or the next after it is lost), else
/// too big.
pub fn over_grant(need: u64, limit: u64) -> ShimError {
    let Some(a) = agent() else { return ShimError::TooBig { need, limit } };
    let most = a.lock().grant.most;
    if need <= most {
        ShimError::Wait { need }
    } else {
        ShimError::TooBig { need, limit: most.max(limit) }
    }
}

/// Blocks until the grant covers `need` bytes, telling the daemon what is waiting (a lost
/// daemon's next one: growing without one could oversubscribe the budget).
pub fn wait_grant(need: u64) {
    let Some(a) = agent() else { return };
    let t0 = stamp();
    let mut l = a.lock();
    l.blocked = need;
    l.poke = true;
    a.changed.notify_all();
    let since = std::time::Instant::now();
    let mut told = Duration::ZERO;
    while l.grant.cap < need {
        l = a.changed.wait_timeout(l, SAY_WAIT).unwrap_or_else(|p| p.into_inner()).0;
        if l.grant.cap < need && since.elapsed() >= told + SAY_WAIT {
            told = since.elapsed();
            if l.lost {
                crate::log!(
                    Warn,
                    "waiting {:.0} s for gmuxd to come back: a command needs {}, more than the last grant of {}; start it with `gmux daemon` (or any `gmux run`) at {}",
                    told.as_secs_f64(),
                    format_size(need),
                    format_size(l.grant.cap),
                    config().daemon.as_ref().map_or(String::new(), |p| p.display().to_string())
                );
                continue;
            }
            crate::log!(
                Warn,
                "waiting {:.0} s for gmuxd to grant a command's {}: tenant {:?} has {} (at most {}); the others hold or protect (gmem.limit.low) the rest; `gmux ps` shows who",
                told.as_secs_f64(),
                format_size(need),
                config().tenant,
                format_size(l.grant.cap),
                format_size(l.grant.most)
            );
        }
    }
    l.blocked = 0;
    crate::log!(Debug, "agent {t0:.3}: a launch waited {:.2} ms for a grant of {}", (stamp() - t0) * 1e3, format_size(need));
}

/// The current grant in bytes, when registered with a daemon (the last one's while it is
/// lost).
pub fn granted() -> Option<u64> {
    Some(agent()?.lock().grant.cap)
}

/// Most unfinished commands per stream: the daemon's setting, else `GMUX_INFLIGHT`.
pub fn inflight_bound() -> usize {
    match agent().map(|a| a.inflight.load(Ordering::Relaxed)) {
        Some(n) if n > 0 => n as usize,
        _ => config().inflight,
    }
}

/// At exit: a last report, so that the daemon's counters include every command.
pub fn farewell() {
    let Some(a) = agent() else { return };
    crate::log!(Debug, "agent {:.6}: exit", stamp());
    let Some(mut g) = crate::state::try_existing() else { return };
    let Some(st) = g.as_mut() else { return };
    let report = FromShim::Report(st.report(0));
    drop(g);
    a.send(&report);
}

/// Asks the worker to report now (the process went busy or idle).
pub fn poke() {
    if let Some(a) = agent() {
        a.lock().poke = true;
        a.changed.notify_all();
    }
}
