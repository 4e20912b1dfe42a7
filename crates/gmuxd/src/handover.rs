//! How a process gets its serving channel: on a connection of its own, whose first line
//! asks for it, after the process registered as a tenant ([`hand_over`]).

use super::conn::FIRST_LINE;
use super::server::{Peer, Shared};
use gmux_channel::send_with_fds;
use gmux_core::protocol::{ChannelReady, Refused, PROTOCOL};
use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use tokio::io::Interest;
use tokio::net::unix::OwnedWriteHalf;

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
