//! `gmux bench cooperate`: a tenant that gives memory back on gmux's events, in the
//! manner of Ghost's GhostAC. A high-priority inference tenant (ResNet-50 at a fixed
//! request rate, each request also reading a KV-cache-like pool: `gpu/rt_infer.py`)
//! runs beside a low-priority tenant that keeps a large cache (`gpu/lp_cache.py`) over
//! the budget. Runs, under one budget and strict priority:
//! the inference tenant alone; both, the cache kept whole (gmux evicts it); both, the
//! cache halved at each swap event of its tenant (`--cooperate`). Reports the inference
//! latencies and the cache tenant's throughput.

use super::lab::{self, Lab, LabArgs};
use crate::Failure;
use serde::Serialize;
use std::path::Path;
use std::time::Duration;

/// Arguments of `gmux bench cooperate`.
#[derive(Debug, clap::Args)]
pub struct CooperateArgs {
    #[command(flatten)]
    lab: LabArgs,
    /// GPU-memory budget shared by the two tenants.
    #[arg(long, default_value = "8G")]
    budget: String,
    /// Inference requests per second.
    #[arg(long, default_value_t = 40.0)]
    rate: f64,
    /// Images per inference request.
    #[arg(long, default_value_t = 8)]
    hp_batch: u32,
    /// The inference tenant's pool, GiB, read by every request.
    #[arg(long, default_value_t = 3.0)]
    hp_kv_gib: f64,
    /// The low-priority tenant's cache, GiB.
    #[arg(long, default_value_t = 12.0)]
    pool_gib: f64,
}

/// One run.
#[derive(Debug, Clone, Serialize)]
struct Row {
    run: String,
    p50_ms: f64,
    p99_ms: f64,
    hp_requests: f64,
    lp_steps_per_s: Option<f64>,
    lp_shrinks: Option<f64>,
    lp_grows: Option<f64>,
    lp_smallest_blocks: Option<f64>,
    failed: Vec<String>,
}

/// Runs the benchmark.
pub fn run(a: &CooperateArgs) -> Result<(), Failure> {
    let lab = Lab::new(&a.lab, &["rt_infer.py", "lp_cache.py", "tenant.py"])?;
    let mut rows = Vec::new();
    for (run, lp) in [("alone", None), ("kept", Some(false)), ("cooperate", Some(true))] {
        eprintln!("gmux bench: cooperate: {run}");
        rows.push(one_run(&lab, a, run, lp)?);
    }
    println!("{}", table(&rows));
    println!(
        "latencies in ms from each request's due time to its completion; budget {}, {} requests/s reading a {} GiB pool, a {} GiB cache beside",
        a.budget, a.rate, a.hp_kv_gib, a.pool_gib
    );
    let out = lab.file("cooperate.json");
    let json = serde_json::json!({ "benchmark": "cooperate", "budget": a.budget, "rate": a.rate, "hp_batch": a.hp_batch, "hp_kv_gib": a.hp_kv_gib, "pool_gib": a.pool_gib, "rows": rows });
    std::fs::write(&out, serde_json::to_string_pretty(&json).expect("serializable"))
        .map_err(|e| Failure::Runtime(format!("cannot write {}: {e}", out.display())))?;
    println!("results: {}", out.display());
    Ok(())
}

/// The table: each run's latencies against the inference tenant alone and against the
/// cache kept whole, and the cache tenant's throughput.
fn table(rows: &[Row]) -> String {
    let p99 = |run: &str| rows.iter().find(|r| r.run == run).map(|r| r.p99_ms);
    let (alone, kept) = (p99("alone"), p99("kept"));
    let ratio = |v: f64, base: Option<f64>| base.filter(|b| *b > 0.0).map_or("-".into(), |b| format!("{:.2}", v / b));
    let opt = |v: Option<f64>, digits: usize| v.map_or("-".into(), |x| format!("{x:.digits$}"));
    let mut s = format!(
        "{:<10} {:>8} {:>8} {:>11} {:>10} {:>9} {:>10} {:>8} {:>6} {:>9}  {}\n",
        "run", "HP p50", "HP p99", "p99/alone", "p99/kept", "requests", "LP steps/s", "shrinks", "grows", "smallest", "failed"
    );
    for r in rows {
        s += &format!(
            "{:<10} {:>8.2} {:>8.2} {:>11} {:>10} {:>9} {:>10} {:>8} {:>6} {:>9}  {}\n",
            r.run,
            r.p50_ms,
            r.p99_ms,
            ratio(r.p99_ms, alone),
            ratio(r.p99_ms, kept),
            r.hp_requests,
            opt(r.lp_steps_per_s, 1),
            opt(r.lp_shrinks, 0),
            opt(r.lp_grows, 0),
            opt(r.lp_smallest_blocks, 0),
            r.failed.join(", ")
        );
    }
    s.trim_end().to_string()
}

fn one_run(lab: &Lab, a: &CooperateArgs, run: &str, lp: Option<bool>) -> Result<Row, Failure> {
    let name = format!("coop-{run}");
    let daemon = lab.daemon(&name, &["--hbm".into(), a.budget.clone(), "--policy".into(), "priority".into()])?;
    let start = lab::unix_now() + a.lab.warmup;
    let window = |out: &Path| lab::fixed_window(start, a.lab.duration, out);
    let hp_out = lab.file(&format!("{name}.hp.json"));
    let lp_out = lab.file(&format!("{name}.lp.json"));
    let _ = (std::fs::remove_file(&hp_out), std::fs::remove_file(&lp_out));
    let mut hp_args = vec!["--rate".to_string(), a.rate.to_string(), "--batch".into(), a.hp_batch.to_string(), "--kv-gib".into(), a.hp_kv_gib.to_string()];
    hp_args.extend(window(&hp_out));
    let mut children = vec![("hp".to_string(), lab.tenant("hp", &name, Some(&daemon.socket), None, 1, "rt_infer.py", &hp_args)?)];
    if let Some(cooperate) = lp {
        let mut lp_args = vec!["--pool-gib".to_string(), a.pool_gib.to_string()];
        if cooperate {
            lp_args.push("--cooperate".into());
        }
        lp_args.extend(window(&lp_out));
        children.push(("lp".to_string(), lab.tenant("lp", &name, Some(&daemon.socket), None, 0, "lp_cache.py", &lp_args)?));
    }
    let failed = lab.wait_all(children, Duration::from_secs_f64(180.0 + a.lab.duration));
    drop(daemon);
    let hp = lab::report(&hp_out)?;
    let lp = lp.map(|_| lab::report(&lp_out)).transpose()?;
    let lp_num = |key: &str| lp.as_ref().map(|r| lab::num(r, key));
    Ok(Row {
        run: run.into(),
        p50_ms: lab::num(&hp, "p50_ms"),
        p99_ms: lab::num(&hp, "p99_ms"),
        hp_requests: lab::num(&hp, "requests"),
        lp_steps_per_s: lp_num("steps_per_s"),
        lp_shrinks: lp_num("shrinks"),
        lp_grows: lp_num("grows"),
        lp_smallest_blocks: lp_num("smallest_blocks"),
        failed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(run: &str, p99_ms: f64, lp: Option<(f64, f64)>) -> Row {
        Row {
            run: run.into(),
            p50_ms: p99_ms / 2.0,
            p99_ms,
            hp_requests: 600.0,
            lp_steps_per_s: lp.map(|l| l.0),
            lp_shrinks: lp.map(|l| l.1),
            lp_grows: lp.map(|l| l.1 * 2.0),
            lp_smallest_blocks: lp.map(|_| 24.0),
            failed: vec![],
        }
    }

    #[test]
    fn the_table_gives_each_p99_against_alone_and_against_the_kept_cache() {
        let t = table(&[row("alone", 10.0, None), row("kept", 80.0, Some((50.0, 0.0))), row("cooperate", 11.0, Some((40.0, 3.0)))]);
        let lines: Vec<Vec<&str>> = t.lines().map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(lines[0][..4], ["run", "HP", "p50", "HP"]);
        assert_eq!(lines[1], ["alone", "5.00", "10.00", "1.00", "0.12", "600", "-", "-", "-", "-"]);
        assert_eq!(lines[2], ["kept", "40.00", "80.00", "8.00", "1.00", "600", "50.0", "0", "0", "24"]);
        assert_eq!(lines[3], ["cooperate", "5.50", "11.00", "1.10", "0.14", "600", "40.0", "3", "6", "24"]);
    }
}
