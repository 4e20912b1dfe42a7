//! gmux's own C functions for serving applications (declared in `include/gmux.h`): an
//! application marks each request as a job, and the marks travel to gmuxd over the
//! process's serving channel, which opens at the first mark after the process
//! registered. A process with no daemon (`gmux run --standalone`, or before its first
//! CUDA call) gets [`UNTRACKED`]: its marks are not sent.

use gmux_channel::{Client, JobName, Message, HOLD};
use std::collections::VecDeque;
use std::ffi::{c_char, c_int, CStr};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::time::{Duration, Instant};

/// The mark was sent (an end may wait in the process to be sent with the next mark).
pub const OK: c_int = 0;
/// The process has no daemon to send it to: not sent.
pub const UNTRACKED: c_int = 1;
/// A null or non-UTF-8 name, a negative or NaN estimate, or a null out-pointer.
pub const EINVAL: c_int = -libc::EINVAL;
/// The channel is full (the daemon is behind): the begin is dropped.
pub const EAGAIN: c_int = -libc::EAGAIN;
/// The channel could not be opened, or broke (the log says why).
pub const ECHANNEL: c_int = -libc::EPIPE;
/// A ping got no answer in time.
pub const ETIMEDOUT: c_int = -libc::ETIMEDOUT;
/// gmux failed inside (the log says where).
pub const EINTERNAL: c_int = -libc::EFAULT;

/// How long after a failed try the channel is asked for again.
const RETRY: Duration = Duration::from_secs(1);

/// Most ends that wait in the process for room in a full channel.
const MAX_WAITING_ENDS: usize = 1024;

/// The channel, the change of the daemon link it was opened after, and when it was last
/// asked for (`client` is `None` after a failed try).
struct Opened {
    client: Option<Arc<Client>>,
    link: u64,
    tried: Instant,
}

static CHANNEL: Mutex<Option<Opened>> = Mutex::new(None);
static NEXT_JOB: AtomicU64 = AtomicU64::new(1);

/// Ends the full channel had no room for, sent before the next mark on the same channel
/// (a new channel's daemon never saw their begins).
static WAITING_ENDS: Mutex<VecDeque<u64>> = Mutex::new(VecDeque::new());

/// The device whose daemon the channel is with, plus one (0: no channel opened yet).
static CHANNEL_DEV: AtomicUsize = AtomicUsize::new(0);

/// The dispatcher's word as the last launch read it ([`wait_turn`]).
static BOUND: AtomicU32 = AtomicU32::new(0);

/// The most commands the daemon's dispatcher asks device `dev`'s streams to keep in
/// flight (`None`: no bound; always so for a process that marks no jobs, and while it
/// is held: [`wait_turn`] holds it), as the launch read it before its release: an atomic
/// load.
pub fn dispatcher_bound(dev: usize) -> Option<u32> {
    if CHANNEL_DEV.load(Ordering::Relaxed) != dev + 1 {
        return None;
    }
    Some(BOUND.load(Ordering::Relaxed)).filter(|b| *b > 0 && *b != HOLD)
}

/// How long a held launch sleeps before it looks again whether its daemon is still
/// there (a lost daemon's hold holds nothing).
const HOLD_RECHECK: Duration = Duration::from_millis(100);

/// How long a launch is held before the process says so (and again after each as long).
const SAY_HELD: Duration = Duration::from_secs(5);

/// Reads the dispatcher's word before a launch, and waits while it holds device `dev`'s
/// commands (`gmux daemon --dispatch fifo|sjf|rr|srpt-deficit`: another process's job
/// goes first). Called before every launch, outside the state lock; costs an atomic load
/// for a process with no channel, and an uncontended lock for one with a channel.
pub fn wait_turn(dev: usize) {
    let Some(Some(mut client)) = look(dev, false) else { return };
    let t0 = Instant::now();
    let mut told = Duration::ZERO;
    loop {
        if client.wait_while_held(HOLD_RECHECK) && t0.elapsed() >= told + SAY_HELD {
            told = t0.elapsed();
            crate::log!(
                Warn,
                "held {:.0} s by gmuxd's dispatcher: other tenants' jobs go first (`gmux daemon --dispatch`); `gmux ps --json` shows whose jobs run",
                told.as_secs_f64()
            );
        }
        match look(dev, true) {
            Some(Some(c)) => client = c,
            _ => break,
        }
    }
    crate::log!(Debug, "the dispatcher held a launch {:.2} ms: another job went first", t0.elapsed().as_secs_f64() * 1e3);
}

/// Reads device `dev`'s dispatcher word into [`BOUND`] (0 from a channel opened before
/// the daemon link's last change: a lost daemon asks nothing), and returns the channel if
/// the word holds the process. `None`: not read, because `dev` has no channel or, unless
/// `wait_for_lock`, the channel is being opened or marked on.
fn look(dev: usize, wait_for_lock: bool) -> Option<Option<Arc<Client>>> {
    if CHANNEL_DEV.load(Ordering::Relaxed) != dev + 1 {
        return None;
    }
    let ch = match CHANNEL.try_lock() {
        Ok(ch) => ch,
        Err(TryLockError::Poisoned(p)) => p.into_inner(),
        Err(TryLockError::WouldBlock) if wait_for_lock => CHANNEL.lock().unwrap_or_else(|p| p.into_inner()),
        Err(TryLockError::WouldBlock) => return None,
    };
    let link = crate::agent::link_changes();
    let client = ch.as_ref().filter(|o| o.link == link).and_then(|o| o.client.as_ref());
    let word = client.map_or(0, |c| c.inflight());
    let held = client.filter(|_| word == HOLD).cloned();
    drop(ch);
    if BOUND.swap(word, Ordering::Relaxed) != word {
        match word {
            HOLD => crate::log!(Debug, "the dispatcher holds this process's commands: another job goes first"),
            b => crate::log!(Debug, "the dispatcher asks for at most {b} commands in flight per stream (0: no bound)"),
        }
    }
    Some(held)
}

/// The channel, opened first when the process lost its daemon or registered since the
/// last try (a daemon that restarted hands out a new one), or a second after a try that
/// failed.
fn channel() -> Result<Arc<Client>, c_int> {
    let Some(dev) = crate::devices::in_use().find(|d| crate::agent::attached(*d)) else { return Err(UNTRACKED) };
    let link = crate::agent::link_changes();
    let mut ch = CHANNEL.lock().unwrap_or_else(|p| p.into_inner());
    let stale = ch.as_ref().is_none_or(|o| o.link != link || (o.client.is_none() && o.tried.elapsed() >= RETRY));
    if stale {
        // Launches that find the channel being opened take no bound of the old one.
        BOUND.store(0, Ordering::Relaxed);
        WAITING_ENDS.lock().unwrap_or_else(|p| p.into_inner()).clear();
        let client = match crate::agent::open_channel(dev) {
            Ok(c) => Some(Arc::new(c)),
            // Said once, not at every try while the daemon is gone.
            Err(why) if ch.as_ref().is_none_or(|o| o.client.is_some()) => {
                crate::log!(Warn, "{why}; job marks are not sent (asked again every second)");
                None
            }
            Err(why) => {
                crate::log!(Debug, "{why}");
                None
            }
        };
        if client.is_some() {
            CHANNEL_DEV.store(dev + 1, Ordering::Relaxed);
        }
        *ch = Some(Opened { client, link, tried: Instant::now() });
    }
    ch.as_ref().and_then(|o| o.client.clone()).ok_or(ECHANNEL)
}

/// Sends `m`, after the ends that waited for room. A channel found broken is dropped
/// (asked for again a second later), so that its bound no longer holds.
fn send(c: &Arc<Client>, m: &Message) -> c_int {
    let broke = |e: gmux_channel::Broken| {
        crate::log!(Warn, "the serving channel broke ({e}); job marks are not sent (asked again every second)");
        let mut ch = CHANNEL.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(o) = ch.as_mut().filter(|o| o.client.as_ref().is_some_and(|x| Arc::ptr_eq(x, c))) {
            o.client = None;
            o.tried = Instant::now();
        }
        ECHANNEL
    };
    let mut waiting = WAITING_ENDS.lock().unwrap_or_else(|p| p.into_inner());
    while let Some(job) = waiting.front().copied() {
        match c.send(&Message::JobEnd { job }) {
            Ok(true) => drop(waiting.pop_front()),
            Ok(false) => break,
            Err(e) => {
                drop(waiting);
                return broke(e);
            }
        }
    }
    match c.send(m) {
        Ok(true) => OK,
        Ok(false) => match *m {
            // An end is never lost while there is room to keep it: the daemon would count
            // the job running for ever.
            Message::JobEnd { job } if waiting.len() < MAX_WAITING_ENDS => {
                waiting.push_back(job);
                OK
            }
            _ => EAGAIN,
        },
        Err(e) => {
            drop(waiting);
            broke(e)
        }
    }
}

/// Runs `f`, turning a panic into [`EINTERNAL`]: none may unwind into C.
fn guarded(what: &str, f: impl FnOnce() -> c_int) -> c_int {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| {
        crate::log!(Warn, "gmux failed inside {what}; the mark is not sent");
        EINTERNAL
    })
}

/// `gmux_job_begin(name, expected_ms, &job)`: a job of kind `name` (at most 40 bytes
/// are kept) begins; `expected_ms` is the application's estimate of its GPU time (0:
/// none). Writes the job's number to `*job` when the begin was sent, else 0, which
/// `gmux_job_end` takes and ignores.
///
/// # Safety
/// `name` is null or a NUL-terminated string; `job` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn gmux_job_begin(name: *const c_char, expected_ms: f64, job: *mut u64) -> c_int {
    guarded("gmux_job_begin", || {
        if job.is_null() {
            return EINVAL;
        }
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { job.write(0) };
        if name.is_null() || expected_ms.is_nan() || expected_ms < 0.0 {
            return EINVAL;
        }
        // SAFETY: non-null, and NUL-terminated by the caller's contract.
        let Ok(name) = unsafe { CStr::from_ptr(name) }.to_str() else { return EINVAL };
        let id = NEXT_JOB.fetch_add(1, Ordering::Relaxed);
        let expected_ns = (expected_ms * 1e6).min(u64::MAX as f64) as u64;
        let r = match channel() {
            Ok(c) => send(&c, &Message::JobBegin { job: id, name: JobName::new(name), expected_ns }),
            Err(r) => r,
        };
        if r == OK {
            // SAFETY: as above.
            unsafe { job.write(id) };
        }
        r
    })
}

/// `gmux_job_end(job)`: job `job` (from `gmux_job_begin`) ended. A job of number 0 (its
/// begin was not sent) is ignored.
#[no_mangle]
pub extern "C" fn gmux_job_end(job: u64) -> c_int {
    guarded("gmux_job_end", || {
        if job == 0 {
            return OK;
        }
        match channel() {
            Ok(c) => send(&c, &Message::JobEnd { job }),
            Err(r) => r,
        }
    })
}

/// `gmux_ping(timeout_us, &rtt_ns)`: a round trip through gmuxd's dispatcher, timed.
///
/// # Safety
/// `rtt_ns` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn gmux_ping(timeout_us: u32, rtt_ns: *mut u64) -> c_int {
    guarded("gmux_ping", || {
        static SEQ: AtomicU64 = AtomicU64::new(1);
        // One ping at a time: each waits for its own answer (marks do not wait for it).
        static PINGING: Mutex<()> = Mutex::new(());
        let _one = PINGING.lock().unwrap_or_else(|p| p.into_inner());
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let c = match channel() {
            Ok(c) => c,
            Err(r) => return r,
        };
        let t = Instant::now();
        match send(&c, &Message::Ping { seq }) {
            OK => {}
            e => return e,
        }
        let deadline = Duration::from_micros(timeout_us.into());
        loop {
            match c.recv(deadline.saturating_sub(t.elapsed())) {
                Ok(Some(Message::Pong { seq: s })) if s == seq => break,
                // The answer to an earlier ping that timed out.
                Ok(Some(_)) => continue,
                Ok(None) => return ETIMEDOUT,
                Err(_) => return ECHANNEL,
            }
        }
        if !rtt_ns.is_null() {
            // SAFETY: non-null and writable by the caller's contract.
            unsafe { rtt_ns.write(t.elapsed().as_nanos() as u64) };
        }
        OK
    })
}
