//! gmux's own C functions for serving applications (declared in `include/gmux.h`): an
//! application marks each request as a job, and the marks travel to gmuxd over the
//! process's serving channel, which opens at the first mark after the process
//! registered. A process with no daemon (`gmux run --standalone`, or before its first
//! CUDA call) gets [`UNTRACKED`]: its marks are not sent.

use gmux_channel::{Client, JobName, Message};
use std::ffi::{c_char, c_int, CStr};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The mark was sent.
pub const OK: c_int = 0;
/// The process has no daemon to send it to: not sent.
pub const UNTRACKED: c_int = 1;
/// A null or non-UTF-8 name, a negative or NaN estimate, or a null out-pointer.
pub const EINVAL: c_int = -libc::EINVAL;
/// The channel is full (the daemon is behind): the mark is dropped.
pub const EAGAIN: c_int = -libc::EAGAIN;
/// The channel could not be opened, or broke (the log says why); a ping timed out.
pub const ECHANNEL: c_int = -libc::EPIPE;
/// gmux failed inside (the log says where).
pub const EINTERNAL: c_int = -libc::EFAULT;

/// The channel, and the registration it was opened after (`None`: opening failed).
struct Opened {
    client: Option<Client>,
    registration: u64,
}

static CHANNEL: Mutex<Option<Opened>> = Mutex::new(None);
static NEXT_JOB: AtomicU64 = AtomicU64::new(1);

/// The device whose daemon the channel is with, plus one (0: no channel opened yet).
static CHANNEL_DEV: AtomicUsize = AtomicUsize::new(0);

/// The bound last read from the channel, for a launch that finds it locked.
static BOUND: AtomicU32 = AtomicU32::new(0);

/// The most commands the daemon's dispatcher asks device `dev`'s streams to keep in
/// flight (`None`: no bound; always so for a process that marks no jobs). Read at every
/// launch: an atomic load, and for a process with a channel an uncontended lock.
pub fn dispatcher_bound(dev: usize) -> Option<u32> {
    if CHANNEL_DEV.load(Ordering::Relaxed) != dev + 1 {
        return None;
    }
    let b = match CHANNEL.try_lock() {
        Ok(ch) => {
            let b = ch.as_ref().and_then(|o| o.client.as_ref()).map_or(0, |c| c.inflight());
            if BOUND.swap(b, Ordering::Relaxed) != b {
                crate::log!(Debug, "the dispatcher asks for at most {b} commands in flight per stream (0: no bound)");
            }
            b
        }
        Err(_) => BOUND.load(Ordering::Relaxed),
    };
    (b > 0).then_some(b)
}

/// Runs `f` on the channel, opening it first when the process registered since the last
/// try (a daemon that restarted hands out a new one).
fn with_channel(f: impl FnOnce(&mut Client) -> c_int) -> c_int {
    let Some(dev) = crate::devices::in_use().find(|d| crate::agent::attached(*d)) else { return UNTRACKED };
    let registration = crate::agent::registrations();
    let mut ch = CHANNEL.lock().unwrap_or_else(|p| p.into_inner());
    if ch.as_ref().is_none_or(|o| o.registration != registration) {
        let client = match crate::agent::open_channel(dev) {
            Ok(c) => Some(c),
            Err(why) => {
                crate::log!(Warn, "{why}; job marks are not sent until the process registers again");
                None
            }
        };
        if client.is_some() {
            CHANNEL_DEV.store(dev + 1, Ordering::Relaxed);
        }
        *ch = Some(Opened { client, registration });
    }
    match ch.as_mut().and_then(|o| o.client.as_mut()) {
        Some(c) => f(c),
        None => ECHANNEL,
    }
}

fn send(c: &mut Client, m: &Message) -> c_int {
    match c.send(m) {
        Ok(true) => OK,
        Ok(false) => EAGAIN,
        Err(e) => {
            crate::log!(Warn, "the serving channel broke ({e}); job marks are not sent");
            ECHANNEL
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
/// none). Writes the job's number to `*job` whatever the result, for `gmux_job_end`.
///
/// # Safety
/// `name` is null or a NUL-terminated string; `job` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn gmux_job_begin(name: *const c_char, expected_ms: f64, job: *mut u64) -> c_int {
    guarded("gmux_job_begin", || {
        if name.is_null() || job.is_null() || expected_ms.is_nan() || expected_ms < 0.0 {
            return EINVAL;
        }
        // SAFETY: non-null, and NUL-terminated by the caller's contract.
        let Ok(name) = unsafe { CStr::from_ptr(name) }.to_str() else { return EINVAL };
        let id = NEXT_JOB.fetch_add(1, Ordering::Relaxed);
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { job.write(id) };
        let expected_ns = (expected_ms * 1e6).min(u64::MAX as f64) as u64;
        with_channel(|c| send(c, &Message::JobBegin { job: id, name: JobName::new(name), expected_ns }))
    })
}

/// `gmux_job_end(job)`: job `job` (from `gmux_job_begin`) ended.
#[no_mangle]
pub extern "C" fn gmux_job_end(job: u64) -> c_int {
    guarded("gmux_job_end", || with_channel(|c| send(c, &Message::JobEnd { job })))
}

/// `gmux_ping(timeout_us, &rtt_ns)`: a round trip through gmuxd's dispatcher, timed.
///
/// # Safety
/// `rtt_ns` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn gmux_ping(timeout_us: u32, rtt_ns: *mut u64) -> c_int {
    guarded("gmux_ping", || {
        static SEQ: AtomicU64 = AtomicU64::new(1);
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        with_channel(|c| {
            let t = Instant::now();
            match send(c, &Message::Ping { seq }) {
                OK => {}
                e => return e,
            }
            let deadline = Duration::from_micros(timeout_us.into());
            loop {
                match c.recv(deadline.saturating_sub(t.elapsed())) {
                    Ok(Some(Message::Pong { seq: s })) if s == seq => break,
                    // An answer to an earlier ping that timed out.
                    Ok(Some(_)) => continue,
                    Ok(None) => return ECHANNEL,
                    Err(_) => return ECHANNEL,
                }
            }
            if !rtt_ns.is_null() {
                // SAFETY: non-null and writable by the caller's contract.
                unsafe { rtt_ns.write(t.elapsed().as_nanos() as u64) };
            }
            OK
        })
    })
}
