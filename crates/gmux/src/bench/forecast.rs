//! `gmux bench forecast`: how well each process's forecast of its next slice matched
//! what the slice then used, on traces `gmux run --record` (or `gmux bench workloads`)
//! recorded, on the CPU. Compares what the process fills by and reports (the history's
//! forecast, floored by what its last slice used) and the history's forecast alone.

use crate::Failure;
use gmux_sim::forecast::{coverage, Coverage, SHORT};
use serde::Serialize;
use std::path::PathBuf;

/// Arguments of `gmux bench forecast`.
#[derive(Debug, clap::Args)]
pub struct ForecastArgs {
    /// Trace files (`.trace.jsonl`), one tenant each, or one `--tenant` of each.
    #[arg(required = true)]
    traces: Vec<PathBuf>,
    /// The tenant to take from a trace that holds several.
    #[arg(long)]
    tenant: Option<String>,
    /// Commands in a slice: the horizon of each forecast (as many as a 200 ms slot ran
    /// in gmuxd's log, "ran N commands").
    #[arg(long, default_value_t = 3000)]
    horizon: usize,
    /// Commands between two points compared.
    #[arg(long, default_value_t = 97)]
    every: usize,
    /// Where to write the results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One trace's results.
#[derive(Debug, Serialize)]
struct Row {
    trace: String,
    horizon: usize,
    #[serde(flatten)]
    coverage: Coverage,
}

/// Runs the benchmark.
pub fn run(a: &ForecastArgs) -> Result<(), Failure> {
    let mut rows = Vec::new();
    for path in &a.traces {
        let trace = gmux_sim::trace::load_tenant(path, a.tenant.as_deref()).map_err(Failure::Usage)?;
        let c = coverage(&trace, a.horizon, a.every).map_err(|e| Failure::Usage(format!("{}: {e}", path.display())))?;
        rows.push(Row { trace: path.display().to_string(), horizon: a.horizon, coverage: c });
    }
    println!("gmux bench forecast: a slice of {} commands, compared every {} commands", a.horizon, a.every);
    println!(
        "{:<40} {:>8} {:>6} {:>9}  {:>8} {:>6} {:>6} {:>6}  {:>8} {:>6} {:>6} {:>6}",
        "trace", "commands", "points", "used MiB", "filled", "short", "worst", "excess", "history", "short", "worst", "excess"
    );
    let pct = |v: f64| format!("{:.0}%", v * 100.0);
    for r in &rows {
        let (c, f, h) = (&r.coverage, &r.coverage.filled, &r.coverage.history);
        let name = std::path::Path::new(&r.trace).file_name().map_or(r.trace.clone(), |n| n.to_string_lossy().into_owned());
        println!(
            "{:<40} {:>8} {:>6} {:>9.0}  {:>8} {:>6} {:>6} {:>6}  {:>8} {:>6} {:>6} {:>6}",
            name,
            c.commands,
            c.points,
            c.used_bytes / (1u64 << 20) as f64,
            pct(f.covered),
            f.short,
            pct(f.worst),
            pct(f.excess),
            pct(h.covered),
            h.short,
            pct(h.worst),
            pct(h.excess)
        );
    }
    println!("filled: what the process fills by and reports (the history's forecast, floored by what its last slice used); history: the forecast alone");
    println!("columns: mean share of the bytes a slice used that the forecast held; points under {}; the smallest share; bytes forecast but not used, over those used", pct(SHORT));
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&rows).expect("serializable"))
            .map_err(|e| Failure::Runtime(format!("cannot write {}: {e}", p.display())))?;
    }
    Ok(())
}
