//! Deaths of tenants' processes, seen through their pidfds in the event loop: a process's
//! memory is handed on as soon as it dies, even before its socket is closed, and a
//! process a previous daemon's journal named stops being awaited.

use super::log::say;
use super::server::{lock, Shared};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// Watches process `pid` started at `start` (0: unknown), with its connection `conn` if
/// it has one. One watcher per process, however many connections it makes; a later
/// process of the same pid is another process, with a watcher of its own.
pub(crate) fn watch_pid(s: &Arc<Shared>, pid: u32, start: u64, conn: Option<u64>) {
    if pid == 0 {
        // A peer in another pid namespace: its death is seen when its socket closes.
        return;
    }
    let key = (pid, start);
    {
        let mut w = lock(&s.watched);
        if let Some(conns) = w.get_mut(&key) {
            conns.extend(conn);
            return;
        }
        w.insert(key, conn.into_iter().collect());
    }
    let unwatched = |why: String| {
        lock(&s.watched).remove(&key);
        say(&format!("{why}; its death is noticed when its socket closes (or, for a process of the previous daemon, within 5 s)"));
    };
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, libc::O_NONBLOCK) } as i32;
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ESRCH) {
            // Already gone.
            return died(s, key);
        }
        return unwatched(format!("pidfd_open({pid}) failed ({e})"));
    }
    // SAFETY: `fd` is a new descriptor that this owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    if start != 0 && super::procfs::start_time(pid) != Some(start) {
        // The pid is already another process's: the one to watch is gone.
        return died(s, key);
    }
    // SAFETY: an OwnedFd keeps its descriptor open, and returns that one, until dropped,
    // which the AsyncFd that owns it does last.
    let fd = match unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) } {
        Ok(fd) => fd,
        Err(e) => return unwatched(format!("cannot watch pid {pid} ({e})")),
    };
    let s = s.clone();
    tokio::spawn(async move {
        // A pidfd turns readable once, when its process exits.
        let _ = fd.readable().await;
        died(&s, key);
    });
}

fn died(s: &Arc<Shared>, (pid, start): (u32, u64)) {
    let conns = lock(&s.watched).remove(&(pid, start)).unwrap_or_default();
    for c in conns {
        s.leave(c, "exited");
    }
    let mut d = s.lock();
    if d.orphan_gone(pid, start) {
        say(&format!("pid {pid}, a process of the previous daemon, exited"));
        s.decide(&mut d);
        drop(d);
        s.wake.notify_one();
    }
}
