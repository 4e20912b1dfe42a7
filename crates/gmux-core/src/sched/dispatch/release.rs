//! Which processes may release commands now, by a release policy over the jobs they
//! mark (`gmux daemon --dispatch fifo|sjf|rr|srpt-deficit`).
//!
//! At every decision (a job mark, and a timer tick while a process is held or kept
//! shallow) the policy ([`Dispatcher`]) chooses one running job. Every process whose
//! running jobs are all more than [`SHALLOW_RATIO`] times longer than the chosen job is
//! held: it releases no new command, so that once what it had in flight drains the
//! chosen job does not share the GPU with far longer kernels. Jobs of comparable length
//! run side by side as the driver time-slices them, so the GPU is not left idle while
//! one process prepares its next kernel. When the policy chooses for fairness (a tenant
//! fell behind), the chosen process runs alone until its tenant caught up. A process
//! whose jobs are far longer than another process's usual job keeps a shallow queue
//! ([`SHALLOW`]) while it runs, so that a short job that begins waits for two of its
//! commands, not for all it could have queued.
//!
//! At each decision the clients let run since the last one are charged the
//! milliseconds since, the chosen one first, so that `srpt-deficit`'s fairness counts
//! time. A job's remaining time is its estimate less the time its process was let
//! release commands ([`Jobs::serve_until`]).

use super::{DispatchPolicy, Dispatcher, JobView, Jobs, SHALLOW, SHALLOW_RATIO};
use crate::size::Nanos;
use crate::tenant::TenantId;

/// What a process may release now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Anything: no bound.
    Free,
    /// At most this many commands in flight per stream.
    Shallow(u32),
    /// Nothing new until the next decision lets it.
    Hold,
}

/// One process as the decision sees it: the tenant it is served as, and its jobs.
pub struct Process<'a> {
    /// Its tenant: fairness is between tenants.
    pub client: TenantId,
    /// The jobs it marks.
    pub jobs: &'a mut Jobs,
}

/// The decision made last: when, among which jobs, and whom it let run.
struct Decided {
    at: Nanos,
    ready: Vec<JobView>,
    served: Vec<TenantId>,
}

/// A release policy applied to processes.
pub struct Releaser {
    dispatcher: Box<dyn Dispatcher + Send>,
    last: Option<Decided>,
    /// The last decision ran a tenant that fell behind alone.
    catching_up: bool,
}

impl Releaser {
    /// Applies `policy`.
    pub fn new(policy: DispatchPolicy) -> Releaser {
        Releaser { dispatcher: policy.build(), last: None, catching_up: false }
    }

    /// Whether the last decision ran a tenant that fell behind alone, holding every
    /// other process with a running job.
    pub fn catching_up(&self) -> bool {
        self.catching_up
    }

    /// After the last decision, something else held processes too (a scheduling
    /// program's admission): the tenants for which `runs` is false are not charged as
    /// served until the next decision.
    pub fn served_only(&mut self, runs: impl Fn(TenantId) -> bool) {
        if let Some(d) = self.last.as_mut() {
            d.served.retain(|t| runs(*t));
        }
    }

    /// Tenant `client` has no process left: its fairness state is dropped.
    pub fn forget(&mut self, client: TenantId) {
        self.dispatcher.forget(client);
    }

    /// What each of `procs` may release from `now` on; counts the service since the last
    /// decision first.
    pub fn decide(&mut self, procs: &mut [Process<'_>], now: Nanos) -> Vec<Release> {
        for p in procs.iter_mut() {
            p.jobs.serve_until(now);
        }
        if let Some(d) = self.last.take() {
            let ms = now.saturating_sub(d.at) as f64 / 1e6;
            if ms > 0.0 {
                self.dispatcher.charge(&d.ready, &d.served, ms);
            }
        }
        let mut ready = Vec::new();
        let mut owner = Vec::new();
        for (i, p) in procs.iter().enumerate() {
            for v in p.jobs.views(p.client) {
                ready.push(JobView { job: ready.len() as u64, ..v });
                owner.push(i);
            }
        }
        // Each process's shortest running job by its kind, and its usual one. A job that
        // ran past twice its estimate goes after the others, but is held by nobody on that
        // account (it may only be slowed by them), and holds nobody if chosen.
        let shortest: Vec<Option<Nanos>> = procs.iter().map(|p| p.jobs.shortest_size()).collect();
        let usual: Vec<Option<Nanos>> = procs.iter().map(|p| p.jobs.typical()).collect();
        // The least usual length, and the one of a process other than its owner.
        let mut by_usual: Vec<(Nanos, usize)> = usual.iter().enumerate().filter_map(|(i, u)| u.map(|u| (u, i))).collect();
        by_usual.sort_unstable();
        let others_usual = |i: usize| by_usual.iter().find(|(_, j)| *j != i).map(|(u, _)| *u);
        let chosen = self.dispatcher.choose(&ready);
        let alone = self.dispatcher.behind(&ready);
        self.catching_up = alone && chosen.is_some();
        let releases: Vec<Release> = (0..procs.len())
            .map(|i| {
                let longer = |a: Nanos, b: Nanos| a > b.saturating_mul(SHALLOW_RATIO);
                let Some(c) = chosen else { return Release::Free };
                if owner[c] != i && shortest[i].is_some_and(|s| alone || longer(s, ready[c].total)) {
                    return Release::Hold;
                }
                match (shortest[i].or(usual[i]), others_usual(i)) {
                    (Some(mine), Some(theirs)) if longer(mine, theirs) => Release::Shallow(SHALLOW),
                    _ => Release::Free,
                }
            })
            .collect();
        for (p, r) in procs.iter_mut().zip(&releases) {
            p.jobs.set_held(*r == Release::Hold, now);
        }
        if let Some(c) = chosen {
            let mut served = vec![ready[c].client];
            served.extend(procs.iter().zip(&releases).zip(&shortest).filter(|((_, r), s)| **r != Release::Hold && s.is_some()).map(|((p, _), _)| p.client));
            self.last = Some(Decided { at: now, ready, served });
        }
        releases
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::dispatch::UNKNOWN_NS;
    use proptest::prelude::*;

    const MS: Nanos = 1_000_000;

    fn decide(r: &mut Releaser, procs: &mut [(u32, Jobs)], now: Nanos) -> Vec<Release> {
        let mut ps: Vec<Process<'_>> = procs.iter_mut().map(|(c, jobs)| Process { client: TenantId(*c), jobs }).collect();
        r.decide(&mut ps, now)
    }

    fn srpt() -> Releaser {
        Releaser::new(DispatchPolicy::SrptDeficit { threshold: 100.0 })
    }

    #[test]
    fn a_short_job_runs_without_far_longer_ones_and_those_keep_shallow_queues_after_it() {
        use Release::*;
        let mut r = srpt();
        let mut p = [(0, Jobs::default()), (1, Jobs::default())];
        assert_eq!(decide(&mut r, &mut p, 0), vec![Free, Free], "no job runs: nobody is bounded");
        p[1].1.begin(7, "vgg", 40 * MS, 0).unwrap();
        assert_eq!(decide(&mut r, &mut p, 0), vec![Free, Free], "alone, and no shorter kind known");
        p[0].1.begin(1, "resnet18", 2 * MS, MS).unwrap();
        assert_eq!(decide(&mut r, &mut p, MS), vec![Free, Hold], "the 2 ms job runs without the 40 ms one");
        p[0].1.end(1, 3 * MS).unwrap();
        assert_eq!(decide(&mut r, &mut p, 3 * MS), vec![Free, Shallow(SHALLOW)], "40 ms is over four times the other's usual 2 ms");
        // The long job was served 1 ms before it was held, and nothing while held.
        let left: Vec<Nanos> = p[1].1.views(TenantId(1)).map(|v| v.remaining).collect();
        assert_eq!(left, vec![39 * MS]);
        decide(&mut r, &mut p, 10 * MS);
        assert_eq!(p[1].1.views(TenantId(1)).map(|v| v.remaining).collect::<Vec<_>>(), vec![32 * MS]);
        // A 5 ms job is not four times a 2 ms one: the two run side by side.
        p[1].1.begin(8, "mobilenet", 5 * MS, 10 * MS).unwrap();
        p[0].1.begin(2, "resnet18", 2 * MS, 10 * MS).unwrap();
        assert_eq!(decide(&mut r, &mut p, 10 * MS), vec![Free, Free]);
    }

    #[test]
    fn fairness_counts_milliseconds_and_a_tenant_behind_runs_alone_until_it_caught_up() {
        use Release::*;
        let mut r = Releaser::new(DispatchPolicy::SrptDeficit { threshold: 20.0 });
        let mut p = [(0, Jobs::default()), (1, Jobs::default())];
        p[1].1.begin(1, "long", 500 * MS, 0).unwrap();
        // Tenant 0 keeps a 1 ms job running; decisions every millisecond.
        let mut turns = Vec::new();
        for t in 0..140 {
            p[0].1.end(t, t * MS).ok();
            p[0].1.begin(t + 1, "short", MS, t * MS).unwrap();
            turns.push(decide(&mut r, &mut p, t * MS));
            assert_eq!(r.catching_up(), turns.last() == Some(&vec![Hold, Shallow(SHALLOW)]));
        }
        // Two tenants present: the held one gains half a millisecond of deficit per
        // millisecond, runs alone past 20, and loses half a millisecond per millisecond
        // it runs alone (keeping a shallow queue): from then on the two alternate.
        let first = turns.iter().position(|t| t[1] != Hold).unwrap();
        assert!((40..=43).contains(&first), "held for {first} decisions");
        let after = &turns[first..];
        let alone = after.iter().filter(|t| **t == vec![Hold, Shallow(SHALLOW)]).count();
        assert_eq!(alone + after.iter().filter(|t| **t == vec![Free, Hold]).count(), after.len());
        assert!(alone.abs_diff(after.len() / 2) <= 2, "{alone} turns alone of {}", after.len());
    }

    /// Two tenants with comparable jobs run side by side, and neither falls behind; when
    /// something else holds one of them after each decision (a program's admission),
    /// only the other is charged as served, and the held one falls behind.
    #[test]
    fn a_tenant_held_by_something_else_is_not_charged_as_served() {
        let behind_after = |hold_one: bool| {
            let mut r = Releaser::new(DispatchPolicy::SrptDeficit { threshold: 20.0 });
            let mut p = [(0, Jobs::default()), (1, Jobs::default())];
            p[0].1.begin(1, "a", 500 * MS, 0).unwrap();
            p[1].1.begin(1, "b", 500 * MS, 0).unwrap();
            (0..100).position(|t| {
                decide(&mut r, &mut p, t * MS);
                if hold_one {
                    r.served_only(|c| c == TenantId(0));
                }
                r.catching_up()
            })
        };
        assert_eq!(behind_after(false), None);
        let first = behind_after(true).expect("tenant 1 falls behind");
        assert!((40..=43).contains(&first), "behind after {first} ms");
    }

    #[test]
    fn a_job_of_no_estimate_or_past_twice_its_own_waits_behind_known_ones() {
        use Release::*;
        let mut r = Releaser::new(DispatchPolicy::Sjf);
        let mut p = [(0, Jobs::default()), (1, Jobs::default())];
        p[0].1.begin(1, "guess", 0, 0).unwrap();
        p[1].1.begin(1, "big", 100 * MS, 1).unwrap();
        assert_eq!(decide(&mut r, &mut p, 1), vec![Hold, Free]);
        // Served 201 ms: past twice its 100 ms, it has no estimate either. Two such are
        // alike: neither is held, and the one of no known kind keeps a shallow queue.
        assert_eq!(decide(&mut r, &mut p, 201 * MS + 2), vec![Shallow(SHALLOW), Free]);
    }

    #[test]
    fn a_short_job_slowed_past_its_estimate_is_not_held_behind_long_ones() {
        use Release::*;
        let mut r = srpt();
        let mut p = [(0, Jobs::default()), (1, Jobs::default()), (2, Jobs::default())];
        p[0].1.begin(1, "mobilenet", 6 * MS, 0).unwrap();
        p[2].1.begin(1, "vgg", 40 * MS, 0).unwrap();
        decide(&mut r, &mut p, 0);
        // 20 ms later, shared with others, it has not ended: past twice its 6 ms.
        p[1].1.begin(1, "resnet18", 3 * MS, 20 * MS).unwrap();
        assert_eq!(decide(&mut r, &mut p, 20 * MS), vec![Free, Free, Hold], "6 ms is not four times 3 ms; 40 ms is");
        assert_eq!(p[0].1.views(TenantId(0)).map(|v| v.remaining).collect::<Vec<_>>(), vec![UNKNOWN_NS], "it goes after the others");
    }

    #[test]
    fn fifo_and_round_robin_apply_as_well() {
        use Release::*;
        let mut p = [(0, Jobs::default()), (1, Jobs::default())];
        p[0].1.begin(1, "a", 9 * MS, 5).unwrap();
        p[1].1.begin(1, "b", 80 * MS, 3).unwrap();
        assert_eq!(decide(&mut Releaser::new(DispatchPolicy::Fifo), &mut p, 10), vec![Free, Shallow(SHALLOW)], "the oldest is the long one: nobody is held");
        let mut rr = Releaser::new(DispatchPolicy::RoundRobin);
        let turns: Vec<Vec<Release>> = (0..3).map(|i| decide(&mut rr, &mut p, 10 + i * MS)).collect();
        assert_eq!(turns, vec![vec![Free, Hold], vec![Free, Shallow(SHALLOW)], vec![Free, Hold]], "tenants in turn");
    }

    fn policy() -> impl Strategy<Value = DispatchPolicy> {
        prop_oneof![
            Just(DispatchPolicy::Fifo),
            Just(DispatchPolicy::Sjf),
            Just(DispatchPolicy::RoundRobin),
            (0.0..50.0f64).prop_map(|threshold| DispatchPolicy::SrptDeficit { threshold }),
        ]
    }

    proptest! {
        /// Whatever the marks: while a job runs, some process with a running job
        /// releases, and a held one has only jobs more than four times longer than the
        /// shortest running anywhere; a process with none is never held, and with no job
        /// running nobody is bounded.
        #[test]
        fn someone_releases_and_only_far_longer_jobs_wait(
            policy in policy(),
            steps in prop::collection::vec((0usize..4, 0u64..6, any::<bool>(), 0u64..50, 0u64..5), 1..120),
        ) {
            let mut r = Releaser::new(policy);
            let mut p: Vec<(u32, Jobs)> = (0..4).map(|i| (i as u32 / 2, Jobs::default())).collect();
            let mut now = 0;
            for (who, job, begin, expected_ms, dt) in steps {
                now += dt * MS / 2;
                let _ = if begin { p[who].1.begin(job, &format!("k{}", job % 3), expected_ms * MS, now) } else { p[who].1.end(job, now).map(|_| ()) };
                let rel = decide(&mut r, &mut p, now);
                let r_catching_up = r.catching_up();
                let totals: Vec<Vec<Nanos>> = p.iter().map(|(c, j)| j.views(TenantId(*c)).map(|v| v.total).collect()).collect();
                let least = totals.iter().flatten().min().copied();
                let releasing = rel.iter().zip(&totals).filter(|(r, t)| !t.is_empty() && **r != Release::Hold).count();
                prop_assert_eq!(releasing > 0, least.is_some());
                for ((r, t), (_, j)) in rel.iter().zip(&totals).zip(&p) {
                    prop_assert_eq!(j.held(), *r == Release::Hold);
                    if *r == Release::Hold && !r_catching_up {
                        let least = least.unwrap_or(0);
                        prop_assert!(t.iter().all(|x| *x > least * SHALLOW_RATIO), "held with {:?}, least {}", t, least);
                    }
                    if least.is_none() {
                        prop_assert_eq!(*r, Release::Free);
                    }
                }
            }
        }
    }
}
