//! A host of several GPUs, on the stand-in with `GMUX_STANDIN_DEVICES` devices: one
//! daemon per GPU on a socket named by the GPU's UUID, `gmux run --gpus`, per-GPU
//! budgets, a daemon that serves one GPU only, and one process on two devices, each
//! within its own limit, with copies and a kernel across them.

mod common;

use common::daemon::wait_for_daemon;
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const GPU0: &str = "GPU-676d7578-0000-0000-0000-000000000000";
const GPU1: &str = "GPU-676d7578-0000-0000-0000-000000000001";
const M: u64 = 1 << 20;

/// A sandbox whose stand-in has two devices, with a run directory of its own.
struct Host {
    sb: Sandbox,
    run: PathBuf,
    daemons: Vec<Child>,
}

impl Host {
    fn new(name: &str) -> Host {
        let sb = Sandbox::new(name, 1 << 30);
        let run = sb.dir.path().join("run");
        Host { sb, run, daemons: Vec::new() }
    }

    /// `gmux ARGS` on this host: no GMUX_SOCKET, so commands find the daemons by GPU.
    fn cli(&self, args: &[&str]) -> Command {
        let mut c = self.sb.gmux_cli(args);
        c.env_remove("GMUX_SOCKET").env("GMUX_RUN_DIR", &self.run).env("GMUX_STANDIN_DEVICES", "2");
        c
    }

    fn socket(&self, gpu: &str) -> PathBuf {
        self.run.join(format!("{gpu}.sock"))
    }

    /// Starts `gmux daemon ARGS` and waits for the sockets of `gpus`.
    fn daemon(&mut self, args: &[&str], gpus: &[&Path]) {
        let log = std::fs::File::create(self.sb.dir.path().join(format!("daemon.{}.log", self.daemons.len()))).unwrap();
        let child = self.cli(&["daemon"]).args(args).stdout(log.try_clone().unwrap()).stderr(log).spawn().unwrap();
        self.daemons.push(child);
        for s in gpus {
            wait_for_daemon(s);
        }
    }

    fn log(&self) -> String {
        (0..self.daemons.len()).map(|i| std::fs::read_to_string(self.sb.dir.path().join(format!("daemon.{i}.log"))).unwrap_or_default()).collect()
    }

    /// `standin_app ARGS` under `gmux run RUN_ARGS`.
    fn tenant(&self, run_args: &[&str], app: &[&str]) -> Child {
        let mut c = self.cli(&["run"]);
        c.args(run_args).arg("--").arg(app_bin()).args(app).stdout(Stdio::piped()).stderr(Stdio::piped());
        c.spawn().unwrap()
    }

    /// `gmux ARGS` against the daemon of `gpu` alone.
    fn on(&self, gpu: &str, args: &[&str]) -> Ran {
        run(self.cli(args).env("GMUX_SOCKET", self.socket(gpu)))
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        for c in &mut self.daemons {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn finish(c: Child) -> Ran {
    let out = c.wait_with_output().unwrap();
    Ran {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into(),
        stderr: String::from_utf8_lossy(&out.stderr).into(),
        command: "tenant".into(),
    }
}

/// The body of `GET /metrics` at `addr`.
fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("no metrics at {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).unwrap();
    all.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or(all)
}

/// The number after `label` in the budget line of `gmux ps` (e.g. "peak ").
fn ps_size(ps: &str, label: &str) -> u64 {
    let head = ps.lines().next().unwrap_or_default();
    let at = head.find(label).unwrap_or_else(|| panic!("no {label:?} in {head:?}")) + label.len();
    let text: String = head[at..].chars().take_while(|c| *c != ')' && *c != ',').collect();
    gmux_core::size::parse_size(text.trim().replace(" MiB", "M").replace(" GiB", "G").replace(".0", "").as_str()).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

#[test]
fn each_gpu_has_its_own_daemon_budget_and_tenants() {
    let mut h = Host::new("gpus-each");
    let (s0, s1) = (h.socket(GPU0), h.socket(GPU1));
    // Two free ports in a row, for the daemons' metrics (GPU i serves the first + i).
    let port = (20000..60000u16)
        .step_by(7)
        .find(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok() && std::net::TcpListener::bind(("127.0.0.1", p + 1)).is_ok())
        .unwrap();
    let metrics = format!("127.0.0.1:{port}");
    h.daemon(&["--gpu", "all", "--hbm", "64M", "--timeslice", "20ms", "--metrics", &metrics], &[&s0, &s1]);
    // Two tenants of 48 MiB each on GPU 0 (150% of its budget), one on GPU 1 (75%).
    let oversub = |seed: &'static str| ["oversub", "--total", "48M", "--buffers", "8", "--ops", "300", "--seed", seed];
    let a0 = h.tenant(&["--gpus", "0", "--tenant", "a0"], &oversub("1"));
    let a1 = h.tenant(&["--gpus", GPU0, "--tenant", "a1"], &oversub("2"));
    let b = h.tenant(&["--gpus", "1", "--tenant", "b"], &oversub("3"));
    for (name, t) in [("a0", a0), ("a1", a1), ("b", b)] {
        let r = finish(t);
        assert!(r.status.success() && r.stdout.contains("checksum mismatches: 0"), "tenant {name}: {}\ndaemons:\n{}", r.describe(), h.log());
    }
    // Each tenant ran on its GPU's daemon and no other.
    let commands = |gpu, t| h.on(gpu, &["get", t, "ggroup.stat"]).stdout.lines().find_map(|l| l.strip_prefix("commands ").map(|v| v.parse::<u64>().unwrap()));
    for (gpu, mine, other) in [(GPU0, ["a0", "a1"].as_slice(), "b"), (GPU1, ["b"].as_slice(), "a0")] {
        for t in mine {
            assert!(commands(gpu, t).is_some_and(|n| n >= 200), "{t} on {gpu}: {:?}", h.on(gpu, &["get", t, "ggroup.stat"]));
        }
        assert_eq!(commands(gpu, other), None, "{other} never registered with {gpu}'s daemon");
    }
    // Each GPU's daemon serves its own metrics, labelled with its GPU.
    for (i, gpu) in [GPU0, GPU1].into_iter().enumerate() {
        let body = scrape(&format!("127.0.0.1:{}", port + i as u16));
        assert!(body.contains(&format!("gmux_budget_bytes{{gpu=\"{gpu}\"}} {}", 64 * M)), "GPU {i}:\n{body}");
    }
    // Budgets are per GPU: GPU 0's two tenants stayed within its 64 MiB together.
    let ps0 = h.on(GPU0, &["ps"]).stdout;
    assert!(ps0.starts_with(&format!("{GPU0}: budget 64.0 MiB")), "{ps0}");
    let peak0 = ps_size(&ps0, "peak ");
    assert!(peak0 <= 64 * M && peak0 > 48 * M, "GPU 0 peak {peak0}: {ps0}");
    // b's 48 MiB in eight buffers, each rounded up to 2 MiB chunks: at most 64 MiB.
    let peak1 = ps_size(&h.on(GPU1, &["ps"]).stdout, "peak ");
    assert!(peak1 > 40 * M && peak1 <= 64 * M, "GPU 1 held only b's memory: {peak1}");
    // Commands that speak to every daemon do; those that speak to one ask which.
    let ps = run(&mut h.cli(&["ps"]));
    assert!(ps.status.success() && ps.stdout.contains(&format!("{GPU0}: budget")) && ps.stdout.contains(&format!("{GPU1}: budget")), "{}", ps.describe());
    let json: serde_json::Value = serde_json::from_str(&run(&mut h.cli(&["ps", "--json"])).stdout).unwrap();
    let gpus: Vec<&str> = json.as_array().unwrap().iter().map(|s| s["gpu"].as_str().unwrap()).collect();
    assert_eq!(gpus, [GPU0, GPU1]);
    // A tenant is per GPU: get and set go to the daemons that know it, or to --gpu's.
    let get = run(&mut h.cli(&["get", "a0", "gmem.limit.high"]));
    assert!(get.status.success() && get.stdout == format!("{GPU0}: max\n"), "{}", get.describe());
    let set = run(&mut h.cli(&["set", "b", "gmem.limit.high", "32M"]));
    assert!(set.status.success() && set.stdout.starts_with(GPU1) && !set.stdout.contains(GPU0), "{}", set.describe());
    assert_eq!(run(&mut h.cli(&["get", "--gpu", "1", "b", "gmem.limit.high"])).stdout.trim(), (32 * M).to_string(), "--gpu by index");
    let other = run(&mut h.cli(&["get", "--gpu", GPU0, "b"]));
    assert!(!other.status.success() && other.stderr.contains("unknown tenant \"b\""), "--gpu by UUID: {}", other.describe());
    let both = run(&mut h.cli(&["get", "--gpu", &GPU0[..20], "b"]));
    assert!(both.status.code() == Some(2) && both.stderr.contains("2 of the daemons"), "an ambiguous --gpu: {}", both.describe());
    let nobody = run(&mut h.cli(&["get", "nobody"]));
    assert!(!nobody.status.success() && nobody.stderr.contains("daemons of 2 GPUs"), "{}", nobody.describe());
    let json: serde_json::Value = serde_json::from_str(&run(&mut h.cli(&["get", "a1", "--json"])).stdout).unwrap();
    let gpus_of_a1: Vec<&String> = json.as_object().unwrap().keys().collect();
    assert!(gpus_of_a1 == [GPU0] && json[GPU0].get("gmem.limit.high").is_some(), "one object of knobs, by GPU: {json}");
    let events = run(&mut h.cli(&["events"]));
    assert!(events.status.code() == Some(2) && events.stderr.contains("daemons of 2 GPUs") && events.stderr.contains("GMUX_SOCKET="), "{}", events.describe());
    let stop = run(&mut h.cli(&["stop"]));
    assert!(stop.status.success(), "{}", stop.describe());
    let parent = h.daemons.pop().unwrap();
    let t0 = Instant::now();
    let mut parent = parent;
    while parent.try_wait().unwrap().is_none() {
        assert!(t0.elapsed() < Duration::from_secs(10), "`gmux daemon --gpu all` did not end when both daemons stopped");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(parent.wait().unwrap().success());
}

#[test]
fn a_daemon_serves_the_gpu_of_its_first_process_alone() {
    let mut h = Host::new("gpus-bound");
    let socket = h.sb.socket();
    h.daemon(&["--socket", socket.to_str().unwrap(), "--hbm", "64M"], &[&socket]);
    let on_socket = |t: &Host, gpus: &str| {
        let mut c = t.cli(&["run", "--gpus", gpus, "--tenant", &format!("t{gpus}"), "--"]);
        c.arg(app_bin()).args(["oversub", "--total", "8M", "--ops", "50"]).env("GMUX_SOCKET", &socket);
        run(&mut c)
    };
    let first = on_socket(&h, "1");
    assert!(first.status.success(), "{}", first.describe());
    let second = on_socket(&h, "0");
    assert!(!second.status.success(), "a process of GPU 0 ran under GPU 1's daemon: {}", second.describe());
    assert!(
        second.stderr.contains(&format!("this daemon serves GPU {GPU1}, and the process's memory is on GPU {GPU0}")) && second.stderr.contains("--gpu"),
        "{}",
        second.describe()
    );
    let ps = run(h.cli(&["ps"]).env("GMUX_SOCKET", &socket));
    assert!(ps.stdout.starts_with(&format!("{GPU1}: budget")), "{}", ps.describe());
    // A process of GPU 1 that also uses GPU 0: the daemon serves its GPU 1 memory, and
    // GPU 0's is refused by name, the process running on.
    let mut c = h.cli(&["run", "--gpus", "1,0", "--tenant", "two", "--"]);
    let both = run(c.arg(app_bin()).arg("second-device").env("GMUX_SOCKET", &socket));
    assert!(both.status.success() && both.stdout.matches("returned 801").count() == 2, "{}", both.describe());
    assert!(both.stderr.contains("device 1: cannot register with gmuxd") && both.stderr.contains("its memory is not virtualized"), "{}", both.describe());
}

#[test]
fn gmux_run_starts_the_daemon_of_each_gpu_it_is_given() {
    let h = Host::new("gpus-run");
    let t = h.tenant(&["--gpus", "1", "--tenant", "solo"], &["oversub", "--total", "8M", "--ops", "50"]);
    let r = finish(t);
    assert!(r.status.success(), "{}", r.describe());
    assert!(h.socket(GPU1).exists() && !h.socket(GPU0).exists(), "only GPU 1's daemon was started: {:?}", std::fs::read_dir(&h.run).map(|d| d.count()));
    let stat = h.on(GPU1, &["get", "solo", "ggroup.stat"]);
    assert!(stat.stdout.contains("commands "), "{}", stat.describe());
    let bad = run(&mut h.cli(&["run", "--gpus", "0,7", "--", "true"]));
    assert!(bad.status.code() == Some(2) && bad.stderr.contains("--gpus 7") && bad.stderr.contains(GPU1), "{}", bad.describe());
    let twice = run(&mut h.cli(&["run", "--gpus", &format!("1,{GPU1}"), "--", "true"]));
    assert!(twice.status.code() == Some(2) && twice.stderr.contains("twice"), "{}", twice.describe());
    let _ = h.on(GPU1, &["stop"]);
}

/// The stand-in's report of `devices`: mismatches, and each device's peak of physical
/// memory.
fn devices_report(r: &Ran) -> (Option<u64>, Vec<u64>) {
    let bad = r.stdout.lines().find_map(|l| l.split("mismatches: ").nth(1)).and_then(|v| v.trim().parse().ok());
    let peaks = r.stdout.lines().filter_map(|l| l.strip_prefix("device ")).filter_map(|l| l.split(" peak ").nth(1)?.trim().parse().ok()).collect();
    (bad, peaks)
}

#[test]
fn one_process_uses_two_gpus_each_within_its_limit() {
    // 4 buffers of 4 MiB on each device, 8 MiB of memory each: every round evicts.
    let app = ["devices", "--devices", "2", "--buffers", "4", "--bytes", "4M", "--rounds", "3"];
    let h = Host::new("gpus-process");
    let second = run(Command::new(app_bin()).arg("second-device").env("LD_LIBRARY_PATH", h.sb.dir.path()).env("GMUX_STANDIN_DEVICES", "2"));
    assert_eq!(second.stdout.matches("returned 0").count(), 2, "natively both allocations succeed: {}", second.describe());
    let mut c = h.cli(&["run", "--standalone", "--mem-limit", "64M", "--", app_bin().to_str().unwrap(), "second-device"]);
    let under = run(&mut c);
    assert_eq!(under.stdout.matches("returned 0").count(), 2, "and under gmux: {}", under.describe());

    let mut c = h.cli(&["run", "--standalone", "--mem-limit", "8M", "--"]);
    let r = run(c.arg(app_bin()).args(app).env("GMUX_LOG", "info"));
    let (bad, peaks) = devices_report(&r);
    assert!(r.status.success() && bad == Some(0), "{}", r.describe());
    assert_eq!(peaks.len(), 2, "{}", r.describe());
    for (d, p) in peaks.iter().enumerate() {
        assert!(*p > 4 * M && *p <= 8 * M, "device {d} held {p} bytes at most, its limit is 8 MiB: {}", r.describe());
    }
    assert!(r.stderr.contains("device 1 joins"), "{}", r.describe());
    for d in 0..2 {
        let line = r
            .stderr
            .lines()
            .find(|l| l.contains(&format!("device {d}: limit 8.0 MiB")))
            .unwrap_or_else(|| panic!("no summary of device {d}: {}", r.describe()));
        assert!(line.contains("peak allocated 16.0 MiB") && line.contains("peak resident 8.0 MiB") && !line.contains("evicted 0 "), "device {d}: {line}");
    }

    // Three devices, each within its own limit.
    let mut c = h.cli(&["run", "--standalone", "--mem-limit", "8M", "--"]);
    let r = run(c.arg(app_bin()).args(app).args(["--devices", "3"]).env("GMUX_STANDIN_DEVICES", "3"));
    let (bad, peaks) = devices_report(&r);
    assert!(r.status.success() && bad == Some(0) && peaks.len() == 3, "{}", r.describe());
    assert!(peaks.iter().all(|p| *p > 4 * M && *p <= 8 * M), "{peaks:?}: {}", r.describe());

    // Under the daemons of both GPUs: the process is a tenant of each, within each budget.
    let mut h = h;
    let (s0, s1) = (h.socket(GPU0), h.socket(GPU1));
    h.daemon(&["--gpu", "all", "--hbm", "8M"], &[&s0, &s1]);
    let r = finish(h.tenant(&["--gpus", "0,1", "--tenant", "both"], &app));
    let (bad, peaks) = devices_report(&r);
    assert!(r.status.success() && bad == Some(0), "{}\ndaemons:\n{}", r.describe(), h.log());
    assert!(peaks.iter().all(|p| *p > 4 * M && *p <= 8 * M), "{peaks:?}: {}", r.describe());
    for gpu in [GPU0, GPU1] {
        let stat = h.on(gpu, &["get", "both", "ggroup.stat"]).stdout;
        let commands = stat.lines().find_map(|l| l.strip_prefix("commands ").map(|v| v.parse::<u64>().unwrap()));
        assert!(commands.is_some_and(|n| n >= 16), "{gpu}: {stat}");
        let peak = ps_size(&h.on(gpu, &["ps"]).stdout, "peak ");
        assert!(peak <= 8 * M && peak > 4 * M, "{gpu}: peak {peak}");
    }
}
