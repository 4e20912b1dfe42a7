//! `gmux bench channel`: the serving channel's round trip and idle cost, against a real
//! daemon. The benchmark starts `gmux daemon` on a socket of its own, registers itself
//! as a tenant, opens its channel as the shim does, and times pings through the
//! daemon's dispatcher thread:
//! - back to back, where both ends stay in their polling phase;
//! - one every `--gap-us`, where both ends have gone to sleep in between (the daemon in
//!   epoll, the client on its futex), so each ping pays both wake-ups.
//!
//! Then it measures the CPU time that an idle client waiting in `recv` and the idle
//! dispatcher thread use per second.

use crate::Failure;
use gmux_channel::{Client, Message};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Options of `gmux bench channel`.
#[derive(Debug, clap::Args)]
pub struct ChannelArgs {
    /// Pings back to back.
    #[arg(long, default_value_t = 100_000)]
    pub pings: u64,
    /// Pings one at a time, `--gap-us` apart.
    #[arg(long, default_value_t = 2_000)]
    pub spaced: u64,
    /// Microseconds between spaced pings (longer than both ends' polling).
    #[arg(long, default_value_t = 1_000)]
    pub gap_us: u64,
    /// Folder for the JSON results.
    #[arg(long, default_value = "bench-out", value_name = "DIR")]
    pub out: PathBuf,
}

/// The daemon the benchmark started, stopped when dropped.
struct Daemon(Child, PathBuf);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

fn runtime(what: &str) -> impl Fn(std::io::Error) -> Failure + '_ {
    move |e| Failure::Runtime(format!("{what}: {e}"))
}

/// Starts `gmux daemon` on a socket in a new folder and waits until it answers.
fn start_daemon() -> Result<(Daemon, PathBuf), Failure> {
    let dir = std::env::temp_dir().join(format!("gmux-bench-channel-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(runtime("cannot make a folder for the daemon"))?;
    let socket = dir.join("gpu0.sock");
    let exe = std::env::current_exe().map_err(runtime("cannot find the gmux executable"))?;
    let child = Command::new(exe)
        .args(["daemon", "--hbm", "1G", "--socket"])
        .arg(&socket)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(runtime("cannot start gmux daemon"))?;
    let d = Daemon(child, dir);
    let t0 = Instant::now();
    while UnixStream::connect(&socket).is_err() {
        if t0.elapsed() > Duration::from_secs(10) {
            return Err(Failure::Runtime("gmux daemon did not answer within 10 s".into()));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok((d, socket))
}

/// Registers this process as tenant `bench` and opens its channel, as the shim does.
fn open(socket: &Path) -> Result<(UnixStream, Client), Failure> {
    let v = gmux_core::protocol::PROTOCOL;
    let hello = UnixStream::connect(socket).map_err(runtime("cannot reach the daemon"))?;
    (&hello)
        .write_all(format!("{{\"op\":\"hello\",\"version\":{v},\"tenant\":\"bench\",\"priority\":0,\"high\":null}}\n").as_bytes())
        .map_err(runtime("hello"))?;
    let mut grant = String::new();
    BufReader::new(hello.try_clone().map_err(runtime("hello"))?).read_line(&mut grant).map_err(runtime("hello"))?;
    let s = UnixStream::connect(socket).map_err(runtime("cannot reach the daemon"))?;
    let request = format!("{{\"op\":\"channel\",\"version\":{v}}}\n");
    let (answer, client) = Client::ask(&s, request.as_bytes(), Duration::from_secs(10)).map_err(runtime("channel"))?;
    let client = client.ok_or_else(|| Failure::Runtime(format!("the daemon gave no channel: {answer}")))?;
    Ok((hello, client))
}

/// How long both ends sit idle while their CPU time is measured.
const IDLE: Duration = Duration::from_secs(3);

/// One ping's round trip.
fn ping(c: &Client, seq: u64) -> Result<Duration, Failure> {
    let t = Instant::now();
    c.send(&Message::Ping { seq }).map_err(|e| Failure::Runtime(format!("the channel broke: {e}")))?;
    match c.recv(Duration::from_secs(5)) {
        Ok(Some(Message::Pong { seq: s })) if s == seq => Ok(t.elapsed()),
        other => Err(Failure::Runtime(format!("ping {seq}: {other:?} instead of its pong within 5 s"))),
    }
}

/// Percentiles of round trips, in microseconds.
fn percentiles(mut ns: Vec<u64>) -> serde_json::Value {
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() - 1) as f64 * q).round() as usize] as f64 / 1e3;
    serde_json::json!({ "pings": ns.len(), "p50_us": at(0.5), "p90_us": at(0.9), "p99_us": at(0.99), "p999_us": at(0.999), "max_us": at(1.0) })
}

/// CPU time of this thread.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is writable.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// CPU time of process `pid`'s thread named `name` (user and system), from `/proc`, at
/// the clock tick's resolution.
fn thread_of_cpu(pid: u32, name: &str) -> Option<Duration> {
    let tid = std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
        .find(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name))?;
    let stat = std::fs::read_to_string(tid.path().join("stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(Duration::from_nanos(ticks * 1_000_000_000 / hz))
}

/// Runs the benchmark: prints a table and writes `channel.json` under `--out`.
pub fn run(a: &ChannelArgs) -> Result<(), Failure> {
    std::fs::create_dir_all(&a.out).map_err(|e| Failure::Runtime(format!("cannot create {}: {e}", a.out.display())))?;
    let (daemon, socket) = start_daemon()?;
    let (_registered, c) = open(&socket)?;
    for seq in 0..1000 {
        ping(&c, seq)?;
    }
    let mut seq = 1000;
    let mut next = || {
        seq += 1;
        seq
    };
    let back: Vec<u64> = (0..a.pings.max(1)).map(|_| ping(&c, next()).map(|d| d.as_nanos() as u64)).collect::<Result<_, _>>()?;
    let gap = Duration::from_micros(a.gap_us);
    let spaced: Vec<u64> = (0..a.spaced.max(1))
        .map(|_| {
            std::thread::sleep(gap);
            ping(&c, next()).map(|d| d.as_nanos() as u64)
        })
        .collect::<Result<_, _>>()?;
    // Idle: the client waits in recv with nothing coming.
    let dispatcher = || thread_of_cpu(daemon.0.id(), "gmuxd-dispatch");
    let (cpu0, daemon0) = (thread_cpu(), dispatcher());
    let t0 = Instant::now();
    let nothing = c.recv(IDLE);
    let idle = t0.elapsed();
    let client_us = (thread_cpu() - cpu0).as_secs_f64() * 1e6 / idle.as_secs_f64();
    let daemon_ms = daemon0.zip(dispatcher()).map(|(a, b)| (b - a).as_secs_f64() * 1e3 / idle.as_secs_f64());
    if !matches!(nothing, Ok(None)) {
        return Err(Failure::Runtime(format!("a message came while idle: {nothing:?}")));
    }
    let (back, spaced) = (percentiles(back), percentiles(spaced));
    println!("the serving channel: round trips through gmuxd's dispatcher, in microseconds");
    println!("{:<26} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8}", "pings", "count", "p50", "p90", "p99", "p99.9", "max");
    for (name, p) in [("back to back", &back), (format!("one every {} us", a.gap_us).as_str(), &spaced)] {
        let f = |k: &str| p[k].as_f64().unwrap_or(0.0);
        println!("{name:<26} {:>9} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.1}", p["pings"], f("p50_us"), f("p90_us"), f("p99_us"), f("p999_us"), f("max_us"));
    }
    println!(
        "idle CPU over {} s: the client waiting in recv {client_us:.1} us/s; the daemon's dispatcher thread {}",
        IDLE.as_secs(),
        daemon_ms.map_or("unknown".into(), |m| format!("{m:.2} ms/s (clock ticks of 10 ms)"))
    );
    let json = serde_json::json!({
        "benchmark": "channel",
        "back_to_back": back,
        "spaced": spaced,
        "gap_us": a.gap_us,
        "idle_client_cpu_us_per_s": client_us,
        "idle_dispatcher_cpu_ms_per_s": daemon_ms,
    });
    let path = a.out.join("channel.json");
    std::fs::write(&path, serde_json::to_string_pretty(&json).expect("serializable"))
        .map_err(|e| Failure::Runtime(format!("cannot write {}: {e}", path.display())))?;
    println!("results: {}", path.display());
    Ok(())
}
