//! The serving channels: one shared-memory channel ([`gmux_channel`]) per tenant process
//! that asks for one, handed over on a connection of its own, and the dispatcher thread
//! that reads them all. It sleeps in epoll on the channels' eventfds while they are
//! idle, and polls for [`POLL`] after each message (notify-then-poll).
//!
//! The dispatcher keeps the jobs each application marks ([`Jobs`]) and answers pings.
//! With `gmux daemon --dispatch shallow` it also keeps the queues of processes running
//! long jobs shallow while a much shorter job runs ([`shallow_bounds`]), through a word
//! of each channel that the shim reads at every launch. A channel whose application
//! writes nonsense is closed, and said so once.

use super::conn::FIRST_LINE;
use super::log::say;
use super::server::{lock, Peer, Shared};
use crate::status::{JobKindStatus, JobsStatus};
use gmux_channel::{send_with_fds, Broken, Handover, Message, Server};
use gmux_core::protocol::{ChannelReady, Refused, PROTOCOL};
use gmux_core::sched::dispatch::{shallow_bounds, Jobs};
use gmux_core::{Nanos, TenantId};
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::Interest;
use tokio::net::unix::OwnedWriteHalf;

/// How long the dispatcher polls after its last message before it sleeps.
pub const POLL: Duration = Duration::from_micros(50);

/// Most job kinds of a tenant that `gmux ps --json` lists (those with the most jobs).
const KINDS_SHOWN: usize = 32;

/// Most channels one connection's process may ask for in [`OPENS_WINDOW`]: it needs one,
/// and asks again after a failed try (once a second) or a change of its daemon link.
/// Each is a memory file the daemon made.
const MAX_OPENS: u32 = 8;

/// The window [`MAX_OPENS`] counts in.
const OPENS_WINDOW: Duration = Duration::from_secs(10);

/// The epoll datum of the eventfd that stops the dispatcher.
const STOP: u64 = u64::MAX;

/// One process's open channel.
struct Open {
    server: Server,
    tenant: TenantId,
    pid: u32,
    jobs: Jobs,
    /// A refused mark was said already.
    told: bool,
    /// The in-flight bound asked of it (0: none).
    bound: u32,
}

/// Every open channel and the dispatcher's epoll set.
pub(crate) struct Channels {
    open: Mutex<HashMap<u64, Open>>,
    /// Channels each connection asked for in the current window, and when it began.
    opens: Mutex<HashMap<u64, (u32, Instant)>>,
    epoll: OwnedFd,
    stop: OwnedFd,
    stopped: AtomicBool,
    start: Instant,
    /// Keep long jobs' queues shallow while short jobs run (`--dispatch shallow`).
    shallow: bool,
    /// Some process is bounded now: what it has left is looked at again every
    /// [`REBOUND`] while the dispatcher sleeps.
    bounded: AtomicBool,
}

/// How often bounds are looked at again while one holds (an estimate runs out with time).
const REBOUND: Duration = Duration::from_millis(1);

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

impl Channels {
    /// No channels yet; the dispatcher runs once [`Channels::dispatch`] is called.
    /// `shallow`: keep long jobs' queues shallow while short ones run.
    pub(crate) fn new(shallow: bool) -> io::Result<Channels> {
        // SAFETY: epoll_create1 has no pointer arguments.
        let epoll = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: a new descriptor that nothing else owns.
        let epoll = unsafe { OwnedFd::from_raw_fd(epoll) };
        let stop = gmux_channel::eventfd()?;
        let c = Channels {
            open: Mutex::new(HashMap::new()),
            opens: Mutex::new(HashMap::new()),
            epoll,
            stop,
            stopped: AtomicBool::new(false),
            start: Instant::now(),
            shallow,
            bounded: AtomicBool::new(false),
        };
        c.watch(c.stop.as_raw_fd(), STOP)?;
        Ok(c)
    }

    /// Waits for `fd` edge-triggered: every write to an eventfd is an edge, and the
    /// dispatcher never reads one (see [`Server::wake_fd`]).
    fn watch(&self, fd: RawFd, datum: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events: (libc::EPOLLIN | libc::EPOLLET) as u32, u64: datum };
        // SAFETY: `ev` lives across the call; both descriptors are open.
        check(unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) }).map(|_| ())
    }

    fn unwatch(&self, fd: RawFd) {
        // SAFETY: both descriptors are open; EPOLL_CTL_DEL ignores the event argument.
        unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut()) };
    }

    /// Opens a channel for process `pid` of `tenant` on connection `conn` (closing one
    /// it had): returns what the process needs to open its end.
    pub(crate) fn add(&self, conn: u64, tenant: TenantId, pid: u32) -> io::Result<Handover> {
        {
            let mut opens = lock(&self.opens);
            let (n, since) = opens.entry(conn).or_insert((0, Instant::now()));
            if since.elapsed() >= OPENS_WINDOW {
                *n = 0;
                *since = Instant::now();
            }
            if *n >= MAX_OPENS {
                return Err(io::Error::other(format!("this process asked for its channel {MAX_OPENS} times in {} s; ask again later", OPENS_WINDOW.as_secs())));
            }
            *n += 1;
        }
        let (server, handed) = Server::create()?;
        let mut open = lock(&self.open);
        if let Some(old) = open.remove(&conn) {
            self.unwatch(old.server.wake_fd());
        }
        self.watch(server.wake_fd(), conn)?;
        // The dispatcher may be asleep: the first message must wake it.
        let _ = server.sleep_unless_pending();
        open.insert(conn, Open { server, tenant, pid, jobs: Jobs::default(), told: false, bound: 0 });
        Ok(handed)
    }

    /// Connection `conn` ended: closes its channel and forgets what it asked for.
    pub(crate) fn forget(&self, conn: u64) {
        lock(&self.opens).remove(&conn);
        self.remove(conn);
    }

    /// Closes the channel of connection `conn`, if it has one. Its bound is lifted first:
    /// the process may go on reading the word.
    pub(crate) fn remove(&self, conn: u64) {
        if let Some(o) = lock(&self.open).remove(&conn) {
            o.server.set_inflight(0);
            self.unwatch(o.server.wake_fd());
        }
    }

    /// The jobs that the live processes of `t` mark, if any of them opened a channel.
    pub(crate) fn jobs(&self, t: TenantId) -> Option<JobsStatus> {
        let open = lock(&self.open);
        let mut mine = open.values().filter(|o| o.tenant == t).peekable();
        mine.peek()?;
        let mut s = JobsStatus::default();
        let mut by_name: HashMap<&str, JobKindStatus> = HashMap::new();
        for o in mine {
            s.shallow |= o.bound > 0;
            s.running += o.jobs.running() as u64;
            s.refused += o.jobs.refused();
            for k in o.jobs.kinds() {
                s.done += k.done;
                by_name.entry(&k.name).and_modify(|m| m.add(k)).or_insert_with(|| JobKindStatus::of(k));
            }
        }
        let mut kinds: Vec<JobKindStatus> = by_name.into_values().collect();
        kinds.sort_by(|a, b| b.done.cmp(&a.done).then_with(|| a.name.cmp(&b.name)));
        kinds.truncate(KINDS_SHOWN);
        s.kinds = kinds;
        Some(s)
    }

    /// Nanoseconds since the channels were made: the jobs' clock.
    fn now(&self) -> Nanos {
        self.start.elapsed().as_nanos() as Nanos
    }

    /// Reads at most a ring's worth of messages from every channel, answering what needs
    /// an answer; closes the channels that broke. Returns whether any message came.
    fn drain(&self) -> bool {
        let mut open = lock(&self.open);
        let mut any = false;
        let mut broken = Vec::new();
        let now = self.now();
        for (conn, o) in open.iter_mut() {
            for _ in 0..gmux_channel::SLOTS {
                match o.server.recv() {
                    Ok(Some(m)) => {
                        any = true;
                        if let Err(e) = o.take(m, now) {
                            broken.push((*conn, e));
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        broken.push((*conn, e));
                        break;
                    }
                }
            }
        }
        for (conn, why) in broken {
            self.close_broken(&mut open, conn, why);
        }
        if any {
            self.rebound(&mut open, now);
        }
        any
    }

    /// Sets each process's in-flight bound from how long its running jobs are at `now`.
    fn rebound(&self, open: &mut HashMap<u64, Open>, now: Nanos) {
        if !self.shallow {
            return;
        }
        let sizes: Vec<_> = open.values().map(|o| o.jobs.sizes(now)).collect();
        let bounds = shallow_bounds(&sizes);
        for (o, b) in open.values_mut().zip(&bounds) {
            if o.bound != *b {
                o.bound = *b;
                o.server.set_inflight(*b);
            }
        }
        self.bounded.store(bounds.iter().any(|b| *b > 0), Ordering::Relaxed);
    }

    /// Closes connection `conn`'s channel, which its process broke (`why`), and says so.
    fn close_broken(&self, open: &mut HashMap<u64, Open>, conn: u64, why: Broken) {
        if let Some(o) = open.remove(&conn) {
            o.server.set_inflight(0);
            self.unwatch(o.server.wake_fd());
            say(&format!("pid {} broke its serving channel ({why}): closed it; its job marks are no longer read", o.pid));
        }
    }

    /// Marks every channel asleep unless one has a message waiting: whether the
    /// dispatcher may sleep. A channel found broken is closed (a process must not keep
    /// the dispatcher awake by writing nonsense).
    fn may_sleep(&self) -> bool {
        let mut open = lock(&self.open);
        let mut all = true;
        let mut broken = Vec::new();
        for (conn, o) in open.iter() {
            match o.server.sleep_unless_pending() {
                Ok(sleeps) => all &= sleeps,
                Err(e) => broken.push((*conn, e)),
            }
        }
        for (conn, why) in broken {
            self.close_broken(&mut open, conn, why);
        }
        all
    }

    /// The dispatcher: runs until [`Channels::stop`].
    pub(crate) fn dispatch(&self) {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
        let mut busy_at = Instant::now();
        while !self.stopped.load(Ordering::Relaxed) {
            if self.drain() {
                busy_at = Instant::now();
                continue;
            }
            if busy_at.elapsed() < POLL {
                std::hint::spin_loop();
                continue;
            }
            if !self.may_sleep() {
                continue;
            }
            let timeout = if self.bounded.load(Ordering::Relaxed) { REBOUND.as_millis() as i32 } else { -1 };
            // SAFETY: `events` is a live array of 64 entries.
            let n = unsafe { libc::epoll_wait(self.epoll.as_raw_fd(), events.as_mut_ptr(), events.len() as i32, timeout) };
            let mut open = lock(&self.open);
            for ev in events.iter().take(n.max(0) as usize) {
                if let Some(o) = open.get(&{ ev.u64 }) {
                    o.server.woken();
                }
            }
            self.rebound(&mut open, self.now());
            // A tick of the bounds' timer is no sign of messages: sleep again at once.
            if n > 0 {
                busy_at = Instant::now();
            }
        }
    }

    /// Ends the dispatcher.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
        gmux_channel::ring_eventfd(self.stop.as_raw_fd());
    }
}

impl Open {
    /// Takes message `m` at `now`. Refused marks are counted and said once.
    fn take(&mut self, m: Message, now: Nanos) -> Result<(), Broken> {
        let marked = match m {
            Message::JobBegin { job, name, expected_ns } => self.jobs.begin(job, &name.as_str(), expected_ns, now).map(|_| ()),
            Message::JobEnd { job } => self.jobs.end(job, now).map(|_| ()),
            Message::Ping { seq } => {
                // A full ring: the application reads none of its answers, and loses this one.
                let _ = self.server.send(&Message::Pong { seq })?;
                Ok(())
            }
            // Server::recv passes only what applications send.
            Message::Pong { .. } => Ok(()),
        };
        if let (Err(e), false) = (marked, self.told) {
            self.told = true;
            say(&format!("pid {}: {e}; refused (such marks are counted in `gmux ps --json`, and not said again)", self.pid));
        }
        Ok(())
    }
}

/// Answers a connection whose first line asked for a serving channel: the peer must be a
/// process registered as a tenant. Hands it the channel's memfd and eventfd with a
/// [`ChannelReady`] line, or says why not with a [`Refused`].
pub(crate) async fn hand_over(s: &Arc<Shared>, mut write: OwnedWriteHalf, who: Peer, version: u32) {
    let refuse = |why: String| Refused { refused: why };
    if version != PROTOCOL {
        let why = format!("this daemon speaks protocol {PROTOCOL}, the shim {version}: run gmux daemon and libgmux.so from the same build");
        return super::conn::reply(&mut write, &refuse(why)).await;
    }
    // The pid must be a registered process's, and of its tenant's user: a pid reused by
    // another user's process before the daemon saw the first leave gets nothing.
    let found = {
        let d = s.lock();
        d.conn_of_pid(who.pid).filter(|(_, t)| who.uid == 0 || d.tenants.get(*t).owner.unwrap_or(s.owner) == who.uid)
    };
    let Some((conn, tenant)) = found else {
        let why = format!("pid {} is no tenant of this daemon: a channel opens only after the process registered (run it under `gmux run`)", who.pid);
        return super::conn::reply(&mut write, &refuse(why)).await;
    };
    let handed = match s.channels.add(conn, tenant, who.pid) {
        Ok(h) => h,
        Err(e) => return super::conn::reply(&mut write, &refuse(format!("gmuxd cannot make a channel: {e}"))).await,
    };
    let mut line = serde_json::to_string(&ChannelReady { slots: gmux_channel::SLOTS }).expect("serializable");
    line.push('\n');
    let fds = [handed.memory.as_raw_fd(), handed.wake.as_raw_fd()];
    let stream = write.as_ref();
    let sent = tokio::time::timeout(FIRST_LINE, async {
        loop {
            stream.writable().await?;
            match stream.try_io(Interest::WRITABLE, || send_with_fds(stream.as_raw_fd(), line.as_bytes(), &fds)) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                r => return r,
            }
        }
    })
    .await;
    // A process that left meanwhile took its channel along only if the channel was made
    // before it left: the arbiter says whether it is still there.
    if s.lock().tenant_of_conn(conn).is_none() {
        s.channels.forget(conn);
    } else if !matches!(sent, Ok(Ok(n)) if n == line.len()) {
        s.channels.remove(conn);
    }
}
