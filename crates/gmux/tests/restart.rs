//! gmuxd restarted, or lost, under running tenants: they run on within their grants,
//! register with the next daemon on the socket, and no byte is lost.

mod common;

use common::daemon::*;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

#[test]
fn a_daemon_killed_under_its_tenants_is_replaced_and_loses_nothing() {
    // The whole-tenant swap: the tenant paused when the daemon dies holds a grant of 0
    // bytes, and must neither die nor take memory until the next daemon grants it.
    // Unstretched slices keep both tenants switching, and neither finishes early.
    let flags = ["--hbm", "48M", "--timeslice", "5ms", "--max-timeslice", "5ms", "--switch", "whole", "--verbose"];
    let mut d = Daemon::start("restart-kill", &flags);
    // Enough rounds that the tenant running at the crash, which runs on within its last
    // grant, cannot finish before the new daemon serves the socket.
    let loop_args = ["loop", "--buffers", "8", "--bytes", "4M", "--rounds", "1600"];
    let a = d.tenant("a", &loop_args);
    let b = d.tenant("b", &loop_args);
    d.wait_commands("a", 30);
    d.wait_commands("b", 30);
    d.crash();
    // A while without a daemon: each tenant runs on within its last grant, or waits.
    std::thread::sleep(Duration::from_millis(300));
    d.restart(&flags, 2);
    let (a, b) = (a.finish("a"), b.finish("b"));
    for (out, n) in [(&a, "a"), (&b, "b")] {
        assert!(out.contains("mismatches: 0"), "{n}:\n{out}");
        assert!(out.contains("lost gmuxd") && out.contains("registered again with gmuxd"), "{n} did not register again:\n{out}");
    }
    let log = d.log_of(2);
    for n in ["a", "b"] {
        assert!(log.contains(&format!("registered again with tenant \"{n}\"")), "the new daemon did not take {n} back:\n{log}");
        assert!(d.stat(n, "commands ") > 0, "the new daemon saw no command of {n}:\n{log}");
    }
    assert!(log.contains("2 processes of the previous daemon may still hold memory"), "{log}");
    let peak = d.peak_held();
    assert!(peak <= 48 * MIB, "peak held {peak} bytes against a 48M budget");
}

#[test]
fn a_restarted_daemon_keeps_the_knobs_and_waits_for_the_old_tenants_before_granting_more() {
    let flags = ["--hbm", "64M"];
    let mut d = Daemon::start("restart-knobs", &flags);
    let a = d.tenant("a", &["loop", "--buffers", "4", "--bytes", "4M", "--rounds", "1000000"]);
    d.wait_commands("a", 20);
    assert!(d.ctl(&["set", "a", "gmem.limit.high", "12M"]).status.success());
    assert!(d.ctl(&["set", "a", "compute.timeslice", "7ms"]).status.success());
    // Stop it (as an operator would to upgrade it), then start one with --resume and
    // other flags: the previous daemon's settings win.
    assert!(d.ctl(&["stop"]).status.success());
    let _ = d.child.wait();
    d.restart(&["--resume", "--hbm", "1G"], 2);
    let t0 = Instant::now();
    while !d.log_of(2).contains("registered again with tenant \"a\"") {
        assert!(t0.elapsed() < Duration::from_secs(10), "a did not register again:\n{}", d.log_of(2));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(d.ctl(&["get", "a", "gmem.limit.high"]).stdout.trim(), (12 * MIB).to_string());
    assert_eq!(d.ctl(&["get", "a", "compute.timeslice"]).stdout.trim(), "7000us");
    let ps = d.ctl(&["ps"]).stdout;
    assert!(ps.lines().next().is_some_and(|l| l.contains("budget 64.0 MiB,")), "--resume took the old budget:\n{ps}");
    // Its first report may wait for the commands it had queued under the old daemon (up to
    // GMUX_INFLIGHT of them) to drain ahead of its last shrink's copies.
    let (before, t0) = (d.stat("a", "commands "), Instant::now());
    while d.stat("a", "commands ") <= before {
        assert!(t0.elapsed() < Duration::from_secs(10), "a made no progress under the new daemon");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(a);
}
