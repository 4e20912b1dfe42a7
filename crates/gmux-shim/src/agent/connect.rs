//! Registering with gmuxd: the first time, when `gmux run` started the process, and
//! again whenever the daemon is lost (it crashed, or was stopped or restarted): the
//! process runs on within its last grant meanwhile, and tells the next daemon on the
//! same socket what it holds.

use super::{agent, apply, Agent};
use crate::config::config;
use crate::devices::MAX_DEVICES;
use gmux_core::protocol::{ChannelReady, FromShim, Grant, MapWrite, Policies, Refused, Resume, PROTOCOL};
use gmux_core::size::format_size;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// Longest wait for the daemon's answer to a `Hello`.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// Longest wait for the daemon to hand over a serving channel (an application's mark
/// waits for it).
const CHANNEL_WITHIN: Duration = Duration::from_secs(2);

/// Why a registration failed.
pub(super) enum Failed {
    /// No daemon (of this user or root) answered: the cause.
    Unreachable(String),
    /// The daemon refused the `Hello`: its reason and fix.
    Refused(String),
}

/// The uid of the process at the other end of `s` (`SO_PEERCRED`).
fn peer_uid(s: &UnixStream) -> std::io::Result<u32> {
    use std::os::fd::AsRawFd;
    let mut c = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `c` and `len` are valid for getsockopt to write.
    let r = unsafe { libc::getsockopt(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED, &mut c as *mut _ as *mut libc::c_void, &mut len) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(c.uid)
}

/// Why the daemon answered a `Hello` with `line` instead of a grant: its refusal, or the
/// error text of a daemon too old to know this shim's `Hello`.
fn refusal(line: &str) -> String {
    if let Ok(r) = serde_json::from_str::<Refused>(line) {
        return r.refused;
    }
    let text = serde_json::from_str::<serde_json::Value>(line).ok().and_then(|v| v.get("text").and_then(|t| t.as_str()).map(str::to_string));
    match text {
        Some(t) => format!("{t} (the daemon may be older than this shim: run gmux daemon and libgmux.so from the same build)"),
        None if line.is_empty() => "the daemon closed the connection".into(),
        None => line.to_string(),
    }
}

/// The daemon this process registers with, and the GPU it says its memory is on.
pub(super) struct Daemon {
    pub socket: PathBuf,
    pub gpu: Option<String>,
}

static DAEMONS: [OnceLock<Daemon>; MAX_DEVICES] = [const { OnceLock::new() }; MAX_DEVICES];

/// The socket of the daemon device `dev` registered with (for messages).
pub(super) fn socket(dev: usize) -> String {
    DAEMONS.get(dev).and_then(OnceLock::get).map_or(String::new(), |d| d.socket.display().to_string())
}

/// The daemon of device `dev`, of GPU `gpu`, that `named` (`GMUX_DAEMON`) names: in a
/// directory of per-GPU sockets, the GPU's own, started if none runs; else the socket
/// named.
pub(super) fn daemon(dev: usize, named: &Path, gpu: Option<String>) -> &'static Daemon {
    DAEMONS[dev].get_or_init(|| {
        let socket = match (&gpu, named.is_dir()) {
            (Some(uuid), true) => {
                let socket = named.join(format!("{uuid}.sock"));
                ensure_daemon(&socket, uuid);
                socket
            }
            (None, true) => crate::log::fatal(&format!(
                "cannot tell which GPU's daemon in {} to register with: the driver gave no UUID for this process's device; set GMUX_SOCKET to that GPU's socket",
                named.display()
            )),
            (_, false) => named.to_path_buf(),
        };
        Daemon { socket, gpu }
    })
}

/// Starts the daemon of GPU `gpu` at `socket` unless one answers there, through
/// `gmux daemon --ensure` (which leaves it running in a session of its own, and returns
/// once it answers). Without `GMUX_EXE` the registration that follows says what is wrong.
fn ensure_daemon(socket: &Path, gpu: &str) {
    let Some(exe) = config().exe.as_ref().filter(|_| UnixStream::connect(socket).is_err()) else { return };
    let started = std::process::Command::new(exe)
        .args(["daemon", "--ensure", "--socket"])
        .arg(socket)
        .arg(format!("--gpu={gpu}"))
        .env_remove("LD_PRELOAD")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .status();
    match started {
        Ok(s) if s.success() => crate::log!(Debug, "started the daemon of GPU {gpu} at {}", socket.display()),
        Ok(s) => {
            crate::log!(Warn, "starting the daemon of GPU {gpu} at {} failed ({s}); its log is {}", socket.display(), socket.with_extension("log").display())
        }
        // A program that ignores SIGCHLD has its children reaped for it: the start went
        // on, and the registration that follows tells whether it worked.
        Err(e) if e.raw_os_error() == Some(libc::ECHILD) => {}
        Err(e) => crate::log!(Warn, "cannot run {} to start the daemon of GPU {gpu}: {e}", exe.display()),
    }
}

/// Connects to the daemon at `path` for device `dev`, says `Hello` (with what it holds,
/// when it registers again) and returns the connection and the first grant.
pub(super) fn register(dev: usize, path: &Path, gpu: Option<String>, resume: Option<Resume>) -> Result<(UnixStream, BufReader<UnixStream>, Grant), Failed> {
    let unreachable = |e: std::io::Error| Failed::Unreachable(e.to_string());
    let stream = UnixStream::connect(path).map_err(unreachable)?;
    match peer_uid(&stream) {
        // SAFETY: geteuid has no preconditions.
        Ok(uid) if uid == 0 || uid == unsafe { libc::geteuid() } => {}
        Ok(uid) => return Err(Failed::Unreachable(format!("it is served by uid {uid}, not by you or root; not talking to it (check GMUX_SOCKET)"))),
        Err(e) => return Err(Failed::Unreachable(format!("cannot tell who serves it: {e}"))),
    }
    let hello = FromShim::Hello { version: PROTOCOL, tenant: config().tenant.clone(), priority: config().priority, high: config().mem_limit, resume, gpu };
    let mut line = serde_json::to_string(&hello).expect("serializable");
    line.push('\n');
    (&stream).write_all(line.as_bytes()).map_err(unreachable)?;
    let mut reader = BufReader::new(stream.try_clone().map_err(unreachable)?);
    let mut first = String::new();
    // A daemon that does not answer is as good as none (a busy one answers in well under this).
    stream.set_read_timeout(Some(ANSWER_WITHIN)).map_err(unreachable)?;
    reader.read_line(&mut first).map_err(unreachable)?;
    // A daemon sends the tenant's policies only where there are some, maybe before the
    // grant: none of an earlier daemon's stay.
    crate::policy::receive(dev, Policies { tenant: 0, policies: Vec::new() });
    while let Ok(p) = serde_json::from_str::<Policies>(first.trim()) {
        crate::policy::receive(dev, p);
        first.clear();
        reader.read_line(&mut first).map_err(unreachable)?;
    }
    stream.set_read_timeout(None).map_err(unreachable)?;
    let grant = serde_json::from_str::<Grant>(first.trim()).map_err(|_| Failed::Refused(refusal(first.trim())))?;
    link_changed();
    Ok((stream, reader, grant))
}

/// Registrations and losses of a daemon so far, of every device: a serving channel
/// opened before the newest may be a daemon's that is gone.
static LINK_CHANGES: AtomicU64 = AtomicU64::new(0);

/// A daemon was registered with, or lost.
pub(super) fn link_changed() {
    LINK_CHANGES.fetch_add(1, Ordering::Release);
}

/// How many times this process registered with a daemon or lost one.
pub fn link_changes() -> u64 {
    LINK_CHANGES.load(Ordering::Acquire)
}

/// Opens the serving channel with device `dev`'s daemon: on a second connection, which
/// the daemon answers with the channel's memory and eventfd.
pub fn open_channel(dev: usize) -> Result<gmux_channel::Client, String> {
    let d = DAEMONS.get(dev).and_then(OnceLock::get).ok_or("the process has not registered with gmuxd")?;
    let fail = |e: std::io::Error| format!("cannot open a serving channel with gmuxd at {}: {e}", d.socket.display());
    let stream = UnixStream::connect(&d.socket).map_err(fail)?;
    match peer_uid(&stream) {
        // SAFETY: geteuid has no preconditions.
        Ok(uid) if uid == 0 || uid == unsafe { libc::geteuid() } => {}
        _ => return Err(format!("gmuxd at {} is not served by you or root; not talking to it", d.socket.display())),
    }
    let mut line = serde_json::to_string(&FromShim::Channel { version: PROTOCOL }).expect("serializable");
    line.push('\n');
    match gmux_channel::Client::ask(&stream, line.as_bytes(), CHANNEL_WITHIN).map_err(fail)? {
        (answer, Some(client)) if serde_json::from_str::<ChannelReady>(&answer).is_ok() => Ok(client),
        (answer, _) => Err(format!("gmuxd at {} gave no serving channel: {}", d.socket.display(), refusal(&answer))),
    }
}

/// Reads grants and policies from the daemon for the life of the process: when the
/// connection ends, runs on within the last grant and registers with the next daemon on
/// the same socket.
pub(super) fn read_grants(dev: usize, mut reader: BufReader<UnixStream>) {
    let a = agent(dev).expect("attached");
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => {
                a.lose("the daemon closed the connection");
                reader = register_again(a);
                continue;
            }
            Ok(_) => {}
        }
        if let Ok(g) = serde_json::from_str::<Grant>(line.trim()) {
            apply(a, g);
        } else if let Ok(p) = serde_json::from_str::<Policies>(line.trim()) {
            crate::policy::receive(dev, p);
        } else if let Ok(w) = serde_json::from_str::<MapWrite>(line.trim()) {
            crate::policy::receive_write(dev, w);
        } else {
            crate::log!(Warn, "gmuxd: {}", line.trim());
        }
    }
}

/// Tries every second (every 5 s after a refusal) to register with a daemon at the
/// socket, telling it what this process holds; returns the new connection's reader.
fn register_again(a: &Agent) -> BufReader<UnixStream> {
    let d = DAEMONS[a.dev].get().expect("registered once");
    let path = &d.socket;
    let mut wait = Duration::from_millis(100);
    let mut refused: Option<String> = None;
    loop {
        std::thread::sleep(wait);
        let held = crate::devices::on(a.dev).as_ref().map_or(0, |st| st.held());
        let g = a.lock().grant;
        match register(a.dev, path, d.gpu.clone(), Some(Resume { held, cap: g.cap, seq: g.seq })) {
            Ok((stream, reader, grant)) => {
                *a.out.lock().unwrap_or_else(|p| p.into_inner()) = Some(stream);
                a.lock().lost = false;
                apply(a, grant);
                crate::log!(Warn, "registered again with gmuxd at {}: holding {}, granted {}", path.display(), format_size(held), format_size(grant.cap));
                return reader;
            }
            Err(Failed::Refused(why)) => {
                if refused.as_deref() != Some(why.as_str()) {
                    crate::log!(Warn, "gmuxd at {} refused this process ({why}); running on within the last grant, asking again every 5 s", path.display());
                }
                refused = Some(why);
            }
            Err(Failed::Unreachable(_)) => {}
        }
        wait = if refused.is_some() { Duration::from_secs(5) } else { (wait * 2).min(Duration::from_secs(1)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The program's disposition of SIGPIPE (a C program's default ends it) must not decide
    /// whether losing the daemon ends the program: a socket write whose peer is gone fails
    /// with EPIPE instead (std sends with MSG_NOSIGNAL). Run in a child process of its own.
    #[test]
    fn a_write_to_a_daemon_that_is_gone_fails_without_sigpipe() {
        if std::env::var_os("GMUX_TEST_SIGPIPE_CHILD").is_some() {
            // SAFETY: the default disposition, set in a process of the test's own.
            unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
            let (ours, theirs) = UnixStream::pair().unwrap();
            drop(theirs);
            let e = (&ours).write_all(b"{\"op\":\"report\"}\n").unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EPIPE));
            println!("ALIVE");
            return;
        }
        let me = std::env::current_exe().unwrap();
        let out = std::process::Command::new(me)
            .args(["--exact", "agent::connect::tests::a_write_to_a_daemon_that_is_gone_fails_without_sigpipe", "--nocapture"])
            .env("GMUX_TEST_SIGPIPE_CHILD", "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains("ALIVE"), "the write ended the process: {:?}\n{text}", out.status);
    }
}
