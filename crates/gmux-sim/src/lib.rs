//! gmux-sim: a discrete-event model of one GPU, its workloads, and the systems gmux is
//! compared against. The policies under test are gmux-core's own, unchanged.

pub mod device;
pub mod dispatch;
pub mod engine;
pub mod forecast;
mod gmuxd;
pub mod ideal;
pub mod lanes;
pub mod model;
pub mod release;
pub mod report;
pub mod scenario;
pub mod trace;
pub mod workload;

pub use report::{Progress, Report, Row};

use std::path::Path;

/// A failure to load or run a scenario; the message names the cause and the fix.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The scenario file could not be read.
    #[error("cannot read scenario {path}: {source}; check the path (scenarios live in scenarios/)")]
    Read { path: String, source: std::io::Error },
    /// The scenario file is not valid.
    #[error("invalid scenario {path}: {msg}")]
    Invalid { path: String, msg: String },
    /// A run could not go on.
    #[error("scenario {name} failed: {msg}")]
    Run { name: String, msg: String },
}

/// A parsed, validated scenario file.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Name (file stem unless given).
    pub name: String,
    /// Its contents.
    pub file: scenario::ScenarioFile,
}

/// Reads and validates a scenario file.
pub fn load_scenario(path: &Path) -> Result<Scenario, SimError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| SimError::Read { path: shown.clone(), source })?;
    let file: scenario::ScenarioFile = toml::from_str(&text).map_err(|e| SimError::Invalid { path: shown.clone(), msg: e.to_string().replace('\n', " ") })?;
    file.validate().map_err(|msg| SimError::Invalid { path: shown.clone(), msg })?;
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    Ok(Scenario { name: file.name.clone().unwrap_or(stem), file })
}

/// Runs every row of a scenario, calling `progress` after each.
pub fn run(scenario: &Scenario, progress: &mut dyn FnMut(&Progress)) -> Result<Report, SimError> {
    scenario.file.run(&scenario.name, progress).map_err(|msg| SimError::Run { name: scenario.name.clone(), msg })
}
