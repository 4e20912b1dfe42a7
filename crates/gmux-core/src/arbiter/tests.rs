use super::*;

const G: u64 = 1 << 30;
const MS: Nanos = 1_000_000;

fn busy(held: u64, want: u64) -> ShimReport {
    ShimReport { held, resident: held, want, allocated: want, busy: true, ..Default::default() }
}

/// Process `conn` reports its first command finished; the daemon sees it at `now`.
fn started(d: &mut Arbiter, conn: u64, held: u64, now: Nanos) {
    rep(d, conn, ShimReport { commands: 1, finished: 1, ..busy(held, 8 * G) });
    d.decide(now);
}

/// Takes a report that has applied the newest grant.
fn rep(d: &mut Arbiter, conn: u64, mut r: ShimReport) {
    r.grant = d.procs.get(&conn).and_then(|p| p.sent).map_or(0, |g| g.seq);
    d.report(conn, r);
}

fn grants(d: &mut Arbiter, now: Nanos) -> HashMap<u64, Grant> {
    d.decide(now);
    d.procs.iter().map(|(c, p)| (*c, p.sent.expect("decided"))).collect()
}

fn four_of_8g(switch: Switch) -> Arbiter {
    let mut d = Arbiter::new(Some(16 * G), None, Policy::RoundRobin, switch);
    for c in 0..4 {
        d.join(c, 100 + c as u32, &format!("t{c}"), 0);
        rep(&mut d, c, busy(0, 8 * G));
    }
    d
}

#[test]
fn round_robin_runs_one_tenant_and_hands_memory_in_belady_order() {
    let mut d = four_of_8g(Switch::Msched);
    let g = grants(&mut d, 0);
    assert_eq!(g.values().filter(|g| g.run).count(), 1);
    assert!(g[&0].run && g[&0].cap == 8 * G && g[&0].fill == Fill::Forecast);
    // The next in the timeline may hold 8 GiB too; the two after it nothing.
    assert_eq!((g[&1].cap, g[&2].cap, g[&3].cap), (8 * G, 0, 0));
    rep(&mut d, 1, busy(8 * G, 8 * G));
    // The slice starts when t0's first command finishes (the switch is not charged).
    started(&mut d, 0, 8 * G, 5 * MS);
    assert!(grants(&mut d, 21 * MS)[&0].run, "t0's 20 ms slice began at 5 ms");
    // After it, t1 runs; t0 runs last now, so it gives its memory to t2.
    let g = grants(&mut d, 26 * MS);
    assert!(g[&1].run && !g[&0].run);
    assert_eq!((g[&0].cap, g[&1].cap, g[&2].cap, g[&3].cap), (0, 8 * G, 0, 0), "t2 waits until t0 has evicted");
    rep(&mut d, 0, busy(2 * G, 8 * G));
    assert_eq!(grants(&mut d, 27 * MS)[&2].cap, 6 * G, "t2's grant grows as t0's memory is released");
    assert_eq!(d.tenants.get(TenantId(1)).stat.switches, 1);
}

#[test]
fn running_at_once_is_judged_on_whole_periods() {
    // Two tenants whose next slices (2 GiB each) fit 16 GiB but whose periods (12 GiB
    // each) do not: running them at once would thrash, so they take turns.
    let mut d = Arbiter::new(Some(16 * G), None, Policy::RoundRobin, Switch::Msched);
    for c in 0..2 {
        d.join(c, 100 + c as u32, &format!("t{c}"), 0);
        rep(&mut d, c, ShimReport { period: 12 * G, ..busy(0, 2 * G) });
    }
    let g = grants(&mut d, 0);
    assert_eq!(g.values().filter(|g| g.run).count(), 1, "time-sliced");
    rep(&mut d, 1, ShimReport { period: 4 * G, ..busy(0, 2 * G) });
    let g = grants(&mut d, MS);
    assert!(g.values().all(|g| g.run && g.fill == Fill::None), "12 + 4 GiB fit: at once");
    // Once t0 has applied its new grant (it may hold what the old one allowed), caps
    // cover both periods.
    rep(&mut d, 0, ShimReport { period: 12 * G, ..busy(0, 2 * G) });
    let g = grants(&mut d, 2 * MS);
    assert!(g[&0].cap >= 12 * G && g[&1].cap >= 4 * G, "caps {} and {} MiB", g[&0].cap >> 20, g[&1].cap >> 20);
}

#[test]
fn whole_swap_waits_for_the_others_to_leave() {
    let mut d = four_of_8g(Switch::Whole);
    rep(&mut d, 1, busy(8 * G, 8 * G));
    grants(&mut d, 0);
    started(&mut d, 0, 8 * G, 0);
    let g = grants(&mut d, 21 * MS);
    assert!(!g[&1].run, "t1 may not run while t0 still holds more than its cap");
    assert_eq!(g[&1].fill, Fill::Whole);
    rep(&mut d, 0, busy(0, 8 * G));
    assert!(grants(&mut d, 22 * MS)[&1].run);
}

#[test]
fn everything_fits_so_everyone_runs_at_once() {
    let mut d = Arbiter::new(Some(16 * G), None, Policy::RoundRobin, Switch::Msched);
    for c in 0..4 {
        d.join(c, 100 + c as u32, &format!("t{c}"), 0);
        rep(&mut d, c, busy(0, 4 * G));
    }
    let g = grants(&mut d, 0);
    assert!(g.values().all(|g| g.run && g.cap >= 4 * G && g.fill == Fill::None));
    assert!(g.values().map(|g| g.cap).sum::<u64>() <= 16 * G);
}

/// Four tenants of 4 GiB in 16 GiB; two have touched only 1.5 GiB of theirs so far, and
/// their forecasts say so. Running at once, each is granted all it allocated, so that it
/// never evicts its own memory while the others hold less than they may.
#[test]
fn running_at_once_grants_what_each_allocated_when_it_all_fits() {
    let mut d = Arbiter::new(Some(16 * G), None, Policy::RoundRobin, Switch::Msched);
    for c in 0..4 {
        d.join(c, 100 + c as u32, &format!("t{c}"), 0);
        let touched = if c < 2 { 4 * G } else { 3 * G / 2 };
        rep(&mut d, c, ShimReport { period: touched, allocated: 4 * G, ..busy(touched, touched) });
    }
    let g = grants(&mut d, 0);
    assert!(g.values().all(|g| g.run && g.fill == Fill::None), "at once");
    for c in 0..4 {
        assert_eq!(g[&c].cap, 4 * G, "t{c}'s cap");
    }
    // Over the budget, what each allocated is no claim: 20 GiB allocated, 10 GiB periods.
    let mut d = Arbiter::new(Some(16 * G), None, Policy::RoundRobin, Switch::Msched);
    for c in 0..4 {
        d.join(c, 100 + c as u32, &format!("t{c}"), 0);
        rep(&mut d, c, ShimReport { period: 5 * G / 2, allocated: 5 * G, ..busy(5 * G / 2, 5 * G / 2) });
    }
    let g = grants(&mut d, 0);
    assert!(g.values().all(|g| g.run), "the periods fit: at once");
    assert!(g.values().map(|g| g.cap).sum::<u64>() <= 16 * G);
}

#[test]
fn priority_gates_best_effort_while_real_time_is_busy() {
    let mut d = Arbiter::new(Some(16 * G), None, Policy::Priority, Switch::Msched);
    d.join(0, 100, "rt", 1);
    d.join(1, 101, "be", 0);
    rep(&mut d, 0, busy(4 * G, 4 * G));
    rep(&mut d, 1, busy(12 * G, 20 * G));
    let g = grants(&mut d, 0);
    assert!(g[&0].run && !g[&1].run);
    assert_eq!((g[&0].cap, g[&1].cap), (4 * G, 12 * G), "real time keeps its working set, best effort gets the rest");
    assert_eq!(g[&1].inflight, GATED_INFLIGHT);
    rep(&mut d, 0, ShimReport { busy: false, ..busy(4 * G, 4 * G) });
    let g = grants(&mut d, MS);
    assert!(g[&0].run && g[&1].run, "best effort runs while real time is idle");
}

#[test]
fn a_dead_tenant_no_longer_counts() {
    let mut d = Arbiter::new(Some(16 * G), None, Policy::RoundRobin, Switch::Msched);
    d.join(0, 100, "a", 0);
    d.join(1, 101, "b", 0);
    rep(&mut d, 0, busy(12 * G, 12 * G));
    rep(&mut d, 1, ShimReport { blocked: 8 * G, ..busy(0, 8 * G) });
    let g = grants(&mut d, 0);
    let b_before = if g[&1].run { g[&1].cap } else { 0 };
    assert!(b_before <= 4 * G);
    assert_eq!(d.leave(0), Some((100, "a".to_string())));
    let g = grants(&mut d, MS);
    assert!(g[&1].run && g[&1].cap >= 8 * G, "{:?}", g[&1]);
    assert_eq!(d.stat(TenantId(0)).submitted, 0);
}

#[test]
fn a_tenant_of_two_processes_splits_its_grant_by_want() {
    let mut d = Arbiter::new(Some(8 * G), None, Policy::RoundRobin, Switch::Msched);
    d.join(0, 100, "a", 0);
    d.join(1, 101, "a", 0);
    rep(&mut d, 0, busy(0, 2 * G));
    rep(&mut d, 1, busy(0, 6 * G));
    let g = grants(&mut d, 0);
    assert_eq!((g[&0].cap, g[&1].cap), (2 * G, 6 * G));
    assert_eq!(d.pids(TenantId(0)), vec![100, 101]);
}

#[test]
fn a_process_joining_its_tenant_gets_only_what_the_first_has_given_back() {
    // The tenant's grant is split anew when a second process joins; the first may hold
    // its old cap until it reports having shrunk, so the second waits for that.
    let mut d = Arbiter::new(Some(8 * G), None, Policy::RoundRobin, Switch::Msched);
    d.join(0, 100, "a", 0);
    rep(&mut d, 0, busy(0, 8 * G));
    assert_eq!(grants(&mut d, 0)[&0].cap, 8 * G);
    rep(&mut d, 0, busy(8 * G, 8 * G));
    d.join(1, 101, "a", 0);
    rep(&mut d, 1, busy(0, 8 * G));
    let g = grants(&mut d, MS);
    assert_eq!((g[&0].cap, g[&1].cap), (4 * G, 0), "the newcomer got memory the first still holds");
    assert!(d.exposure() <= 8 * G, "{}", d.exposure());
    rep(&mut d, 0, busy(4 * G, 8 * G));
    let g = grants(&mut d, 2 * MS);
    assert_eq!((g[&0].cap, g[&1].cap), (4 * G, 4 * G));
    assert!(d.exposure() <= 8 * G, "{}", d.exposure());
}

#[test]
fn a_tenant_that_does_not_read_its_grants_or_is_stopped_loses_its_turns_and_keeps_its_memory_counted() {
    for why in [Silence::NotReading, Silence::Stopped] {
        silent_tenant_loses_its_turns(why);
    }
}

fn silent_tenant_loses_its_turns(why: Silence) {
    let mut d = four_of_8g(Switch::Msched);
    assert!(grants(&mut d, 0)[&0].run);
    rep(&mut d, 0, busy(8 * G, 8 * G));
    started(&mut d, 0, 8 * G, MS);
    assert!(d.set_silent(0, why, true) && !d.set_silent(0, why, true));
    let g = grants(&mut d, 2 * MS);
    assert!(!g[&0].run, "its slice ends at once");
    assert_eq!(g.values().filter(|g| g.run).count(), 1, "another tenant runs");
    let others: u64 = g.iter().filter(|(c, _)| **c != 0).map(|(_, g)| g.cap).sum();
    assert!(others <= 8 * G, "the 8 GiB it holds still count: the others have {others}");
    for t in 1..40 {
        assert!(!grants(&mut d, (2 + 25 * t) * MS)[&0].run, "no turn while it is silent ({why:?})");
    }
    assert!(d.set_silent(0, why, false));
    let back = (1..40).any(|t| grants(&mut d, (1000 + 25 * t) * MS)[&0].run);
    assert!(back, "its turns come back once it answers ({why:?})");
}

#[test]
fn reports_read_after_the_process_died_still_count() {
    // The pid watcher may see a death before the connection's last reports are read.
    let mut d = four_of_8g(Switch::Msched);
    d.report(0, ShimReport { commands: 10, bytes_h2d: 4, ..busy(0, 8 * G) });
    d.leave(0);
    assert_eq!(d.stat(TenantId(0)).submitted, 10);
    assert_eq!(d.report(0, ShimReport { commands: 13, bytes_h2d: 6, ..busy(0, 8 * G) }), None);
    assert_eq!((d.stat(TenantId(0)).submitted, d.stat(TenantId(0)).bytes_h2d), (13, 6), "the late report counts, once");
    d.report(0, ShimReport { commands: 12, ..busy(0, 8 * G) });
    assert_eq!(d.stat(TenantId(0)).submitted, 13, "and never backwards");
    assert!(d.live().iter().all(|t| *t != TenantId(0)), "it holds nothing");
    d.closed(0);
    d.report(0, ShimReport { commands: 20, ..busy(0, 8 * G) });
    assert_eq!(d.stat(TenantId(0)).submitted, 13, "nothing after the connection closed");
}

/// Two tenants of 4 GiB fit 16 GiB and run at once; with `always_slice` they take turns
/// and each keeps all it wants (nothing moves: the in-GPU time-sliced baseline).
#[test]
fn always_slice_takes_turns_even_when_everything_fits() {
    for (always, running) in [(false, 2), (true, 1)] {
        let mut d = Arbiter::new(Some(16 * G), None, Policy::RoundRobin, Switch::Msched);
        d.settings.always_slice = always;
        for c in 0..2 {
            d.join(c, 100 + c as u32, &format!("t{c}"), 0);
            rep(&mut d, c, busy(4 * G, 4 * G));
        }
        let g = grants(&mut d, 0);
        assert_eq!(g.values().filter(|g| g.run).count(), running, "always_slice {always}");
        assert!(g.values().all(|g| g.cap >= 4 * G), "always_slice {always}: nobody gives memory up");
    }
}

/// A switch that has not started after ten slices is logged once, with what the tenant
/// waits for and what each other tenant holds against its cap.
#[test]
fn a_long_switch_says_what_it_waits_for() {
    let mut d = four_of_8g(Switch::Msched);
    grants(&mut d, 0);
    rep(&mut d, 0, ShimReport { blocked: 8 * G, ..busy(6 * G, 8 * G) });
    grants(&mut d, 150 * MS);
    assert!(!d.events.iter().any(|e| e.contains("waits for its switch")), "not yet: {:?}", d.events);
    grants(&mut d, 201 * MS);
    let said: Vec<&String> = d.events.iter().filter(|e| e.contains("waits for its switch")).collect();
    assert_eq!(said.len(), 1, "{:?}", d.events);
    assert!(said[0].starts_with("t0 waits for its switch: holds 6.0 GiB, wants 8.0 GiB, a command needs 8.0 GiB, granted 8.0 GiB"), "{}", said[0]);
    assert!(said[0].contains("t1 (busy) holds 0 B of 8.0 GiB"), "{}", said[0]);
    grants(&mut d, 300 * MS);
    assert_eq!(d.events.iter().filter(|e| e.contains("waits for its switch")).count(), 1, "once per slot");
}

/// An idle tenant's process filled under a grant one behind the newest (which took 408
/// MiB back) and reports holding the old grant's 3244 MiB. The daemon keeps to the newest
/// grant: answering with what it holds would grant the 408 MiB back while the process
/// gives them up, and the two would swap them for ever (seen on a GPU: 2.7 TiB moved
/// while the running tenant waited for 6 MiB).
#[test]
fn a_process_acting_on_an_older_grant_is_not_granted_what_it_gives_back() {
    const M: u64 = 1 << 20;
    let mut d = Arbiter::new(Some(5259 * M), None, Policy::RoundRobin, Switch::Msched);
    for c in 0..3 {
        d.join(c, 100 + c as u32, &format!("t{c}"), 0);
    }
    let grant = |cap, seq| Some(Grant { cap, most: 5259 * M, run: false, fill: Fill::Forecast, inflight: 0, seq });
    let idle = |held| ShimReport { busy: false, ..busy(held, 3400 * M) };
    for (c, cap) in [(0, 270 * M), (1, 1741 * M), (2, 3244 * M)] {
        d.procs.get_mut(&c).expect("joined").sent = grant(cap, 4);
        d.report(c, ShimReport { grant: 4, ..idle(cap) });
    }
    d.report(0, ShimReport { grant: 4, blocked: 268 * M, ..busy(260 * M, 268 * M) });
    // The newest grant to t2 took 408 MiB; it reports under the older one.
    d.procs.get_mut(&2).expect("joined").sent = grant(2836 * M, 5);
    d.procs.get_mut(&2).expect("joined").exposure = 3244 * M;
    d.report(2, ShimReport { grant: 4, ..idle(3244 * M) });
    let g = grants(&mut d, 0);
    assert_eq!(g[&2].cap, 2836 * M, "t2 is not granted back what it gives up");
    // Once it has, the running tenant gets what its command needs.
    d.report(2, ShimReport { grant: g[&2].seq, ..idle(2836 * M) });
    let g = grants(&mut d, MS);
    assert!(g[&0].run && g[&0].cap >= 268 * M, "t0 granted {} MiB", g[&0].cap / M);
    assert_eq!(g[&2].cap, 2836 * M);
}

/// When a slot ends, the log says what the tenant did in it: commands, the bytes it
/// brought in and sent out, and how long its agent held its launches (its fill steps'
/// mappings), from the counters its process reports.
#[test]
fn a_slot_says_what_it_ran_moved_and_held() {
    let mut d = four_of_8g(Switch::Msched);
    rep(&mut d, 0, ShimReport { launches_held_ns: 2 * MS, bytes_h2d: G, bytes_d2h: G, ..busy(0, 8 * G) });
    grants(&mut d, 0);
    rep(&mut d, 0, ShimReport { commands: 1, finished: 1, launches_held_ns: 2 * MS, bytes_h2d: 5 * G, bytes_d2h: G, ..busy(8 * G, 8 * G) });
    grants(&mut d, MS);
    rep(&mut d, 0, ShimReport { commands: 1465, finished: 1400, launches_held_ns: 69 * MS, bytes_h2d: 9 * G, bytes_d2h: 3 * G / 2, ..busy(8 * G, 8 * G) });
    grants(&mut d, 1000 * MS);
    let ended: Vec<&String> = d.events.iter().filter(|e| e.starts_with("t0 ran")).collect();
    assert_eq!(ended.len(), 1, "{:?}", d.events);
    assert_eq!(ended[0], "t0 ran 1465 commands in 1000.0 ms, bringing 8.0 GiB in and sending 512.0 MiB out; its agent held its launches 67.0 ms");
}

/// Slices are stretched to four times what a switch costs among the tenants taking
/// turns, within `max_timeslice`, and alike for all of them: t1, whose memory was in 4 ms
/// after its switch, gets as long a slice as t0, whose memory took 60 ms.
#[test]
fn slices_are_stretched_alike_to_amortize_the_switches_of_the_tenants_taking_turns() {
    for (max, t1_slice, t0_next) in [(1000 * MS, 240 * MS, 128 * MS), (200 * MS, 200 * MS, 128 * MS), (50 * MS, 100 * MS, 100 * MS)] {
        let mut d = Arbiter::new(Some(8 * G), None, Policy::RoundRobin, Switch::Msched);
        (d.settings.timeslice, d.settings.max_timeslice) = (100 * MS, max);
        for c in 0..2 {
            d.join(c, 100 + c as u32, &format!("t{c}"), 0);
            rep(&mut d, c, busy(0, 8 * G));
        }
        assert!(grants(&mut d, 0)[&0].run);
        started(&mut d, 0, 2 * G, 10 * MS);
        rep(&mut d, 0, ShimReport { commands: 5, finished: 2, ..busy(8 * G, 8 * G) });
        d.decide(60 * MS);
        assert!(grants(&mut d, 111 * MS)[&1].run, "t0's first slice of 100 ms began at 10 ms");
        assert_eq!(d.running.map(|r| r.slice), Some(t1_slice), "the switches so far cost 60 ms (max_timeslice {} ms)", max / MS);
        rep(&mut d, 0, busy(0, 8 * G));
        grants(&mut d, 112 * MS);
        started(&mut d, 1, 8 * G, 115 * MS);
        assert!(!grants(&mut d, 114 * MS + t1_slice)[&0].run, "t1's slice began at 115 ms");
        assert!(grants(&mut d, 116 * MS + t1_slice)[&0].run);
        assert_eq!(d.running.map(|r| r.slice), Some(t0_next), "switches cost 60 and 4 ms (max_timeslice {} ms)", max / MS);
        rep(&mut d, 0, ShimReport { commands: 6, finished: 6, ..busy(8 * G, 8 * G) });
        d.decide(120 * MS + t1_slice);
        let stretched = format!("its slice is stretched to {} ms (a switch costs 32.0 ms)", t0_next / MS);
        let said = d.events.iter().any(|e| e.starts_with("t0 started") && e.ends_with(&stretched));
        assert_eq!(said, t0_next > 100 * MS, "{:?}", d.events);
    }
}

#[test]
fn swap_counts_memory_taken_from_a_tenant_not_a_grant_smaller_than_its_last() {
    let mut d = Arbiter::new(Some(8 * G), None, Policy::Priority, Switch::Msched);
    d.join(1, 101, "be", 0);
    let be = TenantId(0);
    rep(&mut d, 1, busy(8 * G, 8 * G));
    assert_eq!(grants(&mut d, 0)[&1].cap, 8 * G);
    // It frees its cache: its last grant is 8 GiB, its memory 64 MiB. A real-time
    // tenant comes, and the division gives it the rest.
    let small = ShimReport { allocated: 64 << 20, ..busy(64 << 20, 64 << 20) };
    rep(&mut d, 1, small);
    d.join(0, 100, "rt", 1);
    rep(&mut d, 0, busy(0, 3 * G));
    grants(&mut d, MS);
    rep(&mut d, 1, small);
    let g = grants(&mut d, 2 * MS);
    assert_eq!((g[&0].cap, g[&1].cap), (8 * G - (64 << 20), 64 << 20));
    assert_eq!(d.mem_events(be).swap, 0, "a grant below its last took none of its 64 MiB");
    // The real-time tenant idles, and the other allocates again and is granted 5 GiB.
    let idle = ShimReport { busy: false, ..busy(3 * G, 3 * G) };
    let grown = ShimReport { allocated: 8 * G, ..busy(G, 8 * G) };
    rep(&mut d, 0, idle);
    rep(&mut d, 1, grown);
    grants(&mut d, 3 * MS);
    rep(&mut d, 0, idle);
    assert_eq!(grants(&mut d, 4 * MS)[&1].cap, 5 * G);
    // Its last report says 1 GiB held, but it may have grown to its 5 GiB since: when the
    // real-time tenant's need leaves it 2 GiB, that is memory taken from it.
    rep(&mut d, 1, grown);
    rep(&mut d, 0, busy(3 * G, 6 * G));
    assert_eq!(grants(&mut d, 5 * MS)[&1].cap, 2 * G);
    assert_eq!(d.mem_events(be).swap, 1, "up to its 5 GiB grant may have been in");
}
