//! The jobs one process's application marks (a serving request each): which run now,
//! and how long each kind took. What the application sends is untrusted: a job begun
//! twice, one never begun, or more than the table holds is refused and counted, and
//! the table never grows past its bounds.

use super::MAX_KINDS;
use crate::size::Nanos;
use std::collections::HashMap;

/// Most jobs of one process running at once.
pub const MAX_RUNNING: usize = 1024;

/// What the jobs of one kind took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobKind {
    /// The name the application gave.
    pub name: String,
    /// Jobs ended.
    pub done: u64,
    /// Their time from begin to end, added up.
    pub total_ns: Nanos,
    /// The longest.
    pub max_ns: Nanos,
    /// The newest estimate the application gave (0: none).
    pub expected_ns: Nanos,
}

/// Why a mark was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobRefused {
    /// A job of this number runs already.
    Duplicate(u64),
    /// No job of this number runs.
    Unknown(u64),
    /// [`MAX_RUNNING`] jobs run already.
    TooMany,
    /// [`MAX_KINDS`] kinds are known already, and this name is new.
    TooManyKinds,
}

impl std::fmt::Display for JobRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobRefused::Duplicate(j) => write!(f, "job {j} began twice"),
            JobRefused::Unknown(j) => write!(f, "job {j} ended but never began"),
            JobRefused::TooMany => write!(f, "more than {MAX_RUNNING} jobs at once"),
            JobRefused::TooManyKinds => write!(f, "more than {MAX_KINDS} job names"),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Running {
    kind: usize,
    began: Nanos,
}

/// One process's jobs.
#[derive(Debug, Default)]
pub struct Jobs {
    running: HashMap<u64, Running>,
    kinds: Vec<JobKind>,
    by_name: HashMap<String, usize>,
    refused: u64,
}

impl Jobs {
    /// Job `job` of kind `name` begins at `now`; the application expects `expected_ns`.
    pub fn begin(&mut self, job: u64, name: &str, expected_ns: Nanos, now: Nanos) -> Result<(), JobRefused> {
        let r = self.try_begin(job, name, expected_ns, now);
        self.refused += u64::from(r.is_err());
        r
    }

    fn try_begin(&mut self, job: u64, name: &str, expected_ns: Nanos, now: Nanos) -> Result<(), JobRefused> {
        if self.running.contains_key(&job) {
            return Err(JobRefused::Duplicate(job));
        }
        if self.running.len() >= MAX_RUNNING {
            return Err(JobRefused::TooMany);
        }
        let kind = match self.by_name.get(name) {
            Some(k) => *k,
            None if self.kinds.len() >= MAX_KINDS => return Err(JobRefused::TooManyKinds),
            None => {
                self.kinds.push(JobKind { name: name.to_string(), done: 0, total_ns: 0, max_ns: 0, expected_ns: 0 });
                self.by_name.insert(name.to_string(), self.kinds.len() - 1);
                self.kinds.len() - 1
            }
        };
        if expected_ns > 0 {
            self.kinds[kind].expected_ns = expected_ns;
        }
        self.running.insert(job, Running { kind, began: now });
        Ok(())
    }

    /// Job `job` ends at `now`: returns how long it ran.
    pub fn end(&mut self, job: u64, now: Nanos) -> Result<Nanos, JobRefused> {
        let Some(r) = self.running.remove(&job) else {
            self.refused += 1;
            return Err(JobRefused::Unknown(job));
        };
        let took = now.saturating_sub(r.began);
        let k = &mut self.kinds[r.kind];
        k.done += 1;
        k.total_ns = k.total_ns.saturating_add(took);
        k.max_ns = k.max_ns.max(took);
        Ok(took)
    }

    /// Jobs running now.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Every kind seen, in the order first seen.
    pub fn kinds(&self) -> &[JobKind] {
        &self.kinds
    }

    /// Marks refused so far.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// How long the running jobs are, by estimate: a kind's mean time so far, else the
    /// application's estimate. A job running past twice its estimate at `now` has none:
    /// it is not what it was thought to be.
    pub fn sizes(&self, now: Nanos) -> JobSizes {
        let mut sizes = JobSizes::default();
        for r in self.running.values() {
            let k = &self.kinds[r.kind];
            let estimate = k.total_ns.checked_div(k.done).unwrap_or(k.expected_ns);
            if estimate == 0 || now.saturating_sub(r.began) > estimate.saturating_mul(2) {
                sizes.unknown += 1;
                continue;
            }
            sizes.shortest = Some(sizes.shortest.map_or(estimate, |s: Nanos| s.min(estimate)));
        }
        sizes
    }
}

/// How long one process's running jobs are, by estimate ([`Jobs::sizes`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobSizes {
    /// The estimated length of its shortest running job that has an estimate.
    pub shortest: Option<Nanos>,
    /// Running jobs without an estimate.
    pub unknown: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_are_timed_by_kind_and_bad_marks_are_refused_and_counted() {
        let mut j = Jobs::default();
        j.begin(1, "resnet", 5_000_000, 100).unwrap();
        j.begin(2, "bert", 0, 200).unwrap();
        assert_eq!(j.begin(1, "resnet", 0, 300), Err(JobRefused::Duplicate(1)));
        assert_eq!(j.end(1, 4_100), Ok(4_000));
        assert_eq!(j.end(1, 5_000), Err(JobRefused::Unknown(1)));
        j.begin(1, "resnet", 0, 10_000).unwrap();
        assert_eq!(j.end(1, 16_000), Ok(6_000));
        assert_eq!(j.running(), 1);
        assert_eq!(j.refused(), 2);
        let r = &j.kinds()[0];
        assert_eq!((r.name.as_str(), r.done, r.total_ns, r.max_ns, r.expected_ns), ("resnet", 2, 10_000, 6_000, 5_000_000));
        // A clock that went back (never from the daemon's) takes 0, not a wrapped time.
        j.begin(3, "bert", 0, 50).unwrap();
        assert_eq!(j.end(3, 10), Ok(0));
    }

    #[test]
    fn a_jobs_size_comes_from_its_kinds_mean_else_the_applications_estimate() {
        let mut j = Jobs::default();
        assert_eq!(j.sizes(0), JobSizes::default());
        j.begin(1, "small", 2_000, 0).unwrap();
        j.begin(2, "guess", 0, 0).unwrap();
        assert_eq!(j.sizes(500), JobSizes { shortest: Some(2_000), unknown: 1 });
        // Learned: small jobs take 1,000 on average now, whatever the application said.
        j.end(1, 1_000).unwrap();
        j.begin(3, "small", 2_000, 10_000).unwrap();
        assert_eq!(j.sizes(10_400).shortest, Some(1_000));
        // Past twice its estimate a job has none.
        assert_eq!(j.sizes(12_001), JobSizes { shortest: None, unknown: 2 });
    }

    #[test]
    fn the_table_never_grows_past_its_bounds() {
        let mut j = Jobs::default();
        let names = MAX_KINDS as u64 + 44;
        let refused: Vec<_> = (0..names).filter_map(|i| j.begin(i, &format!("kind-{i}"), 0, i).err()).collect();
        assert_eq!(refused, vec![JobRefused::TooManyKinds; 44]);
        for i in 0..MAX_KINDS as u64 {
            j.end(i, 1_000).unwrap();
        }
        assert_eq!(j.kinds().len(), MAX_KINDS);
        let refused: Vec<_> = (0..MAX_RUNNING as u64 + 10).filter_map(|i| j.begin(names + i, "kind-0", 0, 0).err()).collect();
        assert_eq!(refused, vec![JobRefused::TooMany; 10]);
        assert_eq!(j.running(), MAX_RUNNING);
        assert_eq!(j.refused(), 54);
    }
}
