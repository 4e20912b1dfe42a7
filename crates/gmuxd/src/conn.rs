//! One connection to the daemon: a tenant's process (`Hello`, then its reports) or a
//! control client (one request, one reply). Everything a peer sends is bounded: lines,
//! the time to send the first one, and the connections one user may hold.

use super::ctl::{self, Request};
use super::log::say;
use super::outbox;
use super::server::{lock, Peer, Shared};
use gmux_core::arbiter::event::{Event, Notice};
use gmux_core::arbiter::{Hello, Sender, Silence, MAX_NAME};
use gmux_core::protocol::{FromShim, Refused, MAX_TRACE};
use gmux_core::size::format_size;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{UnixListener, UnixStream};

/// Most connections one user other than the daemon's owner and root may hold at once.
const MAX_CONNS_PER_USER: usize = 256;

/// Longest line a peer may send (a report is about 400 bytes).
pub(crate) const MAX_LINE: u64 = 64 << 10;

/// How long a new connection has to send its first line, and a reply or refusal has to
/// be read.
pub(crate) const FIRST_LINE: Duration = Duration::from_secs(5);

/// How long a grant may wait for its process to read before the process loses its turns.
const PATIENCE: Duration = Duration::from_millis(500);

/// A tenant's process silent this long (it reports every 20 ms while it runs) is looked
/// at in `/proc`: if it is stopped, it loses its turns until it reports again.
const QUIET: Duration = Duration::from_millis(100);

/// Accepts connections for ever. Running out of descriptors (or another failure to
/// accept) waits 100 ms instead of spinning, and says so once in 10 s.
pub(crate) async fn accept(s: Arc<Shared>, listener: UnixListener) {
    let mut last_complaint: Option<Instant> = None;
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let Some(slot) = Slot::take(&s, &stream) else { continue };
                tokio::spawn(serve_conn(s.clone(), stream, slot));
            }
            Err(e) => {
                if last_complaint.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                    say(&format!("cannot accept a connection ({e}); retrying every 100 ms"));
                    last_complaint = Some(Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Who is on the other end of `s`.
fn peer_of(s: &UnixStream) -> Option<Peer> {
    let c = s.peer_cred().ok()?;
    Some(Peer { pid: c.pid().map_or(0, |p| p as u32), uid: c.uid() })
}

/// One user's connection, counted while it lives.
struct Slot {
    s: Arc<Shared>,
    who: Peer,
}

impl Slot {
    /// Counts a new connection, or refuses it (with the reason, to the peer, if its
    /// socket takes it at once) when its user holds too many.
    fn take(s: &Arc<Shared>, stream: &UnixStream) -> Option<Slot> {
        let who = peer_of(stream)?;
        let mut conns = lock(&s.conns);
        let n = conns.entry(who.uid).or_default();
        if *n >= MAX_CONNS_PER_USER && who.uid != s.owner && who.uid != 0 {
            drop(conns);
            let reply = ctl::Reply::error(format!("uid {} already holds {MAX_CONNS_PER_USER} connections to gmuxd; close some", who.uid));
            let _ = stream.try_write(format!("{}\n", serde_json::to_string(&reply).expect("serializable")).as_bytes());
            return None;
        }
        *n += 1;
        Some(Slot { s: s.clone(), who })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut conns = lock(&self.s.conns);
        if let Some(n) = conns.get_mut(&self.who.uid) {
            *n -= 1;
            if *n == 0 {
                conns.remove(&self.who.uid);
            }
        }
    }
}

/// Reads one line of at most [`MAX_LINE`] bytes into `line`. `Ok(false)`: the peer hung
/// up; an error: it failed, or sent a longer line.
async fn read_line(r: &mut BufReader<OwnedReadHalf>, line: &mut String) -> std::io::Result<bool> {
    line.clear();
    let n = r.take(MAX_LINE + 1).read_line(line).await?;
    if n as u64 > MAX_LINE {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("a line longer than {MAX_LINE} bytes")));
    }
    Ok(n > 0)
}

/// Marks the process on `conn` stopped, or answering again, and says so.
fn silent(s: &Shared, conn: u64, pid: u32, stopped: bool) {
    if s.lock().set_silent(conn, Silence::Stopped, stopped) {
        say(&format!("pid {pid} {}", if stopped { "is stopped: it loses its turns until it runs again" } else { "runs again" }));
        s.wake.notify_one();
    }
}

/// Writes `value` as one line, giving up after [`FIRST_LINE`].
pub(crate) async fn reply<T: serde::Serialize>(w: &mut OwnedWriteHalf, value: &T) {
    let mut text = serde_json::to_string(value).expect("serializable");
    text.push('\n');
    let _ = tokio::time::timeout(FIRST_LINE, w.write_all(text.as_bytes())).await;
}

async fn serve_conn(s: Arc<Shared>, stream: UnixStream, slot: Slot) {
    let who = slot.who;
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut line = String::new();
    match tokio::time::timeout(FIRST_LINE, read_line(&mut reader, &mut line)).await {
        Ok(Ok(true)) => {}
        Ok(Ok(false)) => return,
        Ok(Err(e)) => return say(&format!("pid {} (uid {}): {e}; closing its connection", who.pid, who.uid)),
        Err(_) => return say(&format!("pid {} (uid {}): no first line within {} s; closing its connection", who.pid, who.uid, FIRST_LINE.as_secs())),
    }
    match serde_json::from_str::<FromShim>(line.trim()) {
        Ok(FromShim::Hello { version, tenant, priority, high, resume, gpu }) => {
            let hello = Hello { version, tenant: &tenant, priority, high, resume, gpu: gpu.as_deref() };
            serve_tenant(&s, reader, write, who, &hello).await;
        }
        Ok(FromShim::Channel { version }) => super::handover::hand_over(&s, write, who, version).await,
        _ => {
            let answer = match serde_json::from_str::<Request>(line.trim()) {
                Ok(Request::Stop) if who.uid == s.owner || who.uid == 0 => {
                    reply(&mut write, &ctl::Reply { ok: true, text: "gmuxd stopped".into() }).await;
                    return s.stop(&format!("stopped by pid {}", who.pid));
                }
                Ok(Request::Events { tenant }) => return super::stream::events(&s, reader, write, who, tenant).await,
                Ok(Request::Watch { tenant, trigger }) => return super::stream::watch(&s, reader, write, who, &tenant, trigger).await,
                // A dump needs no decision of the daemon; a write holds the arbiter and the
                // policies from the daemon's copy to its posting, so that writes reach the
                // processes in the order the daemon's copy took them.
                Ok(req @ Request::PolicyMap { action: ctl::MapAction::Dump, .. }) => {
                    lock(&s.policies).answer_map(&req, who, s.owner, s.tenant_policies, &|_| true).0
                }
                Ok(req @ Request::PolicyMap { .. }) => {
                    let d = s.lock();
                    let policies = lock(&s.policies);
                    let live = d.live();
                    let (answer, write) = policies.answer_map(&req, who, s.owner, s.tenant_policies, &|t| live.contains(&gmux_core::TenantId(t)));
                    match write {
                        Some(w) => {
                            let n = policies.post_write(&d, &lock(&s.out), &w);
                            let to = format!("sent to {n} process{} running its memory programs", if n == 1 { "" } else { "es" });
                            match answer.ok {
                                true => ctl::Reply::ok(format!("written in the daemon's copy and {to}")),
                                false => ctl::Reply { ok: n > 0, text: format!("{to}; the daemon's copy: {}", answer.text) },
                            }
                        }
                        None => answer,
                    }
                }
                Ok(req @ (Request::PolicyLoad { .. } | Request::PolicyList { .. } | Request::PolicyUnload { .. })) => {
                    // A load is verified and compiled before the decision lock is taken.
                    let prepared = match &req {
                        Request::PolicyLoad { name, object, hook, tenant } => {
                            let r = super::policy::LoadRequest { name, object, hook: hook.as_deref(), tenant: tenant.as_deref() };
                            Some(super::policy::prepare(&r, who, s.owner, s.tenant_policies))
                        }
                        _ => None,
                    };
                    let mut d = s.lock();
                    let mut policies = lock(&s.policies);
                    let (answer, changed) = policies.answer(&mut d, &req, prepared, who, s.owner, s.tenant_policies);
                    if !matches!(req, Request::PolicyList { .. }) {
                        s.channels.set_admission(policies.admission());
                    }
                    if changed {
                        policies.post(&d, &lock(&s.out), None);
                    }
                    answer
                }
                Ok(req) => {
                    let mut d = s.lock();
                    let answer = ctl::answer(&mut d, &req, who, s.owner, &|t| s.channels.jobs(t));
                    if let (Request::Set { tenant, knob, value }, true) = (&req, answer.ok) {
                        let uid = d.tenants.find(tenant).ok().and_then(|t| d.tenants.get(t).owner);
                        s.publish(Notice { uid, event: Event::KnobSet { tenant: tenant.clone(), knob: knob.clone(), value: value.clone() } });
                    }
                    answer
                }
                Err(e) => ctl::Reply::error(format!("bad request ({e}); use the gmux CLI of the same version as the daemon")),
            };
            s.wake.notify_one();
            reply(&mut write, &answer).await;
        }
    }
    drop(slot);
}

async fn serve_tenant(s: &Arc<Shared>, mut reader: BufReader<OwnedReadHalf>, write: OwnedWriteHalf, who: Peer, hello: &Hello<'_>) {
    let conn = s.next_conn.fetch_add(1, Ordering::Relaxed);
    let start = super::procfs::start_time(who.pid).unwrap_or(0);
    let sender = Sender { pid: who.pid, uid: who.uid, admin: who.uid == s.owner || who.uid == 0, start };
    // Admission, the outbox and the first decision under one lock: no decision in between
    // may grant the new process something that is never posted.
    let admitted = {
        let mut d = s.lock();
        match d.admit(conn, sender, hello) {
            Err(why) => Err((why, write)),
            Ok(_) => {
                let weak = Arc::downgrade(s);
                let stalled = move |stuck: bool| {
                    if let Some(s) = weak.upgrade() {
                        if s.lock().set_silent(conn, Silence::NotReading, stuck) {
                            say(&format!(
                                "pid {} {}",
                                who.pid,
                                if stuck {
                                    format!("has not read its grants for {} ms: it loses its turns until it does", PATIENCE.as_millis())
                                } else {
                                    "reads its grants again".into()
                                }
                            ));
                        }
                        s.wake.notify_one();
                    }
                };
                lock(&s.out).insert(conn, outbox::start(write, PATIENCE, stalled));
                s.decide(&mut d);
                // Its tenant's memory policies, after the first grant (the answer to its `Hello`).
                lock(&s.policies).post(&d, &lock(&s.out), Some(conn));
                Ok(d.usage_of_conn(conn))
            }
        }
    };
    let held = match admitted {
        Ok(held) => held,
        Err((why, mut write)) => {
            say(&format!("pid {} (uid {}) refused: {why}", who.pid, who.uid));
            if s.may_tell_refusal(who.uid) {
                // The name as asked for, cut to what a name may be.
                let tenant: String = hello.tenant.chars().filter(|c| !c.is_control()).take(MAX_NAME).collect();
                s.publish(Notice { uid: Some(who.uid), event: Event::Refused { tenant, pid: who.pid, why: why.clone() } });
            }
            return reply(&mut write, &Refused { refused: why }).await;
        }
    };
    let (tenant, priority) = (hello.tenant, hello.priority);
    match hello.resume {
        Some(r) => say(&format!(
            "pid {} registered again with tenant {tenant:?} (priority {priority}): it holds {}, believed {}",
            who.pid,
            format_size(r.held),
            format_size(held)
        )),
        None => say(&format!("pid {} joined tenant {tenant:?} (priority {priority})", who.pid)),
    }
    s.publish(Notice { uid: Some(who.uid), event: Event::Joined { tenant: tenant.into(), pid: who.pid, priority } });
    super::watch::watch_pid(s, who.pid, start, Some(conn));
    let mut line = String::new();
    let mut bad = 0u64;
    let mut stopped = false;
    let mut traces = Budget::new(TRACES_PER_SECOND);
    let mut snapshots = Budget::new(SNAPSHOTS_PER_SECOND);
    // Looked at after 100 ms of quiet, then less and less often, down to once a second.
    let mut quiet = QUIET;
    loop {
        // Waiting for data is cancel-safe (a line's read is not): a quiet spell ends here.
        match tokio::time::timeout(quiet, reader.fill_buf()).await {
            Err(_) => {
                if !stopped && super::procfs::is_stopped(who.pid) {
                    stopped = true;
                    silent(s, conn, who.pid, true);
                }
                quiet = (quiet * 2).min(Duration::from_secs(1));
                continue;
            }
            Ok(Err(_)) | Ok(Ok([])) => break,
            Ok(Ok(_)) => quiet = QUIET,
        }
        if std::mem::take(&mut stopped) {
            silent(s, conn, who.pid, false);
        }
        match read_line(&mut reader, &mut line).await {
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
                s.wake.notify_one();
            }
            Ok(FromShim::Trace { policy, text }) => {
                if traces.take() {
                    trace(s, conn, who.pid, policy, &text);
                }
            }
            Ok(FromShim::MapSnapshot { policy, map, total, entries }) if snapshots.take() => {
                if let Err(why) = snapshot(s, conn, who.pid, policy, &map, total, &entries) {
                    bad += 1;
                    if bad <= 3 {
                        say(&format!("pid {}: ignoring {why}", who.pid));
                    }
                }
            }
            Ok(FromShim::MapSnapshot { .. }) => {}
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
    lock(&s.policies).process_left(conn);
}

/// Most trace lines a process may send in a second; the rest are dropped.
const TRACES_PER_SECOND: u32 = 20;

/// Most map snapshots a process may send in a second (one per map of each of the 16
/// policies it may run, once a second, fits); the rest are dropped.
const SNAPSHOTS_PER_SECOND: u32 = 64;

/// What is left of one process's messages of one kind this second.
struct Budget {
    per_second: u32,
    second: Option<Instant>,
    sent: u32,
}

impl Budget {
    fn new(per_second: u32) -> Budget {
        Budget { per_second, second: None, sent: 0 }
    }

    /// Whether one more may be taken.
    fn take(&mut self) -> bool {
        if self.second.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
            (self.second, self.sent) = (Some(Instant::now()), 0);
        }
        self.sent += 1;
        self.sent <= self.per_second
    }
}

/// Keeps what the process on `conn` says map `map` of policy `policy` holds in it, for
/// `gmux policy map dump`; `Err`: why it was refused.
fn snapshot(s: &Shared, conn: u64, pid: u32, policy: u32, map: &str, total: u64, entries: &[(String, String)]) -> Result<(), String> {
    let d = s.lock();
    let Some(t) = d.tenant_of_conn(conn) else { return Ok(()) };
    let tenant = d.tenants.get(t).name.clone();
    drop(d);
    lock(&s.policies).keep_snapshot(policy, t, &tenant, (conn, pid), map, total, entries)
}

/// Tells `gmux events` a trace line that the process on `conn` says policy `policy`'s
/// program wrote, if that policy runs in its tenant: control characters dropped, cut to
/// [`MAX_TRACE`] characters, seen by the tenant's owner.
fn trace(s: &Shared, conn: u64, pid: u32, policy: u32, text: &str) {
    let d = s.lock();
    let Some(t) = d.tenant_of_conn(conn) else { return };
    if !lock(&s.policies).runs_in(policy, t) {
        return;
    }
    let text: String = text.chars().filter(|c| !c.is_control()).take(MAX_TRACE).collect();
    let (tenant, uid) = (d.tenants.get(t).name.clone(), d.tenants.get(t).owner);
    drop(d);
    s.publish(Notice { uid, event: Event::PolicyTrace { tenant, pid, policy, text } });
}
