//! `gmux events` against a daemon with stand-in tenants: every kind of event arrives, in
//! order, with its numbers.

mod common;

use common::daemon::*;
use common::*;
use gmuxd::ctl::{Request, Trigger};
use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

/// The lines of streaming request `req` to `d` (what `gmux events --json` and `gmux watch
/// --json` print), subscribed when this returns: the daemon has answered.
fn stream(d: &Daemon, req: Request) -> Receiver<(Instant, String)> {
    let lines = gmuxd::ctl::stream(&d.sb.socket(), &req).unwrap_or_else(|e| panic!("{req:?}: {}", e.message()));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || lines.map_while(Result::ok).for_each(|l| _ = tx.send((Instant::now(), l))));
    rx
}

/// Events until one satisfies `last`, within 20 s.
fn until(rx: &Receiver<(Instant, String)>, what: &str, last: impl Fn(&serde_json::Value) -> bool) -> Vec<serde_json::Value> {
    let t0 = Instant::now();
    let mut seen = Vec::new();
    loop {
        let left = Duration::from_secs(20).saturating_sub(t0.elapsed());
        let (_, line) = rx.recv_timeout(left).unwrap_or_else(|_| panic!("no {what} within 20 s; saw {seen:#?}"));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let done = last(&v);
        seen.push(v);
        if done {
            return seen;
        }
    }
}

fn is(v: &serde_json::Value, event: &str, tenant: &str) -> bool {
    v["event"] == event && v["tenant"] == tenant
}

#[test]
fn events_tell_joins_switches_slots_knobs_refusals_and_leaves() {
    let d = Daemon::start("events", &["--hbm", "48M", "--timeslice", "5ms", "--max-timeslice", "5ms"]);
    let rx = stream(&d, Request::Events { tenant: None });
    let forever = ["loop", "--buffers", "8", "--bytes", "4M", "--rounds", "1000000"];
    let mut a = d.tenant("a", &forever);
    let seen = until(&rx, "a's join", |v| is(v, "joined", "a"));
    let pid = seen.last().unwrap()["pid"].as_u64().unwrap();
    assert_eq!(pid, u64::from(a.child().id()));
    let _b = d.tenant("b", &forever);
    until(&rx, "b's join", |v| is(v, "joined", "b"));
    // A tenant's events alone, once it exists.
    let rx_b = stream(&d, Request::Events { tenant: Some("b".into()) });
    // 2 x 32 MiB over 48 MiB: they take turns, and each slot's end says what it moved.
    let seen = until(&rx, "a slot of b that moved bytes", |v| is(v, "slot_ended", "b") && v["bytes_h2d"].as_u64().unwrap() > 0);
    assert!(seen.iter().any(|v| is(v, "switched_in", "a") && v["slice_ns"] == 5_000_000), "{seen:#?}");
    let end = seen.last().unwrap();
    assert!(end["ran_ns"].as_u64().unwrap() >= end["switch_ns"].as_u64().unwrap(), "{end}");
    assert!(end["at"].as_str().unwrap().ends_with('Z') && end["at"].as_str().unwrap().contains('T'), "RFC 3339: {end}");
    assert!(d.ctl(&["set", "a", "gmem.limit.high", "16M"]).status.success());
    until(&rx, "the knob change", |v| is(v, "knob_set", "a") && v["knob"] == "gmem.limit.high" && v["value"] == "16M");
    // Its 32 MiB loop now wants more than its limit: gmem.events counts high (once per
    // spell; the unit tests check the counting).
    until(&rx, "gmem.events high of a", |v| is(v, "memory", "a") && v["counter"] == "high");
    let events: serde_json::Value = serde_json::from_str(&d.ctl(&["get", "--json", "a", "gmem.events"]).stdout).unwrap();
    assert!(events["gmem.events"]["high"].as_u64().unwrap() >= 1, "{events}");
    assert!(events["gmem.events"]["swap"].as_u64().unwrap() >= 1, "a was switched out with its memory evicted: {events}");
    // A process refused: a priority past what any tenant may ask for.
    let mut c = d.sb.gmux_sub(&["run", "--priority", "2000000"], None, forever);
    c.env("GMUX_TENANT", "c").stdout(Stdio::piped()).stderr(Stdio::piped());
    let refused = c.output().unwrap();
    assert!(!refused.status.success(), "a priority of 2000000 was accepted");
    let seen = until(&rx, "c's refusal", |v| is(v, "refused", "c"));
    assert!(seen.last().unwrap()["why"].as_str().unwrap().contains("priority"), "{seen:#?}\n{refused:?}");
    a.child().kill().unwrap();
    let seen = until(&rx, "a's leave", |v| is(v, "left", "a"));
    assert_eq!(seen.last().unwrap()["pid"].as_u64().unwrap(), pid);
    // The filtered watcher saw b's events and nobody else's.
    let b_seen = until(&rx_b, "b's slot end", |v| is(v, "slot_ended", "b"));
    assert!(b_seen.iter().all(|v| v["tenant"] == "b"), "{b_seen:#?}");
    // The command itself: the same lines as text, and its errors.
    let (mut cli, cli_rx) = watch_cmd(&d, "events", &["--tenant", "b"]);
    let t0 = Instant::now();
    let text = loop {
        // b alone runs without slots: a knob change makes an event, once subscribed.
        assert!(d.ctl(&["set", "b", "compute.timeslice", "5ms"]).status.success());
        if let Ok((_, text)) = cli_rx.recv_timeout(Duration::from_secs(1)) {
            break text;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "gmux events printed nothing");
    };
    assert!(text.ends_with("Z b: compute.timeslice set to 5ms"), "{text}");
    let _ = cli.kill();
    let human = d.ctl(&["events", "--count", "1", "--tenant", "nosuch"]);
    assert!(!human.status.success() && human.stderr.contains("unknown tenant \"nosuch\""), "{human:?}");
}

/// The held bytes of tenant `t`, as `gmux ps --json` says.
fn held(d: &Daemon, t: &str) -> u64 {
    let s: serde_json::Value = serde_json::from_str(&d.ctl(&["ps", "--json"]).stdout).unwrap();
    s["tenants"].as_array().unwrap().iter().find(|x| x["name"] == t).map_or(0, |x| x["held"].as_u64().unwrap())
}

#[test]
fn a_watcher_hears_within_100_ms_that_its_limit_fell_below_what_it_holds_or_its_pressure_rose() {
    let d = Daemon::start("watch", &["--hbm", "64M"]);
    let _a = d.tenant("a", &["loop", "--buffers", "8", "--bytes", "4M", "--rounds", "1000000"]);
    d.wait_commands("a", 20);
    let rx = stream(&d, Request::Watch { tenant: "a".into(), trigger: Trigger::LimitBelowHeld });
    let mut latencies = Vec::new();
    for _ in 0..5 {
        assert!(d.ctl(&["set", "a", "gmem.limit.high", "max"]).status.success());
        let t0 = Instant::now();
        while held(&d, "a") < 24 << 20 {
            assert!(t0.elapsed() < Duration::from_secs(10), "a never grew back");
            std::thread::sleep(Duration::from_millis(20));
        }
        // From before `gmux set` starts: the latency includes starting that process.
        let set = Instant::now();
        assert!(d.ctl(&["set", "a", "gmem.limit.high", "8M"]).status.success());
        let (heard, line) = rx.recv_timeout(Duration::from_secs(5)).expect("the watcher heard nothing within 5 s");
        latencies.push(heard - set);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!((v["event"].as_str(), v["limit_high"].as_u64()), (Some("limit_below_held"), Some(8 << 20)), "{v}");
        assert!(v["held"].as_u64().unwrap() > 8 << 20, "{v}");
    }
    latencies.sort();
    eprintln!("limit below held: heard after {latencies:?}");
    assert!(latencies[2] <= Duration::from_millis(100) && latencies[4] <= Duration::from_secs(1), "{latencies:?}");
    // Held at 8M, a 32M loop waits for memory most of the time.
    let (mut pressed, rx) = watch_cmd(&d, "watch", &["a", "--pressure-above", "10", "--json"]);
    let (_, line) = rx.recv_timeout(Duration::from_secs(20)).expect("no pressure event within 20 s");
    let heard = std::time::SystemTime::now();
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!((v["event"].as_str(), v["kind"].as_str(), v["window"].as_u64()), (Some("pressure_above"), Some("some"), Some(10)), "{v}");
    assert!(v["percent"].as_f64().unwrap() > 10.0 && v["threshold"] == 10.0, "{v}");
    let at = humantime::parse_rfc3339(v["at"].as_str().unwrap()).unwrap();
    let delivered = heard.duration_since(at).unwrap_or_default();
    eprintln!("pressure above 10%: delivered {delivered:?} after the daemon saw it");
    assert!(delivered <= Duration::from_secs(1), "{delivered:?}");
    let p: serde_json::Value = serde_json::from_str(&d.ctl(&["get", "--json", "a", "gmem.pressure"]).stdout).unwrap();
    assert!(p["gmem.pressure"]["some"]["avg10"].as_f64().unwrap() > 0.05, "{p}");
    let text = d.ctl(&["get", "a", "gmem.pressure"]).stdout;
    assert!(text.starts_with("some avg10=") && text.contains("\nfull avg10="), "{text}");
    let _ = pressed.kill();
    let bad = d.ctl(&["watch", "a", "--pressure-above", "10", "--window", "30"]);
    assert!(!bad.status.success() && bad.stderr.contains("10, 60 or 300"), "{bad:?}");
}

/// `gmux SUB ARGS` (events or watch) on `d`, its lines arriving on the receiver.
fn watch_cmd(d: &Daemon, sub: &str, args: &[&str]) -> (std::process::Child, Receiver<(Instant, String)>) {
    let mut c = Command::new(gmux_bin()).arg(sub).args(args).env("GMUX_SOCKET", d.sb.socket()).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
    let lines = std::io::BufReader::new(c.stdout.take().unwrap()).lines();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || lines.map_while(Result::ok).for_each(|l| _ = tx.send((Instant::now(), l))));
    (c, rx)
}

/// A reader that stops early (`gmux ps | head`) ends a printing command quietly, by
/// SIGPIPE, as other command-line tools end; Rust's default was a panic at the first
/// write ("failed printing to stdout: Broken pipe") and status 101. `gmux sim` writes its
/// files before its table, so they are whole.
#[test]
fn a_reader_that_stops_early_ends_the_command_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let d = Daemon::start("sigpipe", &[]);
    let dir = d.sb.dir.path();
    let scenario = dir.join("tiny.toml");
    std::fs::write(
        &scenario,
        "description = \"one small tenant\"\nduration = \"200ms\"\ngpu = \"1G\"\nsystems = [\"in-hbm\"]\n\n[[tenant]]\nname = \"a\"\n\
         workload = { kind = \"dnn\", weights = \"64M\", layers = 4, activations = \"16M\", layer_us = 100 }\n",
    )
    .expect("write");
    let json = dir.join("tiny.json");
    let sim = ["sim", "--quiet", scenario.to_str().expect("utf-8"), "--json", json.to_str().expect("utf-8")];
    for args in [&["ps"][..], &sim[..]] {
        let mut c = d.sb.gmux_cli(args);
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = c.spawn().expect("gmux");
        // The reader goes away before anything is written.
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "gmux {args:?}: {:?}: {stderr}", out.status);
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).expect("the JSON file")).expect("whole JSON");
    assert_eq!(v["results"].as_array().map(Vec::len), Some(1), "{v}");
}
