//! The daemon's event loop: a tokio runtime of two worker threads serves every
//! connection ([`crate::conn`]), the grant writers ([`crate::outbox`]), the watchers of
//! process deaths ([`crate::watch`]) and the scheduler, which decides the grants. The
//! decisions themselves are [`Arbiter`]'s, under one lock that is never held across an
//! await or a socket write.

use super::channels::Channels;
use super::journal::{self, Entry, Journal, Settings};
use super::log::say;
use super::metrics::{self, Metrics};
use super::outbox::Outbox;
use super::rundir;
pub use super::stream::Stamped;
use super::stream::{Watch, EVENTS_KEPT};
use crate::Failure;
use gmux_core::arbiter::event::{Event, Notice};
use gmux_core::arbiter::Arbiter;
use gmux_core::size::format_size;
use gmux_core::Nanos;
use std::collections::{BTreeMap, HashMap};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, Notify};

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

/// How the daemon runs, besides its [`Settings`].
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Members of this group may use the daemon too.
    pub group: Option<u32>,
    /// Exit after this many seconds without tenants (0: never).
    pub idle_exit: u64,
    /// A tenant's owner may load memory policies for it (`gmux policy load --tenant`).
    pub allow_tenant_policies: bool,
    /// Log every switch and slice start.
    pub verbose: bool,
    /// Take the settings of the previous daemon on this socket from its journal.
    pub resume: bool,
    /// Serve Prometheus metrics at this address ([`crate::metrics`]).
    pub metrics: Option<std::net::SocketAddr>,
    /// What the dispatcher does with the jobs applications mark.
    pub dispatch: Dispatch,
    /// The deficit, in ns of the GPU's time, past which `srpt-deficit` serves the most
    /// starved tenant first.
    pub fairness: u64,
}

/// What the dispatcher does with the jobs applications mark (`gmux daemon --dispatch`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Dispatch {
    /// Keeps them: `gmux ps --json` shows them.
    #[default]
    None,
    /// Also keeps the queues of processes running long jobs shallow while a much shorter
    /// job runs (docs/serving.md).
    Shallow,
    /// Chooses the oldest job, and holds the processes whose jobs are all far longer.
    Fifo,
    /// The same, choosing the job of least estimated length.
    Sjf,
    /// The same, choosing each tenant with a running job in turn, a decision each.
    Rr,
    /// The same, choosing the job of least estimated remaining time, with deficit
    /// fairness between tenants (`--fairness`).
    SrptDeficit,
}

/// What every task of the daemon shares.
pub(crate) struct Shared {
    d: Mutex<Arbiter>,
    /// Wakes the scheduler: something changed.
    pub(crate) wake: Notify,
    /// Ends the daemon: `gmux stop`, or no tenants for `--idle-exit`.
    done: Notify,
    pub(crate) out: Mutex<HashMap<u64, Outbox>>,
    /// `None` after a write failed: written whole again at the next change.
    journal: Mutex<Option<Journal>>,
    journal_path: PathBuf,
    /// The journal's first line.
    started: Entry,
    pub(crate) owner: u32,
    pub(crate) path: PathBuf,
    start: Instant,
    pub(crate) next_conn: AtomicU64,
    /// Open connections per uid.
    pub(crate) conns: Mutex<HashMap<u32, usize>>,
    /// Loaded policies; taken after `d`, and before `out`, when held together.
    pub(crate) policies: Mutex<super::policy::Policies>,
    /// A tenant's owner may load memory policies for it.
    pub(crate) tenant_policies: bool,
    /// Connections per watched process (pid and start time); one watcher per process.
    pub(crate) watched: Mutex<BTreeMap<(u32, u64), Vec<u64>>>,
    last_tenant: Mutex<Instant>,
    verbose: bool,
    /// What `/metrics` keeps between scrapes, when served.
    pub(crate) metrics: Option<Metrics>,
    /// Events for `gmux events` subscribers; one that falls this far behind loses the
    /// oldest ([`EVENTS_KEPT`]).
    pub(crate) events: broadcast::Sender<Arc<Stamped>>,
    /// The `gmux watch` triggers, looked at after each decision.
    pub(crate) watches: Mutex<Vec<Watch>>,
    /// Refusals told to `gmux events` per uid in the current second, and when it began.
    pub(crate) refusals_told: Mutex<HashMap<u32, (Instant, u32)>>,
    /// The processes' serving channels, read by the dispatcher thread.
    pub(crate) channels: Channels,
}

/// Locks `m`, taking over from a holder that panicked.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Arbiter> {
        lock(&self.d)
    }

    fn now(&self) -> Nanos {
        self.start.elapsed().as_nanos() as Nanos
    }

    /// Keeps the changes in the journal, then decides and posts the grants that changed
    /// (with the state locked, so that each process's newest grant is the newest decided,
    /// and none goes out before what it depends on is kept); their writers send them.
    pub(crate) fn decide(&self, d: &mut Arbiter) {
        self.keep(d);
        let grants = d.decide(self.now());
        let out = lock(&self.out);
        for (conn, g) in &grants {
            if let Some(o) = out.get(conn) {
                let mut line = serde_json::to_string(g).expect("serializable");
                line.push('\n');
                o.post(line);
            }
        }
        drop(out);
        for e in d.events.drain(..) {
            if self.verbose {
                say(&e);
            }
        }
        for n in d.notices.drain(..) {
            self.publish(n);
        }
        for (policy, line, text) in lock(&self.policies).traces() {
            say(&line);
            self.publish(Notice { uid: None, event: Event::PolicyTrace { tenant: String::new(), pid: 0, policy, text } });
        }
        self.check_watches(d);
    }

    /// Appends the state's new journal entries, or rewrites the journal whole once it has
    /// grown past several times what it describes. A write that fails is logged once; the
    /// daemon serves on and writes the journal whole at the next change.
    fn keep(&self, d: &mut Arbiter) {
        if d.journal.is_empty() {
            return;
        }
        let mut j = lock(&self.journal);
        let r = match j.as_mut() {
            Some(jr) if !jr.grown() => jr.append(&d.journal).map_err(|e| format!("cannot write the journal {} ({e})", jr.path().display())),
            // Grown, or broken by a failed write: written whole again.
            _ => self.rewrite(d).map(|new| {
                if j.is_none() {
                    say(&format!("the journal {} is written again", new.path().display()));
                }
                *j = Some(new);
            }),
        };
        if let Err(e) = r {
            if j.take().is_some() {
                say(&format!("{e}; serving on, and trying again at the next change: until then a daemon after this one would not know the processes since"));
            }
        }
        d.journal.clear();
    }

    fn rewrite(&self, d: &Arbiter) -> Result<Journal, String> {
        Journal::create(&self.journal_path, &whole(&self.started, d))
    }

    /// Ends the daemon, saying why: its socket goes at once, so that nobody connects to a
    /// daemon on its way out. Its journal stays, for the next daemon.
    pub(crate) fn stop(&self, why: &str) {
        let _ = std::fs::remove_file(&self.path);
        say(why);
        self.done.notify_one();
    }

    /// Forgets connection `conn` (its process exited or hung up) and hands its memory on.
    pub(crate) fn leave(&self, conn: u64, why: &str) {
        let t0 = Instant::now();
        let mut d = self.lock();
        let held = d.usage_of_conn(conn);
        let Some((pid, tenant)) = d.leave(conn) else { return };
        let uid = d.tenants.find(&tenant).ok().and_then(|t| d.tenants.get(t).owner);
        self.publish(Notice { uid, event: Event::Left { tenant: tenant.clone(), pid, why: why.into(), held } });
        for (_, conns) in lock(&self.watched).range_mut((pid, 0)..=(pid, u64::MAX)) {
            conns.retain(|c| *c != conn);
        }
        lock(&self.out).remove(&conn);
        self.channels.forget(conn);
        self.decide(&mut d);
        if d.live().is_empty() {
            *lock(&self.last_tenant) = Instant::now();
        }
        drop(d);
        self.wake.notify_one();
        say(&format!(
            "tenant {tenant:?} pid {pid} {why}; its {} of GPU memory went to the others in {:.2} ms",
            format_size(held),
            t0.elapsed().as_secs_f64() * 1e3
        ));
    }
}

/// Listens on `path` until stopped.
pub fn serve(path: &Path, settings: Settings, opts: &Options) -> Result<(), Failure> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        rundir::ensure_dir(dir, opts.group).map_err(Failure::Runtime)?;
    }
    let held = rundir::lock(path).map_err(Failure::Runtime)?;
    super::log::start();
    rundir::clear_stale(path, &held).map_err(Failure::Runtime)?;
    let jpath = journal::path_for(path);
    let (d, started, journal) = take_over(&jpath, settings, opts.resume)?;
    let listener = std::os::unix::net::UnixListener::bind(path).map_err(|e| Failure::Runtime(format!("cannot listen on {}: {e}", path.display())))?;
    if let Some(gid) = opts.group {
        rundir::share(path, gid, 0o660).map_err(Failure::Runtime)?;
    }
    listener.set_nonblocking(true).map_err(|e| Failure::Runtime(e.to_string()))?;
    let scrapes = opts.metrics.map(metrics::bind).transpose()?;
    announce(path, &d);
    if let Some(l) = &scrapes {
        eprintln!("gmuxd: metrics at http://{}/metrics", l.local_addr().map_err(|e| Failure::Runtime(e.to_string()))?);
    }
    // SAFETY: geteuid has no preconditions.
    let owner = unsafe { libc::geteuid() };
    let gpu = path.file_stem().map_or("gpu0".into(), |s| s.to_string_lossy().into_owned());
    let awaited: Vec<(u32, u64)> = d.awaited().map(|(pid, start, _)| (pid, start)).collect();
    let shared = Arc::new(Shared {
        d: Mutex::new(d),
        wake: Notify::new(),
        done: Notify::new(),
        out: Mutex::new(HashMap::new()),
        journal: Mutex::new(Some(journal)),
        journal_path: jpath,
        started,
        owner,
        path: path.to_path_buf(),
        start: Instant::now(),
        next_conn: AtomicU64::new(1),
        conns: Mutex::new(HashMap::new()),
        policies: Mutex::default(),
        tenant_policies: opts.allow_tenant_policies,
        watched: Mutex::new(BTreeMap::new()),
        last_tenant: Mutex::new(Instant::now()),
        verbose: opts.verbose,
        metrics: scrapes.is_some().then(|| Metrics::new(&gpu, owner)),
        events: broadcast::channel(EVENTS_KEPT).0,
        watches: Mutex::new(Vec::new()),
        refusals_told: Mutex::new(HashMap::new()),
        channels: Channels::new(opts.dispatch, opts.fairness as f64 / 1e6)
            .map_err(|e| Failure::Runtime(format!("cannot start the serving channels' dispatcher: {e}")))?,
    });
    let dispatcher = {
        let shared = shared.clone();
        std::thread::Builder::new().name("gmuxd-dispatch".into()).spawn(move || shared.channels.dispatch())
    }
    .map_err(|e| Failure::Runtime(format!("cannot start the serving channels' dispatcher: {e}")))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("gmuxd")
        .enable_all()
        .build()
        .map_err(|e| Failure::Runtime(format!("cannot start the daemon's runtime: {e}")))?;
    let channels = shared.clone();
    let served = rt.block_on(async move {
        let listener = tokio::net::UnixListener::from_std(listener).map_err(|e| Failure::Runtime(e.to_string()))?;
        for (pid, start) in awaited {
            super::watch::watch_pid(&shared, pid, start, None);
        }
        tokio::spawn(schedule(shared.clone()));
        if let Some(l) = scrapes {
            tokio::spawn(metrics::serve(shared.clone(), l));
        }
        if opts.idle_exit > 0 {
            tokio::spawn(exit_when_idle(shared.clone(), opts.idle_exit));
        }
        tokio::select! {
            _ = super::conn::accept(shared.clone(), listener) => {}
            _ = shared.done.notified() => {}
        }
        Ok(())
    });
    rt.shutdown_timeout(Duration::from_millis(500));
    channels.channels.stop();
    let _ = dispatcher.join();
    super::log::flush();
    drop(held);
    served
}

/// The arbiter that takes over from the daemon whose journal is at `jpath` (its settings
/// too with `resume`), with its journal's first entry and the journal it goes on with.
fn take_over(jpath: &Path, mut settings: Settings, resume: bool) -> Result<(Arbiter, Entry, Journal), Failure> {
    let boot = journal::boot_id();
    let kept = journal::load(jpath, &boot).map_err(Failure::Runtime)?;
    for s in &kept.skipped {
        say(&format!("{}: skipped {s}", jpath.display()));
    }
    // The GPU is the command line's, else the one the previous daemon served: its
    // processes register again from it.
    let gpu = settings.gpu.clone().or_else(|| kept.gpu.clone()).or_else(|| kept.settings.as_ref().and_then(|k| k.gpu.clone()));
    if let (true, Some(k)) = (resume, &kept.settings) {
        settings = k.clone();
    }
    settings.gpu = gpu;
    let mut d = Arbiter::with(&settings);
    let orphans: Vec<(u32, u64, String)> =
        kept.procs.into_iter().filter(|(pid, (start, _))| super::procfs::runs(*pid, *start)).map(|(pid, (start, t))| (pid, start, t)).collect();
    for w in d.restore(&kept.tenants, orphans) {
        say(&w);
    }
    let started = Entry::Start { boot, settings };
    let journal = Journal::create(jpath, &whole(&started, &d)).map_err(Failure::Runtime)?;
    Ok((d, started, journal))
}

/// The line that says the daemon serves, and how.
fn announce(path: &Path, d: &Arbiter) {
    eprintln!(
        "gmuxd: serving {} (pid {}) for {}: budget {}, host {}, policy {}, switch {}, slices stretched up to {} ms{}{}",
        path.display(),
        std::process::id(),
        d.settings.gpu.as_deref().map_or("the GPU of the first process".into(), |g| format!("GPU {g}")),
        d.settings.hbm.map_or("device".into(), format_size),
        d.settings.host.map_or("unlimited".into(), format_size),
        d.policy_name(),
        d.settings.switch.name(),
        d.settings.max_timeslice / 1_000_000,
        if d.settings.always_slice { ", time-sliced even when all fit" } else { "" },
        if d.recovering() {
            format!("; {} processes of the previous daemon may still hold memory: nobody grows until they register again or exit", d.awaited().count())
        } else {
            String::new()
        }
    );
}

/// The whole journal of `d`: its first line, then everything a daemon after it must know.
fn whole(started: &Entry, d: &Arbiter) -> Vec<Entry> {
    std::iter::once(started.clone()).chain(d.snapshot()).collect()
}

/// Sends grants whenever something changed, and at slice ends; says every few seconds
/// which processes of a previous daemon it still waits for.
async fn schedule(s: Arc<Shared>) {
    let mut said: Option<Instant> = None;
    loop {
        let wait = {
            let mut d = s.lock();
            s.decide(&mut d);
            if d.recovering() && said.is_none_or(|t| t.elapsed() >= Duration::from_secs(5)) {
                // Deaths the watchers could not see (no pidfd to be had) are seen here.
                let gone: Vec<(u32, u64)> =
                    d.awaited().filter(|(pid, start, _)| !super::procfs::runs(*pid, *start)).map(|(pid, start, _)| (pid, start)).collect();
                if !gone.is_empty() {
                    gone.into_iter().for_each(|(pid, start)| _ = d.orphan_gone(pid, start));
                    s.decide(&mut d);
                }
                let who: Vec<String> = d.awaited().map(|(pid, _, t)| format!("pid {pid} (tenant {t:?})")).collect();
                if !who.is_empty() {
                    say(&format!("waiting for {} to register again before anyone grows: it may hold memory under the previous daemon's grants (a stopped process continues with `kill -CONT`; one that is stuck can be ended)", who.join(", ")));
                }
                said = Some(Instant::now());
            }
            if !d.recovering() {
                said = None;
            }
            d.slice_end().map_or(Duration::from_millis(50), |end| Duration::from_nanos(end.saturating_sub(s.now()).max(100_000)))
        };
        tokio::select! {
            _ = s.wake.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// Ends the daemon once it has had no tenants for `seconds`.
async fn exit_when_idle(s: Arc<Shared>, seconds: u64) {
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let empty = {
            let d = s.lock();
            d.live().is_empty() && !d.recovering()
        };
        let idle = empty && lock(&s.last_tenant).elapsed().as_secs() >= seconds;
        if idle {
            return s.stop(&format!("no tenants for {seconds} s; exiting"));
        }
    }
}
