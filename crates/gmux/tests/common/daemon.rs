//! A daemon of a test's own, and tenants of it, that end with the test.

use super::*;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Waits until a daemon listens at `socket` (the file appears at bind, a moment before
/// connections are accepted).
pub fn wait_for_daemon(socket: &std::path::Path) {
    use std::io::Write;
    let t0 = Instant::now();
    loop {
        if let Ok(mut s) = std::os::unix::net::UnixStream::connect(socket) {
            let _ = s.write_all(b"{\"op\":\"ps\"}\n");
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "daemon did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A sandbox with a daemon of its own, stopped when dropped.
pub struct Daemon {
    pub sb: Sandbox,
    pub child: Child,
}

impl Daemon {
    pub fn start(name: &str, flags: &[&str]) -> Daemon {
        let sb = Sandbox::new(name, 1 << 30);
        let log = std::fs::File::create(sb.dir.path().join("daemon.log")).unwrap();
        let child =
            Command::new(gmux_bin()).arg("daemon").args(flags).arg("--socket").arg(sb.socket()).stdout(log.try_clone().unwrap()).stderr(log).spawn().unwrap();
        wait_for_daemon(&sb.socket());
        Daemon { sb, child }
    }

    /// Kills the daemon with SIGKILL, as a crash would, leaving its tenants running.
    pub fn crash(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Starts a daemon again on the same socket, logging to `daemon.N.log`.
    pub fn restart(&mut self, flags: &[&str], n: u32) {
        let log = std::fs::File::create(self.sb.dir.path().join(format!("daemon.{n}.log"))).unwrap();
        self.child = Command::new(gmux_bin())
            .arg("daemon")
            .args(flags)
            .arg("--socket")
            .arg(self.sb.socket())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        wait_for_daemon(&self.sb.socket());
    }

    /// What daemon number `n` after the first printed so far.
    pub fn log_of(&self, n: u32) -> String {
        std::fs::read_to_string(self.sb.dir.path().join(format!("daemon.{n}.log"))).unwrap_or_default()
    }

    /// `gmux ARGS` against this daemon.
    pub fn ctl(&self, args: &[&str]) -> Ran {
        run(Command::new(gmux_bin()).args(args).env("GMUX_SOCKET", self.sb.socket()))
    }

    /// A tenant running `standin_app ARGS`, started in the background.
    pub fn tenant(&self, name: &str, args: &[&str]) -> Tenant {
        self.tenant_with(name, &[], args)
    }

    /// [`Daemon::tenant`] with more environment variables.
    pub fn tenant_with(&self, name: &str, env: &[(&str, &str)], args: &[&str]) -> Tenant {
        let mut c = self.sb.gmux(None, args);
        c.envs(env.iter().copied());
        c.env_remove("GMUX_SOCKET").env("GMUX_SOCKET", self.sb.socket()).env("GMUX_TENANT", name).stdout(Stdio::piped()).stderr(Stdio::piped());
        Tenant(Some(c.spawn().unwrap()))
    }

    /// The number after `label` in `gmux get TENANT ggroup.stat`.
    pub fn stat(&self, tenant: &str, label: &str) -> u64 {
        self.try_stat(tenant, label).unwrap_or_else(|| panic!("no {label} of tenant {tenant}"))
    }

    /// As [`Daemon::stat`]; `None` before the tenant has joined.
    pub fn try_stat(&self, tenant: &str, label: &str) -> Option<u64> {
        let r = self.ctl(&["get", tenant, "ggroup.stat"]);
        r.stdout.lines().find_map(|l| l.strip_prefix(label).map(|v| v.trim().parse().unwrap()))
    }

    /// Waits until tenant `name` has released at least `n` commands (by this daemon's count).
    pub fn wait_commands(&self, name: &str, n: u64) {
        let t0 = Instant::now();
        while self.try_stat(name, "commands ").unwrap_or(0) < n {
            assert!(t0.elapsed() < Duration::from_secs(30), "tenant {name} never ran; gmuxd:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until tenant `name` is listed.
    pub fn wait_tenant(&self, name: &str) {
        let t0 = Instant::now();
        while !self.ctl(&["ps"]).stdout.lines().any(|l| l.split_whitespace().next() == Some(name)) {
            assert!(t0.elapsed() < Duration::from_secs(30), "tenant {name} never joined; gmuxd:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What the daemon printed so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.sb.dir.path().join("daemon.log")).unwrap_or_default()
    }

    /// Whether the daemon logs `text` within 2 s (its log is written by a thread of its own).
    pub fn logs(&self, text: &str) -> bool {
        let t0 = Instant::now();
        while !self.log().contains(text) {
            if t0.elapsed() > Duration::from_secs(2) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }

    pub fn peak_held(&self) -> u64 {
        let ps = self.ctl(&["ps"]).stdout;
        let peak = ps.split("peak ").nth(1).and_then(|s| s.split(')').next()).unwrap_or_else(|| panic!("no peak in {ps}"));
        gmux_core::size::parse_size(&peak.replace(" MiB", "M").replace(" GiB", "G").replace(" KiB", "K").replace(" B", "").replace(".0", "")).unwrap()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.ctl(&["stop"]);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A tenant that must not outlive its test, even a failed one.
pub struct Tenant(pub Option<Child>);

impl Tenant {
    pub fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("running")
    }

    pub fn finish(mut self, what: &str) -> String {
        finish(self.0.take().expect("running"), what)
    }
}

impl Drop for Tenant {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn finish(c: Child, what: &str) -> String {
    let out = c.wait_with_output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{what} failed:\n{text}");
    text
}
