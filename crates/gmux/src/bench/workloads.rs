//! `gmux bench workloads`: real programs as tenants (`gpu/workload.py`: LLM decoding
//! with transformers, torchvision training, GPT-2 fine-tuning), side by side in one run.
//! Per mix, the tenants first run natively at once, which gives their footprints; each
//! level's budget is their sum over the level. Systems: `native` (at once, no gmux; 100%
//! only), `in-hbm` (gmuxd time-slices them with no budget: the same slices, no
//! pressure), `gmux` (the proactive switch), `whole` (the whole-tenant swap) and
//! `traced` (the proactive switch again, each process recording its trace). Throughput is
//! normalized to `in-hbm`; the simulator replays the traces of `traced` for the `ideal`
//! bound and its prediction of gmuxd, which the `gmux` row of the level shows too.
//! Recording times every command on the device, which slows a launch-bound program
//! (measured: a transformers decoder alone ran at 0.85 of native under gmux and at 0.69
//! recording), so no row compared with another system records.

use super::lab::{self, Lab, LabArgs};
use crate::Failure;
use gmux_core::size::format_size;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// Arguments of `gmux bench workloads`.
#[derive(Debug, clap::Args)]
pub struct WorkloadsArgs {
    #[command(flatten)]
    lab: LabArgs,
    /// Mixes of tenants: multi-llm (3 GPT-2-large decoders), multi-dnn (ResNet-50 and
    /// ViT-B/16 training), hybrid (a decoder beside ResNet-50 training), finetune (2
    /// GPT-2-medium fine-tunings).
    #[arg(long, value_delimiter = ',', default_value = "multi-llm,multi-dnn,hybrid,finetune")]
    mixes: Vec<String>,
    /// Total footprint as % of the budget, one run per level and system.
    #[arg(long, value_delimiter = ',', default_value = "100,150,200,300")]
    levels: Vec<u32>,
    /// Round-robin timeslice.
    #[arg(long, default_value = "200ms")]
    timeslice: String,
    /// Systems: native, in-hbm, gmux, whole, traced (gmux recording the traces the
    /// simulator replays; without it there is no ideal bound or prediction).
    #[arg(long, value_delimiter = ',', default_value = "native,in-hbm,gmux,whole,traced")]
    systems: Vec<String>,
    /// Seconds the tenants run together, every one set up, before the window opens: the
    /// time the switch costs (and so the stretched slices) and the forecasts' histories
    /// take to settle. The programs' own setup (imports, models, a first iteration) comes
    /// before it and is not counted.
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS", value_parser = seconds)]
    settle: f64,
    /// Skip the simulator's replay of the traced runs' traces (no ideal bound or
    /// prediction; the traces are still written, for `gmux sim` later).
    #[arg(long)]
    no_replay: bool,
    /// Pairs of native and gmux runs at 100% (both systems and the level asked for):
    /// a launch-bound program's rate moves by a fifth or more from one run to the next,
    /// so one pair cannot tell a few percent. The first pair's native run is the mix's
    /// first run; the others run one after another after the first gmux run. The ratio is
    /// given per pair and as their median.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    pairs: u32,
}

const SYSTEMS: [&str; 5] = ["native", "in-hbm", "gmux", "whole", "traced"];

/// A number of seconds, 0 or more.
fn seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(format!("{s:?} is not a number of seconds: give 0 or more, e.g. 10")),
    }
}

/// The tenants of a mix: (name, `workload.py --kind`).
fn mix(name: &str) -> Option<&'static [(&'static str, &'static str)]> {
    Some(match name {
        "multi-llm" => &[("llm-0", "llm-decode"), ("llm-1", "llm-decode"), ("llm-2", "llm-decode")],
        "multi-dnn" => &[("resnet50", "train-resnet50"), ("vit-b16", "train-vit")],
        "hybrid" => &[("llm", "llm-decode"), ("resnet50", "train-resnet50")],
        "finetune" => &[("gpt2-0", "finetune-gpt2"), ("gpt2-1", "finetune-gpt2")],
        _ => return None,
    })
}

/// One mix at one level under one system.
#[derive(Debug, Clone, Serialize)]
struct Row {
    mix: String,
    level: u32,
    system: String,
    /// Which of the native and gmux pairs at 100% (`--pairs`) the row is, from 0.
    pair: u32,
    /// GPU-memory budget (none for native and in-hbm).
    budget: Option<u64>,
    /// Units (tokens, samples, sequences) per second of each tenant in the window.
    units_per_s: BTreeMap<String, f64>,
    unit: String,
    /// Mean over tenants of units/s over the same tenant's in-hbm units/s.
    throughput_norm: Option<f64>,
    /// Bytes copied both ways in the window, per tenant (mean).
    bytes_per_tenant: Option<f64>,
    /// Mean over tenants of the share of the window each one stalled: its launches held
    /// by its agent or its commands waiting for memory (`gmem.pressure` `some`).
    stalled: Option<f64>,
    /// Mean time from a switch to the first command of the slice, in the window (ms).
    switch_wait_ms: Option<f64>,
    /// Mean slice gmuxd gave (stretched to amortize the switch), over the slots started in
    /// the window (ms).
    slice_ms: Option<f64>,
    /// The simulator on the traces gmux recorded (gmux rows): the OPT bound and gmuxd's
    /// own decisions, each normalized to the simulated in-hbm run; bytes per tenant.
    ideal_norm: Option<f64>,
    ideal_bytes_per_tenant: Option<f64>,
    sim_gmuxd_norm: Option<f64>,
    failed: Vec<String>,
}

/// Runs the benchmark.
pub fn run(a: &WorkloadsArgs) -> Result<(), Failure> {
    if let Some(m) = a.mixes.iter().find(|m| mix(m).is_none()) {
        return Err(Failure::Usage(format!("--mixes: unknown mix {m:?}; use multi-llm, multi-dnn, hybrid, finetune")));
    }
    if let Some(s) = a.systems.iter().find(|s| !SYSTEMS.contains(&s.as_str())) {
        return Err(Failure::Usage(format!("--systems: unknown system {s:?}; use {}", SYSTEMS.join(", "))));
    }
    let asked = |s: &str| a.systems.iter().any(|x| x == s);
    if a.pairs > 1 && !(a.levels.contains(&100) && asked("native") && asked("gmux")) {
        return Err(Failure::Usage(format!("--pairs {}: pairs of native and gmux run at 100%; add 100 to --levels and native and gmux to --systems", a.pairs)));
    }
    if let Some(l) = a.levels.iter().find(|l| **l < 100) {
        return Err(Failure::Usage(format!("--levels: {l}% is under 100%; a level is the total footprint over the budget")));
    }
    let lab = Lab::new(&a.lab, &["workload.py", "tenant.py"])?;
    let mut rows: Vec<Row> = Vec::new();
    for m in &a.mixes {
        let tenants = mix(m).expect("checked");
        eprintln!("gmux bench: {m}: native, for the footprints");
        let native = one_run(&lab, a, m, 100, "native", None, 0)?;
        let footprint: u64 = native.1.values().sum();
        if footprint == 0 {
            return Err(Failure::Runtime(format!("{m}: the native run reported no footprint; see its logs in {}", a.lab.out.display())));
        }
        eprintln!("gmux bench: {m}: footprint {} ({} tenants)", format_size(footprint), tenants.len());
        let base = if a.systems.iter().any(|s| s == "in-hbm") {
            eprintln!("gmux bench: {m}: in-hbm (time-sliced, no budget)");
            Some(one_run(&lab, a, m, 100, "in-hbm", None, 0)?.0)
        } else {
            None
        };
        let mut mine: Vec<Row> = Vec::new();
        for &level in &a.levels {
            let budget = footprint * 100 / u64::from(level);
            for system in &a.systems {
                let row = match system.as_str() {
                    "native" if level == 100 => native.0.clone(),
                    "in-hbm" => Row { level, ..base.clone().expect("in-hbm ran") },
                    "native" => continue,
                    s => {
                        eprintln!("gmux bench: {m}: level {level}%: {s} (budget {})", format_size(budget));
                        let mut row = one_run(&lab, a, m, level, s, Some(budget), 0)?.0;
                        if s == "traced" && !a.no_replay {
                            if let Err(e) = replay(&lab, a, m, level, budget, &mut row) {
                                eprintln!("gmux bench: {m}: level {level}%: no replay: {}", e.message());
                            }
                        }
                        row
                    }
                };
                eprintln!("gmux bench: {m}: level {level}%: {system}: {:?} units/s", row.units_per_s);
                mine.push(row);
                share_replay(&mut mine, level);
                write(&lab, a, &[rows.as_slice(), mine.as_slice()].concat())?;
            }
            if level == 100 && asked("native") && asked("gmux") {
                for pair in 1..a.pairs {
                    for system in ["native", "gmux"] {
                        eprintln!("gmux bench: {m}: level 100%: {system}, pair {} of {}", pair + 1, a.pairs);
                        let budget = (system == "gmux").then_some(budget);
                        let row = one_run(&lab, a, m, level, system, budget, pair)?.0;
                        eprintln!("gmux bench: {m}: level 100%: {system}, pair {}: {:?} units/s", pair + 1, row.units_per_s);
                        mine.push(row);
                        write(&lab, a, &[rows.as_slice(), mine.as_slice()].concat())?;
                    }
                }
            }
        }
        if let Some(b) = &base {
            for r in &mut mine {
                let ratios: Vec<f64> = tenants.iter().map(|(n, _)| r.units_per_s.get(*n).copied().unwrap_or(0.0) / b.units_per_s[*n]).collect();
                r.throughput_norm = Some(ratios.iter().sum::<f64>() / ratios.len() as f64);
            }
        }
        rows.extend(mine);
        write(&lab, a, &rows)?;
    }
    println!("{}", table(&rows));
    println!("results: {}", lab.file("workloads.json").display());
    Ok(())
}

/// Gives the `gmux` row at `level` the replay of the `traced` row's traces: the ideal
/// bound and the simulator's prediction belong to the workload and the budget, and the
/// unrecorded run is the one to hold against them.
fn share_replay(rows: &mut [Row], level: u32) {
    let Some(t) = rows.iter().find(|r| r.level == level && r.system == "traced").cloned() else { return };
    for r in rows.iter_mut().filter(|r| r.level == level && r.system == "gmux") {
        (r.ideal_norm, r.ideal_bytes_per_tenant, r.sim_gmuxd_norm) = (t.ideal_norm, t.ideal_bytes_per_tenant, t.sim_gmuxd_norm);
    }
}

/// Writes `workloads.json` and `workloads.svg` (throughput against level, one line per
/// mix and system, with gmux's ideal bound).
fn write(lab: &Lab, a: &WorkloadsArgs, rows: &[Row]) -> Result<(), Failure> {
    let put = |name: &str, text: String| {
        let out = lab.file(name);
        std::fs::write(&out, text).map_err(|e| Failure::Runtime(format!("cannot write {}: {e}", out.display())))
    };
    let json = serde_json::json!({ "benchmark": "workloads", "timeslice": a.timeslice, "duration_s": a.lab.duration, "rows": rows });
    put("workloads.json", serde_json::to_string_pretty(&json).expect("serializable"))?;
    let point = |system: &str, r: &Row, y: Option<f64>| {
        let mut p = gmux_sim::Row::new(system, &r.mix, Some(f64::from(r.level)), a.lab.duration);
        p.throughput_norm = y;
        p
    };
    let mut results: Vec<gmux_sim::Row> = rows.iter().map(|r| point(&r.system, r, r.throughput_norm)).collect();
    results.extend(rows.iter().filter(|r| r.ideal_norm.is_some()).map(|r| point("ideal", r, r.ideal_norm)));
    let report = gmux_sim::Report { scenario: "workloads".into(), description: "real programs as tenants: throughput over in-hbm".into(), results };
    put("workloads.svg", crate::plot::svg(&report))
}

/// One run; its row and each tenant's footprint.
fn one_run(lab: &Lab, a: &WorkloadsArgs, m: &str, level: u32, system: &str, budget: Option<u64>, pair: u32) -> Result<(Row, BTreeMap<String, u64>), Failure> {
    let tenants = mix(m).expect("checked");
    let run = if pair == 0 { format!("{m}-L{level}-{system}") } else { format!("{m}-L{level}-{system}-{}", pair + 1) };
    let mut flags: Vec<String> = vec!["--policy".into(), "rr".into(), "--timeslice".into(), a.timeslice.clone(), "--verbose".into()];
    match (system, budget) {
        ("native", _) => {}
        ("in-hbm", _) => flags.push("--always-slice".into()),
        (s, Some(b)) => flags.extend(["--hbm".into(), b.to_string(), "--switch".into(), if s == "whole" { "whole".into() } else { "msched".into() }]),
        (s, None) => return Err(Failure::Runtime(format!("{s} needs a budget"))),
    }
    let daemon = (system != "native").then(|| lab.daemon(&run, &flags)).transpose()?;
    let window = lab::Window { start: lab::unix_now() + a.lab.warmup, settle: a.settle, duration: a.lab.duration };
    let ready = lab.file(&format!("{run}.ready"));
    let _ = std::fs::remove_dir_all(&ready);
    std::fs::create_dir_all(&ready).map_err(|e| Failure::Runtime(format!("cannot create {}: {e}", ready.display())))?;
    let mut children = Vec::new();
    for (name, kind) in tenants {
        let report = lab.file(&format!("{run}.{name}.json"));
        let _ = std::fs::remove_file(&report);
        let trace = lab.file(&format!("{m}-L{level}.{name}.trace.jsonl"));
        let record = (system == "traced").then(|| {
            let _ = std::fs::remove_file(&trace);
            trace.as_path()
        });
        let mut args: Vec<String> = vec!["--kind".into(), (*kind).into()];
        args.extend(lab::window_args(window, &ready, tenants.len(), &report));
        children.push((name.to_string(), lab.tenant(name, &run, daemon.as_ref().map(|d| d.socket.as_path()), record, 0, "workload.py", &args)?));
        if let Some(d) = &daemon {
            if !lab::wait_joined(&d.socket, name, Duration::from_secs(120)) {
                eprintln!("gmux bench: {name} did not join gmuxd within 120 s; see its log");
            }
        }
    }
    // Bytes both ways and stalled µs (none unless every tenant's was read), summed over
    // tenants.
    let counters = |d: &Option<lab::Daemon>| {
        d.as_ref().map(|d| {
            let each = tenants.iter().map(|(n, _)| (lab::stat(&d.socket, n), lab::stalled_us(&d.socket, n)));
            each.fold((0, Some(0)), |s, (b, us)| (s.0 + b.0 + b.1, s.1.zip(us).map(|(x, y)| x + y)))
        })
    };
    let (start, before, after) =
        lab::measure_window(&ready, tenants.len(), Duration::from_secs(600), window, &run, || counters(&daemon), &mut || Lab::first_exited(&mut children));
    let mut failed = lab.wait_all(children, Duration::from_secs_f64(180.0 + a.lab.duration));
    drop(daemon);
    let mut row = Row {
        mix: m.into(),
        level,
        system: system.into(),
        pair,
        budget,
        units_per_s: BTreeMap::new(),
        unit: String::new(),
        throughput_norm: None,
        bytes_per_tenant: before.zip(after).map(|(b, e)| e.0.saturating_sub(b.0) as f64 / tenants.len() as f64),
        stalled: before.zip(after).and_then(|(b, e)| b.1.zip(e.1)).map(|(b, e)| e.saturating_sub(b) as f64 / 1e6 / a.lab.duration / tenants.len() as f64),
        switch_wait_ms: switch_wait_ms(&lab.file(&format!("{run}.daemon.log")), start, start + a.lab.duration),
        slice_ms: slice_ms(&lab.file(&format!("{run}.daemon.log")), start, start + a.lab.duration, &a.timeslice),
        ideal_norm: None,
        ideal_bytes_per_tenant: None,
        sim_gmuxd_norm: None,
        failed: Vec::new(),
    };
    let mut footprints = BTreeMap::new();
    for (name, _) in tenants {
        let r = lab::report(&lab.file(&format!("{run}.{name}.json")))?;
        row.units_per_s.insert(name.to_string(), lab::num(&r, "units_per_s"));
        row.unit = r.get("unit").and_then(|u| u.as_str()).unwrap_or("unit").to_string();
        footprints.insert(name.to_string(), lab::num(&r, "footprint_bytes").max(0.0) as u64);
        if lab::num(&r, "late_start_s") > 0.0 {
            failed.push(format!("{name} (late by {:.1} s)", lab::num(&r, "late_start_s")));
        }
    }
    row.failed = failed;
    Ok((row, footprints))
}

/// The mean time from a switch to its slice's first command over the slots gmuxd's log
/// says started inside [`from`, `to`] (UNIX seconds), in ms.
fn switch_wait_ms(log: &Path, from: f64, to: f64) -> Option<f64> {
    mean(lab::slot_starts(log).iter().filter(|s| (from..=to).contains(&s.at)).map(|s| s.wait_ms))
}

/// The mean slice (ms) of the slots gmuxd's log says started inside [`from`, `to`]:
/// stretched where it says so, else `timeslice`.
fn slice_ms(log: &Path, from: f64, to: f64, timeslice: &str) -> Option<f64> {
    mean(lab::slot_slices(log, from, to, timeslice).into_iter().map(|(_, ms)| ms))
}

/// The median of `xs` (not empty).
fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn mean(xs: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = xs.fold((0.0, 0), |(s, n), x| (s + x, n + 1));
    (n > 0).then(|| sum / n as f64)
}

/// The simulator on the traces the `traced` run recorded at `level`, each tenant with the
/// slices gmuxd gave it in that run (stretched ones included): fills the row's ideal and
/// gmuxd prediction.
fn replay(lab: &Lab, a: &WorkloadsArgs, m: &str, level: u32, budget: u64, row: &mut Row) -> Result<(), Failure> {
    let tenants = mix(m).expect("checked");
    let what = format!("{m} traces at {level}%");
    let names: Vec<&str> = tenants.iter().map(|(n, _)| *n).collect();
    let slices = lab::slices_used(lab, &format!("{m}-L{level}-traced"), &names, &a.timeslice);
    let report = lab::replay(lab, &what, &format!("{m}-L{level}"), budget, slices, &["in-hbm", "gmuxd", "ideal"], names.iter().copied())?;
    let get = |s: &str| report.results.iter().find(|r| r.system == s).ok_or_else(|| Failure::Runtime(format!("replay has no {s} row")));
    let ideal = get("ideal")?;
    row.ideal_norm = ideal.throughput_norm;
    // Bytes over the replay's simulated time, scaled to the window.
    let per_s = (ideal.bytes_h2d + ideal.bytes_d2h) as f64 / ideal.sim_seconds.max(1e-9);
    row.ideal_bytes_per_tenant = Some(per_s * a.lab.duration / tenants.len() as f64);
    row.sim_gmuxd_norm = get("gmuxd")?.throughput_norm;
    Ok(())
}

/// The mean over tenants of each one's units/s in `a` over its units/s in `b`; none
/// unless both ran every tenant of the mix.
fn per_tenant_ratio(a: &Row, b: &Row) -> Option<f64> {
    let ratios: Vec<f64> = b.units_per_s.iter().filter(|(_, v)| **v > 0.0).filter_map(|(n, v)| a.units_per_s.get(n).map(|x| x / v)).collect();
    (!ratios.is_empty() && ratios.len() == b.units_per_s.len()).then(|| ratios.iter().sum::<f64>() / ratios.len() as f64)
}

fn table(rows: &[Row]) -> String {
    let f = |v: Option<f64>, d: usize| v.map_or("-".to_string(), |x| format!("{x:.d$}"));
    let gib = |v: Option<f64>| f(v.map(|b| b / (1u64 << 30) as f64), 1);
    let mut s = format!(
        "{:<10} {:<6} {:<9} {:>9} {:>11} {:>10} {:>8} {:>9} {:>10} {:>9} {:>8} {:>9} {:>8} {:>8}  {}\n",
        "mix",
        "level",
        "system",
        "budget",
        "units/s",
        "throughput",
        "ideal",
        "vs ideal",
        "GiB/tenant",
        "ideal GiB",
        "sim",
        "switch ms",
        "slice ms",
        "stalled",
        "failed"
    );
    for r in rows {
        let mean = r.units_per_s.values().sum::<f64>() / r.units_per_s.len().max(1) as f64;
        let vs = r.throughput_norm.zip(r.ideal_norm).map(|(t, i)| t / i);
        s += &format!(
            "{:<10} {:<6} {:<9} {:>9} {:>11} {:>10} {:>8} {:>9} {:>10} {:>9} {:>8} {:>9} {:>8} {:>8}  {}\n",
            r.mix,
            format!("{}%", r.level),
            if r.pair == 0 { r.system.clone() } else { format!("{} {}", r.system, r.pair + 1) },
            r.budget.map_or("-".into(), format_size),
            format!("{mean:.1} {}", r.unit.chars().next().unwrap_or('u')),
            f(r.throughput_norm, 3),
            f(r.ideal_norm, 3),
            f(vs, 3),
            gib(r.bytes_per_tenant),
            gib(r.ideal_bytes_per_tenant),
            f(r.sim_gmuxd_norm, 3),
            f(r.switch_wait_ms, 1),
            f(r.slice_ms, 0),
            r.stalled.map_or("-".into(), |x| format!("{:.1}%", x * 100.0)),
            r.failed.join(", ")
        );
    }
    for (m, l) in rows.iter().map(|r| (r.mix.clone(), r.level)).collect::<std::collections::BTreeSet<_>>() {
        let get = |sys: &str, pair: u32| rows.iter().find(|r| r.mix == m && r.level == l && r.system == sys && r.pair == pair);
        if let Some(x) = get("gmux", 0).zip(get("whole", 0)).and_then(|(g, o)| per_tenant_ratio(g, o)) {
            s += &format!("{m} {l}%: gmux / whole-tenant swap = {x:.2}x\n");
        }
        let pairs: Vec<f64> = (0..).map_while(|k| get("gmux", k).zip(get("native", k))).filter_map(|(g, o)| per_tenant_ratio(g, o)).collect();
        s += &match pairs.as_slice() {
            [] => String::new(),
            [x] => format!("{m} {l}%: gmux / native at once = {x:.2}x\n"),
            each => {
                let list = each.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(", ");
                format!("{m} {l}%: gmux / native at once = {:.2}x, the median of {} pairs run one after another ({list})\n", median(each), each.len())
            }
        };
    }
    s + "gmux / X: the mean over tenants of each one's units/s under gmux over its units/s under X\n\
         units/s: mean per tenant (t: tokens, s: samples or sequences); throughput: mean over tenants of units/s over the same tenant's in-hbm units/s\n\
         ideal, sim: the simulator on the traces the traced run recorded (OPT bound; gmuxd's own code), normalized to its in-hbm replay, shown on the gmux row too; GiB: both ways, per tenant, in the window\n\
         switch ms: from a switch to its slice's first command; slice ms: the slices gmuxd gave, stretched to amortize the switch (means over the window)\n\
         stalled: share of the window a tenant's launches were held by its agent or its commands waited for memory (gmem.pressure some), mean over tenants"
}

#[cfg(test)]
mod tests {
    use super::{per_tenant_ratio, Row};

    fn row(units: &[(&str, f64)]) -> Row {
        Row {
            mix: "m".into(),
            level: 100,
            system: "s".into(),
            pair: 0,
            budget: None,
            units_per_s: units.iter().map(|(n, u)| (n.to_string(), *u)).collect(),
            unit: "tokens".into(),
            throughput_norm: None,
            bytes_per_tenant: None,
            stalled: None,
            switch_wait_ms: None,
            slice_ms: None,
            ideal_norm: None,
            ideal_bytes_per_tenant: None,
            sim_gmuxd_norm: None,
            failed: Vec::new(),
        }
    }

    /// The traced run's replay reaches the unrecorded gmux row of its level only.
    #[test]
    fn the_gmux_row_shows_the_replay_of_the_traced_run_at_its_level() {
        let at = |level, system: &str| Row { level, system: system.into(), ..row(&[]) };
        let mut traced = at(200, "traced");
        (traced.ideal_norm, traced.ideal_bytes_per_tenant, traced.sim_gmuxd_norm) = (Some(0.8), Some(4e10), Some(0.7));
        let mut rows = vec![at(200, "gmux"), at(150, "gmux"), at(200, "whole"), traced];
        super::share_replay(&mut rows, 200);
        assert_eq!((rows[0].ideal_norm, rows[0].ideal_bytes_per_tenant, rows[0].sim_gmuxd_norm), (Some(0.8), Some(4e10), Some(0.7)));
        assert_eq!((rows[1].ideal_norm, rows[2].ideal_norm), (None, None));
    }

    /// Each tenant is compared with itself, then the ratios are averaged; a tenant missing
    /// from either run leaves no ratio rather than a flattering one.
    #[test]
    fn the_ratio_to_another_system_is_per_tenant() {
        let native = row(&[("a", 100.0), ("b", 10.0)]);
        let gmux = row(&[("a", 90.0), ("b", 10.0)]);
        assert!((per_tenant_ratio(&gmux, &native).unwrap() - 0.95).abs() < 1e-12);
        assert_eq!(per_tenant_ratio(&row(&[("a", 90.0)]), &native), None);
    }

    /// With several pairs of native and gmux runs at 100%, the table gives each pair's
    /// ratio, pair by pair (never a gmux run against another pair's native run), and
    /// their median.
    #[test]
    fn pairs_at_100_percent_are_compared_pair_by_pair() {
        let at = |system: &str, pair: u32, units: f64| Row { system: system.into(), pair, ..row(&[("a", units)]) };
        let rows =
            vec![at("native", 0, 100.0), at("gmux", 0, 90.0), at("native", 1, 200.0), at("gmux", 1, 196.0), at("native", 2, 150.0), at("gmux", 2, 150.0)];
        let t = super::table(&rows);
        assert!(t.contains("gmux / native at once = 0.98x, the median of 3 pairs run one after another (0.90, 0.98, 1.00)"), "{t}");
        assert!(t.contains("native 2") && t.contains("gmux 3"), "{t}");
        let one = super::table(&rows[..2]);
        assert!(one.contains("gmux / native at once = 0.90x\n"), "{one}");
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(super::median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(super::median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(super::median(&[7.0]), 7.0);
    }

    /// `--settle` takes 0 or more seconds; anything else is refused with an example.
    #[test]
    fn settle_takes_seconds_from_zero_up() {
        assert_eq!(super::seconds("10"), Ok(10.0));
        assert_eq!(super::seconds("0"), Ok(0.0));
        assert_eq!(super::seconds("2.5"), Ok(2.5));
        for bad in ["-1", "NaN", "inf", "10s", ""] {
            let e = super::seconds(bad).expect_err(bad);
            assert!(e.contains("e.g. 10"), "{e}");
        }
    }
}
