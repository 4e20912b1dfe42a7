//! `gmux top` against a daemon with stand-in tenants: in a real terminal (tmux) its
//! screen shows each tenant's numbers, they change as the tenants run, and its keys
//! freeze a tenant; in a pipe it prints one line per refresh.

mod common;

use common::daemon::*;
use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

/// A tmux server of the test's own (its socket in the sandbox), killed on drop.
struct Tmux {
    socket: std::path::PathBuf,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux").arg("-S").arg(&self.socket).args(args).output().expect("tmux runs")
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", "top"]).stdout).into_owned()
    }

    /// Waits up to 10 s for the screen to satisfy `ok`, and returns it.
    fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let t0 = Instant::now();
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            assert!(t0.elapsed() < Duration::from_secs(10), "the screen never showed {what}:\n{s}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

/// The cells of tenant `name`'s row on `screen`.
fn row<'a>(screen: &'a str, name: &str) -> Option<Vec<&'a str>> {
    screen.lines().map(|l| l.split_whitespace().collect::<Vec<_>>()).find(|c| c.first() == Some(&name) && c.len() >= 12)
}

/// The COMMANDS-per-second and SWITCHES cells of `name`'s row.
fn numbers(screen: &str, name: &str) -> Option<(String, String)> {
    // TENANT STATE PRIO GMEM(2) WANT(2) SWAP(2) LOW(2) HIGH IN/s(2) OUT/s(2) CMD/s SWITCHES WAIT PSI10
    let c = row(screen, name)?;
    let n = c.len();
    Some((c[n - 4].to_string(), c[n - 3].to_string()))
}

#[test]
fn top_shows_each_tenant_live_and_freezes_the_selected_one() {
    if which_tmux().is_none() {
        assert!(std::env::var_os("GMUX_REQUIRE_TMUX").is_none(), "tmux not found: install Debian's tmux package");
        eprintln!("tmux not found: gmux top's screen is not tested here");
        return;
    }
    let d = Daemon::start("top", &["--hbm", "48M", "--timeslice", "5ms", "--max-timeslice", "5ms"]);
    let forever = ["loop", "--buffers", "8", "--bytes", "4M", "--rounds", "1000000"];
    let _a = d.tenant("a", &forever);
    let _b = d.tenant("b", &forever);
    d.wait_commands("a", 20);
    d.wait_commands("b", 20);
    let tmux = Tmux { socket: d.sb.dir.path().join("tmux.sock") };
    let top = format!("GMUX_SOCKET={} {} top --interval 0.5", d.sb.socket().display(), gmux_bin().display());
    let started = tmux.cmd(&["new-session", "-d", "-s", "top", "-x", "160", "-y", "30", &top]);
    assert!(started.status.success(), "{started:?}");
    let first = tmux.wait_for("both tenants with rates", |s| ["a", "b"].iter().all(|t| numbers(s, t).is_some_and(|(cmd, _)| cmd != "-")));
    assert!(first.contains("TENANT") && first.contains("budget 48.0 MiB"), "{first}");
    for t in ["a", "b"] {
        let c = row(&first, t).unwrap();
        assert!(c[1] == "running" || c[1] == "paused", "{t}'s state: {c:?}");
    }
    // The numbers move as the tenants run: switches only grow, and both take turns.
    let (_, switches_a) = numbers(&first, "a").unwrap();
    tmux.wait_for("a's switches grow", |s| numbers(s, "a").is_some_and(|(_, sw)| sw.parse::<u64>().unwrap() > switches_a.parse::<u64>().unwrap()));
    // Rows sort by name at first: a is selected; f freezes it, as `gmux set` would.
    tmux.cmd(&["send-keys", "-t", "top", "f"]);
    tmux.wait_for("a frozen", |s| row(s, "a").is_some_and(|c| c[1] == "frozen") && s.contains("a: compute.freeze 1"));
    assert_eq!(d.ctl(&["get", "a", "compute.freeze"]).stdout.trim(), "1");
    // Down to b, then f again freezes b; a stays frozen.
    tmux.cmd(&["send-keys", "-t", "top", "Down", "f"]);
    tmux.wait_for("b frozen", |s| row(s, "b").is_some_and(|c| c[1] == "frozen"));
    assert_eq!(d.ctl(&["get", "a", "compute.freeze"]).stdout.trim(), "1");
    // A frozen tenant releases nothing: its commands per second fall to 0.
    tmux.wait_for("b at 0 commands per second", |s| numbers(s, "b").is_some_and(|(cmd, _)| cmd == "0"));
    tmux.cmd(&["send-keys", "-t", "top", "q"]);
    let t0 = Instant::now();
    while tmux.cmd(&["has-session", "-t", "top"]).status.success() {
        assert!(t0.elapsed() < Duration::from_secs(5), "q did not end gmux top");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn which_tmux() -> Option<()> {
    Command::new("tmux").arg("-V").output().ok().filter(|o| o.status.success()).map(|_| ())
}

#[test]
fn top_in_a_pipe_prints_one_line_per_refresh_and_says_when_no_daemon_runs() {
    let d = Daemon::start("top-plain", &["--hbm", "48M"]);
    let _a = d.tenant("a", &["loop", "--buffers", "4", "--bytes", "4M", "--rounds", "1000000"]);
    d.wait_commands("a", 20);
    let out = d.ctl(&["top", "--interval", "0.2", "--count", "3"]);
    assert!(out.status.success(), "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", out.stdout);
    for l in &lines {
        assert!(l.starts_with("budget 48.0 MiB") && l.contains("; a running gmem "), "{l}");
    }
    let cmds: Vec<f64> = lines.iter().map(|l| l.split(" cmd ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap()).collect();
    // A loaded machine may hold the stand-in back for a refresh, not for all three.
    assert!(cmds.iter().any(|c| *c > 0.0), "a runs alone, yet no refresh saw it release a command: {cmds:?}");
    let gone = run(Command::new(gmux_bin()).args(["top", "--count", "1"]).env("GMUX_SOCKET", d.sb.dir.path().join("nobody.sock")));
    assert!(!gone.status.success() && gone.stderr.contains("gmuxd is not running") && gone.stderr.contains("gmux daemon"), "{gone:?}");
    let bad = d.ctl(&["top", "--interval", "0"]);
    assert!(bad.stderr.contains("refresh interval"), "{bad:?}");
}
