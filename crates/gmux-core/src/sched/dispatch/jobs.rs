//! The jobs one process's application marks (a serving request each): which run now,
//! and how long each kind took. What the application sends is untrusted: a job begun
//! twice, one never begun, or more than the table holds is refused and counted, and
//! the table never grows past its bounds.

use super::{JobView, MAX_KINDS};
use crate::size::Nanos;
use crate::tenant::TenantId;
use std::collections::HashMap;

/// How long a job of no estimate counts as: after every job that has one. So does a
/// job that has been let run twice its estimate: it is not what it was thought to be.
pub const UNKNOWN_NS: Nanos = 3_600_000_000_000;

/// Most jobs of one process running at once.
pub const MAX_RUNNING: usize = 1024;

/// What the jobs of one kind took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobKind {
    /// The name the application gave.
    pub name: String,
    /// Jobs ended.
    pub done: u64,
    /// Their time from begin to end, less the time their process was held, added up.
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
    /// The time its process was let release commands while it ran.
    served: Nanos,
    /// A scheduling program's `admission` let it run (or gmux did, past its bounds).
    admitted: bool,
}

/// A running job that no `admission` program has let run yet ([`Jobs::unadmitted`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unadmitted<'a> {
    /// Its number.
    pub job: u64,
    /// Its kind's name.
    pub kind: &'a str,
    /// Its kind's estimated length (0: none).
    pub estimate: Nanos,
    /// When it began.
    pub began: Nanos,
}

/// One process's jobs.
#[derive(Debug, Default)]
pub struct Jobs {
    running: HashMap<u64, Running>,
    kinds: Vec<JobKind>,
    by_name: HashMap<String, usize>,
    refused: u64,
    /// The process is held: its running jobs are not being served.
    held: bool,
    /// Service is counted up to here.
    counted: Nanos,
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
        self.serve_until(now);
        self.running.insert(job, Running { kind, began: now, served: 0, admitted: false });
        Ok(())
    }

    /// Counts the time up to `now` as served to every running job, unless the process
    /// was held.
    pub fn serve_until(&mut self, now: Nanos) {
        let dt = now.saturating_sub(self.counted);
        self.counted = self.counted.max(now);
        if !self.held {
            self.running.values_mut().for_each(|r| r.served = r.served.saturating_add(dt));
        }
    }

    /// From `now` on, the process is held (`true`) or let release commands.
    pub fn set_held(&mut self, held: bool, now: Nanos) {
        self.serve_until(now);
        self.held = held;
    }

    /// Whether the process is held now.
    pub fn held(&self) -> bool {
        self.held
    }

    /// The estimated length of a job of kind `kind`: the kind's mean time so far, else
    /// the application's estimate (0: none).
    /// At most [`UNKNOWN_NS`]: an application's estimate is untrusted.
    fn estimate(&self, kind: usize) -> Nanos {
        let k = &self.kinds[kind];
        k.total_ns.checked_div(k.done).unwrap_or(k.expected_ns).min(UNKNOWN_NS)
    }

    /// The running jobs as a release policy sees them, as client `client`, with what
    /// they have left by the service counted so far ([`Jobs::serve_until`]). A job of no
    /// estimate, or served twice its estimate, counts as [`UNKNOWN_NS`] long, all left.
    pub fn views(&self, client: TenantId) -> impl Iterator<Item = JobView> + '_ {
        self.running.iter().map(move |(&job, r)| {
            let total = self.estimate(r.kind);
            let (total, remaining) =
                if total == 0 || r.served > total.saturating_mul(2) { (UNKNOWN_NS, UNKNOWN_NS) } else { (total, total.saturating_sub(r.served)) };
            JobView { job, client, arrival: r.began, remaining, total }
        })
    }

    /// The estimated length of this process's shortest running job, by its kind alone
    /// (however long it has run; [`UNKNOWN_NS`] for a kind of no estimate): a job slowed
    /// by others is no longer for it. `None`: none runs.
    pub fn shortest_size(&self) -> Option<Nanos> {
        self.running.values().map(|r| Some(self.estimate(r.kind)).filter(|e| *e > 0).unwrap_or(UNKNOWN_NS)).min()
    }

    /// The estimated length of this process's shortest kind of job (`None`: no kind has one).
    pub fn typical(&self) -> Option<Nanos> {
        (0..self.kinds.len()).map(|k| self.estimate(k)).filter(|e| *e > 0).min()
    }

    /// Job `job` ends at `now`: returns how long it ran, less the time its process was
    /// held (a job's length must not grow with the holds of others: a job held for
    /// being long would look longer, and be held longer still).
    pub fn end(&mut self, job: u64, now: Nanos) -> Result<Nanos, JobRefused> {
        if !self.running.contains_key(&job) {
            self.refused += 1;
            return Err(JobRefused::Unknown(job));
        }
        self.serve_until(now);
        let r = self.running.remove(&job).expect("running");
        let took = r.served;
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

    /// The running jobs not admitted yet, oldest first (then by number).
    pub fn unadmitted(&self) -> Vec<Unadmitted<'_>> {
        let mut v: Vec<Unadmitted<'_>> = self
            .running
            .iter()
            .filter(|(_, r)| !r.admitted)
            .map(|(&job, r)| Unadmitted { job, kind: &self.kinds[r.kind].name, estimate: self.estimate(r.kind), began: r.began })
            .collect();
        v.sort_by_key(|u| (u.began, u.job));
        v
    }

    /// Job `job` is admitted: it is not asked about again. A job not running is ignored.
    pub fn admit(&mut self, job: u64) {
        if let Some(r) = self.running.get_mut(&job) {
            r.admitted = true;
        }
    }

    /// Running jobs that were admitted.
    pub fn admitted(&self) -> usize {
        self.running.values().filter(|r| r.admitted).count()
    }

    /// The estimated length of the shortest admitted running job, by its kind. A job of
    /// no estimate, or served past twice its estimate ([`Jobs::serve_until`]), counts as
    /// [`UNKNOWN_NS`]: a job that claims to be tiny and never ends does not stay the
    /// shortest. `None`: none runs.
    pub fn shortest_admitted(&self) -> Option<Nanos> {
        let size = |r: &Running| Some(self.estimate(r.kind)).filter(|e| *e > 0 && r.served <= e.saturating_mul(2)).unwrap_or(UNKNOWN_NS);
        self.running.values().filter(|r| r.admitted).map(size).min()
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
            let estimate = self.estimate(r.kind);
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
    fn the_time_a_process_was_held_does_not_count_in_its_jobs_lengths() {
        let mut j = Jobs::default();
        j.begin(1, "long", 0, 0).unwrap();
        j.set_held(true, 10);
        j.begin(2, "long", 0, 50).unwrap();
        j.set_held(false, 90);
        assert_eq!(j.end(1, 100), Ok(20), "run 0..10 and 90..100");
        assert_eq!(j.end(2, 130), Ok(40), "begun while held: run 90..130");
        assert_eq!((j.kinds()[0].total_ns, j.kinds()[0].max_ns), (60, 40));
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
