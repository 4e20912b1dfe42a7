//! The serving channels: one shared-memory channel ([`gmux_channel`]) per tenant process
//! that asks for one, handed over on a connection of its own, and the dispatcher thread
//! that reads them all. It sleeps in epoll on the channels' eventfds while they are
//! idle, and polls for [`POLL`] after each message (notify-then-poll).
//!
//! The dispatcher keeps the jobs each application marks ([`Jobs`]) and answers pings.
//! With `gmux daemon --dispatch shallow` it also keeps the queues of processes running
//! long jobs shallow while a much shorter job runs ([`shallow_bounds`]); with a release
//! policy (`fifo`, `sjf`, `rr`, `srpt-deficit`) it chooses one job at a time and holds
//! the processes whose jobs are all far longer ([`Releaser`]). Both speak through a word of
//! each channel that the shim reads at every launch. A loaded scheduling program with an
//! `admission` hook may keep jobs waiting as well ([`admission`]). A channel whose
//! application writes nonsense is closed, and said so once.

mod admission;

use super::log::say;
use super::server::{lock, Dispatch};
use crate::status::{JobKindStatus, JobsStatus};
use gmux_channel::{check, Broken, Handover, Message, Server};
use gmux_core::hooks::SchedHooks;
use gmux_core::sched::dispatch::{shallow_bounds, DispatchPolicy, Jobs, Process, Release, Releaser};
use gmux_core::{Nanos, TenantId};
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

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
    /// The in-flight word written to it (0: no bound; [`gmux_channel::HOLD`]: held).
    bound: u32,
}

/// What the dispatcher does with the marks (`gmux daemon --dispatch`).
enum Mode {
    /// Keeps them.
    Keep,
    /// Keeps long jobs' queues shallow while a short one runs.
    Shallow,
    /// Chooses one job at a time, and holds the processes of far longer ones.
    Release(Mutex<Releaser>),
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
    mode: Mode,
    /// Some process is bounded or held now, or a job waits for admission: the bounds are
    /// decided again every [`REBOUND`] while the dispatcher sleeps.
    bounded: AtomicBool,
    /// The loaded policies' `admission` program, if one is.
    admission: Mutex<Option<Box<dyn SchedHooks>>>,
}

/// How often bounds are decided again while one holds (an estimate runs out with time,
/// and a release policy's fairness counts it).
const REBOUND: Duration = Duration::from_millis(1);

impl Channels {
    /// No channels yet; the dispatcher runs once [`Channels::dispatch`] is called, and
    /// does with the marks what `dispatch` says (`fairness_ms`: `srpt-deficit`'s
    /// threshold).
    pub(crate) fn new(dispatch: Dispatch, fairness_ms: f64) -> io::Result<Channels> {
        let policy = |p| Mode::Release(Mutex::new(Releaser::new(p)));
        let mode = match dispatch {
            Dispatch::None => Mode::Keep,
            Dispatch::Shallow => Mode::Shallow,
            Dispatch::Fifo => policy(DispatchPolicy::Fifo),
            Dispatch::Sjf => policy(DispatchPolicy::Sjf),
            Dispatch::Rr => policy(DispatchPolicy::RoundRobin),
            Dispatch::SrptDeficit => policy(DispatchPolicy::SrptDeficit { threshold: fairness_ms }),
        };
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
            mode,
            bounded: AtomicBool::new(false),
            admission: Mutex::new(None),
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
            old.server.set_inflight(0);
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
        let mut open = lock(&self.open);
        if let Some(o) = open.remove(&conn) {
            o.server.set_inflight(0);
            self.unwatch(o.server.wake_fd());
            self.closed(&mut open, o.tenant);
        }
    }

    /// A channel of `tenant` was closed: the others are decided again at once (it may
    /// have held them), and a tenant with none left is forgotten by the release policy.
    fn closed(&self, open: &mut HashMap<u64, Open>, tenant: TenantId) {
        if let Mode::Release(r) = &self.mode {
            if !open.values().any(|o| o.tenant == tenant) {
                lock(r).forget(tenant);
            }
        }
        self.rebound(open, self.now());
    }

    /// The jobs that the live processes of `t` mark, if any of them opened a channel.
    pub(crate) fn jobs(&self, t: TenantId) -> Option<JobsStatus> {
        let open = lock(&self.open);
        let mut mine = open.values().filter(|o| o.tenant == t).peekable();
        mine.peek()?;
        let mut s = JobsStatus::default();
        let mut by_name: HashMap<&str, JobKindStatus> = HashMap::new();
        for o in mine {
            s.shallow |= o.bound > 0 && o.bound != gmux_channel::HOLD;
            s.held |= o.bound == gmux_channel::HOLD;
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

    /// Sets each process's in-flight word from its running jobs at `now`.
    fn rebound(&self, open: &mut HashMap<u64, Open>, now: Nanos) {
        let mut open: Vec<&mut Open> = open.values_mut().collect();
        let mut bounds: Vec<u32> = match &self.mode {
            Mode::Keep => vec![0; open.len()],
            Mode::Shallow => {
                let sizes: Vec<_> = open.iter().map(|o| o.jobs.sizes(now)).collect();
                shallow_bounds(&sizes)
            }
            Mode::Release(r) => {
                let mut procs: Vec<Process<'_>> = open.iter_mut().map(|o| Process { client: o.tenant, jobs: &mut o.jobs }).collect();
                let word = |r: &Release| match *r {
                    Release::Free => 0,
                    Release::Shallow(n) => n,
                    Release::Hold => gmux_channel::HOLD,
                };
                lock(r).decide(&mut procs, now).iter().map(word).collect()
            }
        };
        let waiting = self.hold_for_admission(&mut open, &mut bounds, now);
        if let (Mode::Release(r), true) = (&self.mode, waiting) {
            let runs = |t: TenantId| open.iter().zip(&bounds).any(|(o, b)| o.tenant == t && *b != gmux_channel::HOLD && o.jobs.running() > 0);
            lock(r).served_only(runs);
        }
        for (o, b) in open.iter_mut().zip(&bounds) {
            // A held process's jobs are not being served (a release policy said so already).
            o.jobs.set_held(*b == gmux_channel::HOLD, now);
            if o.bound != *b {
                o.bound = *b;
                o.server.set_inflight(*b);
            }
        }
        self.bounded.store(waiting || bounds.iter().any(|b| *b > 0), Ordering::Relaxed);
    }

    /// Closes connection `conn`'s channel, which its process broke (`why`), and says so.
    fn close_broken(&self, open: &mut HashMap<u64, Open>, conn: u64, why: Broken) {
        if let Some(o) = open.remove(&conn) {
            o.server.set_inflight(0);
            self.unwatch(o.server.wake_fd());
            say(&format!("pid {} broke its serving channel ({why}): closed it; its job marks are no longer read", o.pid));
            self.closed(open, o.tenant);
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
