//! `gmux bench priority`: a real-time tenant (ResNet-50 inference at a fixed request
//! rate, `gpu/rt_infer.py`) beside a best-effort tenant (ResNet-50 training,
//! `gpu/be_train.py`) whose footprint with the real-time one's is over the GPU-memory
//! budget. Runs: the real-time tenant alone, both under round robin, both under strict
//! priority (the real-time tenant asking for priority 1), and with `--rt-policy`, both
//! under strict priority with that policy loaded and asking for nothing, the policy's map
//! `rt_names` naming the real-time tenant (`policies/rt_boost.c`: the class comes from
//! the program); reports the real-time latencies and the best-effort throughput.

use super::lab::{self, Lab, LabArgs};
use crate::Failure;
use serde::Serialize;
use std::path::Path;
use std::time::Duration;

/// Arguments of `gmux bench priority`.
#[derive(Debug, clap::Args)]
pub struct PriorityArgs {
    #[command(flatten)]
    lab: LabArgs,
    /// GPU-memory budget shared by the two tenants.
    #[arg(long, default_value = "8G")]
    budget: String,
    /// Real-time requests per second.
    #[arg(long, default_value_t = 40.0)]
    rate: f64,
    /// Images per real-time request.
    #[arg(long, default_value_t = 8)]
    rt_batch: u32,
    /// Images per training iteration.
    #[arg(long, default_value_t = 32)]
    be_batch: u32,
    /// Extra idle memory of the training tenant, GiB (memory pressure).
    #[arg(long, default_value_t = 4.0)]
    be_extra_gib: f64,
    /// A policy object (`policies/rt_boost.c`, compiled) for one more run, `ebpf`: strict
    /// priority with it loaded, no tenant asking for a priority, and the real-time
    /// tenant's name (`rt`) written into its map `rt_names`.
    #[arg(long, value_name = "FILE.o")]
    rt_policy: Option<std::path::PathBuf>,
    /// The runs, of alone, rr, priority and ebpf (default: all; ebpf needs --rt-policy).
    #[arg(long, value_delimiter = ',', value_name = "RUN,...")]
    runs: Vec<String>,
    /// Runs each of them this many times, in turn (a P99 of a few hundred requests moves
    /// by a third from run to run); the table gives each run's median.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    repeat: u32,
}

/// The runs: name, the daemon's `--policy`, and whether the best-effort tenant runs.
const RUNS: [(&str, &str, bool); 4] = [("alone", "priority", false), ("rr", "rr", true), ("priority", "priority", true), ("ebpf", "priority", true)];

/// One run.
#[derive(Debug, Clone, Serialize)]
struct Row {
    run: String,
    /// Its repetition, from 0.
    repeat: u32,
    p50_ms: f64,
    p99_ms: f64,
    rt_requests: f64,
    be_iters_per_s: Option<f64>,
    failed: Vec<String>,
}

/// Runs the benchmark.
pub fn run(a: &PriorityArgs) -> Result<(), Failure> {
    let runs = chosen(a)?;
    let lab = Lab::new(&a.lab, &["rt_infer.py", "be_train.py", "tenant.py"])?;
    let mut rows = Vec::new();
    for repeat in 0..a.repeat {
        for &(run, policy, with_be) in &runs {
            eprintln!("gmux bench: priority: {run} ({} of {})", repeat + 1, a.repeat);
            rows.push(Row { repeat, ..one_run(&lab, a, run, policy, with_be)? });
        }
    }
    let median = |run: &str, f: fn(&Row) -> f64| {
        let mut v: Vec<f64> = rows.iter().filter(|r| r.run == run).map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let alone = runs.iter().any(|r| r.0 == "alone").then(|| median("alone", |r| r.p99_ms));
    let mut s = format!("{:<9} {:>8} {:>8} {:>12} {:>9} {:>12}  {}\n", "run", "RT p50", "RT p99", "p99 / alone", "requests", "BE iters/s", "failed");
    for &(run, _, with_be) in &runs {
        let failed: Vec<String> = rows.iter().filter(|r| r.run == run).flat_map(|r| r.failed.clone()).collect();
        let p99 = median(run, |r| r.p99_ms);
        s += &format!(
            "{:<9} {:>8.2} {:>8.2} {:>12} {:>9} {:>12}  {}\n",
            run,
            median(run, |r| r.p50_ms),
            p99,
            alone.map_or("-".into(), |a| format!("{:.2}", p99 / a)),
            median(run, |r| r.rt_requests),
            if with_be { format!("{:.2}", median(run, |r| r.be_iters_per_s.unwrap_or(0.0))) } else { "-".into() },
            failed.join(", ")
        );
    }
    if a.repeat > 1 {
        s += &format!("medians of {} runs each, taken in turn; every run's RT p99:", a.repeat);
        for &(run, ..) in &runs {
            let all: Vec<String> = rows.iter().filter(|r| r.run == run).map(|r| format!("{:.2}", r.p99_ms)).collect();
            s += &format!(" {run} {}", all.join("/"));
        }
        s += "\n";
    }
    println!("{s}latencies in ms from each request's due time to its completion; budget {}, {} requests/s", a.budget, a.rate);
    let out = lab.file("priority.json");
    let json = serde_json::json!({ "benchmark": "priority", "budget": a.budget, "rate": a.rate, "rt_batch": a.rt_batch, "be_batch": a.be_batch, "be_extra_gib": a.be_extra_gib, "rt_policy": a.rt_policy, "repeat": a.repeat, "rows": rows });
    std::fs::write(&out, serde_json::to_string_pretty(&json).expect("serializable"))
        .map_err(|e| Failure::Runtime(format!("cannot write {}: {e}", out.display())))?;
    println!("results: {}", out.display());
    Ok(())
}

/// The runs `--runs` names, in the benchmark's order.
fn chosen(a: &PriorityArgs) -> Result<Vec<(&'static str, &'static str, bool)>, Failure> {
    if let Some(bad) = a.runs.iter().find(|r| !RUNS.iter().any(|k| k.0 == r.as_str())) {
        return Err(Failure::Usage(format!("--runs: unknown run {bad:?}; use alone, rr, priority or ebpf")));
    }
    let wanted = |name: &str| if a.runs.is_empty() { name != "ebpf" || a.rt_policy.is_some() } else { a.runs.iter().any(|r| r == name) };
    let runs: Vec<_> = RUNS.into_iter().filter(|r| wanted(r.0)).collect();
    if runs.iter().any(|r| r.0 == "ebpf") && a.rt_policy.is_none() {
        return Err(Failure::Usage("--runs ebpf needs --rt-policy FILE.o (policies/rt_boost.c, compiled)".into()));
    }
    Ok(runs)
}

fn one_run(lab: &Lab, a: &PriorityArgs, run: &str, policy: &str, with_be: bool) -> Result<Row, Failure> {
    let daemon = lab.daemon(&format!("prio-{run}"), &["--hbm".into(), a.budget.clone(), "--policy".into(), policy.into()])?;
    let rt_policy = a.rt_policy.as_ref().filter(|_| run == "ebpf");
    if let Some(file) = rt_policy {
        load(&daemon.socket, file)?;
    }
    let start = lab::unix_now() + a.lab.warmup;
    let window = |out: &Path| lab::fixed_window(start, a.lab.duration, out);
    let rt_out = lab.file(&format!("prio-{run}.rt.json"));
    let be_out = lab.file(&format!("prio-{run}.be.json"));
    let _ = (std::fs::remove_file(&rt_out), std::fs::remove_file(&be_out));
    let mut rt_args = vec!["--rate".to_string(), a.rate.to_string(), "--batch".into(), a.rt_batch.to_string()];
    rt_args.extend(window(&rt_out));
    let run_name = format!("prio-{run}");
    let rt_class = i32::from(policy == "priority" && rt_policy.is_none());
    let mut children = vec![("rt".to_string(), lab.tenant("rt", &run_name, Some(&daemon.socket), None, rt_class, "rt_infer.py", &rt_args)?)];
    if with_be {
        let mut be_args = vec!["--batch".to_string(), a.be_batch.to_string(), "--extra-gib".into(), a.be_extra_gib.to_string()];
        be_args.extend(window(&be_out));
        children.push(("be".to_string(), lab.tenant("be", &run_name, Some(&daemon.socket), None, 0, "be_train.py", &be_args)?));
    }
    let failed = lab.wait_all(children, Duration::from_secs_f64(180.0 + a.lab.duration));
    drop(daemon);
    let r = lab::report(&rt_out)?;
    let be = if with_be { Some(lab::num(&lab::report(&be_out)?, "iters_per_s")) } else { None };
    Ok(Row {
        run: run.into(),
        repeat: 0,
        p50_ms: lab::num(&r, "p50_ms"),
        p99_ms: lab::num(&r, "p99_ms"),
        rt_requests: lab::num(&r, "requests"),
        be_iters_per_s: be,
        failed,
    })
}

/// Loads the policy object `file` into the fresh daemon at `socket` (its policy 1), and
/// names the real-time tenant in its map `rt_names`.
fn load(socket: &Path, file: &Path) -> Result<(), Failure> {
    use gmuxd::ctl::{request, MapAction, Request};
    let needs = "--rt-policy takes policies/rt_boost.c, compiled";
    eprintln!("gmux bench: priority: {}", Lab::load_policy(socket, file, needs)?);
    let action = MapAction::Update { key: "str:rt".into(), value: "1".into() };
    let named = request(socket, &Request::PolicyMap { id: 1, map: "rt_names".into(), action })?;
    if !named.ok {
        return Err(Failure::Runtime(format!("{}: {} ({needs})", file.display(), named.text)));
    }
    Ok(())
}
