//! Admission of marked jobs by a scheduling program (the `admission` hook), within
//! gmux's bounds.
//!
//! At each of the dispatcher's decisions every running job not yet admitted is asked
//! about, oldest first. A job the program admits runs, and is not asked about again. A
//! process whose running jobs all wait is held: it releases no new command. The program
//! advises; gmux keeps the final say:
//! - a job waits at most [`ADMISSION_WAIT_MAX`], then is admitted;
//! - admission never holds every job: while a process that the release policy lets run
//!   has a running job, at least one such process is not held for admission (the oldest
//!   waiting job is admitted where none would run);
//! - at most [`MAX_ASKS`] questions a decision, and [`MAX_ASKS_EACH`] about one
//!   process's jobs, its oldest first, so that the jobs tenants mark bound the
//!   dispatcher's time and one process's jobs do not crowd out the others'.

use super::Jobs;
use crate::hooks::{short_name, JobAsk};
use crate::size::Nanos;
use crate::tenant::TenantId;

/// The longest a job waits for admission: then it is admitted, whatever the program says.
pub const ADMISSION_WAIT_MAX: Nanos = 1_000_000_000;

/// Most questions to the program in one decision; the jobs not asked wait for the next.
pub const MAX_ASKS: usize = 256;

/// Most questions about one process's jobs in one decision.
pub const MAX_ASKS_EACH: usize = 16;

/// One process as admission sees it.
pub struct Candidate<'a> {
    /// Its tenant.
    pub tenant: TenantId,
    /// Its pid.
    pub pid: u32,
    /// The jobs it marks.
    pub jobs: &'a mut Jobs,
    /// Whether the release policy lets it run now.
    pub free: bool,
}

/// Asks `ask` about every job of `procs` not yet admitted at `now`; returns whether each
/// process is held for admission.
pub fn admit(procs: &mut [Candidate<'_>], now: Nanos, ask: &mut dyn FnMut(&JobAsk) -> bool) -> Vec<bool> {
    let running = procs.iter().map(|p| p.jobs.running() as u32).fold(0, u32::saturating_add);
    let mut admitted = procs.iter().map(|p| p.jobs.admitted() as u32).fold(0, u32::saturating_add);
    let mut shortest = procs.iter().filter_map(|p| p.jobs.shortest_admitted()).min().unwrap_or(u64::MAX);
    let mut asks_left = MAX_ASKS;
    for p in procs.iter_mut() {
        let asks: Vec<JobAsk> = p
            .jobs
            .unadmitted()
            .iter()
            .map(|u| JobAsk {
                tenant: p.tenant,
                pid: p.pid,
                job: u.job,
                kind: short_name(u.kind),
                estimate: u.estimate,
                waited: now.saturating_sub(u.began),
                running,
                admitted,
                shortest,
            })
            .collect();
        let mut asks_here = MAX_ASKS_EACH;
        for mut a in asks {
            (a.admitted, a.shortest) = (admitted, shortest);
            let let_run = if a.waited >= ADMISSION_WAIT_MAX {
                true
            } else if asks_left == 0 || asks_here == 0 {
                false
            } else {
                asks_left -= 1;
                asks_here -= 1;
                ask(&a)
            };
            if let_run {
                p.jobs.admit(a.job);
                admitted += 1;
                shortest = shortest.min(if a.estimate > 0 { a.estimate } else { super::UNKNOWN_NS });
            }
        }
    }
    let waits = |p: &Candidate<'_>| p.jobs.running() > 0 && p.jobs.admitted() == 0;
    let runs = |p: &Candidate<'_>| p.free && p.jobs.running() > 0 && !waits(p);
    if !procs.iter().any(runs) {
        // The oldest waiting job among the processes the release policy lets run.
        let oldest =
            procs.iter().enumerate().filter(|(_, p)| p.free && waits(p)).filter_map(|(i, p)| p.jobs.unadmitted().first().map(|u| (u.began, i, u.job))).min();
        if let Some((_, i, job)) = oldest {
            procs[i].jobs.admit(job);
        }
    }
    procs.iter().map(waits).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: Nanos = 1_000_000;

    /// Two processes with a job each, the first (`rt`) begun at 0, the second (`batch`)
    /// at 1 ms; `free` says which the release policy lets run.
    fn two() -> (Jobs, Jobs) {
        let (mut a, mut b) = (Jobs::default(), Jobs::default());
        a.begin(1, "rt", 2 * MS, 0).unwrap();
        b.begin(7, "batch", 50 * MS, MS).unwrap();
        (a, b)
    }

    fn decide(a: &mut Jobs, b: &mut Jobs, free: [bool; 2], now: Nanos, ask: &mut dyn FnMut(&JobAsk) -> bool) -> Vec<bool> {
        let mut procs =
            [Candidate { tenant: TenantId(0), pid: 10, jobs: a, free: free[0] }, Candidate { tenant: TenantId(1), pid: 20, jobs: b, free: free[1] }];
        admit(&mut procs, now, ask)
    }

    #[test]
    fn a_program_holds_the_jobs_it_does_not_admit_and_is_not_asked_twice() {
        let (mut a, mut b) = two();
        let mut asked = Vec::new();
        let mut rt_first = |j: &JobAsk| {
            asked.push((j.pid, j.job, j.waited / MS, j.running, j.admitted, j.estimate / MS, j.shortest / MS));
            &j.kind[..3] == b"rt\0"
        };
        assert_eq!(decide(&mut a, &mut b, [true, true], 3 * MS, &mut rt_first), [false, true]);
        assert_eq!(decide(&mut a, &mut b, [true, true], 4 * MS, &mut rt_first), [false, true]);
        let none = u64::MAX / MS;
        assert_eq!(asked, [(10, 1, 3, 2, 0, 2, none), (20, 7, 2, 2, 1, 50, 2), (20, 7, 3, 2, 1, 50, 2)], "rt asked once; batch at each decision");
        a.end(1, 5 * MS).unwrap();
        // rt ended: batch is all that runs, and runs whatever the program says.
        assert_eq!(decide(&mut a, &mut b, [true, true], 5 * MS, &mut |_| false), [false, false]);
    }

    #[test]
    fn a_job_waits_at_most_the_bound() {
        let (mut a, mut b) = two();
        assert_eq!(decide(&mut a, &mut b, [true, true], 2 * MS, &mut |j| j.pid == 10), [false, true]);
        assert_eq!(decide(&mut a, &mut b, [true, true], MS + ADMISSION_WAIT_MAX - 1, &mut |_| false), [false, true]);
        assert_eq!(decide(&mut a, &mut b, [true, true], MS + ADMISSION_WAIT_MAX, &mut |_| false), [false, false]);
    }

    #[test]
    fn the_gpu_never_idles_for_admission() {
        // Refusing everyone admits the oldest job of a process the release policy lets run.
        let (mut a, mut b) = two();
        assert_eq!(decide(&mut a, &mut b, [true, true], 2 * MS, &mut |_| false), [false, true]);
        let (mut a, mut b) = two();
        assert_eq!(decide(&mut a, &mut b, [false, true], 2 * MS, &mut |_| false), [true, false], "rt is held by the release policy");
        // An admitted job of a held process does not count as running.
        let (mut a, mut b) = two();
        a.admit(1);
        assert_eq!(decide(&mut a, &mut b, [false, true], 2 * MS, &mut |_| false), [false, false]);
    }

    #[test]
    fn a_decision_asks_at_most_the_bounds_and_the_rest_next_time() {
        let mut jobs: Vec<Jobs> = (0..20).map(|_| Jobs::default()).collect();
        for (p, j) in jobs.iter_mut().enumerate() {
            for n in 0..30 {
                j.begin(n, "k", MS, p as u64 * 100 + n).unwrap();
            }
        }
        let mut procs: Vec<Candidate<'_>> =
            jobs.iter_mut().enumerate().map(|(i, jobs)| Candidate { tenant: TenantId(i as u32), pid: i as u32, jobs, free: true }).collect();
        let mut asked = Vec::new();
        admit(&mut procs, 2 * MS, &mut |j| {
            asked.push((j.pid, j.job));
            false
        });
        assert_eq!(asked.len(), MAX_ASKS);
        let first: Vec<(u32, u64)> = asked.iter().copied().filter(|(p, _)| *p == 0).collect();
        assert_eq!(first, (0..MAX_ASKS_EACH as u64).map(|j| (0, j)).collect::<Vec<_>>(), "each process's oldest, at most 16");
        // Past the bound, every job runs, asked or not.
        asked.clear();
        admit(&mut procs, ADMISSION_WAIT_MAX + 2 * MS, &mut |j| {
            asked.push((j.pid, j.job));
            false
        });
        assert!(asked.is_empty());
        assert!(procs.iter().all(|p| p.jobs.unadmitted().is_empty()));
    }

    /// A job that claims to be tiny and never ends stops being the shortest once it ran
    /// past twice its claim; a claim past [`super::super::UNKNOWN_NS`] counts as that.
    #[test]
    fn a_tiny_claim_that_never_ends_stops_holding_others() {
        let (mut liar, mut other) = (Jobs::default(), Jobs::default());
        liar.begin(1, "tiny", 1, 0).unwrap();
        liar.admit(1);
        other.begin(1, "k", u64::MAX, 0).unwrap();
        let mut seen = Vec::new();
        let mut ask = |j: &JobAsk| {
            seen.push((j.shortest, j.estimate));
            false
        };
        liar.serve_until(2);
        decide(&mut liar, &mut other, [true, true], 2, &mut ask);
        liar.serve_until(3);
        decide(&mut liar, &mut other, [true, true], 3, &mut ask);
        let unknown = super::super::UNKNOWN_NS;
        assert_eq!(seen, [(1, unknown), (unknown, unknown)]);
    }

    proptest! {
        /// Whatever the program answers: a process with an admitted job is never held for
        /// admission, and while a free process has a running job, one free process with
        /// a running job is not held.
        #[test]
        fn admission_is_work_conserving(jobs in prop::collection::vec((0usize..4, 0u64..5_000), 1..12), free in prop::collection::vec(any::<bool>(), 4), answers in prop::collection::vec(any::<bool>(), 12), now in 0u64..6_000) {
            let mut all: Vec<Jobs> = (0..4).map(|_| Jobs::default()).collect();
            for (i, (p, began)) in jobs.iter().enumerate() {
                all[*p].begin(i as u64, "k", 0, began * MS / 1000).unwrap();
            }
            let mut n = 0;
            let mut ask = |_: &JobAsk| { n += 1; answers[(n - 1) % answers.len()] };
            let mut procs: Vec<Candidate<'_>> = all.iter_mut().enumerate().map(|(i, j)| Candidate { tenant: TenantId(i as u32), pid: i as u32, jobs: j, free: free[i] }).collect();
            let held = admit(&mut procs, now * MS / 1000, &mut ask);
            for (p, h) in procs.iter().zip(&held) {
                prop_assert_eq!(*h, p.jobs.running() > 0 && p.jobs.admitted() == 0);
            }
            if procs.iter().any(|p| p.free && p.jobs.running() > 0) {
                prop_assert!(procs.iter().zip(&held).any(|(p, h)| p.free && p.jobs.running() > 0 && !h));
            }
        }
    }
}
