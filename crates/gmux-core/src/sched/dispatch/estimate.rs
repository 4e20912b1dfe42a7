//! Paella's remaining-time estimate (§6), learned online per job kind and kernel.

use crate::size::Nanos;
use std::collections::BTreeMap;

/// Identifies a kernel's code, e.g. a hash of its symbol name (Paella distinguishes
/// kernels by their location in the shared library).
pub type KernelId = u64;

/// A kernel as the estimator tells them apart: its code and its grid. One kernel runs
/// for very different times over different grids (a decoder's attention grows with the
/// sequence), so each grid is timed on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KernelKey {
    /// Which code.
    pub kernel: KernelId,
    /// Its grid, in blocks (x, y, z).
    pub grid: [u32; 3],
}

impl KernelKey {
    /// Kernel `kernel` over a one-block grid: for callers that know no grid.
    pub fn code(kernel: KernelId) -> KernelKey {
        KernelKey { kernel, grid: [1, 1, 1] }
    }
}

/// What one kernel did in one finished job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelRecord {
    /// Which kernel.
    pub kernel: KernelKey,
    /// How many times it ran in the job.
    pub count: u64,
    /// Total time of those runs.
    pub time: Nanos,
}

/// One kernel's history within a job kind.
#[derive(Debug, Clone, Copy, Default)]
struct Stat {
    /// Runs in finished jobs.
    runs: u64,
    /// Runs whose time was measured, and their total time.
    timed: u64,
    time: Nanos,
}

#[derive(Debug, Clone, Default)]
struct Profile {
    jobs: u64,
    kernels: BTreeMap<KernelKey, Stat>,
}

impl Profile {
    /// Kernel `kernel`'s history, made if there is room for it.
    fn stat(&mut self, kernel: KernelKey) -> Option<&mut Stat> {
        if !self.kernels.contains_key(&kernel) && self.kernels.len() >= MAX_KERNELS {
            return None;
        }
        Some(self.kernels.entry(kernel).or_default())
    }
}

/// Most job kinds one estimator learns: kinds and kernels come from applications, so
/// what they can make it keep is bounded; past the bound, new kinds are not learned.
pub const MAX_KINDS: usize = 256;

/// Most kernels (code and grid) one job kind keeps; past it, new ones are not learned.
pub const MAX_KERNELS: usize = 4096;

/// Paella's remaining-time estimate, learned online per job kind.
///
/// A job kind is a string key (e.g. the model name): jobs of one kind run the same
/// code. For each kind and kernel `k` it keeps `avgCount_k` (runs per finished job,
/// counting 0 for jobs where `k` did not run) and `avgTime_k` (measured time per run,
/// from every run observed, finished job or not), and estimates
/// `remaining = Σ_k max(0, avgCount_k - count_k) * avgTime_k`.
#[derive(Debug, Clone, Default)]
pub struct RemainingEstimator {
    kinds: BTreeMap<String, Profile>,
}

impl RemainingEstimator {
    /// A run of `kernel` in a job of `kind` took `time`, as measured when it completed.
    pub fn observe(&mut self, kind: &str, kernel: KernelKey, time: Nanos) {
        if let Some(stat) = self.profile(kind).and_then(|p| p.stat(kernel)) {
            stat.timed += 1;
            stat.time = stat.time.saturating_add(time);
        }
    }

    /// A job of `kind` finished, having run each kernel `(kernel, count)` times.
    pub fn finish(&mut self, kind: &str, counts: &[(KernelKey, u64)]) {
        let Some(profile) = self.profile(kind) else { return };
        profile.jobs += 1;
        for (kernel, count) in counts {
            if let Some(stat) = profile.stat(*kernel) {
                stat.runs = stat.runs.saturating_add(*count);
            }
        }
    }

    /// A finished job of `kind` with its per-kernel counts and total times: each
    /// kernel's time observed as one run of the total, then the job finished.
    pub fn record(&mut self, kind: &str, kernels: &[KernelRecord]) {
        for k in kernels.iter().filter(|k| k.count > 0) {
            if let Some(stat) = self.profile(kind).and_then(|p| p.stat(k.kernel)) {
                stat.timed = stat.timed.saturating_add(k.count);
                stat.time = stat.time.saturating_add(k.time);
            }
        }
        let counts: Vec<(KernelKey, u64)> = kernels.iter().map(|k| (k.kernel, k.count)).collect();
        self.finish(kind, &counts);
    }

    /// Remaining time of a running job of `kind` whose kernels have run `ran`
    /// `(kernel, count so far)` times; `None` before any job of `kind` finished. A
    /// kernel never timed counts nothing.
    pub fn estimate(&self, kind: &str, ran: &[(KernelKey, u64)]) -> Option<Nanos> {
        let profile = self.kinds.get(kind).filter(|p| p.jobs > 0)?;
        let remaining: f64 = profile
            .kernels
            .iter()
            .filter(|(_, s)| s.runs > 0 && s.timed > 0)
            .map(|(kernel, s)| {
                let avg_count = s.runs as f64 / profile.jobs as f64;
                let avg_time = s.time as f64 / s.timed as f64;
                let done: u64 = ran.iter().filter(|(k, _)| k == kernel).map(|(_, c)| c).sum();
                (avg_count - done as f64).max(0.0) * avg_time
            })
            .sum();
        Some(remaining.round() as Nanos)
    }

    /// Estimated time of a whole job of `kind` (what remains before its first kernel).
    pub fn total(&self, kind: &str) -> Option<Nanos> {
        self.estimate(kind, &[])
    }

    /// Kind `kind`'s profile, made if there is room for it.
    fn profile(&mut self, kind: &str) -> Option<&mut Profile> {
        if !self.kinds.contains_key(kind) && self.kinds.len() < MAX_KINDS {
            self.kinds.insert(kind.to_string(), Profile::default());
        }
        self.kinds.get_mut(kind)
    }
}
