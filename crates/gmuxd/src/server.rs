//! The daemon's sockets and threads: one thread per connection (and, for a tenant's, a
//! writer of its grants, [`super::outbox`]), one per process that watches its pidfd, and
//! the scheduler thread that decides the grants.

use super::ctl::{self, Request};
use super::outbox::{self, Outbox};
use super::log::say;
use super::rundir;
use super::state::{Daemon, Hello, Sender};
use crate::Failure;
use gmux_core::protocol::{FromShim, Grant, Refused};
use gmux_core::size::format_size;
use gmux_core::Nanos;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Who is on the other end of a connection (`SO_PEERCRED`).
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    /// Its pid.
    pub pid: u32,
    /// Its uid.
    pub uid: u32,
}

/// Who is on the other end of a connected socket (`SO_PEERCRED`).
pub fn peer(s: &UnixStream) -> std::io::Result<Peer> {
    let mut c = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `c` and `len` are valid for getsockopt to write.
    let r = unsafe { libc::getsockopt(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED, &mut c as *mut _ as *mut libc::c_void, &mut len) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(Peer { pid: c.pid as u32, uid: c.uid })
}

/// How long a grant may wait for its process to read before the process loses its turns.
const PATIENCE: Duration = Duration::from_millis(500);

struct Shared {
    d: Mutex<Daemon>,
    wake: Condvar,
    out: Mutex<HashMap<u64, Arc<Outbox>>>,
    owner: u32,
    start: Instant,
    next_conn: AtomicU64,
    /// Open connections per uid.
    conns: Mutex<HashMap<u32, usize>>,
    /// Connections per watched pid; one watcher thread per pid.
    watched: Mutex<HashMap<u32, Vec<u64>>>,
    last_tenant: Mutex<Instant>,
    verbose: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Daemon> {
        self.d.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> Nanos {
        self.start.elapsed().as_nanos() as Nanos
    }

    /// Decides and posts the grants that changed (with the state locked, so that each
    /// process's newest grant is the newest decided); their writers send them.
    fn decide(&self, d: &mut Daemon) {
        let grants = d.decide(self.now());
        self.send(&grants);
        for e in d.events.drain(..) {
            if self.verbose {
                say(&e);
            }
        }
    }

    fn send(&self, grants: &[(u64, Grant)]) {
        let out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        for (conn, g) in grants {
            if let Some(o) = out.get(conn) {
                let mut line = serde_json::to_string(g).expect("serializable");
                line.push('\n');
                o.post(line);
            }
        }
    }

    /// Forgets connection `conn` (its process exited or hung up) and hands its memory on.
    fn leave(&self, conn: u64, why: &str) {
        let t0 = Instant::now();
        let mut d = self.lock();
        let held = d.usage_of_conn(conn);
        let Some((pid, tenant)) = d.leave(conn) else { return };
        if let Some(conns) = self.watched.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&pid) {
            conns.retain(|c| *c != conn);
        }
        if let Some(o) = self.out.lock().unwrap_or_else(|p| p.into_inner()).remove(&conn) {
            o.close();
        }
        self.decide(&mut d);
        if d.live().is_empty() {
            *self.last_tenant.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        }
        drop(d);
        self.wake.notify_all();
        say(&format!("tenant {tenant:?} pid {pid} {why}; its {} of GPU memory went to the others in {:.2} ms", format_size(held), t0.elapsed().as_secs_f64() * 1e3));
    }
}

/// Listens on `path` until stopped; with `group`, that group's members may connect too.
pub fn serve(path: &Path, d: Daemon, group: Option<u32>, idle_exit: u64, verbose: bool) -> Result<(), Failure> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        rundir::ensure_dir(dir, group).map_err(Failure::Runtime)?;
    }
    let lock = rundir::lock(path).map_err(Failure::Runtime)?;
    super::log::start();
    rundir::clear_stale(path, &lock).map_err(Failure::Runtime)?;
    let listener = UnixListener::bind(path).map_err(|e| Failure::Runtime(format!("cannot listen on {}: {e}", path.display())))?;
    if let Some(gid) = group {
        rundir::share(path, gid, 0o660).map_err(Failure::Runtime)?;
    }
    eprintln!(
        "gmuxd: serving {} (pid {}): budget {}, host {}, policy {}, switch {:?}",
        path.display(),
        std::process::id(),
        d.hbm.map_or("device".into(), format_size),
        d.host.map_or("unlimited".into(), format_size),
        d.policy_name(),
        d.switch
    );
    let shared = Arc::new(Shared {
        d: Mutex::new(d),
        wake: Condvar::new(),
        out: Mutex::new(HashMap::new()),
        // SAFETY: geteuid has no preconditions.
        owner: unsafe { libc::geteuid() },
        start: Instant::now(),
        next_conn: AtomicU64::new(1),
        conns: Mutex::new(HashMap::new()),
        watched: Mutex::new(HashMap::new()),
        last_tenant: Mutex::new(Instant::now()),
        verbose,
    });
    let s = shared.clone();
    std::thread::Builder::new().name("gmuxd-sched".into()).spawn(move || schedule(&s)).expect("thread");
    if idle_exit > 0 {
        let s = shared.clone();
        let path = path.to_path_buf();
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(200));
            let idle = s.lock().live().is_empty() && s.last_tenant.lock().unwrap_or_else(|p| p.into_inner()).elapsed().as_secs() >= idle_exit;
            if idle {
                say(&format!("no tenants for {idle_exit} s; exiting"));
                let _ = std::fs::remove_file(&path);
                super::log::flush();
                std::process::exit(0);
            }
        });
    }
    let _held = lock;
    let mut last_complaint: Option<Instant> = None;
    for conn in listener.incoming() {
        let stream = match conn {
            Ok(stream) => stream,
            Err(e) => {
                // Out of descriptors (or another transient failure): wait instead of spinning.
                if last_complaint.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                    say(&format!("cannot accept a connection ({e}); retrying every 100 ms"));
                    last_complaint = Some(Instant::now());
                }
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let Some(slot) = Slot::take(&shared, &stream) else { continue };
        let s = shared.clone();
        let p = path.to_path_buf();
        let spawned = std::thread::Builder::new().name("gmuxd-conn".into()).spawn(move || {
            let _slot = slot;
            serve_conn(&s, stream, &p);
        });
        if let Err(e) = spawned {
            say(&format!("cannot start a thread for a connection ({e}); dropping it"));
        }
    }
    Ok(())
}

/// Most connections one user other than the daemon's owner and root may hold at once.
const MAX_CONNS_PER_USER: usize = 256;

/// Longest line a peer may send (a report is about 400 bytes).
const MAX_LINE: u64 = 64 << 10;

/// How long a new connection has to send its first line.
const FIRST_LINE: Duration = Duration::from_secs(5);

/// One user's connection, counted while it lives.
struct Slot {
    s: Arc<Shared>,
    uid: u32,
}

impl Slot {
    /// Counts a new connection, or refuses it (with the reason, to the peer) when its
    /// user holds too many.
    fn take(s: &Arc<Shared>, stream: &UnixStream) -> Option<Slot> {
        let who = peer(stream).ok()?;
        let mut conns = s.conns.lock().unwrap_or_else(|p| p.into_inner());
        let n = conns.entry(who.uid).or_default();
        if *n >= MAX_CONNS_PER_USER && who.uid != s.owner && who.uid != 0 {
            drop(conns);
            let reply = ctl::Reply::error(format!("uid {} already holds {MAX_CONNS_PER_USER} connections to gmuxd; close some", who.uid));
            let _ = (&*stream).write_all(format!("{}\n", serde_json::to_string(&reply).expect("serializable")).as_bytes());
            return None;
        }
        *n += 1;
        Some(Slot { s: s.clone(), uid: who.uid })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut conns = self.s.conns.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = conns.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                conns.remove(&self.uid);
            }
        }
    }
}

/// A connection's reading end with an optional deadline for everything read (not each
/// read: a peer that trickles a byte at a time still runs out of time).
struct Timed {
    s: UnixStream,
    deadline: Option<Instant>,
}

impl Timed {
    /// Reads without a deadline from now on.
    fn untimed(&mut self) {
        self.deadline = None;
        let _ = self.s.set_read_timeout(None);
    }
}

impl std::io::Read for Timed {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if let Some(d) = self.deadline {
            let left = d.checked_duration_since(Instant::now()).filter(|l| !l.is_zero());
            let left = left.ok_or_else(|| std::io::Error::new(std::io::ErrorKind::TimedOut, format!("no first line within {} s", FIRST_LINE.as_secs())))?;
            self.s.set_read_timeout(Some(left))?;
        }
        self.s.read(buf)
    }
}

/// Reads one line of at most [`MAX_LINE`] bytes into `line`. `Ok(false)`: the peer hung
/// up; an error: it failed, or sent a longer line.
fn read_line<R: BufRead>(r: &mut R, line: &mut String) -> std::io::Result<bool> {
    line.clear();
    let n = std::io::Read::take(r, MAX_LINE + 1).read_line(line)?;
    if n as u64 > MAX_LINE {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("a line longer than {MAX_LINE} bytes")));
    }
    Ok(n > 0)
}

/// Sends grants whenever something changed, and at slice ends.
fn schedule(s: &Shared) {
    let mut d = s.lock();
    loop {
        s.decide(&mut d);
        let wait = d.slice_end().map_or(Duration::from_millis(50), |end| Duration::from_nanos(end.saturating_sub(s.now()).max(100_000)));
        d = s.wake.wait_timeout(d, wait).unwrap_or_else(|p| p.into_inner()).0;
    }
}

fn serve_conn(s: &Arc<Shared>, stream: UnixStream, path: &Path) {
    let Ok(who) = peer(&stream) else { return };
    let Ok(read) = stream.try_clone() else { return };
    let mut reader = BufReader::new(Timed { s: read, deadline: Some(Instant::now() + FIRST_LINE) });
    let mut line = String::new();
    match read_line(&mut reader, &mut line) {
        Ok(true) => {}
        Ok(false) => return,
        Err(e) => {
            say(&format!("pid {} (uid {}): {e}; closing its connection", who.pid, who.uid));
            return;
        }
    }
    // A tenant may stay silent for long; its death is seen through its pid.
    reader.get_mut().untimed();
    match serde_json::from_str::<FromShim>(line.trim()) {
        Ok(FromShim::Hello { version, tenant, priority, high }) => serve_tenant(s, stream, reader, who, &Hello { version, tenant: &tenant, priority, high }),
        _ => {
            let reply = match serde_json::from_str::<Request>(line.trim()) {
                Ok(Request::Stop) if who.uid == s.owner || who.uid == 0 => {
                    let _ = (&stream).write_all(b"{\"ok\":true,\"text\":\"gmuxd stopped\"}\n");
                    let _ = std::fs::remove_file(path);
                    say(&format!("stopped by pid {}", who.pid));
                    super::log::flush();
                    std::process::exit(0);
                }
                Ok(req) => ctl::answer(&mut s.lock(), &req, who, s.owner),
                Err(e) => ctl::Reply::error(format!("bad request ({e}); use the gmux CLI of the same version as the daemon")),
            };
            s.wake.notify_all();
            let mut text = serde_json::to_string(&reply).expect("serializable");
            text.push('\n');
            let _ = stream.set_write_timeout(Some(FIRST_LINE));
            let _ = (&stream).write_all(text.as_bytes());
        }
    }
}

fn serve_tenant(s: &Arc<Shared>, stream: UnixStream, mut reader: BufReader<Timed>, who: Peer, hello: &Hello) {
    let conn = s.next_conn.fetch_add(1, Ordering::Relaxed);
    let Ok(out) = stream.try_clone() else { return };
    let weak = Arc::downgrade(s);
    let stalled = move |stuck: bool| {
        if let Some(s) = weak.upgrade() {
            if s.lock().set_unresponsive(conn, stuck) {
                say(&format!("pid {} {}", who.pid, if stuck { format!("has not read its grants for {} ms: it loses its turns until it does", PATIENCE.as_millis()) } else { "reads its grants again".into() }));
            }
            s.wake.notify_all();
        }
    };
    let Ok(outbox) = outbox::start(out, PATIENCE, stalled) else { return };
    s.out.lock().unwrap_or_else(|p| p.into_inner()).insert(conn, outbox);
    let sender = Sender { pid: who.pid, uid: who.uid, admin: who.uid == s.owner || who.uid == 0 };
    {
        let mut d = s.lock();
        if let Err(why) = d.admit(conn, sender, hello) {
            drop(d);
            if let Some(o) = s.out.lock().unwrap_or_else(|p| p.into_inner()).remove(&conn) {
                o.close();
            }
            say(&format!("pid {} (uid {}) refused: {why}", who.pid, who.uid));
            let mut line = serde_json::to_string(&Refused { refused: why }).expect("serializable");
            line.push('\n');
            let _ = stream.set_write_timeout(Some(FIRST_LINE));
            let _ = (&stream).write_all(line.as_bytes());
            return;
        }
        s.decide(&mut d);
    }
    let (tenant, priority) = (hello.tenant, hello.priority);
    say(&format!("pid {} joined tenant {tenant:?} (priority {priority})", who.pid));
    watch_pid(s.clone(), conn, who.pid);
    let mut line = String::new();
    let mut bad = 0u64;
    loop {
        match read_line(&mut reader, &mut line) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => {
                say(&format!("pid {}: {e}; disconnecting it", who.pid));
                break;
            }
        }
        match serde_json::from_str::<FromShim>(line.trim()) {
            Ok(FromShim::Report(r)) => {
                let doubt = s.lock().report(conn, r);
                if let Some(why) = doubt {
                    say(&format!("pid {}: not believed: {why}; the daemon goes by its grants instead", who.pid));
                }
                s.wake.notify_all();
            }
            _ => {
                bad += 1;
                if bad <= 3 {
                    say(&format!("pid {}: ignoring a bad message: {:?}", who.pid, line.trim().chars().take(200).collect::<String>()));
                }
            }
        }
    }
    if bad > 3 {
        say(&format!("pid {}: ignored {} more bad messages", who.pid, bad - 3));
    }
    s.leave(conn, "disconnected");
    s.lock().closed(conn);
}

/// Reclaims a process's memory as soon as it dies (its pidfd becomes readable), even
/// before its socket is closed. One watcher per pid, however many connections it makes.
fn watch_pid(s: Arc<Shared>, conn: u64, pid: u32) {
    if pid == 0 {
        // A peer in another pid namespace: its death is seen when its socket closes.
        return;
    }
    {
        let mut w = s.watched.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(conns) = w.get_mut(&pid) {
            conns.push(conn);
            return;
        }
        w.insert(pid, vec![conn]);
    }
    let unwatched = |why: String| {
        s.watched.lock().unwrap_or_else(|p| p.into_inner()).remove(&pid);
        say(&format!("{why}; its death is noticed when its socket closes"));
    };
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) } as i32;
    if fd < 0 {
        return unwatched(format!("pidfd_open({pid}) failed ({})", std::io::Error::last_os_error()));
    }
    // SAFETY: `fd` is a new descriptor that this owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let watcher = s.clone();
    let spawned = std::thread::Builder::new().name("gmuxd-pid".into()).spawn(move || {
        let s = watcher;
        let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        while unsafe { libc::poll(&mut p, 1, -1) } < 0 {}
        let conns = s.watched.lock().unwrap_or_else(|p| p.into_inner()).remove(&pid).unwrap_or_default();
        for c in conns {
            s.leave(c, "exited");
        }
    });
    if let Err(e) = spawned {
        unwatched(format!("cannot watch pid {pid} ({e})"));
    }
}
