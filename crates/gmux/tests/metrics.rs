//! `gmux daemon --metrics` on the CPU stand-in: the exposition is valid, and its counters
//! are ggroup.stat's to the byte.

mod common;

use common::daemon::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The address the daemon printed for its metrics.
fn metrics_addr(d: &Daemon) -> String {
    // The whole line: the log may be read while it is being written.
    assert!(d.logs("/metrics\n"), "no metrics address in the log:\n{}", d.log());
    let log = d.log();
    let url = log.split("metrics at http://").nth(1).unwrap();
    url.split("/metrics").next().unwrap().to_string()
}

/// GETs `path` and returns the status line and the body.
fn http_get(addr: &str, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).unwrap();
    let (head, body) = all.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no HTTP head in {all:?}"));
    (head.lines().next().unwrap().to_string(), body.to_string())
}

/// The value of the series `name` of tenant `tenant`.
fn sample(text: &str, name: &str, tenant: &str) -> Option<f64> {
    let want = format!("tenant=\"{tenant}\"");
    text.lines().find(|l| l.starts_with(&format!("{name}{{")) && l.contains(&want)).map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
}

/// Both tenants' ggroup.stat, as `gmux get --json` prints it.
fn stats(d: &Daemon) -> Vec<serde_json::Value> {
    ["a", "b"]
        .iter()
        .map(|t| {
            let r = d.ctl(&["get", "--json", t, "ggroup.stat"]);
            let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {:?}", r.stdout));
            v["ggroup.stat"].clone()
        })
        .collect()
}

/// Checks the exposition with `promtool check metrics` (Debian's prometheus package),
/// which `.ci/run` installs and requires through GMUX_REQUIRE_PROMTOOL.
fn promtool_check(text: &str) {
    let child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            assert!(std::env::var_os("GMUX_REQUIRE_PROMTOOL").is_none(), "promtool not found ({e}): install Debian's prometheus package");
            eprintln!("promtool not found: the exposition was checked by this test's own reading only");
            return;
        }
    };
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && said.trim().is_empty(), "promtool check metrics: {said}\n{text}");
}

#[test]
fn metrics_are_valid_and_their_counters_are_ggroup_stat_to_the_byte() {
    let d = Daemon::start("metrics", &["--hbm", "48M", "--timeslice", "5ms", "--max-timeslice", "5ms", "--metrics", "127.0.0.1:0"]);
    let addr = metrics_addr(&d);
    let forever = ["loop", "--buffers", "8", "--bytes", "4M", "--rounds", "1000000"];
    let _a = d.tenant("a", &forever);
    let _b = d.tenant("b", &forever);
    d.wait_commands("a", 100);
    d.wait_commands("b", 100);
    // Until each has been switched in twice and evicted by the other's need.
    let swaps = |t: &str| {
        let v: serde_json::Value = serde_json::from_str(&d.ctl(&["get", "--json", t, "gmem.events"]).stdout).unwrap_or_default();
        v["gmem.events"]["swap"].as_u64().unwrap_or(0)
    };
    let t0 = Instant::now();
    while !stats(&d).iter().all(|s| s["switches"].as_u64() >= Some(2) && s["bytes_d2h"].as_u64() > Some(0)) || swaps("a") == 0 || swaps("b") == 0 {
        assert!(t0.elapsed() < Duration::from_secs(30), "the tenants did not take turns: {:?}, swaps {} and {}", stats(&d), swaps("a"), swaps("b"));
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, live) = http_get(&addr, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    promtool_check(&live);
    // Frozen, the tenants release nothing more; once their counters stand still, the
    // scrape between two equal reads must give exactly those numbers.
    for t in ["a", "b"] {
        assert!(d.ctl(&["set", t, "compute.freeze", "1"]).status.success());
    }
    let t0 = Instant::now();
    let (before, text) = loop {
        let before = stats(&d);
        std::thread::sleep(Duration::from_millis(300));
        let (_, text) = http_get(&addr, "/metrics");
        if stats(&d) == before {
            break (before, text);
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "the frozen tenants' counters never stood still");
    };
    promtool_check(&text);
    for (t, stat) in ["a", "b"].iter().zip(&before) {
        for (metric, field) in [
            ("gmux_tenant_commands_total", "submitted"),
            ("gmux_tenant_finished_commands_total", "finished"),
            ("gmux_tenant_h2d_bytes_total", "bytes_h2d"),
            ("gmux_tenant_d2h_bytes_total", "bytes_d2h"),
            ("gmux_tenant_switches_total", "switches"),
        ] {
            let want = stat[field].as_u64().unwrap();
            assert_eq!(sample(&text, metric, t), Some(want as f64), "{metric} of {t}\n{text}");
        }
        assert!(stat["bytes_d2h"].as_u64().unwrap() > 0 && stat["switches"].as_u64().unwrap() >= 2, "{t} never swapped: {stat}");
        let evicted =
            text.lines().find(|l| l.starts_with("gmux_tenant_memory_events_total{") && l.contains(&format!("tenant=\"{t}\"")) && l.contains("kind=\"swap\""));
        assert!(evicted.is_some_and(|l| !l.ends_with(" 0")), "{t}'s swaps are not in gmem.events: {evicted:?}");
        let switched = sample(&text, "gmux_tenant_switch_seconds_count", t).unwrap();
        assert!(switched >= 1.0, "{t}'s switches are not in the histogram\n{text}");
        assert!(text.contains(&format!("gmux_tenant_held_bytes{{tenant=\"{t}\",gpu=\"gmux\",uid=\"")), "labels of {t}\n{text}");
    }
    assert!(text.contains("gmux_budget_bytes{gpu=\"gmux\"} 50331648"), "{text}");
}

#[test]
fn a_stalled_or_hostile_scraper_never_stalls_the_daemon() {
    let d = Daemon::start("metrics-hostile", &["--hbm", "48M", "--metrics", "127.0.0.1:0"]);
    let addr = metrics_addr(&d);
    // Connections that never send their request hold every scrape slot.
    let idle: Vec<TcpStream> = (0..40).map(|_| TcpStream::connect(&addr).unwrap()).collect();
    let t0 = Instant::now();
    assert!(d.ctl(&["ps"]).status.success());
    assert!(t0.elapsed() < Duration::from_secs(2), "gmux ps took {:?} beside stalled scrapers", t0.elapsed());
    drop(idle);
    // Slots freed, a scrape answers again within the stalled clients' timeout.
    let t0 = Instant::now();
    loop {
        if let Ok(mut s) = TcpStream::connect(&addr) {
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let _ = s.write_all(b"GET /nothing HTTP/1.1\r\n\r\n");
            let mut a = String::new();
            let _ = s.read_to_string(&mut a);
            if a.starts_with("HTTP/1.1 404") {
                break;
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "scrapes never answered again");
        std::thread::sleep(Duration::from_millis(100));
    }
    // A head past 8 KiB is refused.
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let junk = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n", "x".repeat(64 << 10));
    let _ = s.write_all(junk.as_bytes());
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:?}");
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"DELETE /metrics HTTP/1.1\r\n\r\n").unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 405"), "{answer:?}");
    assert!(http_get(&addr, "/metrics").0.ends_with("200 OK"));
}
