//! How well a process's forecast of its next slice matches what the slice then uses, on
//! a recorded trace. The commands run through gmux-runtime's own memory (the shim's
//! code), and at regular points the allocations it would fill by
//! ([`TenantMemory::next_slice`], also the report's `want`) and the history's forecast
//! alone ([`TenantMemory::forecast_slice`]) are compared with the allocations the next
//! `horizon` commands use. As in the simulator, a command's signature is made of its
//! allocations alone (the shim also keys it by the kernel, which a trace does not name).

use crate::device::SimDevice;
use crate::gmuxd::{working_set, SETTINGS};
use crate::model::DeviceModel;
use crate::trace::TenantTrace;
use gmux_core::AllocId;
use gmux_runtime::{TenantMemory, WorkingSet};
use serde::Serialize;
use std::collections::HashSet;

/// A slice's forecast below this share of the bytes the slice uses counts as short.
pub const SHORT: f64 = 0.9;

/// How one forecast fared over a trace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Fit {
    /// Mean share of the bytes each slice used that the forecast held.
    pub covered: f64,
    /// Points where it held less than [`SHORT`] of them.
    pub short: usize,
    /// The smallest share at any point.
    pub worst: f64,
    /// Mean bytes forecast that the slice did not use, as a share of what it used.
    pub excess: f64,
}

/// Forecasts against use over one trace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Coverage {
    /// Commands in the trace.
    pub commands: usize,
    /// Points compared.
    pub points: usize,
    /// Mean bytes a slice used.
    pub used_bytes: f64,
    /// What the process fills by and reports: the forecast, floored by its last slice.
    pub filled: Fit,
    /// The history's forecast alone.
    pub history: Fit,
}

/// Runs `trace` and compares, every `every` commands once `horizon` have run, the next
/// slice's forecast over `horizon` commands with what those commands use.
pub fn coverage(trace: &TenantTrace, horizon: usize, every: usize) -> Result<Coverage, String> {
    if horizon == 0 || every == 0 {
        return Err("the horizon and the distance between points must be at least one command".into());
    }
    if trace.allocs.iter().try_fold(0u64, |s, a| s.checked_add(a.bytes)).is_none_or(|s| s > u64::MAX / 4) {
        return Err("the trace's allocations add up to more than any device holds; check the trace".into());
    }
    let mut mem = TenantMemory::new(SimDevice::new(DeviceModel::default()), u64::MAX / 2, SETTINGS);
    let allocs: Vec<AllocId> = trace
        .allocs
        .iter()
        .enumerate()
        .map(|(i, a)| mem.allocate(a.bytes).map_err(|e| format!("allocation {i} of {} bytes: {e:?}", a.bytes)))
        .collect::<Result<_, _>>()?;
    let sizes: Vec<u64> = trace.allocs.iter().map(|a| a.bytes).collect();
    let bytes = |set: &HashSet<AllocId>| set.iter().map(|a| sizes[a.0 as usize]).sum::<u64>();
    let sets: Vec<WorkingSet> = trace.cmds.iter().map(|c| working_set(c, &allocs)).collect();
    mem.slot_ended(horizon as u64);
    let mut out = Coverage { commands: sets.len(), ..Coverage::default() };
    let (mut filled, mut history) = (Tally::default(), Tally::default());
    for (i, ws) in sets.iter().enumerate() {
        let sig = mem.signature(0, ws);
        mem.released(ws, sig);
        if i + 1 < horizon || (i + 1) % every != 0 || i + horizon >= sets.len() {
            continue;
        }
        let used: HashSet<AllocId> = sets[i + 1..=i + horizon].iter().flat_map(|w| mem.allocs_in(w).into_owned()).collect();
        let used_bytes = bytes(&used);
        if used_bytes == 0 {
            continue;
        }
        out.points += 1;
        out.used_bytes += used_bytes as f64;
        for (tally, forecast) in [(&mut filled, mem.next_slice()), (&mut history, mem.forecast_slice())] {
            let forecast: HashSet<AllocId> = forecast.into_iter().collect();
            tally.add(bytes(&forecast.intersection(&used).copied().collect()), bytes(&forecast.difference(&used).copied().collect()), used_bytes);
        }
    }
    if out.points == 0 {
        return Err(format!("a trace of {} commands has no point to compare at with a horizon of {horizon}; record a longer run", sets.len()));
    }
    out.used_bytes /= out.points as f64;
    out.filled = filled.fit(out.points);
    out.history = history.fit(out.points);
    Ok(out)
}

/// Sums over the points of one forecast.
#[derive(Default)]
struct Tally {
    covered: f64,
    excess: f64,
    short: usize,
    worst: Option<f64>,
}

impl Tally {
    fn add(&mut self, held: u64, extra: u64, used: u64) {
        let share = held as f64 / used as f64;
        self.covered += share;
        self.excess += extra as f64 / used as f64;
        self.short += usize::from(share < SHORT);
        self.worst = Some(self.worst.map_or(share, |w| w.min(share)));
    }

    fn fit(&self, points: usize) -> Fit {
        Fit { covered: self.covered / points as f64, short: self.short, worst: self.worst.unwrap_or(0.0), excess: self.excess / points as f64 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{Access, AllocSpec, Command};

    fn cmd(alloc: usize) -> Command {
        Command { duration_ns: 1e3, ws: vec![Access { alloc, offset: 0, len: 1, write: false }], task_end: false, arrival_ns: None }
    }

    /// A loop over four 4 MiB layers, interrupted every 40 commands by five runs of one
    /// 2 MiB command (a `generate` call's first step): there the history forecasts that
    /// command and nothing else; the floor keeps the layers.
    #[test]
    fn the_floor_holds_what_a_new_phase_leaves_out() {
        let mb = 1u64 << 20;
        let allocs = vec![AllocSpec { bytes: 4 * mb, on_disk: false }; 4].into_iter().chain([AllocSpec { bytes: 2 * mb, on_disk: false }]).collect();
        let mut cmds = Vec::new();
        for _ in 0..20 {
            cmds.extend((0..40).map(|k| cmd(k % 4)));
            cmds.extend((0..5).map(|_| cmd(4)));
        }
        let trace = TenantTrace { allocs, cmds, window: None };
        let c = coverage(&trace, 8, 1).expect("points");
        assert_eq!(c.commands, 900);
        assert_eq!(c.history.worst, 0.0, "in the new phase the history forecasts its command alone: {c:?}");
        assert!(c.filled.worst >= 0.75, "the floor keeps at least three of the four layers: {c:?}");
        assert!(c.filled.covered > c.history.covered + 0.1 && 2 * c.filled.short < c.history.short, "{c:?}");
        assert!(c.filled.excess < 0.1, "and claims little it does not use: {c:?}");
    }

    #[test]
    fn a_trace_shorter_than_the_horizon_says_so() {
        let trace = TenantTrace { allocs: vec![AllocSpec { bytes: 1 << 21, on_disk: false }], cmds: vec![cmd(0); 10], window: None };
        let e = coverage(&trace, 50, 1).unwrap_err();
        assert!(e.contains("no point to compare") && e.contains("10 commands"), "{e}");
    }
}
