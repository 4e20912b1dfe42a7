//! Connections that stay open to stream: `gmux events` (everything a user may see) and
//! `gmux watch` (a trigger on one tenant). Neither can hold the daemon up: a client that
//! does not read loses events or is disconnected once a write has waited
//! [`FIRST_LINE`].

use super::conn::{reply, FIRST_LINE};
use super::ctl::{self, Lost, Trigger};
use super::server::{lock, Peer, Shared, Stamped, Watch};
use gmux_core::arbiter::event::Event;
use std::sync::Arc;
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
