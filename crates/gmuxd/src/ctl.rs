//! The control API (`gmux ps`, `get`, `set`, `stop`): requests, their answers, and the
//! client side, including starting a daemon on demand for `gmux run`.

use super::server::Peer;
use super::status::{status, table, Jobs};
use crate::Failure;
use gmux_core::arbiter::event::Event;
use gmux_core::arbiter::Arbiter;
use gmux_core::knobs::Knob;
use gmux_core::pressure::{Pressure, StallKind};
use gmux_core::TenantId;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// A control request: one JSON line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// List tenants: a table, or the [`Status`] as JSON.
    Ps {
        /// Answer with the [`Status`] as JSON.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        json: bool,
    },
    /// Read one knob, or all of them.
    Get {
        /// The tenant's name.
        tenant: String,
        /// The knob's Ghost name; all knobs when absent.
        knob: Option<String>,
        /// Answer with a JSON object of knob names and values ([`knobs_json`]).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        json: bool,
    },
    /// Write a knob (owner of the daemon or root only).
    Set { tenant: String, knob: String, value: String },
    /// Stop the daemon (owner or root only).
    Stop,
    /// Stream events as they happen ([`crate::server::Stamped`], one JSON line each),
    /// after a first [`Reply`]: of all tenants the asker may read, or of one.
    Events {
        /// Only this tenant's events.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tenant: Option<String>,
    },
    /// Stream an event each time `trigger` fires on `tenant`, after a first [`Reply`].
    Watch {
        /// The tenant watched.
        tenant: String,
        /// What to wait for.
        trigger: Trigger,
    },
    /// Load a policy: `object` is the object file in hex, `name` what `gmux policy list`
    /// calls it. Owner or root, or a tenant's owner for its own tenant where the daemon
    /// allows tenant policies.
    PolicyLoad {
        name: String,
        object: String,
        /// Attach only this hook's program.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hook: Option<String>,
        /// Run its memory programs in this tenant's processes only (else every tenant's).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tenant: Option<String>,
    },
    /// List the loaded policies.
    PolicyList {
        /// Answer with a JSON array.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        json: bool,
    },
    /// Unload policy `id` (owner or root, or who loaded it).
    PolicyUnload { id: u32 },
    /// Read or write a map of policy `id` (owner or root, or who loaded it).
    PolicyMap { id: u32, map: String, action: MapAction },
}

/// What `gmux policy map` does to a map. Keys and values are decimal numbers
/// (little-endian, up to 8 bytes), `0x` and their bytes in hex, or `str:` and text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "do", rename_all = "snake_case", deny_unknown_fields)]
pub enum MapAction {
    /// Every key and value.
    Dump,
    /// Set `key` to `value`.
    Update { key: String, value: String },
    /// Remove `key`.
    Delete { key: String },
}

/// What `gmux watch` waits for on a tenant.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "when", rename_all = "snake_case", deny_unknown_fields)]
pub enum Trigger {
    /// Its `gmem.pressure` of `kind`, averaged over `window` seconds (10, 60 or 300),
    /// rises above `percent`.
    PressureAbove {
        /// Some or full.
        kind: StallKind,
        /// 10, 60 or 300.
        window: u32,
        /// Above 0 and below 100.
        percent: f64,
    },
    /// Its `gmem.limit.high` falls below what it holds.
    LimitBelowHeld,
}

impl Trigger {
    /// Refuses a trigger that could never fire, or always would.
    pub fn check(&self) -> Result<(), String> {
        match *self {
            Trigger::PressureAbove { window, .. } if !matches!(window, 10 | 60 | 300) => {
                Err(format!("pressure is averaged over 10, 60 or 300 s, not {window}; pick one of them"))
            }
            Trigger::PressureAbove { percent, .. } if !(percent > 0.0 && percent < 100.0) => {
                Err(format!("a pressure threshold is a percentage above 0 and below 100, not {percent}"))
            }
            _ => Ok(()),
        }
    }

    /// The event to send when the trigger's condition holds for `tenant` with this
    /// pressure, what it holds and its `gmem.limit.high`; `None` while it does not.
    pub fn fires(&self, tenant: &str, pressure: &Pressure, held: u64, limit_high: Option<u64>) -> Option<Event> {
        match *self {
            Trigger::PressureAbove { kind, window, percent } => {
                let now = pressure.of(kind).over(window)? * 100.0;
                (now > percent).then(|| Event::PressureAbove { tenant: tenant.into(), kind, window, percent: now, threshold: percent })
            }
            Trigger::LimitBelowHeld => {
                let limit = limit_high.filter(|l| *l < held)?;
                Some(Event::LimitBelowHeld { tenant: tenant.into(), limit_high: limit, held })
            }
        }
    }
}

/// The answer: text to print.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    /// Whether the request succeeded.
    pub ok: bool,
    /// What to print (the error message when not ok).
    pub text: String,
}

impl Reply {
    /// A failed request with its cause and fix.
    pub fn error(text: String) -> Reply {
        Reply { ok: false, text }
    }

    /// A request that succeeded, with what to print.
    pub fn ok(text: String) -> Reply {
        Reply { ok: true, text }
    }
}

/// Answers `req` from `who`. Everyone may list and read the tenants of their own user;
/// the daemon's owner (uid `owner`) and root may read all and write knobs. A tenant a user
/// may not read gets the same answer as one that does not exist. `jobs` gives the jobs
/// a tenant's processes mark.
pub fn answer(d: &mut Arbiter, req: &Request, who: Peer, owner: u32, jobs: Jobs<'_>) -> Reply {
    let admin = who.uid == owner || who.uid == 0;
    let may_read = |d: &Arbiter, t: TenantId| admin || d.tenants.get(t).owner == Some(who.uid);
    // Exited tenants stay readable by their user and the owner (their counters).
    let find = |d: &Arbiter, name: &str| d.tenants.find(name).ok().filter(|t| may_read(d, *t));
    match req {
        Request::Ps { json } => {
            let s = status(d, &|t| may_read(d, t), admin, jobs);
            Reply::ok(if *json { serde_json::to_string(&s).expect("serializable") } else { table(&s) })
        }
        Request::Get { tenant, knob, json } => {
            let Some(t) = find(d, tenant) else { return Reply::error(format!("unknown tenant {tenant:?}: list tenants with `gmux ps`")) };
            let knobs = match knob.as_deref().map(Knob::parse).transpose() {
                Ok(Some(k)) => vec![k],
                Ok(None) => Knob::ALL.to_vec(),
                Err(e) => return Reply::error(e.to_string()),
            };
            if *json {
                return Reply::ok(knobs_json(d, t, &knobs).to_string());
            }
            let one = knobs.len() == 1;
            let lines: Vec<String> =
                knobs.iter().map(|k| if one { value(d, t, *k) } else { format!("{} {}", k.name(), value(d, t, *k).replace('\n', "\n  ")) }).collect();
            Reply::ok(lines.join("\n"))
        }
        Request::Set { tenant, knob, value } => {
            if !admin {
                return Reply::error(format!("permission denied: only the daemon's owner (uid {owner}) or root may set knobs"));
            }
            if find(d, tenant).is_none() {
                return Reply::error(format!("unknown tenant {tenant:?}: list tenants with `gmux ps`"));
            }
            match d.set_knob(tenant, knob, value) {
                Ok(warning) => Reply::ok(warning.unwrap_or_default()),
                Err(e) => Reply::error(e),
            }
        }
        Request::Stop => Reply::error("permission denied: only the daemon's owner or root may stop it".into()),
        // The server streams them on the connection itself.
        Request::Events { .. } | Request::Watch { .. } => Reply::error("events stream on a connection of their own; use `gmux events` or `gmux watch`".into()),
        // The server keeps the policies beside the arbiter.
        Request::PolicyLoad { .. } | Request::PolicyList { .. } | Request::PolicyUnload { .. } | Request::PolicyMap { .. } => {
            Reply::error("policy requests go to the daemon's policy table; use `gmux policy`".into())
        }
    }
}

/// Knobs as a JSON object: each name with the text `gmux get` prints for it, except
/// `ggroup.stat`, an object of its counters.
pub fn knobs_json(d: &Arbiter, t: TenantId, knobs: &[Knob]) -> serde_json::Value {
    let pairs = knobs.iter().map(|k| {
        let v = match k {
            Knob::Stat => serde_json::to_value(d.stat(t)).expect("serializable"),
            Knob::Pressure => serde_json::to_value(d.pressure(t)).expect("serializable"),
            Knob::Events => serde_json::to_value(d.mem_events(t)).expect("serializable"),
            k => value(d, t, *k).into(),
        };
        (k.name().to_string(), v)
    });
    serde_json::Value::Object(pairs.collect())
}

fn value(d: &Arbiter, t: TenantId, k: Knob) -> String {
    let u = d.usage(t);
    match k {
        Knob::Current => u.held.to_string(),
        Knob::SwapCurrent => u.swapped.to_string(),
        Knob::Pressure => d.pressure(t).text(),
        Knob::Events => d.mem_events(t).text(),
        Knob::Stat => {
            let s = d.stat(t);
            format!("commands {}\nbytes_h2d {}\nbytes_d2h {}\nswitches {}", s.submitted, s.bytes_h2d, s.bytes_d2h, s.switches)
        }
        k => d.tenants.get(t).limits.get(k).expect("writable knob"),
    }
}

/// Sends `req` to the daemon at `path` and returns its reply.
pub fn request(path: &Path, req: &Request) -> Result<Reply, Failure> {
    let s = connect(path)?;
    let mut line = serde_json::to_string(req).expect("serializable");
    line.push('\n');
    send_all(&s, line.as_bytes()).map_err(|e| Failure::Runtime(format!("cannot talk to gmuxd at {}: {e}", path.display())))?;
    let mut reply = String::new();
    BufReader::new(s).read_line(&mut reply).map_err(|e| Failure::Runtime(format!("no answer from gmuxd at {}: {e}", path.display())))?;
    parse_reply(path, &reply)
}

fn parse_reply(path: &Path, line: &str) -> Result<Reply, Failure> {
    serde_json::from_str(line.trim())
        .map_err(|_| Failure::Runtime(format!("gmuxd at {} answered {:?}; is it the same version as this gmux?", path.display(), line.trim())))
}

/// Writes `bytes` to the daemon's socket `s`, an error rather than SIGPIPE if the daemon
/// closed it (a command that ends on SIGPIPE, `gmux ps | head`, still says so).
fn send_all(s: &UnixStream, mut bytes: &[u8]) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    while !bytes.is_empty() {
        // SAFETY: `bytes` is a live buffer of `bytes.len()` bytes, and the descriptor is
        // `s`'s, open while `s` is borrowed.
        let n = unsafe { libc::send(s.as_raw_fd(), bytes.as_ptr().cast(), bytes.len(), libc::MSG_NOSIGNAL) };
        match usize::try_from(n) {
            Ok(n) => bytes = &bytes[n..],
            Err(_) => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// Connects to the daemon at `path`, if it is run by this user or root.
fn connect(path: &Path) -> Result<UnixStream, Failure> {
    let s = UnixStream::connect(path)
        .map_err(|e| Failure::Runtime(format!("gmuxd is not running at {} ({e}); start it with `gmux daemon` (or any `gmux run`)", path.display())))?;
    trusted(&s, path)?;
    Ok(s)
}

/// A line of `gmux events` after its first: an event, or word that some were lost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StreamLine {
    /// An event.
    Event(crate::server::Stamped),
    /// Events were dropped before this client read them.
    Lost(Lost),
}

/// Events were dropped before a `gmux events` client read them: it did not keep up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lost {
    /// When it was noticed, in RFC 3339.
    pub at: String,
    /// Always true.
    pub lost: bool,
    /// How many events, of all tenants (told only to the daemon's owner and root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
}

/// Sends `req`, which streams ([`Request::Events`], [`Request::Watch`]), to the daemon at
/// `path`: the lines after its first answer, as they come.
pub fn stream(path: &Path, req: &Request) -> Result<impl Iterator<Item = Result<String, Failure>>, Failure> {
    let s = connect(path)?;
    let mut line = serde_json::to_string(req).expect("serializable");
    line.push('\n');
    send_all(&s, line.as_bytes()).map_err(|e| Failure::Runtime(format!("cannot talk to gmuxd at {}: {e}", path.display())))?;
    let mut lines = BufReader::new(s).lines();
    let first = lines.next().unwrap_or_else(|| Ok(String::new())).map_err(|e| Failure::Runtime(format!("no answer from gmuxd at {}: {e}", path.display())))?;
    let reply = parse_reply(path, &first)?;
    if !reply.ok {
        return Err(Failure::Runtime(reply.text));
    }
    let shown = path.display().to_string();
    Ok(lines.map(move |l| l.map_err(|e| Failure::Runtime(format!("lost gmuxd at {shown}: {e}")))))
}

/// Refuses a daemon run by a user other than this one or root: whoever listens on the
/// socket learns what is sent to it.
fn trusted(s: &UnixStream, path: &Path) -> Result<(), Failure> {
    let who = super::server::peer(s).map_err(|e| Failure::Runtime(format!("cannot tell who serves {}: {e}", path.display())))?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if who.uid != me && who.uid != 0 {
        return Err(Failure::Runtime(format!("{} is served by uid {}, not by you or root; not talking to it (check GMUX_SOCKET)", path.display(), who.uid)));
    }
    Ok(())
}

/// Makes sure a daemon listens at `path`, starting one (which exits after a minute
/// without tenants) if none does: for GPU `gpu` (a UUID), or for the first process's.
pub fn ensure_daemon(path: &Path, gpu: Option<&str>) -> Result<(), Failure> {
    if UnixStream::connect(path).is_ok() {
        return Ok(());
    }
    let exe = std::env::current_exe().map_err(|e| Failure::Runtime(format!("cannot locate the gmux executable: {e}")))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        super::rundir::ensure_dir(dir, None).map_err(Failure::Runtime)?;
    }
    let log_path = path.with_extension("log");
    let log = super::rundir::open_log(&log_path).map_err(Failure::Runtime)?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["daemon", "--resume", "--idle-exit", "60", "--socket"]).arg(path);
    if let Some(uuid) = gpu {
        cmd.arg(format!("--gpu={uuid}"));
    }
    cmd.stdin(std::process::Stdio::null()).stdout(log.try_clone().map_err(|e| Failure::Runtime(e.to_string()))?).stderr(log);
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid, close_range and close are async-signal-safe. The daemon leaves the
    // caller's session, and keeps none of its descriptors beyond the three it is given
    // (a process that starts its GPU's daemon may hold pipes a reader waits to see close).
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) != 0 {
                (3..4096).for_each(|fd| _ = libc::close(fd));
            }
            Ok(())
        });
    }
    cmd.spawn().map_err(|e| Failure::Runtime(format!("cannot start gmuxd: {e}")))?;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        if UnixStream::connect(path).is_ok() {
            // Said to a person at a terminal only: a program run in a pipe or a script
            // keeps its own output, untouched.
            if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
                eprintln!("gmux: started gmuxd at {} (it exits after a minute without tenants); its log: {}", path.display(), log_path.display());
            }
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(Failure::Runtime(format!("started gmuxd but it does not answer at {}; see {}", path.display(), log_path.display())))
}

#[cfg(test)]
mod tests;
