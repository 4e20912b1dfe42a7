//! Results of a scenario run, as printed and as written to JSON.

use serde::{Deserialize, Serialize};

/// One measured configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// System name: `in-hbm`, `um`, `xsched-um`, `gmux-alloc`, `gmux-exact`, `ideal`.
    pub system: String,
    /// What else distinguishes this row: a policy (`rr`, `priority`, `fifo`, `srpt-deficit`,
    /// `alone`) or a placement (`tier-order`, `random`, `reuse`, `two-tier`); empty if none.
    pub variant: String,
    /// True for baselines that are models, not implementations (`um`, `xsched-um`, `ideal`).
    pub modelled: bool,
    /// Total footprint over the GPU-memory budget, in percent; `None` where not swept.
    pub subscription: Option<f64>,
    /// Mean per-tenant throughput over the same tenant's in-HBM throughput.
    pub throughput_norm: Option<f64>,
    /// Bytes copied host → device (disk reads that go on to the GPU included).
    pub bytes_h2d: u64,
    /// Bytes copied device → host.
    pub bytes_d2h: u64,
    /// Bytes read from the disk tier.
    pub bytes_disk_read: u64,
    /// Bytes written to the disk tier.
    pub bytes_disk_write: u64,
    /// Demand page faults (the `um` models only).
    pub faults: Option<u64>,
    /// Median request latency of the latency-critical tenants.
    pub p50_ms: Option<f64>,
    /// 99th-percentile request latency of the latency-critical tenants.
    pub p99_ms: Option<f64>,
    /// Best-effort throughput in tasks per simulated second, where the scenario has one.
    pub be_tasks_per_s: Option<f64>,
    /// Simulated seconds covered.
    pub sim_seconds: f64,
    /// Residency-invariant violations seen (must be 0).
    pub violations: u64,
}

impl Row {
    /// A row with every measurement empty.
    pub fn new(system: &str, variant: &str, subscription: Option<f64>, sim_seconds: f64) -> Row {
        Row {
            system: system.into(),
            variant: variant.into(),
            modelled: false,
            subscription,
            throughput_norm: None,
            bytes_h2d: 0,
            bytes_d2h: 0,
            bytes_disk_read: 0,
            bytes_disk_write: 0,
            faults: None,
            p50_ms: None,
            p99_ms: None,
            be_tasks_per_s: None,
            sim_seconds,
            violations: 0,
        }
    }
}

/// A whole scenario's results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// What the scenario measures, one line.
    pub description: String,
    /// One row per (system, variant, subscription).
    pub results: Vec<Row>,
}

/// Progress of a running scenario, reported after each finished row.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// Rows finished.
    pub done: usize,
    /// Rows in all.
    pub total: usize,
    /// Label of the row just finished.
    pub label: String,
}
