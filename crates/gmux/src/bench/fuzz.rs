//! `gmux bench daemon-fuzz`: a real daemon (this executable's `gmux daemon`) fed random,
//! absurd, truncated and overlong messages by several clients at once over its socket.
//! Between batches `gmux ps` must answer within a second; at the end the daemon must
//! still run, hold no more threads than before and no more descriptors (but the pidfd
//! watching the clients' process), and have grown its memory by at most 10 MiB. On the CPU; no GPU or shim is involved.

use crate::Failure;
use gmux_core::protocol::PROTOCOL;
use gmuxd::ctl::{request, Request};
use serde::Serialize;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Arguments of `gmux bench daemon-fuzz`.
#[derive(Debug, clap::Args)]
pub struct FuzzArgs {
    /// Messages to send in all.
    #[arg(long, default_value_t = 1_000_000)]
    messages: u64,
    /// Clients sending at once.
    #[arg(long, default_value_t = 8)]
    clients: u64,
    /// Seed of the random messages.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where to write the results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// What was measured.
#[derive(Debug, Serialize)]
struct Results {
    messages: u64,
    connections: u64,
    batches: u64,
    seconds: f64,
    ps_max_ms: f64,
    rss_before_kib: u64,
    rss_after_kib: u64,
    fds_before: u64,
    fds_after: u64,
    threads_before: u64,
    threads_after: u64,
    daemon_alive: bool,
}

/// splitmix64: small, seeded, good enough to pick messages.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn size(&mut self) -> u64 {
        match self.below(5) {
            0 => 0,
            1 => u64::MAX,
            2 => self.below(1 << 31),
            _ => self.next(),
        }
    }
}

/// One random line (without its newline, which the caller may leave off).
fn line(r: &mut Rng) -> Vec<u8> {
    match r.below(10) {
        0..=4 => format!(
            r#"{{"op":"report","held":{},"resident":{},"allocated":{},"swapped":{},"want":{},"period":{},"blocked":{},"commands":{},"bytes_h2d":{},"bytes_d2h":{},"busy":{},"waiting":{},"finished":{},"grant":{},"largest":{}}}"#,
            r.size(),
            r.size(),
            r.size(),
            r.size(),
            r.size(),
            r.size(),
            r.size(),
            r.next(),
            r.next(),
            r.next(),
            r.below(2) == 0,
            r.below(2) == 0,
            r.next(),
            r.next(),
            r.size()
        )
        .into_bytes(),
        5 => hello(r).into_bytes(),
        6 => {
            let full = hello(r).into_bytes();
            let cut = r.below(full.len() as u64) as usize;
            full[..cut].to_vec()
        }
        7 => (0..r.below(300)).map(|_| (r.below(95) + 32) as u8).collect(),
        8 => (0..r.below(300)).map(|_| r.next() as u8).filter(|b| *b != b'\n').collect(),
        _ => [r#"{"op":"ps"}"#, r#"{"op":"get","tenant":"t1","knob":null}"#, r#"{"op":"set","tenant":"t1","knob":"gmem.limit.high","value":"1"}"#, r#"{"op":"report"}"#, "{}", "null", "[]"][r.below(7) as usize].as_bytes().to_vec(),
    }
}

fn hello(r: &mut Rng) -> String {
    let version = if r.below(8) == 0 { r.next() as u32 } else { PROTOCOL };
    let tenant = ["t1", "t2", "t3", "t4", "t5", "", "a\nb", "\u{7}bell"][r.below(8) as usize];
    let priority = if r.below(4) == 0 { r.next() as i32 } else { r.below(3) as i32 - 1 };
    let high = if r.below(2) == 0 { "null".to_string() } else { r.size().to_string() };
    format!(r#"{{"op":"hello","version":{version},"tenant":{tenant:?},"priority":{priority},"high":{high}}}"#)
}

/// One client: connections of a random Hello and up to 200 random lines each, some cut
/// off, some overlong, until `left` runs out.
fn client(socket: &Path, seed: u64, left: &AtomicU64, sent: &AtomicU64, conns: &AtomicU64) {
    let mut r = Rng(seed);
    while left.load(Ordering::Relaxed) > 0 {
        let Ok(mut s) = UnixStream::connect(socket) else {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        conns.fetch_add(1, Ordering::Relaxed);
        let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
        let mut first = hello(&mut r).into_bytes();
        first.push(b'\n');
        if s.write_all(&first).is_err() {
            continue;
        }
        for _ in 0..r.below(200) {
            if left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_err() {
                return;
            }
            let mut l = if r.below(2000) == 0 { vec![b'x'; 70 << 10] } else { line(&mut r) };
            l.push(b'\n');
            sent.fetch_add(1, Ordering::Relaxed);
            if s.write_all(&l).is_err() {
                break;
            }
        }
    }
}

/// A number from `/proc/PID/status` (`VmRSS:` in KiB, `Threads:`).
fn status(pid: u32, key: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap_or(0)
}

/// The names of the process's threads and the targets of its descriptors, for a report.
fn inventory(pid: u32) -> String {
    let names: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .collect();
    let links: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|f| std::fs::read_link(f.path()).ok())
        .map(|p| p.display().to_string())
        .collect();
    format!("threads {names:?}, descriptors {links:?}")
}

fn fds(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64)
}

/// Runs the benchmark.
pub fn run(a: &FuzzArgs) -> Result<(), Failure> {
    let dir = std::env::temp_dir().join(format!("gmux-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| Failure::Runtime(format!("cannot create {}: {e}", dir.display())))?;
    let socket = dir.join("fuzz.sock");
    let exe = std::env::current_exe().map_err(|e| Failure::Runtime(format!("cannot locate gmux: {e}")))?;
    let log = std::fs::File::create(dir.join("daemon.log")).map_err(|e| Failure::Runtime(e.to_string()))?;
    let mut daemon = std::process::Command::new(exe)
        .args(["daemon", "--hbm", "1G", "--socket"])
        .arg(&socket)
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| Failure::Runtime(format!("cannot start gmuxd: {e}")))?;
    let pid = daemon.id();
    let t0 = Instant::now();
    while request(&socket, &Request::Ps { json: false }).is_err() {
        if t0.elapsed() > Duration::from_secs(5) {
            let _ = daemon.kill();
            return Err(Failure::Runtime(format!("gmuxd did not start; see {}", dir.join("daemon.log").display())));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let (rss_before_kib, fds_before, threads_before) = (status(pid, "VmRSS:"), fds(pid), status(pid, "Threads:"));
    let left = Arc::new(AtomicU64::new(a.messages));
    let sent = Arc::new(AtomicU64::new(0));
    let conns = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let workers: Vec<_> = (0..a.clients.max(1))
        .map(|i| {
            let (socket, left, sent, conns) = (socket.clone(), left.clone(), sent.clone(), conns.clone());
            let seed = a.seed.wrapping_mul(1_000_003).wrapping_add(i);
            std::thread::spawn(move || client(&socket, seed, &left, &sent, &conns))
        })
        .collect();
    let batch = (a.messages / 10).max(1);
    let (mut batches, mut ps_max_ms) = (0u64, 0f64);
    let mut next = batch;
    eprintln!("gmux bench daemon-fuzz: {} messages from {} clients to gmuxd pid {pid}", a.messages, a.clients);
    while workers.iter().any(|w| !w.is_finished()) {
        std::thread::sleep(Duration::from_millis(20));
        if sent.load(Ordering::Relaxed) >= next || workers.iter().all(|w| w.is_finished()) {
            let t = Instant::now();
            let ok = request(&socket, &Request::Ps { json: false }).is_ok_and(|r| r.ok);
            let ms = t.elapsed().as_secs_f64() * 1e3;
            ps_max_ms = ps_max_ms.max(if ok { ms } else { f64::INFINITY });
            batches += 1;
            next += batch;
            eprintln!("  {:>9} sent, gmux ps {}", sent.load(Ordering::Relaxed), if ok { format!("{ms:.1} ms") } else { "FAILED".into() });
        }
    }
    for w in workers {
        let _ = w.join();
    }
    let seconds = start.elapsed().as_secs_f64();
    let daemon_alive = daemon.try_wait().is_ok_and(|s| s.is_none()) && request(&socket, &Request::Ps { json: false }).is_ok();
    // Let the daemon notice the last hang-ups. It keeps one descriptor (a pidfd) watching
    // this process, its clients' pid, until this process exits.
    let (fds_allowed, threads_allowed) = (fds_before + 1, threads_before);
    let settle = Instant::now();
    while settle.elapsed() < Duration::from_secs(10) && (fds(pid) > fds_allowed || status(pid, "Threads:") > threads_allowed) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let left_over = inventory(pid);
    let r = Results {
        messages: sent.load(Ordering::Relaxed),
        connections: conns.load(Ordering::Relaxed),
        batches,
        seconds,
        ps_max_ms,
        rss_before_kib,
        rss_after_kib: status(pid, "VmRSS:"),
        fds_before,
        fds_after: fds(pid),
        threads_before,
        threads_after: status(pid, "Threads:"),
        daemon_alive,
    };
    let _ = request(&socket, &Request::Stop);
    let _ = daemon.wait();
    let _ = std::fs::remove_dir_all(&dir);
    println!("gmux bench daemon-fuzz: {} messages over {} connections in {:.1} s", r.messages, r.connections, r.seconds);
    println!("{:<28} {:>12} {:>12}", "", "before", "after");
    println!("{:<28} {:>12} {:>12}", "RSS (KiB)", r.rss_before_kib, r.rss_after_kib);
    println!("{:<28} {:>12} {:>12}", "open descriptors", r.fds_before, r.fds_after);
    println!("{:<28} {:>12} {:>12}", "threads", r.threads_before, r.threads_after);
    println!("slowest gmux ps between batches: {:.1} ms; daemon alive at the end: {}", r.ps_max_ms, r.daemon_alive);
    println!("(after: a pidfd watches this process, the clients' pid, until it exits)");
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&r).expect("serializable"))
            .map_err(|e| Failure::Runtime(format!("cannot write {}: {e}", p.display())))?;
    }
    let grew = r.rss_after_kib.saturating_sub(r.rss_before_kib);
    if !r.daemon_alive || r.ps_max_ms > 1000.0 || grew > 10 << 10 || r.fds_after > fds_allowed || r.threads_after > threads_allowed {
        return Err(Failure::Runtime(format!(
            "gmuxd did not hold up: alive {}, slowest ps {:.0} ms, RSS +{grew} KiB, descriptors {} -> {}, threads {} -> {}; at the end: {left_over}",
            r.daemon_alive, r.ps_max_ms, r.fds_before, r.fds_after, r.threads_before, r.threads_after
        )));
    }
    Ok(())
}
