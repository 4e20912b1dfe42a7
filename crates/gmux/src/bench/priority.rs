//! `gmux bench priority`: a real-time tenant (ResNet-50 inference at a fixed request
//! rate, `gpu/rt_infer.py`) beside a best-effort tenant (ResNet-50 training,
//! `gpu/be_train.py`) whose footprint with the real-time one's is over the GPU-memory
//! budget. Runs: the real-time tenant alone, both under round robin, both under strict
//! priority, and with `--rt-policy`, both under round robin with that policy loaded
//! (`policies/rt_boost.c`: long turns for the real-time tenant, short ones for the other);
//! reports the real-time latencies and the best-effort throughput.

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
    /// A policy object (`policies/rt_boost.c`, compiled) for one more run, `ebpf`: round
    /// robin with it loaded, the real-time tenant asking for priority 1.
    #[arg(long, value_name = "FILE.o")]
    rt_policy: Option<std::path::PathBuf>,
}

/// One run.
#[derive(Debug, Clone, Serialize)]
struct Row {
    run: String,
    p50_ms: f64,
    p99_ms: f64,
    rt_requests: f64,
    be_iters_per_s: Option<f64>,
    failed: Vec<String>,
}

/// Runs the benchmark.
pub fn run(a: &PriorityArgs) -> Result<(), Failure> {
    let lab = Lab::new(&a.lab, &["rt_infer.py", "be_train.py", "tenant.py"])?;
    let mut rows = Vec::new();
    let mut runs = vec![("alone", "priority", false), ("rr", "rr", true), ("priority", "priority", true)];
    if a.rt_policy.is_some() {
        runs.push(("ebpf", "rr", true));
    }
    for (run, policy, with_be) in runs {
        eprintln!("gmux bench: priority: {run}");
        rows.push(one_run(&lab, a, run, policy, with_be)?);
    }
    let alone = rows[0].p99_ms;
    let mut s = format!("{:<9} {:>8} {:>8} {:>12} {:>9} {:>12}  {}\n", "run", "RT p50", "RT p99", "p99 / alone", "requests", "BE iters/s", "failed");
    for r in &rows {
        s += &format!(
            "{:<9} {:>8.2} {:>8.2} {:>12.2} {:>9} {:>12}  {}\n",
            r.run,
            r.p50_ms,
            r.p99_ms,
            r.p99_ms / alone,
            r.rt_requests,
            r.be_iters_per_s.map_or("-".into(), |x| format!("{x:.2}")),
            r.failed.join(", ")
        );
    }
    println!("{s}latencies in ms from each request's due time to its completion; budget {}, {} requests/s", a.budget, a.rate);
    let out = lab.file("priority.json");
    let json = serde_json::json!({ "benchmark": "priority", "budget": a.budget, "rate": a.rate, "rt_batch": a.rt_batch, "be_batch": a.be_batch, "be_extra_gib": a.be_extra_gib, "rt_policy": a.rt_policy, "rows": rows });
    std::fs::write(&out, serde_json::to_string_pretty(&json).expect("serializable"))
        .map_err(|e| Failure::Runtime(format!("cannot write {}: {e}", out.display())))?;
    println!("results: {}", out.display());
    Ok(())
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
    let rt_class = i32::from(policy == "priority" || rt_policy.is_some());
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
        p50_ms: lab::num(&r, "p50_ms"),
        p99_ms: lab::num(&r, "p99_ms"),
        rt_requests: lab::num(&r, "requests"),
        be_iters_per_s: be,
        failed,
    })
}

/// Loads the policy object `file` into the daemon at `socket`.
fn load(socket: &Path, file: &Path) -> Result<(), Failure> {
    let data = std::fs::read(file).map_err(|e| Failure::Usage(format!("cannot read {}: {e}", file.display())))?;
    let name = file.file_name().map_or("policy".into(), |n| n.to_string_lossy().into_owned());
    let req = gmuxd::ctl::Request::PolicyLoad { name, object: gmux_core::protocol::hex(&data), hook: None, tenant: None };
    let reply = gmuxd::ctl::request(socket, &req)?;
    if !reply.ok {
        return Err(Failure::Runtime(format!("loading {}: {}", file.display(), reply.text)));
    }
    eprintln!("gmux bench: priority: {}", reply.text);
    Ok(())
}
