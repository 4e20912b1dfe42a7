//! `gmux bench serving`: a mixed inference load of six torchvision models as separate
//! tenant processes (`gpu/serve_load.py`): three whose requests take about a
//! millisecond (short jobs) and three whose requests take tens (long jobs). Requests
//! arrive open-loop with lognormal gaps. The loads and shapes (`--loads`, `--sigmas`)
//! are run under each system (`--systems`), side by side in one run:
//! - `native`: the processes share the GPU as the driver time-slices them;
//! - `gmux-rr`: each a tenant of a gmuxd with round robin and no memory pressure;
//! - `gmux-shallow`: the same with `--dispatch shallow`, which keeps the long jobs'
//!   queues shallow while a short job runs;
//! - `gmux-fifo`, `gmux-srpt`: the same with `--dispatch fifo` or `--dispatch
//!   srpt-deficit`, which choose one job at a time and hold the processes whose jobs are
//!   all far longer;
//! - `gmux-admit`: `gmux-rr` with the policy program `--admission` loaded
//!   (`policies/admit_short.c`: a job waits while a far shorter one runs).
//!
//! A load L gives each of the six tenants the rate L / 6 / its service time alone
//! (measured first, each model alone), so that the GPU would be busy a share L of the
//! time if requests never overlapped. Reported: the short jobs' P50 and P99 latencies
//! (pooled over the short tenants, arrival to completion), the long jobs' throughput,
//! and Jain's fairness index over the tenants' completed shares of what arrived.
//!
//! MPS is not run: starting its control daemon changes how the GPU is shared for every
//! user of the host. The table says whether `nvidia-cuda-mps-control` is there.

use super::lab::{self, Lab, LabArgs};
use crate::Failure;
use serde::Serialize;
use std::time::Duration;

/// Options of `gmux bench serving`.
#[derive(Debug, clap::Args)]
pub struct ServingArgs {
    #[command(flatten)]
    lab: LabArgs,
    /// Loads, each a share of the GPU's time (see above).
    #[arg(long, value_delimiter = ',', default_value = "0.5,0.8")]
    loads: Vec<f64>,
    /// Shapes of the lognormal gaps between arrivals.
    #[arg(long, value_delimiter = ',', default_value = "1.5,2")]
    sigmas: Vec<f64>,
    /// Systems: native, gmux-rr, gmux-shallow, gmux-fifo, gmux-srpt, gmux-admit.
    #[arg(long, value_delimiter = ',', default_value = "native,gmux-rr,gmux-shallow,gmux-fifo,gmux-srpt")]
    systems: Vec<String>,
    /// `gmux daemon --fairness` for gmux-srpt.
    #[arg(long, default_value = "100ms")]
    fairness: String,
    /// A policy object with an `admission` program (`policies/admit_short.c`, compiled),
    /// for the system gmux-admit.
    #[arg(long, value_name = "FILE.o")]
    admission: Option<std::path::PathBuf>,
}

/// The systems compared.
const SYSTEMS: [&str; 6] = ["native", "gmux-rr", "gmux-shallow", "gmux-fifo", "gmux-srpt", "gmux-admit"];

/// The six tenants: model and kind, as `serve_load.py` names them.
const MODELS: [(&str, &str); 6] =
    [("resnet18", "short"), ("mobilenet_v3_small", "short"), ("squeezenet1_1", "short"), ("resnet50", "long"), ("vit_b_16", "long"), ("vgg16", "long")];

/// One run: a system at one load and shape.
#[derive(Debug, Clone, Serialize)]
struct Row {
    system: String,
    sigma: f64,
    load: f64,
    short_p50_ms: Option<f64>,
    short_p99_ms: Option<f64>,
    long_req_per_s: f64,
    jain: f64,
    arrived: u64,
    missed: u64,
    failed: Vec<String>,
}

/// Jain's fairness index of `x`: 1 when all are equal, 1/n when one has everything.
pub fn jain(x: &[f64]) -> f64 {
    let (sum, squares) = x.iter().fold((0.0, 0.0), |(s, q), v| (s + v, q + v * v));
    if squares == 0.0 {
        return 1.0;
    }
    sum * sum / (x.len() as f64 * squares)
}

/// Nearest-rank percentile `p` of ascending `v`.
fn percentile(v: &[f64], p: f64) -> Option<f64> {
    (!v.is_empty()).then(|| v[((p / 100.0 * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1])
}

/// Runs the benchmark: prints a table and writes `serving.json` under `--out`.
pub fn run(a: &ServingArgs) -> Result<(), Failure> {
    for s in &a.systems {
        if !SYSTEMS.contains(&s.as_str()) {
            return Err(Failure::Usage(format!("unknown system {s:?}: the systems are {}", SYSTEMS.join(", "))));
        }
    }
    if a.systems.iter().any(|s| s == "gmux-admit") && a.admission.is_none() {
        return Err(Failure::Usage("gmux-admit needs --admission FILE.o (policies/admit_short.c, compiled)".into()));
    }
    if gmux_core::knobs::parse_duration(&a.fairness).is_none() {
        return Err(Failure::Usage(format!("--fairness {}: write a duration between 1us and 10s, e.g. 100ms", a.fairness)));
    }
    if let Some(l) = a.loads.iter().find(|l| !(**l > 0.0 && **l <= 2.0)) {
        return Err(Failure::Usage(format!("load {l} is not in (0, 2]: a load is a share of the GPU's time")));
    }
    let lab = Lab::new(&a.lab, &["serve_load.py", "tenant.py", "torch_check.py"])?;
    eprintln!("gmux bench serving: each model alone first");
    let calib_out = lab.file("serving.calibrate.json");
    let child = lab.tenant("calibrate", "serving", None, None, 0, "serve_load.py", &["--calibrate".into(), "--out".into(), calib_out.display().to_string()])?;
    let failed = lab.wait_all(vec![("calibrate".into(), child)], Duration::from_secs(300));
    if !failed.is_empty() {
        return Err(Failure::Runtime(format!("calibration failed: {}; see {}", failed.join(", "), lab.file("serving.calibrate.log").display())));
    }
    let calib = lab::report(&calib_out)?;
    let service_ms: Vec<f64> = MODELS.iter().map(|(m, _)| lab::num(&calib, &format!("{m}.service_ms"))).collect();
    let mut rows = Vec::new();
    for &sigma in &a.sigmas {
        for &load in &a.loads {
            for system in &a.systems {
                eprintln!("gmux bench serving: {system} at load {load}, sigma {sigma}");
                rows.push(one_run(&lab, a, system, sigma, load, &service_ms)?);
            }
        }
    }
    let mps = std::process::Command::new("nvidia-cuda-mps-control").arg("-h").output().is_ok();
    print_table(&rows, &service_ms, mps);
    let out = lab.file("serving.json");
    let json = serde_json::json!({ "benchmark": "serving", "models": MODELS, "service_ms": service_ms, "mps_control_found": mps, "rows": rows });
    std::fs::write(&out, serde_json::to_string_pretty(&json).expect("serializable"))
        .map_err(|e| Failure::Runtime(format!("cannot write {}: {e}", out.display())))?;
    println!("results: {}", out.display());
    Ok(())
}

fn one_run(lab: &Lab, a: &ServingArgs, system: &str, sigma: f64, load: f64, service_ms: &[f64]) -> Result<Row, Failure> {
    let run = format!("serving-{system}-{load}-{sigma}");
    let dispatch = match system {
        "native" => None,
        "gmux-rr" | "gmux-admit" => Some("none"),
        "gmux-shallow" => Some("shallow"),
        "gmux-fifo" => Some("fifo"),
        _ => Some("srpt-deficit"),
    };
    let daemon = match dispatch {
        Some(d) => Some(lab.daemon(&run, &["--policy".into(), "rr".into(), "--dispatch".into(), d.into(), "--fairness".into(), a.fairness.clone()])?),
        None => None,
    };
    if let (Some(d), Some(file), "gmux-admit") = (&daemon, &a.admission, system) {
        eprintln!("gmux bench serving: {}", Lab::load_policy(&d.socket, file, "--admission takes policies/admit_short.c, compiled")?);
    }
    let start = lab::unix_now() + a.lab.warmup;
    let mut children = Vec::new();
    let mut outs = Vec::new();
    for (i, ((model, _), ms)) in MODELS.iter().zip(service_ms).enumerate() {
        let out = lab.file(&format!("{run}.{model}.json"));
        let _ = std::fs::remove_file(&out);
        let rate = load / MODELS.len() as f64 / (ms / 1e3);
        let mut args: Vec<String> = [
            "--model",
            model,
            "--rate",
            &format!("{rate:.3}"),
            "--sigma",
            &sigma.to_string(),
            "--seed",
            &(i + 1).to_string(),
            "--expected-ms",
            &format!("{ms:.3}"),
        ]
        .map(String::from)
        .to_vec();
        args.extend(lab::fixed_window(start, a.lab.duration, &out));
        children.push((model.to_string(), lab.tenant(model, &run, daemon.as_ref().map(|d| d.socket.as_path()), None, 0, "serve_load.py", &args)?));
        outs.push(out);
    }
    let failed = lab.wait_all(children, Duration::from_secs_f64(180.0 + a.lab.warmup + a.lab.duration));
    drop(daemon);
    let mut short = Vec::new();
    let (mut long_rate, mut shares, mut arrived, mut missed) = (0.0, Vec::new(), 0, 0);
    for ((_, kind), out) in MODELS.iter().zip(&outs) {
        let Ok(r) = lab::report(out) else { continue };
        let n_arrived = lab::num(&r, "arrived");
        shares.push(if n_arrived > 0.0 { lab::num(&r, "requests") / n_arrived } else { 1.0 });
        arrived += n_arrived as u64;
        missed += lab::num(&r, "missed") as u64;
        match *kind {
            "short" => short.extend(r["latencies_ms"].as_array().into_iter().flatten().filter_map(|v| v.as_f64())),
            _ => long_rate += lab::num(&r, "req_per_s"),
        }
    }
    short.sort_by(f64::total_cmp);
    Ok(Row {
        system: system.into(),
        sigma,
        load,
        short_p50_ms: percentile(&short, 50.0),
        short_p99_ms: percentile(&short, 99.0),
        long_req_per_s: long_rate,
        jain: jain(&shares),
        arrived,
        missed,
        failed,
    })
}

fn print_table(rows: &[Row], service_ms: &[f64], mps: bool) {
    let models: Vec<String> = MODELS.iter().zip(service_ms).map(|((m, _), ms)| format!("{m} {ms:.2}")).collect();
    println!("six tenants, ms per request alone: {}", models.join(", "));
    println!(
        "{:<12} {:>5} {:>5} {:>12} {:>12} {:>11} {:>13} {:>11} {:>6} {:>8} {:>7}  failed",
        "system", "sigma", "load", "short p50 ms", "short p99 ms", "p99 native/", "long req/s", "long /native", "jain", "arrived", "missed"
    );
    let native = |r: &Row| rows.iter().find(|n| n.system == "native" && n.sigma == r.sigma && n.load == r.load);
    let f = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}"));
    for r in rows {
        let base = native(r);
        let p99_ratio = base.and_then(|b| b.short_p99_ms.zip(r.short_p99_ms)).map(|(b, s)| b / s);
        let long_ratio = base.filter(|b| b.long_req_per_s > 0.0).map(|b| r.long_req_per_s / b.long_req_per_s);
        println!(
            "{:<12} {:>5} {:>5} {:>12} {:>12} {:>11} {:>13.2} {:>11} {:>6.3} {:>8} {:>7}  {}",
            r.system,
            r.sigma,
            r.load,
            f(r.short_p50_ms),
            f(r.short_p99_ms),
            f(p99_ratio),
            r.long_req_per_s,
            f(long_ratio),
            r.jain,
            r.arrived,
            r.missed,
            r.failed.join(", ")
        );
    }
    println!(
        "latencies from arrival to completion; 'p99 native/' is native's short-job P99 over this one's (above 1: better). MPS not run ({})",
        if mps { "nvidia-cuda-mps-control is on this host; starting it changes the GPU's sharing for every user" } else { "nvidia-cuda-mps-control not found" }
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_is_one_when_equal_and_one_over_n_when_one_has_all() {
        assert_eq!(jain(&[0.5, 0.5, 0.5]), 1.0);
        assert!((jain(&[1.0, 0.0, 0.0, 0.0]) - 0.25).abs() < 1e-12);
        assert!((jain(&[1.0, 0.5]) - 0.9).abs() < 1e-12);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!((percentile(&v, 50.0), percentile(&v, 99.0), percentile(&v, 100.0)), (Some(50.0), Some(99.0), Some(100.0)));
        assert_eq!(percentile(&[], 50.0), None);
    }
}
