//! Scenario files (TOML): tenants, budgets, which systems and policies to compare.
//! docs/scenarios.md documents every key.

use crate::dispatch::{self, JobSpec};
use crate::engine::{self, Outcome, RunSpec, System, TenantSetup};
use crate::ideal;
use crate::model::DeviceModel;
use crate::report::{Progress, Report, Row};
use crate::workload::{Size, WorkloadSpec};
use gmux_core::evict::Eviction;
use gmux_core::knobs::{parse_duration, DEFAULT_TIMESLICE};
use gmux_core::memory::Capacities;
use gmux_core::placement::PlacementKind;
use gmux_core::sched::dispatch::DispatchPolicy;
use gmux_core::sched::Policy;
use gmux_core::CHUNK_BYTES;
use serde::Deserialize;

/// A whole scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    /// Name; the file stem when absent.
    pub name: Option<String>,
    /// One line saying what is measured.
    #[serde(default)]
    pub description: String,
    /// Simulated time per row, e.g. `"10s"`.
    pub duration: String,
    /// Seed of every random choice.
    #[serde(default = "one")]
    pub seed: u64,
    /// GPU-memory budget.
    pub gpu: Option<Size>,
    /// Host-tier budget (unlimited when absent).
    pub host: Option<Size>,
    /// Disk-tier budget (unlimited when absent).
    pub disk: Option<Size>,
    /// Footprint as a percentage of `gpu`; sizes in the file are those at 100%.
    #[serde(default = "hundred")]
    pub subscriptions: Vec<f64>,
    /// Systems to compare, by name (`ideal` derives from `gmux-exact`).
    #[serde(default = "gmux_exact")]
    pub systems: Vec<String>,
    /// Time-slice policies to compare.
    #[serde(default = "rr")]
    pub policies: Vec<Policy>,
    /// Eviction order of the gmux systems.
    #[serde(default = "opt")]
    pub eviction: Eviction,
    /// Placements of evicted chunks to compare.
    #[serde(default = "tier_order")]
    pub placements: Vec<PlacementKind>,
    /// Also run these tenants alone (row variant `alone`).
    #[serde(default)]
    pub alone: Vec<String>,
    /// Kernel-granular dispatch policies to compare (Paella); replaces time slicing.
    #[serde(default)]
    pub dispatchers: Vec<DispatchPolicy>,
    /// With `dispatchers`: the tenants are separate processes, as under gmuxd, and each
    /// policy is applied by gmuxd's release policy (holding processes), after a row of
    /// native time slicing (`crate::release`).
    #[serde(default)]
    pub processes: bool,
    /// Device constants.
    #[serde(default)]
    pub device: DeviceModel,
    /// Tenants.
    #[serde(rename = "tenant", default)]
    pub tenants: Vec<TenantFile>,
}

/// One tenant in a scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantFile {
    /// Name.
    pub name: String,
    /// Its workload (time-sliced scenarios).
    pub workload: Option<WorkloadSpec>,
    /// Its jobs (dispatch scenarios).
    pub jobs: Option<JobSpec>,
    /// Strict-priority class.
    #[serde(default)]
    pub priority: i32,
    /// Weighted-share weight.
    #[serde(default = "one_u32")]
    pub weight: u32,
    /// `compute.timeslice`, e.g. `"20ms"`.
    pub timeslice: Option<String>,
    /// `gmem.limit.high`.
    pub limit_high: Option<Size>,
    /// `gmem.limit.low`.
    pub limit_low: Option<Size>,
    /// Its latencies count in p50/p99 (default: tenants whose requests have arrivals).
    pub latency_critical: Option<bool>,
}

fn one() -> u64 {
    1
}
fn one_u32() -> u32 {
    1
}
fn hundred() -> Vec<f64> {
    vec![100.0]
}
fn gmux_exact() -> Vec<String> {
    vec!["gmux-exact".into()]
}
fn rr() -> Vec<Policy> {
    vec![Policy::RoundRobin]
}
fn opt() -> Eviction {
    Eviction::Opt
}
fn tier_order() -> Vec<PlacementKind> {
    vec![PlacementKind::TierOrder]
}

/// Names accepted in `systems`.
pub const SYSTEMS: [&str; 7] = ["in-hbm", "um", "xsched-um", "gmux-alloc", "gmux-exact", "gmuxd", "ideal"];

fn system(name: &str) -> Option<System> {
    Some(match name {
        "in-hbm" => System::InHbm,
        "um" => System::Um,
        "xsched-um" => System::XschedUm,
        "gmux-alloc" => System::GmuxAlloc,
        "gmux-exact" => System::GmuxExact,
        "gmuxd" => System::Gmuxd,
        _ => return None,
    })
}

impl ScenarioFile {
    /// Checks everything a run relies on; the message names the key and the fix.
    pub fn validate(&self) -> Result<(), String> {
        self.device.validate()?;
        let d = parse_duration(&self.duration).ok_or(format!("duration {:?}: write e.g. \"10s\" (at most 10s per row)", self.duration))?;
        if d == 0 {
            return Err("duration must be positive".into());
        }
        if self.tenants.is_empty() {
            return Err("no [[tenant]]: add at least one".into());
        }
        for s in &self.systems {
            if !SYSTEMS.contains(&s.as_str()) {
                return Err(format!("unknown system {s:?}: use one of {SYSTEMS:?}"));
            }
        }
        if self.subscriptions.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
            return Err("subscriptions must be positive percentages".into());
        }
        if self.processes && self.dispatchers.is_empty() {
            return Err("processes = true applies dispatchers as gmuxd does: add dispatchers = [...]".into());
        }
        let needs_gpu = self.dispatchers.is_empty() && self.systems.iter().any(|s| s != "in-hbm");
        if needs_gpu && self.gpu.is_none() {
            return Err("gpu budget missing: add gpu = \"16G\"".into());
        }
        for t in &self.tenants {
            if let Some(ts) = &t.timeslice {
                parse_duration(ts).ok_or(format!("tenant {}: timeslice {ts:?}: write e.g. \"20ms\"", t.name))?;
            }
            match (self.dispatchers.is_empty(), &t.workload, &t.jobs) {
                (true, Some(_), None) | (false, None, Some(_)) => {}
                (true, _, _) => return Err(format!("tenant {}: needs workload = {{ kind = ... }} (and no jobs)", t.name)),
                (false, _, _) => return Err(format!("tenant {}: dispatch scenarios need jobs = {{ ... }} (and no workload)", t.name)),
            }
        }
        for a in &self.alone {
            if !self.tenants.iter().any(|t| &t.name == a) {
                return Err(format!("alone names unknown tenant {a:?}"));
            }
        }
        Ok(())
    }

    fn duration_ns(&self) -> f64 {
        parse_duration(&self.duration).unwrap_or(1) as f64
    }

    /// Number of rows `run` will produce.
    pub fn rows(&self) -> usize {
        if !self.dispatchers.is_empty() {
            return self.dispatchers.len() + usize::from(self.processes);
        }
        self.subscriptions.len() * self.systems.len() * self.policies.len() * self.placements.len() + self.alone.len()
    }

    fn setups(&self, scale: f64, only: Option<&str>) -> Result<Vec<TenantSetup>, String> {
        self.tenants
            .iter()
            .filter(|t| only.is_none_or(|o| o == t.name))
            .enumerate()
            .map(|(i, t)| {
                let w = t.workload.as_ref().expect("validated");
                Ok(TenantSetup {
                    name: t.name.clone(),
                    source: w.build(scale, &self.device, self.seed.wrapping_mul(1000).wrapping_add(i as u64))?,
                    priority: t.priority,
                    weight: t.weight,
                    timeslice: t.timeslice.as_deref().and_then(parse_duration).unwrap_or(DEFAULT_TIMESLICE),
                    limit_high: t.limit_high.map(|s| s.0),
                    limit_low: t.limit_low.map_or(0, |s| (s.0 as f64 * scale) as u64),
                })
            })
            .collect()
    }

    fn caps(&self) -> Capacities {
        Capacities { gpu: self.gpu.map(|s| s.0), host: self.host.map(|s| s.0), disk: self.disk.map(|s| s.0) }
    }

    fn one_run(&self, system: System, sub: f64, policy: Policy, placement: PlacementKind, only: Option<&str>, record: bool) -> Result<Outcome, String> {
        engine::run(RunSpec {
            system,
            model: &self.device,
            caps: self.caps(),
            policy,
            eviction: self.eviction,
            placement,
            duration_ns: self.duration_ns(),
            tenants: self.setups(sub / 100.0, only)?,
            record_accesses: record,
            seed: self.seed,
        })
    }

    /// Runs every row, calling `progress` after each.
    pub fn run(&self, name: &str, progress: &mut dyn FnMut(&Progress)) -> Result<Report, String> {
        let total = self.rows();
        let mut rows = Vec::new();
        let mut tick = |rows: &Vec<Row>, label: String| progress(&Progress { done: rows.len(), total, label });
        if !self.dispatchers.is_empty() {
            let clients: Vec<(String, JobSpec)> = self.tenants.iter().map(|t| (t.name.clone(), t.jobs.clone().expect("validated"))).collect();
            let runs: Vec<Option<DispatchPolicy>> = if self.processes {
                std::iter::once(None).chain(self.dispatchers.iter().copied().map(Some)).collect()
            } else {
                self.dispatchers.iter().copied().map(Some).collect()
            };
            for d in runs {
                let out = match d {
                    Some(d) if !self.processes => dispatch::run(&clients, d, self.duration_ns(), self.seed),
                    _ => crate::release::run(&clients, d, self.duration_ns(), self.seed),
                };
                let lc: Vec<f64> = self
                    .tenants
                    .iter()
                    .zip(&out.latencies_ns)
                    .filter(|(t, _)| t.latency_critical.unwrap_or(true))
                    .flat_map(|(_, l)| l.iter().copied())
                    .collect();
                let (system, name) = match d {
                    None => ("native", "time slicing".to_string()),
                    Some(d) if self.processes => ("gmuxd", format!("release {}", d.build().name())),
                    Some(d) => ("gmux-exact", d.build().name().to_string()),
                };
                let mut row = blank(system, &name, None, out.elapsed_ns);
                (row.p50_ms, row.p99_ms) = percentiles(lc);
                rows.push(row);
                tick(&rows, format!("dispatch {name}"));
            }
            return Ok(Report { scenario: name.into(), description: self.description.clone(), results: rows });
        }
        for &sub in &self.subscriptions {
            for &policy in &self.policies {
                for &placement in &self.placements {
                    let norm = self.one_run(System::InHbm, sub, policy, placement, None, false)?;
                    let base: Vec<f64> = norm.tenants.iter().map(|t| t.tasks as f64 / norm.elapsed_ns).collect();
                    let mut exact: Option<Outcome> = None;
                    for s in &self.systems {
                        let row = if s == "ideal" {
                            let ex = match exact.take() {
                                Some(e) => e,
                                None => self.one_run(System::GmuxExact, sub, policy, placement, None, true)?,
                            };
                            let r = self.ideal_row(&ex, &base, sub);
                            exact = Some(ex);
                            r
                        } else {
                            let sys = system(s).expect("validated");
                            let out = if sys == System::InHbm {
                                norm.clone()
                            } else {
                                self.one_run(sys, sub, policy, placement, None, sys == System::GmuxExact && self.systems.iter().any(|x| x == "ideal"))?
                            };
                            let r = self.row(s, variant(self, policy, placement), Some(sub), &out, &base);
                            if sys == System::GmuxExact {
                                exact = Some(out);
                            }
                            r
                        };
                        rows.push(row);
                        tick(&rows, format!("{s} {} @ {sub}%", variant(self, policy, placement)));
                    }
                }
            }
        }
        for a in &self.alone {
            let out = self.one_run(System::GmuxExact, 100.0, self.policies[0], self.placements[0], Some(a), false)?;
            let mut row = self.row("gmux-exact", "alone".into(), None, &out, &[]);
            row.throughput_norm = None;
            rows.push(row);
            tick(&rows, format!("{a} alone"));
        }
        Ok(Report { scenario: name.into(), description: self.description.clone(), results: rows })
    }

    fn row(&self, system: &str, variant: String, sub: Option<f64>, out: &Outcome, base: &[f64]) -> Row {
        let mut row = blank(system, &variant, sub, out.elapsed_ns);
        row.modelled = matches!(system, "um" | "xsched-um");
        row.throughput_norm = norm(out.tenants.iter().map(|t| t.tasks as f64 / out.elapsed_ns), base);
        row.bytes_h2d = out.bytes_h2d;
        row.bytes_d2h = out.bytes_d2h;
        row.bytes_disk_read = out.bytes_disk_read;
        row.bytes_disk_write = out.bytes_disk_write;
        row.faults = row.modelled.then_some(out.faults);
        row.violations = out.violations;
        let lc: Vec<f64> = out.tenants.iter().filter(|t| t.latency_critical).flat_map(|t| t.latencies_ns.iter().copied()).collect();
        (row.p50_ms, row.p99_ms) = percentiles(lc);
        let be: Vec<_> = out.tenants.iter().filter(|t| !t.latency_critical).collect();
        if out.tenants.iter().any(|t| t.latency_critical) && !be.is_empty() {
            row.be_tasks_per_s = Some(be.iter().map(|t| t.tasks as f64).sum::<f64>() / (out.elapsed_ns / 1e9));
        }
        row
    }

    fn ideal_row(&self, exact: &Outcome, base: &[f64], sub: f64) -> Row {
        let cap = (self.gpu.map_or(u64::MAX, |g| g.0) / CHUNK_BYTES) as usize;
        let v = ideal::opt_volume(&exact.accesses, cap);
        let (h2d, d2h) = (v.populated * CHUNK_BYTES, v.evicted * CHUNK_BYTES);
        let time = exact.compute_ns + self.device.duplex_ns(h2d, d2h);
        let mut row = blank("ideal", "", Some(sub), time);
        row.modelled = true;
        row.throughput_norm = norm(exact.tenants.iter().map(|t| t.tasks as f64 / time), base);
        row.bytes_h2d = h2d;
        row.bytes_d2h = d2h;
        row
    }
}

fn variant(f: &ScenarioFile, policy: Policy, placement: PlacementKind) -> String {
    let mut parts = Vec::new();
    if f.policies.len() > 1 {
        parts.push(match policy {
            Policy::RoundRobin => "rr",
            Policy::Priority => "priority",
            Policy::Share => "share",
        });
    }
    if f.placements.len() > 1 {
        parts.push(match placement {
            PlacementKind::TierOrder => "tier-order",
            PlacementKind::Random => "random",
            PlacementKind::Reuse => "reuse",
            PlacementKind::TwoTier => "two-tier",
        });
    }
    parts.join("/")
}

fn blank(system: &str, variant: &str, sub: Option<f64>, elapsed_ns: f64) -> Row {
    Row::new(system, variant, sub, elapsed_ns / 1e9)
}

/// Mean over tenants of rate / in-HBM rate, skipping tenants that made no progress in-HBM.
fn norm(rates: impl Iterator<Item = f64>, base: &[f64]) -> Option<f64> {
    let pairs: Vec<f64> = rates.zip(base).filter(|(_, b)| **b > 0.0).map(|(r, b)| r / b).collect();
    (!pairs.is_empty()).then(|| pairs.iter().sum::<f64>() / pairs.len() as f64)
}

/// P50 and P99 in ms (nearest rank).
pub fn percentiles(mut ns: Vec<f64>) -> (Option<f64>, Option<f64>) {
    if ns.is_empty() {
        return (None, None);
    }
    ns.sort_by(f64::total_cmp);
    let at = |p: f64| ns[((p * ns.len() as f64).ceil() as usize).clamp(1, ns.len()) - 1] / 1e6;
    (Some(at(0.50)), Some(at(0.99)))
}
