//! The serving channel on the CPU stand-in: an application marks its requests as jobs
//! through the shim's C functions, the daemon's dispatcher reads them from shared memory
//! and `gmux ps --json` shows them; a process that forges its channel breaks only its
//! own, and only a tenant's process gets one.

mod common;

use common::daemon::*;
use common::{compile_policy, TempDir};

use gmux_channel::{Client, Message};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::Stdio;
use std::time::Duration;

/// The tenant `name` of `gmux ps --json`.
fn tenant_json(d: &Daemon, name: &str) -> serde_json::Value {
    let r = d.ctl(&["ps", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}", r.describe()));
    v["tenants"].as_array().and_then(|ts| ts.iter().find(|t| t["name"] == name).cloned()).unwrap_or_else(|| panic!("no tenant {name}: {}", r.stdout))
}

#[test]
fn an_application_marks_jobs_and_gmux_ps_shows_them() {
    let d = Daemon::start("jobs-marks", &["--hbm", "64M"]);
    let mut c = d.sb.gmux(None, ["jobs", "--count", "50", "--pings", "200"]);
    c.env_remove("GMUX_SOCKET").env("GMUX_SOCKET", d.sb.socket()).env("GMUX_TENANT", "serve");
    c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut t = Tenant(Some(c.spawn().unwrap()));
    let mut line = String::new();
    BufReader::new(t.child().stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.starts_with("jobs: 50 marked, rtt p50 ") && line.trim_end().ends_with(", ready"), "{line:?}; gmuxd:\n{}", d.log());
    // The pings came after every mark, through the same ring: the daemon has read them all.
    let jobs = tenant_json(&d, "serve")["jobs"].clone();
    assert_eq!((jobs["done"].as_u64(), jobs["running"].as_u64(), jobs["refused"].as_u64()), (Some(51), Some(1), Some(1)), "{jobs}");
    let kinds = jobs["kinds"].as_array().unwrap();
    let kind = |name: &str| kinds.iter().find(|k| k["name"] == name).unwrap_or_else(|| panic!("no kind {name}: {jobs}"));
    assert_eq!(kind("small")["done"].as_u64(), Some(26), "{jobs}");
    assert_eq!(kind("large")["done"].as_u64(), Some(25), "{jobs}");
    assert_eq!(kind("large")["expected_ms"].as_f64(), Some(20.0), "{jobs}");
    let (mean, max) = (kind("large")["mean_ms"].as_f64().unwrap(), kind("large")["max_ms"].as_f64().unwrap());
    assert!(mean > 0.0 && mean <= max, "{jobs}");
    assert!(d.logs("job ") && d.log().contains("ended but never began; refused"), "the refused mark is said once:\n{}", d.log());
    drop(t.child().stdin.take());
    let status = t.child().wait().unwrap();
    assert!(status.success());
    // The process left: so did its channel and its jobs.
    let gone = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        let r = d.ctl(&["ps", "--json"]);
        !r.stdout.contains("\"jobs\"")
    });
    assert!(gone, "{}", d.ctl(&["ps", "--json"]).stdout);
}

/// Asks for a channel on a connection of its own: the answer line and the channel.
fn ask_channel(d: &Daemon, version: u32) -> (String, Option<Client>) {
    let s = UnixStream::connect(d.sb.socket()).unwrap();
    Client::ask(&s, format!("{{\"op\":\"channel\",\"version\":{version}}}\n").as_bytes(), Duration::from_secs(10)).unwrap()
}

#[test]
fn a_channel_goes_only_to_a_tenant_and_one_forged_breaks_only_itself() {
    let d = Daemon::start("jobs-forged", &["--hbm", "64M"]);
    let v = gmux_core::protocol::PROTOCOL;
    // Not a tenant yet: refused, with the reason.
    let (line, client) = ask_channel(&d, v);
    assert!(client.is_none() && line.contains("is no tenant of this daemon"), "{line}");
    // This test process registers as tenant "raw" (reading its grants meanwhile).
    let hello = UnixStream::connect(d.sb.socket()).unwrap();
    (&hello).write_all(format!("{{\"op\":\"hello\",\"version\":{v},\"tenant\":\"raw\",\"priority\":0,\"high\":null}}\n").as_bytes()).unwrap();
    let reader = BufReader::new(hello.try_clone().unwrap());
    std::thread::spawn(move || reader.lines().map_while(Result::ok).for_each(drop));
    d.wait_tenant("raw");
    let (line, client) = ask_channel(&d, v + 1);
    assert!(client.is_none() && line.contains(&format!("protocol {v}, the shim {}", v + 1)), "{line}");
    let (line, client) = ask_channel(&d, v);
    let client = client.unwrap_or_else(|| panic!("no channel: {line}"));
    assert_eq!(line, format!("{{\"slots\":{}}}", gmux_channel::SLOTS));
    client.send(&Message::Ping { seq: 7 }).unwrap();
    assert_eq!(client.recv(Duration::from_secs(5)), Ok(Some(Message::Pong { seq: 7 })));
    // A message only the daemon sends: the channel is closed, and said so.
    client.send(&Message::Pong { seq: 1 }).unwrap();
    assert!(d.logs("broke its serving channel"), "{}", d.log());
    client.send(&Message::Ping { seq: 8 }).unwrap();
    assert_eq!(client.recv(Duration::from_millis(300)), Ok(None), "a closed channel is not read");
    // The daemon serves on: a new channel, and a real tenant's jobs.
    let (_, again) = ask_channel(&d, v);
    let again = again.expect("a second channel");
    again.send(&Message::Ping { seq: 9 }).unwrap();
    assert_eq!(again.recv(Duration::from_secs(5)), Ok(Some(Message::Pong { seq: 9 })));
    assert!(d.ctl(&["ps"]).status.success());
    // The eventfd's file description is shared: the process makes it blocking, and reads
    // every wake-up before the daemon could. The daemon never reads it, so it neither
    // blocks nor misses a message.
    let s = UnixStream::connect(d.sb.socket()).unwrap();
    (&s).write_all(format!("{{\"op\":\"channel\",\"version\":{v}}}\n").as_bytes()).unwrap();
    let (_, fds) = gmux_channel::recv_with_fds(std::os::fd::AsRawFd::as_raw_fd(&s), &mut [0u8; 256]).unwrap();
    let wake = std::os::fd::AsRawFd::as_raw_fd(&fds[1]);
    // SAFETY: an open descriptor of this process; F_SETFL takes an int.
    assert_eq!(unsafe { libc::fcntl(wake, libc::F_SETFL, 0) }, 0);
    for _ in 0..20 {
        let mut v = 1u64.to_ne_bytes();
        // SAFETY: 8 bytes from and to live buffers, on an open eventfd.
        unsafe {
            libc::write(wake, v.as_ptr().cast(), 8);
            libc::read(wake, v.as_mut_ptr().cast(), 8);
        }
    }
    let t0 = std::time::Instant::now();
    assert!(d.ctl(&["ps"]).status.success() && t0.elapsed() < Duration::from_secs(5), "the daemon answers");
    let (_, third) = ask_channel(&d, v);
    let third = third.expect("a channel");
    third.send(&Message::Ping { seq: 10 }).unwrap();
    assert_eq!(third.recv(Duration::from_secs(5)), Ok(Some(Message::Pong { seq: 10 })), "the dispatcher still reads");
    // A process that asks again and again: each is a memory file of the daemon's.
    let refused = (0..10).map(|_| ask_channel(&d, v)).find(|(_, c)| c.is_none()).map(|(line, _)| line).unwrap_or_default();
    assert!(refused.contains("asked for its channel 8 times in 10 s"), "{refused}");
}

/// The stand-in's `jobs --long` as tenant "long": a process running one job of 1,000 s,
/// that launches six 50 ms kernels on one stream at each `launch()` and says in how many
/// ms its launches returned.
struct LongTenant {
    t: Tenant,
    input: std::process::ChildStdin,
    /// Its output's lines, read on a thread of their own so that a launch held for good
    /// fails the test instead of hanging it.
    lines: std::sync::mpsc::Receiver<String>,
    err: std::path::PathBuf,
}

/// How long a test waits for a line of the long tenant's.
const LINE_WITHIN: Duration = Duration::from_secs(60);

impl LongTenant {
    fn start(d: &Daemon) -> LongTenant {
        let mut c = d.sb.gmux(None, ["jobs", "--long"]);
        c.env_remove("GMUX_SOCKET").env("GMUX_SOCKET", d.sb.socket()).env("GMUX_TENANT", "long").env("GMUX_LOG", "debug");
        let err = d.sb.dir.path().join("long.err");
        c.stderr(std::fs::File::create(&err).unwrap());
        c.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut t = Tenant(Some(c.spawn().unwrap()));
        let input = t.child().stdin.take().unwrap();
        let output = BufReader::new(t.child().stdout.take().unwrap());
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || output.lines().map_while(Result::ok).try_for_each(|l| send.send(l)));
        let long = LongTenant { t, input, lines, err };
        assert_eq!(long.line(), "long: ready", "gmuxd:\n{}", d.log());
        long
    }

    fn line(&self) -> String {
        self.lines.recv_timeout(LINE_WITHIN).unwrap_or_else(|e| panic!("no line from the long tenant in {LINE_WITHIN:?} ({e}); it said:\n{}", self.said()))
    }

    /// Starts six launches.
    fn start_launch(&mut self) {
        self.input.write_all(b"launch\n").unwrap();
    }

    /// How long the launches started last took, in ms; returns once their kernels ran.
    fn launched(&mut self) -> f64 {
        let l = self.line();
        let ms = l.strip_prefix("launched in ").and_then(|r| r.strip_suffix(" ms")).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{l:?}"));
        assert_eq!(self.line(), "synced");
        ms
    }

    fn launch(&mut self) -> f64 {
        self.start_launch();
        self.launched()
    }

    /// Ends its job and begins one of kind `name`, estimated 1,000 s.
    fn again(&mut self, name: &str) {
        self.input.write_all(format!("again {name}\n").as_bytes()).unwrap();
        assert_eq!(self.line(), "begun");
    }

    fn said(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    fn finish(mut self) {
        drop(self.input);
        assert!(self.t.child().wait().unwrap().success());
    }
}

/// This test process as tenant "short": registered, with a channel; returns a function
/// that sends a mark and waits until the dispatcher has read it.
fn short_tenant(d: &Daemon) -> impl Fn(Message, u64) {
    let v = gmux_core::protocol::PROTOCOL;
    let hello = UnixStream::connect(d.sb.socket()).unwrap();
    (&hello).write_all(format!("{{\"op\":\"hello\",\"version\":{v},\"tenant\":\"short\",\"priority\":0,\"high\":null}}\n").as_bytes()).unwrap();
    let reader = BufReader::new(hello.try_clone().unwrap());
    std::thread::spawn(move || reader.lines().map_while(Result::ok).for_each(drop));
    d.wait_tenant("short");
    let (answer, client) = ask_channel(d, v);
    let client = client.unwrap_or_else(|| panic!("no channel: {answer}"));
    move |m: Message, seq: u64| {
        let _registered = &hello;
        client.send(&m).unwrap();
        client.send(&Message::Ping { seq }).unwrap();
        assert_eq!(client.recv(Duration::from_secs(5)), Ok(Some(Message::Pong { seq })));
    }
}

fn begin(job: u64, name: &str, expected_ns: u64) -> Message {
    Message::JobBegin { job, name: gmux_channel::JobName::new(name), expected_ns }
}

#[test]
fn long_jobs_keep_shallow_queues_while_a_much_shorter_job_runs() {
    let mut d = Daemon::start("jobs-shallow", &["--hbm", "64M", "--dispatch", "shallow"]);
    let mut long = LongTenant::start(&d);
    let shallow = |d: &Daemon, name: &str| tenant_json(d, name)["jobs"]["shallow"].as_bool();
    assert!(long.launch() < 100.0, "alone, its launches do not wait");
    assert_eq!(shallow(&d, "long"), Some(false));
    // This test process runs a job of 10 s, beside the long one's 1,000 s (estimates long
    // enough for a slow test machine).
    let mark = short_tenant(&d);
    mark(begin(1, "short", 10_000_000_000), 1);
    assert_eq!((shallow(&d, "long"), shallow(&d, "short")), (Some(true), Some(false)), "{}", d.ctl(&["ps", "--json"]).stdout);
    let held = long.launch();
    assert!(held >= 150.0, "held to 2 in flight, four of the six launches wait for a 50 ms kernel each: {held} ms");
    assert!(long.said().contains("the dispatcher asks for at most 2 commands in flight per stream"), "{}", long.said());
    mark(Message::JobEnd { job: 1 }, 2);
    assert_eq!(shallow(&d, "long"), Some(false));
    assert!(long.launch() < 100.0, "the short job ended: no bound");
    // A short job past twice its estimate holds nobody any more.
    mark(begin(2, "blip", 20_000_000), 3);
    assert_eq!(shallow(&d, "long"), Some(true));
    let lifted = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(10));
        shallow(&d, "long") == Some(false)
    });
    assert!(lifted, "still shallow after a 20 ms job ran a second");
    // Held shallow again, then the daemon dies: a bound from a daemon that is gone holds
    // nothing.
    mark(begin(3, "short", 10_000_000_000), 4);
    assert!(long.launch() >= 150.0, "held shallow again");
    d.crash();
    std::thread::sleep(Duration::from_millis(200));
    let after = long.launch();
    assert!(after < 100.0, "a dead daemon's bound still held the launches: {after} ms");
    long.finish();
}

#[test]
fn srpt_holds_a_long_jobs_launches_until_the_short_job_ends() {
    // Fairness far off: this test's half second of holding is all SRPT's.
    let mut d = Daemon::start("jobs-srpt", &["--hbm", "64M", "--dispatch", "srpt-deficit", "--fairness", "10s"]);
    let mut long = LongTenant::start(&d);
    let jobs = |d: &Daemon, name: &str| {
        let j = &tenant_json(d, name)["jobs"];
        (j["held"].as_bool(), j["shallow"].as_bool())
    };
    assert!(long.launch() < 100.0, "alone, its job runs and its launches do not wait");
    assert_eq!(jobs(&d, "long"), (Some(false), Some(false)));
    let mark = short_tenant(&d);
    mark(begin(1, "short", 10_000_000_000), 1);
    assert_eq!(jobs(&d, "long"), (Some(true), Some(false)), "the 10 s job goes before the 1,000 s one");
    long.start_launch();
    std::thread::sleep(Duration::from_millis(500));
    mark(Message::JobEnd { job: 1 }, 2);
    let held = long.launched();
    assert!(held >= 450.0, "the launches went on while the short job ran: {held} ms; {}", long.said());
    assert!(long.said().contains("the dispatcher held a launch"), "{}", long.said());
    // Its turn, beside a tenant whose jobs take about half a second: more than four times
    // that, it keeps two commands in flight, and four of its six launches wait.
    assert_eq!(jobs(&d, "long"), (Some(false), Some(true)));
    let shallow = long.launch();
    assert!(shallow >= 150.0, "not kept shallow: {shallow} ms");
    // Held again, then the daemon dies: a launch held by a daemon that is gone goes on.
    mark(begin(2, "short", 10_000_000_000), 3);
    long.start_launch();
    std::thread::sleep(Duration::from_millis(100));
    d.crash();
    let after = long.launched();
    assert!(after < 2_000.0, "a dead daemon's hold held the launches {after} ms");
    long.finish();
}

/// `policies/admit_short.c` as the `admission` program: a job more than four times
/// longer than one running waits, its launches held, until the short job ends; a kind
/// named in its map `first` runs at once; unloading the program lifts its hold.
#[test]
fn an_admission_program_holds_a_long_job_until_the_short_one_ends() {
    let dir = TempDir::new("jobs-admit-obj");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let Some(obj) = compile_policy(&root.join("policies/admit_short.c"), &dir.path().join("admit_short.o")) else { return };
    let d = Daemon::start("jobs-admit", &["--hbm", "64M"]);
    let loaded = d.ctl(&["policy", "load", obj.to_str().expect("utf-8")]);
    assert!(loaded.stdout.contains("loaded policy 1 (admit_short.o): admission"), "{}", loaded.describe());
    let held = |d: &Daemon, name: &str| tenant_json(d, name)["jobs"]["held"].as_bool();
    // The dispatcher reads a mark within a few ms.
    let soon = |want: bool| {
        (0..200).any(|_| {
            let now = held(&d, "long") == Some(want);
            if !now {
                std::thread::sleep(Duration::from_millis(10));
            }
            now
        })
    };
    // Alone, the long tenant's job runs at once (and takes its memory).
    let mut long = LongTenant::start(&d);
    assert!(long.launch() < 100.0);
    // This test process runs a job of 1 s; a job of 1,000 s begins after it. (A job
    // served past twice its estimate no longer holds anybody: the test ends it first.)
    let mark = short_tenant(&d);
    mark(begin(1, "short", 1_000_000_000), 1);
    long.again("huge");
    assert!(soon(true) && held(&d, "short") == Some(false), "{}", d.ctl(&["ps", "--json"]).stdout);
    long.start_launch();
    std::thread::sleep(Duration::from_millis(500));
    mark(Message::JobEnd { job: 1 }, 2);
    let waited = long.launched();
    assert!(waited >= 450.0, "the long job's launches went on beside the short job: {waited} ms; {}", long.said());
    assert_eq!(held(&d, "long"), Some(false));
    // Let run, the long job runs on beside a short job that begins now.
    mark(begin(2, "blip", 1_000_000), 3);
    assert!(long.launch() < 100.0, "a job let run is not held again");
    // A kind named in `first` runs at once beside a far shorter job (5 s against 1,000 s).
    mark(begin(3, "medium", 5_000_000_000), 4);
    assert!(d.ctl(&["policy", "map", "1", "first", "update", "str:huge2", "1"]).status.success());
    long.again("huge2");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(held(&d, "long"), Some(false), "{}", d.ctl(&["ps", "--json"]).stdout);
    assert!(long.launch() < 100.0);
    // Waiting again, then the policy is unloaded: the hold is lifted, before gmux's own
    // bound of a second would have lifted it.
    let began = std::time::Instant::now();
    long.again("huge3");
    assert!(soon(true), "{}", d.ctl(&["ps", "--json"]).stdout);
    assert!(d.ctl(&["policy", "unload", "1"]).status.success());
    let unloaded = began.elapsed();
    assert!(soon(false), "still held after the policy was unloaded");
    let lifted = began.elapsed();
    // Unloaded well within the second (not so on a machine too slow to tell): lifted by
    // the unload, before the bound.
    if unloaded < Duration::from_millis(700) {
        assert!(lifted < Duration::from_secs(1), "lifted {lifted:?} after the job began, unloaded at {unloaded:?}: by the bound");
    }
    assert!(long.launch() < 100.0);
    long.finish();
}
