use super::*;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn job(job: u64, client: u32, arrival: Nanos, remaining: Nanos) -> JobView {
    JobView { job, client: TenantId(client), arrival, remaining, total: remaining }
}

#[test]
fn fifo_picks_oldest_then_lowest_id() {
    let ready = [job(4, 0, 30, 1), job(9, 1, 10, 50), job(2, 2, 10, 90)];
    assert_eq!(Fifo.pick(&ready), Some(2));
    assert_eq!(Fifo.pick(&ready[..2]), Some(1));
    assert_eq!(Fifo.pick(&[]), None);
}

#[test]
fn srpt_picks_shortest() {
    let mut d = SrptDeficit::new(10.0);
    let ready = [job(1, 0, 0, 500), job(2, 1, 5, 20), job(3, 2, 1, 20), job(4, 0, 9, 300)];
    assert_eq!(d.pick(&ready), Some(2));
    assert!((d.deficit(TenantId(2)) + 2.0 / 3.0).abs() < 1e-12);
    assert!((d.deficit(TenantId(0)) - 1.0 / 3.0).abs() < 1e-12);
    assert_eq!(d.pick(&[]), None);
}

#[test]
fn deficit_forces_the_starved_client() {
    let mut d = SrptDeficit::new(1.0);
    let ready = [job(1, 0, 0, 1_000), job(2, 0, 3, 900), job(3, 1, 7, 10)];
    let picks: Vec<usize> = (0..6).map(|_| d.pick(&ready).unwrap()).collect();
    assert_eq!(picks, [2, 2, 2, 0, 2, 0]);
    assert_eq!(d.deficit(TenantId(0)), 1.0);
    assert_eq!(d.deficit(TenantId(0)) + d.deficit(TenantId(1)), 0.0);
    assert_eq!(d.deficit(TenantId(7)), 0.0);
}

#[test]
fn sjf_picks_the_shortest_whole_job_whatever_it_has_run() {
    // Job 1 is nearly done but long in all; job 2 is short and has not started.
    let ready = [JobView { total: 1_000, ..job(1, 0, 0, 10) }, JobView { total: 50, ..job(2, 1, 5, 50) }, JobView { total: 50, ..job(3, 2, 3, 50) }];
    assert_eq!(Sjf.pick(&ready), Some(2), "the shortest, the older of two");
    assert_eq!(SrptDeficit::new(10.0).pick(&ready), Some(0), "SRPT takes the least remaining");
    assert_eq!(Sjf.pick(&[]), None);
}

#[test]
fn round_robin_serves_clients_in_turn_whatever_their_jobs() {
    let mut d = ClientRoundRobin::default();
    // Client 0 has three jobs, client 2 one, client 5 one: each client gets every third kernel.
    let ready = [job(1, 0, 0, 9), job(2, 0, 1, 9), job(3, 2, 2, 9), job(4, 5, 3, 9), job(5, 0, 4, 9)];
    let picks: Vec<usize> = (0..6).map(|_| d.pick(&ready).unwrap()).collect();
    assert_eq!(picks, [0, 2, 3, 0, 2, 3], "clients 0, 2, 5 in turn, each its oldest job");
    // Client 2 leaves: after client 5 (served last) comes client 0, then 5, then 0.
    let ready = [job(1, 0, 0, 9), job(4, 5, 3, 9)];
    assert_eq!((d.pick(&ready), d.pick(&ready), d.pick(&ready)), (Some(0), Some(1), Some(0)));
    assert_eq!(d.pick(&[]), None);
}

#[test]
fn policy_builds_by_name() {
    for (p, name) in [
        (DispatchPolicy::Fifo, "fifo"),
        (DispatchPolicy::Sjf, "sjf"),
        (DispatchPolicy::RoundRobin, "rr"),
        (DispatchPolicy::SrptDeficit { threshold: 2.0 }, "srpt-deficit"),
    ] {
        assert_eq!(p.build().name(), name);
    }
    let rr: DispatchPolicy = serde_json::from_str("\"rr\"").expect("rr by name");
    assert_eq!(rr, DispatchPolicy::RoundRobin);
}

fn k(kernel: KernelId) -> KernelKey {
    KernelKey::code(kernel)
}

#[test]
fn estimator_follows_paella_formula() {
    let mut e = RemainingEstimator::default();
    assert_eq!(e.estimate("resnet", &[]), None);
    e.record("resnet", &[KernelRecord { kernel: k(1), count: 2, time: 20 }, KernelRecord { kernel: k(2), count: 1, time: 100 }]);
    e.record("resnet", &[KernelRecord { kernel: k(1), count: 4, time: 40 }, KernelRecord { kernel: k(2), count: 1, time: 300 }]);
    e.record("bert", &[KernelRecord { kernel: k(1), count: 1, time: 7 }]);
    // kernel 1: avgCount 3, avgTime 10; kernel 2: avgCount 1, avgTime 200.
    assert_eq!(e.total("resnet"), Some(3 * 10 + 200));
    assert_eq!(e.estimate("resnet", &[(k(1), 1)]), Some(2 * 10 + 200));
    assert_eq!(e.estimate("resnet", &[(k(1), 5), (k(2), 1)]), Some(0));
    assert_eq!(e.estimate("resnet", &[(k(2), 1), (k(9), 4)]), Some(30));
    e.record("resnet", &[KernelRecord { kernel: k(1), count: 3, time: 30 }]);
    // kernel 2 absent in the third job: avgCount 2/3.
    assert_eq!(e.estimate("resnet", &[(k(1), 3)]), Some(133));
}

/// One kernel over two grids is two kernels to the estimate, and each run observed counts
/// at once, before its job finishes.
#[test]
fn the_estimate_keys_kernels_by_grid_and_learns_each_run() {
    let mut e = RemainingEstimator::default();
    let (small, large) = (KernelKey { kernel: 7, grid: [4, 1, 1] }, KernelKey { kernel: 7, grid: [512, 1, 1] });
    e.observe("llm", small, 10);
    assert_eq!(e.total("llm"), None, "no job has finished: the counts are unknown");
    e.observe("llm", large, 1_000);
    e.finish("llm", &[(small, 2), (large, 1)]);
    assert_eq!(e.total("llm"), Some(2 * 10 + 1_000));
    assert_eq!(e.estimate("llm", &[(small, 2)]), Some(1_000), "the small grid's runs do not count against the large one's");
    // A slower run of the large grid moves its mean at once: (1000 + 3000) / 2.
    e.observe("llm", large, 3_000);
    assert_eq!(e.estimate("llm", &[(small, 2)]), Some(2_000));
    // A kernel seen in a finished job but never timed counts nothing.
    e.finish("llm", &[(small, 2), (large, 1), (k(8), 5)]);
    assert_eq!(e.total("llm"), Some(2 * 10 + 2_000));
}

/// Kinds and kernels past the bounds are not learned, and the ones learned keep working.
#[test]
fn the_estimate_keeps_at_most_its_bounds_of_kinds_and_kernels() {
    let mut e = RemainingEstimator::default();
    for i in 0..MAX_KINDS + 10 {
        e.record(&format!("kind-{i}"), &[KernelRecord { kernel: k(1), count: 1, time: 5 }]);
    }
    assert_eq!(e.total("kind-0"), Some(5));
    assert_eq!(e.total(&format!("kind-{}", MAX_KINDS - 1)), Some(5));
    assert_eq!(e.total(&format!("kind-{MAX_KINDS}")), None, "past the bound of kinds");
    for g in 0..MAX_KERNELS as u32 + 10 {
        e.observe("kind-0", KernelKey { kernel: 2, grid: [g, 1, 1] }, 1);
    }
    let last = KernelKey { kernel: 2, grid: [MAX_KERNELS as u32 + 5, 1, 1] };
    e.finish("kind-0", &[(k(1), 1), (last, 100)]);
    assert_eq!(e.total("kind-0"), Some(5), "the kernel past the bound counts nothing");
}

proptest! {
    #[test]
    fn deficit_never_exceeds_threshold_plus_one(
        seed in any::<u64>(),
        clients in 2u32..6,
        threshold in prop::sample::select(vec![0.0, 0.5, 1.0, 2.0, 5.0]),
    ) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut d = SrptDeficit::new(threshold);
        let mut next = 0u64;
        let mut jobs: Vec<JobView> = Vec::new();
        for step in 0..2_000u64 {
            for c in 0..clients {
                while !jobs.iter().any(|j| j.client.0 == c) || rng.gen_bool(0.05) {
                    next += 1;
                    jobs.push(job(next, c, step, rng.gen_range(1..100_000)));
                }
            }
            let i = d.pick(&jobs).unwrap();
            jobs[i].remaining = jobs[i].remaining.saturating_sub(rng.gen_range(0..5_000));
            if jobs[i].remaining == 0 {
                jobs.swap_remove(i);
            }
            for c in 0..clients {
                let deficit = d.deficit(TenantId(c));
                prop_assert!(deficit <= threshold + 1.0 + 1e-9, "client {} deficit {} at step {}", c, deficit, step);
            }
        }
    }
}

#[test]
fn a_client_with_no_ready_job_starts_again_from_zero() {
    let mut d = SrptDeficit::new(100.0);
    let ready = [job(1, 0, 0, 10), job(2, 1, 0, 1_000)];
    for _ in 0..10 {
        d.charge(&ready, &[TenantId(0)], 2.0);
    }
    assert_eq!((d.deficit(TenantId(0)), d.deficit(TenantId(1))), (-10.0, 10.0), "2 ms a time, half of it owed to the waiting client");
    d.charge(&ready[..1], &[TenantId(0)], 2.0);
    assert_eq!((d.deficit(TenantId(0)), d.deficit(TenantId(1))), (-10.0, 0.0), "client 1 left: its deficit is gone");
}

#[test]
fn clients_served_together_share_what_they_got() {
    let mut d = SrptDeficit::new(100.0);
    let ready = [job(1, 0, 0, 10), job(2, 1, 0, 20), job(3, 2, 0, 1_000), job(4, 3, 0, 1_000)];
    // Four present, two served 4 ms together: each got 2 of its fair 1; the held two 1 each.
    d.charge(&ready, &[TenantId(0), TenantId(1)], 4.0);
    let deficits: Vec<f64> = (0..4).map(|c| d.deficit(TenantId(c))).collect();
    assert_eq!(deficits, vec![-1.0, -1.0, 1.0, 1.0]);
}
