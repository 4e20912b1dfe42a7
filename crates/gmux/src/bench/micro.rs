//! `gmux bench msched-micro` (MSched §7.1, Fig. 6): two streaming vector-add and two
//! matmul tenants with equal footprints, round robin, at several levels of a GPU-memory
//! budget. Per level: throughput normalized to the same four running natively in GPU
//! memory (`in-hbm`), under gmux's proactive switch (`gmux`) and under the whole-tenant
//! swap baseline (`whole`); bytes migrated per task; and, from the traces gmux recorded,
//! the simulator's `ideal` bound and its prediction of gmux's throughput.

use super::lab::{self, Lab, LabArgs};
use crate::Failure;
use gmux_core::size::parse_size;
use serde::Serialize;
use std::collections::HashMap;
use std::time::Duration;

/// Arguments of `gmux bench msched-micro`.
#[derive(Debug, clap::Args)]
pub struct MicroArgs {
    #[command(flatten)]
    lab: LabArgs,
    /// GPU-memory budget shared by the four tenants.
    #[arg(long, default_value = "16G")]
    budget: String,
    /// Total footprint as % of the budget, one run per level.
    #[arg(long, value_delimiter = ',', default_value = "100,150,200,300")]
    levels: Vec<u32>,
    /// Round-robin timeslice.
    #[arg(long, default_value = "50ms")]
    timeslice: String,
    /// Systems: in-hbm (native, no gmux), gmux (proactive switch), whole (whole-tenant swap).
    #[arg(long, value_delimiter = ',', default_value = "in-hbm,gmux,whole")]
    systems: Vec<String>,
    /// Matrix size of the matmul tenants.
    #[arg(long, default_value_t = 4096)]
    n: u32,
}

const TENANTS: [(&str, &str); 4] = [("vecadd-0", "vecadd"), ("vecadd-1", "vecadd"), ("matmul-0", "matmul"), ("matmul-1", "matmul")];

/// One level under one system.
#[derive(Debug, Clone, Serialize)]
struct Row {
    level: u32,
    system: String,
    /// Units (kernels) per second of each tenant in the window.
    units_per_s: HashMap<String, f64>,
    /// Mean over tenants of units/s over the same tenant's in-HBM units/s.
    throughput_norm: Option<f64>,
    /// Bytes copied each way in the window, all tenants.
    bytes_h2d: u64,
    bytes_d2h: u64,
    /// Bytes migrated (both ways) per unit of work, all tenants.
    bytes_per_task: Option<f64>,
    /// From the simulator on the recorded traces (gmux rows only): the OPT bound, the
    /// planner-level model of gmux, and gmuxd's own decisions over per-process runtimes.
    ideal_norm: Option<f64>,
    sim_gmux_norm: Option<f64>,
    sim_gmuxd_norm: Option<f64>,
    failed: Vec<String>,
}

/// Runs the benchmark.
pub fn run(a: &MicroArgs) -> Result<(), Failure> {
    let budget = parse_size(&a.budget).map_err(|e| Failure::Usage(format!("--budget {}: {e}", a.budget)))?;
    if let Some(s) = a.systems.iter().find(|s| !["in-hbm", "gmux", "whole"].contains(&s.as_str())) {
        return Err(Failure::Usage(format!("--systems: unknown system {s:?}; use in-hbm, gmux, whole")));
    }
    let lab = Lab::new(&a.lab, &["tenant.py"])?;
    let mut rows: Vec<Row> = Vec::new();
    for &level in &a.levels {
        let gib = budget as f64 * level as f64 / 100.0 / 4.0 / (1u64 << 30) as f64;
        for system in &a.systems {
            eprintln!("gmux bench: level {level}%: {system} ({gib:.2} GiB per tenant)");
            let mut row = one_run(&lab, a, level, gib, system)?;
            if system == "gmux" {
                match ideal(&lab, a, level) {
                    Ok((ideal, sim, simd)) => (row.ideal_norm, row.sim_gmux_norm, row.sim_gmuxd_norm) = (Some(ideal), Some(sim), Some(simd)),
                    Err(e) => eprintln!("gmux bench: level {level}%: no ideal bound: {}", e.message()),
                }
            }
            rows.push(row);
        }
        let base: Option<HashMap<String, f64>> = rows.iter().find(|r| r.level == level && r.system == "in-hbm").map(|r| r.units_per_s.clone());
        for r in rows.iter_mut().filter(|r| r.level == level) {
            r.throughput_norm = base.as_ref().map(|b| {
                let ratios: Vec<f64> = TENANTS.iter().map(|(n, _)| r.units_per_s.get(*n).copied().unwrap_or(0.0) / b[*n]).collect();
                ratios.iter().sum::<f64>() / ratios.len() as f64
            });
        }
    }
    println!("{}", table(&rows));
    let out = lab.file("msched-micro.json");
    let json = serde_json::json!({ "benchmark": "msched-micro", "budget": a.budget, "timeslice": a.timeslice, "duration_s": a.lab.duration, "rows": rows });
    std::fs::write(&out, serde_json::to_string_pretty(&json).expect("serializable"))
        .map_err(|e| Failure::Runtime(format!("cannot write {}: {e}", out.display())))?;
    println!("results: {}", out.display());
    Ok(())
}

fn one_run(lab: &Lab, a: &MicroArgs, level: u32, gib: f64, system: &str) -> Result<Row, Failure> {
    let daemon = match system {
        "in-hbm" => None,
        s => Some(lab.daemon(
            &format!("L{level}-{s}"),
            &[
                "--hbm".into(),
                a.budget.clone(),
                "--policy".into(),
                "rr".into(),
                "--timeslice".into(),
                a.timeslice.clone(),
                "--switch".into(),
                if s == "gmux" { "msched".into() } else { "whole".into() },
                "--verbose".into(),
            ],
        )?),
    };
    // The window opens at the warm-up's end, or `lab::SETTLE_S` after the last tenant
    // finished its setup if later (setups under memory pressure take long).
    let window = lab::Window { start: lab::unix_now() + a.lab.warmup, settle: lab::SETTLE_S, duration: a.lab.duration };
    let ready = lab.file(&format!("L{level}-{system}.ready"));
    let _ = std::fs::remove_dir_all(&ready);
    std::fs::create_dir_all(&ready).map_err(|e| Failure::Runtime(format!("cannot create {}: {e}", ready.display())))?;
    let mut children = Vec::new();
    for (name, kind) in TENANTS {
        let report = lab.file(&format!("L{level}-{system}.{name}.json"));
        let _ = std::fs::remove_file(&report);
        let trace = lab.file(&format!("L{level}.{name}.trace.jsonl"));
        let record = (system == "gmux").then(|| {
            let _ = std::fs::remove_file(&trace);
            trace.as_path()
        });
        let mut args: Vec<String> = vec!["--kind".into(), kind.into(), "--gib".into(), format!("{gib:.4}"), "--n".into(), a.n.to_string()];
        args.extend(lab::window_args(window, &ready, TENANTS.len(), &report));
        children.push((
            name.to_string(),
            lab.tenant(name, &format!("L{level}-{system}"), daemon.as_ref().map(|d| d.socket.as_path()), record, 0, "tenant.py", &args)?,
        ));
        if let Some(d) = &daemon {
            // Tenants join in the order listed, so round robin runs them in the order the
            // replay in the simulator does (the order changes what a switch must move).
            if !lab::wait_joined(&d.socket, name, Duration::from_secs(60)) {
                eprintln!("gmux bench: {name} did not join gmuxd within 60 s; see its log");
            }
        }
    }
    let bytes = |d: &Option<lab::Daemon>| {
        d.as_ref().map_or((0, 0), |d| TENANTS.iter().map(|(n, _)| lab::stat(&d.socket, n)).fold((0, 0), |s, b| (s.0 + b.0, s.1 + b.1)))
    };
    let what = format!("level {level}%, {system}");
    let (_, before, after) =
        lab::measure_window(&ready, TENANTS.len(), Duration::from_secs(300), window, &what, || bytes(&daemon), &mut || Lab::first_exited(&mut children));
    let mut failed = lab.wait_all(children, Duration::from_secs_f64(120.0 + a.lab.duration));
    drop(daemon);
    let mut units_per_s = HashMap::new();
    let mut units = 0.0;
    for (name, _) in TENANTS {
        let r = lab::report(&lab.file(&format!("L{level}-{system}.{name}.json")))?;
        units_per_s.insert(name.to_string(), lab::num(&r, "units_per_s"));
        units += lab::num(&r, "units");
        if lab::num(&r, "late_start_s") > 0.0 {
            failed.push(format!("{name} (late by {:.1} s)", lab::num(&r, "late_start_s")));
        }
    }
    let (h2d, d2h) = (after.0 - before.0, after.1 - before.1);
    Ok(Row {
        level,
        system: system.into(),
        units_per_s,
        throughput_norm: None,
        bytes_h2d: h2d,
        bytes_d2h: d2h,
        bytes_per_task: (units > 0.0).then(|| (h2d + d2h) as f64 / units),
        ideal_norm: None,
        sim_gmux_norm: None,
        sim_gmuxd_norm: None,
        failed,
    })
}

/// The simulator on the traces recorded at `level`, each tenant with the slices gmuxd gave
/// it in the run: (ideal, gmux-exact, gmuxd) throughput, each normalized to the simulated
/// in-HBM run of the same traces.
fn ideal(lab: &Lab, a: &MicroArgs, level: u32) -> Result<(f64, f64, f64), Failure> {
    let what = format!("msched-micro traces at {level}%");
    let systems = ["in-hbm", "gmux-exact", "gmuxd", "ideal"];
    let names: Vec<&str> = TENANTS.iter().map(|(n, _)| *n).collect();
    let slices = lab::slices_used(lab, &format!("L{level}-gmux"), &names, &a.timeslice);
    let report = lab::replay(lab, &what, &format!("L{level}"), &a.budget, slices, &systems, names.iter().copied())?;
    let get = |s: &str| {
        report.results.iter().find(|r| r.system == s).and_then(|r| r.throughput_norm).ok_or_else(|| Failure::Runtime(format!("replay has no {s} row")))
    };
    Ok((get("ideal")?, get("gmux-exact")?, get("gmuxd")?))
}

fn table(rows: &[Row]) -> String {
    let f = |v: Option<f64>, d: usize| v.map_or("-".to_string(), |x| format!("{x:.d$}"));
    let mut s = format!(
        "{:<6} {:<7} {:>10} {:>12} {:>8} {:>10} {:>10} {:>9} {:>10} {:>9}  {}\n",
        "level", "system", "throughput", "GiB/task", "ideal", "vs ideal", "sim gmux", "sim err", "sim gmuxd", "err", "failed"
    );
    for r in rows {
        let vs_ideal = r.throughput_norm.zip(r.ideal_norm).map(|(t, i)| t / i);
        let err = r.throughput_norm.zip(r.sim_gmux_norm).map(|(t, p)| (p - t).abs() / t * 100.0);
        let errd = r.throughput_norm.zip(r.sim_gmuxd_norm).map(|(t, p)| (p - t).abs() / t * 100.0);
        s += &format!(
            "{:<6} {:<7} {:>10} {:>12} {:>8} {:>10} {:>10} {:>8}% {:>10} {:>8}%  {}\n",
            format!("{}%", r.level),
            r.system,
            f(r.throughput_norm, 3),
            f(r.bytes_per_task.map(|b| b / (1u64 << 30) as f64), 3),
            f(r.ideal_norm, 3),
            f(vs_ideal, 3),
            f(r.sim_gmux_norm, 3),
            f(err, 1),
            f(r.sim_gmuxd_norm, 3),
            f(errd, 1),
            r.failed.join(", ")
        );
    }
    let levels: Vec<u32> = rows.iter().map(|r| r.level).collect();
    for l in levels.iter().copied().collect::<std::collections::BTreeSet<_>>() {
        let get = |sys: &str| rows.iter().find(|r| r.level == l && r.system == sys).and_then(|r| r.throughput_norm);
        if let (Some(g), Some(w)) = (get("gmux"), get("whole")) {
            s += &format!("level {l}%: gmux / whole-tenant swap = {:.2}x\n", g / w);
        }
    }
    s + "throughput: mean over the four tenants of kernels/s over the same tenant's kernels/s natively in GPU memory (in-hbm)\nideal, sim gmux, sim gmuxd: the simulator on the traces gmux recorded at that level (sim gmuxd runs the daemon's and the runtime's own code)"
}
