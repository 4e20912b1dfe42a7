//! The daemon's log: lines go to a thread of their own that writes them to stderr, so
//! that no daemon lock is ever held while stderr is written (a terminal on pause or a
//! pipe nobody drains would otherwise stall every tenant). Lines that find the queue full
//! are counted and reported once there is room.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Lines queued at most.
const QUEUE: usize = 4096;

static QUEUED: OnceLock<SyncSender<String>> = OnceLock::new();
static DROPPED: AtomicU64 = AtomicU64::new(0);
static PENDING: AtomicU64 = AtomicU64::new(0);

/// Starts the writer thread; until then lines go to stderr directly.
pub fn start() {
    let (tx, rx) = sync_channel::<String>(QUEUE);
    if QUEUED.set(tx).is_err() {
        return;
    }
    let spawned = std::thread::Builder::new().name("gmuxd-log".into()).spawn(move || {
        for line in rx {
            let dropped = DROPPED.swap(0, Ordering::Relaxed);
            if dropped > 0 {
                eprintln!("gmuxd: {dropped} log lines dropped (stderr did not keep up)");
            }
            eprintln!("{line}");
            PENDING.fetch_sub(1, Ordering::Release);
        }
    });
    if spawned.is_err() {
        eprintln!("gmuxd: cannot start the log thread; logging from the callers");
    }
}

/// Logs one line with the wall-clock time (RFC 3339, UTC, milliseconds), so that events
/// can be lined up with other programs' clocks.
pub fn say(msg: &str) {
    let line = format!("gmuxd {}: {msg}", humantime::format_rfc3339_millis(std::time::SystemTime::now()));
    match QUEUED.get() {
        Some(tx) => {
            PENDING.fetch_add(1, Ordering::Acquire);
            if tx.try_send(line).is_err() {
                PENDING.fetch_sub(1, Ordering::Release);
                DROPPED.fetch_add(1, Ordering::Relaxed);
            }
        }
        None => eprintln!("{line}"),
    }
}

/// Waits (at most half a second) until the queued lines are written: before exiting.
pub fn flush() {
    let t0 = Instant::now();
    while PENDING.load(Ordering::Acquire) > 0 && t0.elapsed() < Duration::from_millis(500) {
        std::thread::sleep(Duration::from_millis(5));
    }
}
