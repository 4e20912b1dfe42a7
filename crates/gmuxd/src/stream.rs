//! What the daemon tells those who watch it: the events it publishes (to `/metrics` and
//! to `gmux events`), and the connections that stay open to stream them: `gmux events`
//! (everything a user may see) and `gmux watch` (a trigger on one tenant, checked at each
//! decision). Neither can hold the daemon up: a client that does not read loses events
//! or is disconnected once a write has waited [`FIRST_LINE`].

use super::conn::{reply, FIRST_LINE};
use super::ctl::{self, Lost, Trigger};
use super::server::{lock, Peer, Shared};
use gmux_core::arbiter::event::Event;
use gmux_core::arbiter::event::Notice;
use gmux_core::arbiter::Arbiter;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::broadcast;

fn now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// Whether `who` may read tenant `name`: the daemon's owner and root, and its user.
fn readable(s: &Shared, who: Peer, name: &str) -> bool {
    let d = s.lock();
    d.tenants.find(name).ok().is_some_and(|t| who.uid == s.owner || who.uid == 0 || d.tenants.get(t).owner == Some(who.uid))
}

/// Writes one line; false once the client is gone or has not read for [`FIRST_LINE`].
async fn send(w: &mut OwnedWriteHalf, line: &str) -> bool {
    let sent = tokio::time::timeout(FIRST_LINE, w.write_all(format!("{line}\n").as_bytes())).await;
    matches!(sent, Ok(Ok(())))
}

/// Streams events to a `gmux events` client until it hangs up: those of `tenant`, or of
/// every tenant it may read. A client that falls behind the events kept is told that it
/// lost some.
pub(crate) async fn events(s: &Shared, mut reader: BufReader<OwnedReadHalf>, mut write: OwnedWriteHalf, who: Peer, tenant: Option<String>) {
    let mut events = s.events.subscribe();
    let admin = who.uid == s.owner || who.uid == 0;
    if let Some(t) = tenant.as_deref().filter(|t| !readable(s, who, t)) {
        return reply(&mut write, &ctl::Reply::error(format!("unknown tenant {t:?}: list tenants with `gmux ps`"))).await;
    }
    reply(&mut write, &ctl::Reply { ok: true, text: String::new() }).await;
    loop {
        let line = tokio::select! {
            e = events.recv() => match e {
                Ok(e) if (admin || e.uid == Some(who.uid)) && tenant.as_ref().is_none_or(|t| t == e.event.tenant()) => serde_json::to_string(&*e).expect("serializable"),
                Ok(_) => continue,
                // How many only to those who may see every tenant's events.
                Err(broadcast::error::RecvError::Lagged(n)) => serde_json::to_string(&Lost { at: now(), lost: true, count: admin.then_some(n) }).expect("serializable"),
                Err(broadcast::error::RecvError::Closed) => return,
            },
            // The client sends nothing more: anything, or its hanging up, ends the stream.
            _ = reader.fill_buf() => return,
        };
        if !send(&mut write, &line).await {
            return;
        }
    }
}

/// Events queued for a `gmux watch` client that has not read them: more are lost.
const WATCH_QUEUE: usize = 16;

/// Streams to a `gmux watch` client, until it hangs up, an event each time `trigger`
/// fires on `tenant`: the daemon looks at it after every decision, and it fires again
/// only once its condition has been false in between ([`Shared::check_watches`]).
pub(crate) async fn watch(s: &Shared, mut reader: BufReader<OwnedReadHalf>, mut write: OwnedWriteHalf, who: Peer, tenant: &str, trigger: Trigger) {
    if let Err(e) = trigger.check() {
        return reply(&mut write, &ctl::Reply::error(e)).await;
    }
    if !readable(s, who, tenant) {
        return reply(&mut write, &ctl::Reply::error(format!("unknown tenant {tenant:?}: list tenants with `gmux ps`"))).await;
    }
    let (tx, mut fired) = tokio::sync::mpsc::channel(WATCH_QUEUE);
    lock(&s.watches).push(Watch { tenant: tenant.into(), trigger, armed: true, tx });
    s.wake.notify_one();
    reply(&mut write, &ctl::Reply { ok: true, text: String::new() }).await;
    loop {
        let line = tokio::select! {
            e = fired.recv() => match e {
                Some(e) => serde_json::to_string(&*e).expect("serializable"),
                None => return,
            },
            _ = reader.fill_buf() => return,
        };
        if !send(&mut write, &line).await {
            return;
        }
    }
}

/// An event of `gmux events`, as it is streamed.
pub(crate) fn stamped(event: Event, uid: Option<u32>) -> Arc<Stamped> {
    Arc::new(Stamped { at: now(), event, uid })
}

/// Most refusals of one user's processes told to `gmux events` per second: a user who
/// connects in a loop cannot push everyone else's events out of those kept.
const REFUSALS_TOLD_PER_S: u32 = 10;

/// A `gmux watch` connection's trigger on a tenant, and where its events go.
pub(crate) struct Watch {
    /// The tenant watched.
    pub(crate) tenant: String,
    /// What it waits for.
    pub(crate) trigger: Trigger,
    /// False from its firing until its condition has been false again.
    pub(crate) armed: bool,
    /// The connection's queue; a full one loses the event, a closed one ends the watch.
    pub(crate) tx: tokio::sync::mpsc::Sender<Arc<Stamped>>,
}

/// Events kept for subscribers that have not read them yet.
pub(crate) const EVENTS_KEPT: usize = 1024;

/// An event with the time it happened and who may see it, as `gmux events` streams it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Stamped {
    /// When, in RFC 3339 (UTC, milliseconds).
    pub at: String,
    /// What happened.
    #[serde(flatten)]
    pub event: Event,
    /// Who may see it besides the daemon's owner and root.
    #[serde(skip)]
    pub uid: Option<u32>,
}

impl Shared {
    /// Looks at every `gmux watch` trigger, under the lock the decision holds: one that
    /// fires sends its event (a watcher whose queue is full loses it), one whose watcher
    /// has gone is dropped.
    pub(crate) fn check_watches(&self, d: &Arbiter) {
        let mut watches = lock(&self.watches);
        watches.retain(|w| !w.tx.is_closed());
        for w in watches.iter_mut() {
            let Ok(t) = d.tenants.find(&w.tenant) else { continue };
            match w.trigger.fires(&w.tenant, &d.pressure(t), d.usage(t).held, d.tenants.get(t).limits.high) {
                Some(event) if w.armed => {
                    w.armed = false;
                    let _ = w.tx.try_send(super::stream::stamped(event, None));
                }
                Some(_) => {}
                None => w.armed = true,
            }
        }
    }

    /// Whether a refusal of a process of `uid` may be told to `gmux events` now
    /// ([`REFUSALS_TOLD_PER_S`]).
    pub(crate) fn may_tell_refusal(&self, uid: u32) -> bool {
        let mut told = lock(&self.refusals_told);
        told.retain(|_, (since, _)| since.elapsed() < Duration::from_secs(1));
        let (_, n) = told.entry(uid).or_insert((Instant::now(), 0));
        *n += 1;
        *n <= REFUSALS_TOLD_PER_S
    }

    /// Tells `n` to `/metrics` and to the subscribers of `gmux events` (none may be).
    pub(crate) fn publish(&self, n: Notice) {
        if let Some(m) = &self.metrics {
            m.observe(&n);
        }
        let _ = self.events.send(super::stream::stamped(n.event, n.uid));
    }
}
