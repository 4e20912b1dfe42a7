//! What the benchmarks share: where things are, starting a daemon and tenant processes,
//! reading their reports and the daemon's counters.

use crate::Failure;
use gmuxd::ctl::{self, Request};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Options every benchmark takes.
#[derive(Debug, Clone, clap::Args)]
pub struct LabArgs {
    /// Folder for logs, traces and the JSON results.
    #[arg(long, default_value = "bench-out", value_name = "DIR")]
    pub out: PathBuf,
    /// Folder of the tenant programs (tenant.py, rt_infer.py, be_train.py).
    #[arg(long, default_value = "gpu", value_name = "DIR")]
    pub workloads: PathBuf,
    /// Python interpreter with PyTorch.
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// Seconds of measurement per run (after warm-up).
    #[arg(long, default_value_t = 15.0)]
    pub duration: f64,
    /// Seconds from the start of a run to the opening of its measurement window, at the
    /// earliest (process start-up, allocation, first switches).
    #[arg(long, default_value_t = 15.0)]
    pub warmup: f64,
}

/// One benchmark's processes and files.
pub struct Lab {
    /// The options.
    pub args: LabArgs,
    gmux: PathBuf,
}

/// A started daemon.
pub struct Daemon {
    child: Child,
    /// Its socket.
    pub socket: PathBuf,
}

/// Starts `gmux` (this executable) as `gmux daemon` with `flags` on `socket`, its output
/// in `log`; returns once the socket is there.
pub fn start_daemon(gmux: &Path, flags: &[String], socket: PathBuf, log: &Path) -> Result<Daemon, Failure> {
    let file = std::fs::File::create(log).map_err(|e| Failure::Runtime(format!("cannot create {}: {e}", log.display())))?;
    let mut child = Command::new(gmux)
        .arg("daemon")
        .args(flags)
        .arg("--socket")
        .arg(&socket)
        .stdin(Stdio::null())
        .stdout(file.try_clone().map_err(|e| Failure::Runtime(e.to_string()))?)
        .stderr(file)
        .spawn()
        .map_err(|e| Failure::Runtime(format!("cannot start gmux daemon: {e}")))?;
    let t0 = Instant::now();
    while !socket.exists() {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(Failure::Runtime(format!("gmux daemon ended ({status}); see {}", log.display())));
        }
        if t0.elapsed() > Duration::from_secs(5) {
            return Err(Failure::Runtime(format!("gmux daemon did not start; see {}", log.display())));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(Daemon { child, socket })
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = ctl::request(&self.socket, &Request::Stop);
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(5) {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Seconds since the epoch.
pub fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64()
}

/// Sleeps until UNIX time `t`.
fn sleep_until(t: f64) {
    let d = t - unix_now();
    if d > 0.0 {
        std::thread::sleep(Duration::from_secs_f64(d));
    }
}

/// What `--python` must be able to do: import PyTorch and see a GPU.
const PYTHON_CHECK: &str =
    "import sys\ntry:\n    import torch\nexcept ImportError as e:\n    print(e); sys.exit(3)\nsys.exit(0 if torch.cuda.is_available() else 4)";

/// Checks that `python` runs, has PyTorch and sees a GPU, before any tenant is started:
/// each failure says which, and what to do.
pub fn check_python(python: &str) -> Result<(), Failure> {
    let out = Command::new(python)
        .args(["-c", PYTHON_CHECK])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Failure::Usage(format!("cannot run the interpreter {python:?} ({e}); give one with PyTorch as --python PATH")))?;
    match out.status.code() {
        Some(0) => Ok(()),
        Some(3) => Err(Failure::Usage(format!(
            "{python} has no PyTorch ({}); install it (pip install torch) or give another interpreter as --python PATH",
            String::from_utf8_lossy(&out.stdout).trim()
        ))),
        Some(4) => Err(Failure::Runtime(format!(
            "PyTorch under {python} sees no GPU (torch.cuda.is_available() is False): check nvidia-smi, the driver and CUDA_VISIBLE_DEVICES"
        ))),
        _ => Err(Failure::Runtime(format!("{python} failed the PyTorch check: {}", String::from_utf8_lossy(&out.stderr).trim()))),
    }
}

impl Lab {
    /// Checks the folders, the interpreter (PyTorch and a GPU) and the shim, and creates
    /// `--out`.
    pub fn new(args: &LabArgs, needs: &[&str]) -> Result<Lab, Failure> {
        for n in needs {
            let p = args.workloads.join(n);
            if !p.is_file() {
                return Err(Failure::Usage(format!("{} not found; run from the repository root or give --workloads DIR", p.display())));
            }
        }
        check_python(&args.python)?;
        crate::run::find_shim()?;
        std::fs::create_dir_all(&args.out).map_err(|e| Failure::Runtime(format!("cannot create {}: {e}", args.out.display())))?;
        let gmux = std::env::current_exe().map_err(|e| Failure::Runtime(format!("cannot locate the gmux executable: {e}")))?;
        Ok(Lab { args: args.clone(), gmux })
    }

    fn log(&self, name: &str) -> Result<std::fs::File, Failure> {
        let p = self.args.out.join(format!("{name}.log"));
        std::fs::File::create(&p).map_err(|e| Failure::Runtime(format!("cannot create {}: {e}", p.display())))
    }

    /// Starts `gmux daemon` with `flags` on a socket of its own.
    pub fn daemon(&self, name: &str, flags: &[String]) -> Result<Daemon, Failure> {
        let socket = std::env::temp_dir().join(format!("gmux-bench-{}-{name}.sock", std::process::id()));
        start_daemon(&self.gmux, flags, socket, &self.args.out.join(format!("{name}.daemon.log")))
    }

    /// Loads the policy object `file` into the daemon at `socket`: its reply, or why not
    /// (`needs`: what the option takes).
    pub fn load_policy(socket: &Path, file: &Path, needs: &str) -> Result<String, Failure> {
        let data = std::fs::read(file).map_err(|e| Failure::Usage(format!("cannot read {}: {e}", file.display())))?;
        let name = file.file_name().map_or("policy".into(), |n| n.to_string_lossy().into_owned());
        let req = gmuxd::ctl::Request::PolicyLoad { name, object: gmux_core::protocol::hex(&data), hook: None, tenant: None };
        let reply = gmuxd::ctl::request(socket, &req)?;
        if !reply.ok {
            return Err(Failure::Runtime(format!("{}: {} ({needs})", file.display(), reply.text)));
        }
        Ok(reply.text)
    }

    /// Starts workload `script` with `args` as tenant `name`: under the daemon at
    /// `socket` (recording its trace to `record` if given) in priority class `priority`,
    /// or natively without one.
    #[allow(clippy::too_many_arguments)]
    pub fn tenant(
        &self,
        name: &str,
        run: &str,
        socket: Option<&Path>,
        record: Option<&Path>,
        priority: i32,
        script: &str,
        args: &[String],
    ) -> Result<Child, Failure> {
        let mut cmd = match socket {
            Some(s) => {
                let mut c = Command::new(&self.gmux);
                c.args(["run", "--tenant", name, "--priority", &priority.to_string(), "--"]).env("GMUX_SOCKET", s);
                if let Some(r) = record {
                    c.env("GMUX_RECORD", r);
                }
                c.arg(&self.args.python);
                c
            }
            None => Command::new(&self.args.python),
        };
        cmd.arg(self.args.workloads.join(script)).args(args).env("PYTHONUNBUFFERED", "1").stdin(Stdio::null());
        let log = self.log(&format!("{run}.{name}"))?;
        cmd.stdout(log.try_clone().map_err(|e| Failure::Runtime(e.to_string()))?).stderr(log);
        cmd.spawn().map_err(|e| Failure::Runtime(format!("cannot start {name}: {e}")))
    }

    /// Path of a result file.
    pub fn file(&self, name: &str) -> PathBuf {
        self.args.out.join(name)
    }

    /// A probe for [`measure_window`]: the first of `children` that has exited, with its
    /// status.
    pub fn first_exited(children: &mut [(String, Child)]) -> Option<String> {
        children.iter_mut().find_map(|(name, c)| c.try_wait().ok().flatten().map(|st| format!("{name} ({st})")))
    }

    /// Waits for `children` up to `limit`, killing the rest after it; returns the
    /// names of those that failed.
    pub fn wait_all(&self, children: Vec<(String, Child)>, limit: Duration) -> Vec<String> {
        let t0 = Instant::now();
        let mut failed = Vec::new();
        for (name, mut c) in children {
            loop {
                match c.try_wait() {
                    Ok(Some(st)) => {
                        if !st.success() {
                            failed.push(format!("{name} ({st})"));
                        }
                        break;
                    }
                    Ok(None) if t0.elapsed() < limit => std::thread::sleep(Duration::from_millis(50)),
                    _ => {
                        let _ = c.kill();
                        let _ = c.wait();
                        failed.push(format!("{name} (killed after {} s)", limit.as_secs()));
                        break;
                    }
                }
            }
        }
        failed
    }
}

/// A tenant's `ggroup.stat` from the daemon: bytes in each direction.
pub fn stat(socket: &Path, tenant: &str) -> (u64, u64) {
    let Ok(r) = ctl::request(socket, &Request::Get { tenant: tenant.into(), knob: Some("ggroup.stat".into()), json: false }) else { return (0, 0) };
    let field = |k: &str| r.text.lines().find_map(|l| l.strip_prefix(k).and_then(|v| v.trim().parse().ok())).unwrap_or(0);
    (field("bytes_h2d "), field("bytes_d2h "))
}

/// A tenant's stalled time so far, µs: the `total` of its `gmem.pressure` `some` line
/// (its launches held by its agent, or its commands waiting for memory, while it ran);
/// `None` when the daemon did not say.
pub fn stalled_us(socket: &Path, tenant: &str) -> Option<u64> {
    let r = ctl::request(socket, &Request::Get { tenant: tenant.into(), knob: Some("gmem.pressure".into()), json: false }).ok()?;
    pressure_total(&r.text)
}

/// The `total=` of the `some` line of a `gmem.pressure` text.
fn pressure_total(text: &str) -> Option<u64> {
    let some = text.lines().find(|l| l.starts_with("some "))?;
    some.split_whitespace().find_map(|w| w.strip_prefix("total=")).and_then(|v| v.parse().ok())
}

/// Waits until `tenant` has joined the daemon at `socket` (its process reached CUDA),
/// at most `limit`; whether it did.
pub fn wait_joined(socket: &Path, tenant: &str, limit: Duration) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if ctl::request(socket, &Request::Get { tenant: tenant.into(), knob: None, json: false }).is_ok_and(|r| r.ok) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Seconds the workloads run together, all set up, before the window opens, unless a
/// benchmark asks for more (`--settle` of `gpu/tenant.py`, whose default it is).
pub const SETTLE_S: f64 = 1.0;

/// Why a run's workloads did not all become ready.
#[derive(Debug, PartialEq)]
enum NotReady {
    /// The time given for their setup passed.
    Late,
    /// This workload exited first (its name and exit status).
    Exited(String),
}

/// Waits until `count` workloads have marked themselves ready in `folder` (see
/// `--ready-dir` in `gpu/tenant.py`), at most `limit`, or until `exited` names one that
/// has ended; the UNIX time the last one became ready.
fn ready_at(folder: &Path, count: usize, limit: Duration, exited: &mut dyn FnMut() -> Option<String>) -> Result<f64, NotReady> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if let Some(who) = exited() {
            return Err(NotReady::Exited(who));
        }
        let marks: Vec<f64> = std::fs::read_dir(folder)
            .map_err(|_| NotReady::Late)?
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".ready"))
            .filter_map(|e| e.metadata().ok()?.modified().ok()?.duration_since(UNIX_EPOCH).ok().map(|d| d.as_secs_f64()))
            .collect();
        if marks.len() >= count {
            return marks.into_iter().reduce(f64::max).ok_or(NotReady::Late);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(NotReady::Late)
}

/// A run's measurement window.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    /// The UNIX time it opens at the earliest.
    pub start: f64,
    /// Seconds the workloads run together, all set up, before it opens.
    pub settle: f64,
    /// Its length in seconds.
    pub duration: f64,
}

/// Measures window `w` once `count` workloads are ready in `ready` (at most `setup`): it
/// opens at `w.start`, or `w.settle` seconds after the last became ready if later.
/// Returns when it opened and `measure` at its start and end. `what` names the run in
/// the message when some workload never became ready; `exited` names a workload that has
/// ended, which stops the wait at once.
pub fn measure_window<T>(
    ready: &Path,
    count: usize,
    setup: Duration,
    w: Window,
    what: &str,
    measure: impl Fn() -> T,
    exited: &mut dyn FnMut() -> Option<String>,
) -> (f64, T, T) {
    let (start, duration) = (w.start, w.duration);
    let start = match ready_at(ready, count, setup, exited) {
        Ok(last) => start.max(last + w.settle),
        Err(NotReady::Late) => {
            eprintln!("gmux bench: {what}: not every tenant finished its setup within {} s; see their logs", setup.as_secs());
            start
        }
        Err(NotReady::Exited(who)) => {
            eprintln!("gmux bench: {what}: tenant {who} exited before its setup was done; see its log");
            start
        }
    };
    sleep_until(start);
    let before = measure();
    sleep_until(start + duration);
    (start, before, measure())
}

/// The arguments of a workload's window (`window_args` of `gpu/tenant.py`) that opens at
/// UNIX time `start` for `duration` seconds, with the JSON report to `out`.
pub fn fixed_window(start: f64, duration: f64, out: &Path) -> Vec<String> {
    vec!["--start-at".into(), format!("{start:.3}"), "--duration".into(), duration.to_string(), "--out".into(), out.display().to_string()]
}

/// The arguments of `gpu/tenant.py`'s window (`window_args` there) for window `w`, once
/// `count` workloads are ready in `ready`; the JSON report goes to `report`.
pub fn window_args(w: Window, ready: &Path, count: usize, report: &Path) -> Vec<String> {
    vec![
        "--start-at".into(),
        format!("{:.3}", w.start),
        "--ready-dir".into(),
        ready.display().to_string(),
        "--ready-count".into(),
        count.to_string(),
        "--settle".into(),
        w.settle.to_string(),
        "--duration".into(),
        w.duration.to_string(),
        "--out".into(),
        report.display().to_string(),
    ]
}

/// A workload's JSON report.
pub fn report(path: &Path) -> Result<serde_json::Value, Failure> {
    let text = std::fs::read_to_string(path).map_err(|e| Failure::Runtime(format!("no report at {} ({e}); see the log next to it", path.display())))?;
    serde_json::from_str(&text).map_err(|e| Failure::Runtime(format!("bad report {}: {e}", path.display())))
}

/// A number field of a report.
pub fn num(v: &serde_json::Value, key: &str) -> f64 {
    v.get(key).and_then(|x| x.as_f64()).unwrap_or(f64::NAN)
}

/// The slices gmuxd gave each tenant in run `run` of the lab, from its `--verbose` log:
/// per tenant, the mean over the slots it started in the measured window (from the
/// latest `start_at` of the tenants' reports) of its slice (stretched where the log says
/// so, else `timeslice`), as a duration the simulator reads. A tenant with no slot there
/// gets `timeslice`.
pub fn slices_used(lab: &Lab, run: &str, tenants: &[&str], timeslice: &str) -> impl Fn(&str) -> String {
    let from = tenants.iter().filter_map(|n| report(&lab.file(&format!("{run}.{n}.json"))).ok()).map(|r| num(&r, "start_at")).fold(0.0, f64::max);
    slices_in_log(&lab.file(&format!("{run}.daemon.log")), from, timeslice)
}

fn slices_in_log(log: &Path, from: f64, timeslice: &str) -> impl Fn(&str) -> String {
    let mut slots: std::collections::HashMap<String, Vec<f64>> = std::collections::HashMap::new();
    for (tenant, ms) in slot_slices(log, from, f64::INFINITY, timeslice) {
        slots.entry(tenant).or_default().push(ms);
    }
    let timeslice = timeslice.to_string();
    move |name| match slots.get(name) {
        Some(ms) => format!("{:.0}us", ms.iter().sum::<f64>() / ms.len() as f64 * 1e3),
        None => timeslice.clone(),
    }
}

/// The slice (ms) of each slot gmuxd's log `log` says started inside [`from`, `to`] (UNIX
/// seconds), with its tenant: stretched where the log says so, else `timeslice` (a slot
/// of neither, when `timeslice` does not parse, is left out).
pub fn slot_slices(log: &Path, from: f64, to: f64, timeslice: &str) -> Vec<(String, f64)> {
    let base = gmux_core::knobs::parse_duration(timeslice).map(|ns| ns as f64 / 1e6);
    slot_starts(log).into_iter().filter(|s| (from..=to).contains(&s.at)).filter_map(|s| Some((s.tenant, s.stretched_ms.or(base)?))).collect()
}

/// A slot's start, as gmuxd's `--verbose` log says it.
pub struct SlotStart {
    /// The tenant switched in.
    pub tenant: String,
    /// When its slice started (UNIX seconds).
    pub at: f64,
    /// From its switch to its slice's first command (ms).
    pub wait_ms: f64,
    /// Its slice, where it was stretched (ms).
    pub stretched_ms: Option<f64>,
}

/// Every slot start gmuxd's `--verbose` log `log` records ("NAME started N ms after its
/// switch …").
pub fn slot_starts(log: &Path) -> Vec<SlotStart> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let start = |line: &str| {
        let (stamp, msg) = line.strip_prefix("gmuxd ")?.split_once(": ")?;
        let (tenant, rest) = msg.split_once(" started ")?;
        let (wait, rest) = rest.split_once(" ms after its switch")?;
        let stretched_ms = rest.split_once("its slice is stretched to ").and_then(|(_, r)| r.split_once(" ms")).and_then(|(ms, _)| ms.parse().ok());
        let at = humantime::parse_rfc3339(stamp).ok()?.duration_since(UNIX_EPOCH).ok()?.as_secs_f64();
        Some(SlotStart { tenant: tenant.to_string(), at, wait_ms: wait.parse().ok()?, stretched_ms })
    };
    text.lines().filter_map(start).collect()
}

/// Replays in the simulator, as `systems`, the traces of `tenants` that a run recorded in
/// the lab as `{prefix}.{tenant}.trace.jsonl`, on a device of `budget` (bytes, or a size
/// such as 16G), each tenant with the slice `timeslice` gives it: their steady part,
/// looped, for 10 s of simulated time. The scenario is kept as `{prefix}.replay.toml`;
/// `what` names it in its description.
pub fn replay<'a>(
    lab: &Lab,
    what: &str,
    prefix: &str,
    budget: impl std::fmt::Display,
    timeslice: impl Fn(&str) -> String,
    systems: &[&str],
    tenants: impl IntoIterator<Item = &'a str>,
) -> Result<gmux_sim::Report, Failure> {
    let systems = systems.iter().map(|s| format!("\"{s}\"")).collect::<Vec<_>>().join(", ");
    let mut toml = format!("description = \"{what}\"\nduration = \"10s\"\ngpu = \"{budget}\"\nsystems = [{systems}]\n");
    for name in tenants {
        let trace = lab.file(&format!("{prefix}.{name}.trace.jsonl"));
        let path = trace.canonicalize().map_err(|e| Failure::Runtime(format!("no trace {} ({e})", trace.display())))?;
        toml += &format!(
            "\n[[tenant]]\nname = \"{name}\"\ntimeslice = \"{}\"\nworkload = {{ kind = \"trace\", path = \"{}\", tenant = \"{name}\", repeat = true, steady = true }}\n",
            timeslice(name),
            path.display()
        );
    }
    let file = lab.file(&format!("{prefix}.replay.toml"));
    std::fs::write(&file, toml).map_err(|e| Failure::Runtime(format!("cannot write {}: {e}", file.display())))?;
    let scenario = gmux_sim::load_scenario(&file).map_err(|e| Failure::Runtime(e.to_string()))?;
    gmux_sim::run(&scenario, &mut |_| {}).map_err(|e| Failure::Runtime(e.to_string()))
}

#[cfg(test)]
mod tests;
