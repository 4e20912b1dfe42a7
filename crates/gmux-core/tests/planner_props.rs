//! Invariants of the planner on random traces: budgets hold, every chunk is in exactly
//! one place, no command runs with a chunk missing, and OPT never moves more than LRU.

use gmux_core::evict::{Eviction, Evictor, Forecast};
use gmux_core::memory::{Capacities, Tier};
use gmux_core::placement::PlacementKind;
use gmux_core::planner::{Planner, Request};
use gmux_core::{ChunkId, Memory, TenantId, Tenants, CHUNK_BYTES};
use proptest::prelude::*;

/// Replays `cmds` (tenant, chunk indices) with a GPU budget of `budget` chunks; returns
/// chunks moved in plus out.
fn replay(eviction: Eviction, tenants_n: u32, chunks_per_tenant: u32, budget: u64, cmds: &[(u32, Vec<u32>)]) -> u64 {
    let mut mem = Memory::new(Capacities { gpu: Some(budget * CHUNK_BYTES), ..Default::default() });
    let mut tenants = Tenants::default();
    for t in 0..tenants_n {
        tenants.add(&format!("t{t}")).unwrap();
        mem.allocate(TenantId(t), chunks_per_tenant as u64 * CHUNK_BYTES).unwrap();
    }
    let chunk = |t: u32, i: u32| ChunkId(t * chunks_per_tenant + i);
    let mut planner = Planner::new(Evictor::new(eviction), PlacementKind::TierOrder.build(0));
    let mut moved = 0;
    for (i, (t, ws)) in cmds.iter().enumerate() {
        let need: Vec<ChunkId> = ws.iter().map(|&c| chunk(*t, c)).collect();
        let future = cmds[i..].iter().flat_map(|(t, ws)| ws.iter().map(move |&c| chunk(*t, c)));
        let forecast = Forecast::from_accesses(future);
        let plan = planner.plan(&mem, &tenants, &Request { tenant: TenantId(*t), need: &need, required: need.len(), pinned: &|_| false }, &forecast);
        let m = planner.apply(&mut mem, &plan).unwrap();
        moved += m.populated + m.evicted;
        mem.check().unwrap();
        for c in &need {
            assert!(mem.is_resident(*c), "command {i} released with chunk {c:?} not resident");
        }
        assert!(mem.used_chunks(Tier::Gpu) <= budget, "GPU budget exceeded");
        for (k, c) in need.iter().enumerate() {
            planner.access(&mut mem, *c, (i * 64 + k) as u64 + 1, k % 2 == 0);
        }
    }
    moved
}

fn trace() -> impl Strategy<Value = (u32, u32, u64, Vec<(u32, Vec<u32>)>)> {
    (1u32..4, 2u32..12).prop_flat_map(|(tenants, per)| {
        let cmd = (0..tenants, prop::collection::vec(0..per, 1..4));
        (Just(tenants), Just(per), 3u64..10, prop::collection::vec(cmd, 1..60))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn opt_never_moves_more_than_lru((tenants, per, budget, cmds) in trace()) {
        let opt = replay(Eviction::Opt, tenants, per, budget, &cmds);
        let lru = replay(Eviction::Lru, tenants, per, budget, &cmds);
        prop_assert!(opt <= lru, "OPT moved {opt} chunks, LRU {lru}");
    }

    #[test]
    fn dual_clock_keeps_every_invariant((tenants, per, budget, cmds) in trace()) {
        replay(Eviction::DualClock, tenants, per, budget, &cmds);
    }
}

#[test]
fn limit_high_evicts_own_chunks_and_limit_low_protects() {
    let mut mem = Memory::new(Capacities { gpu: Some(8 * CHUNK_BYTES), ..Default::default() });
    let mut tenants = Tenants::default();
    let a = tenants.add("a").unwrap();
    let b = tenants.add("b").unwrap();
    tenants.set_knob("a", "gmem.limit.high", "6M").unwrap();
    tenants.set_knob("b", "gmem.limit.low", "8M").unwrap();
    mem.allocate(a, 8 * CHUNK_BYTES).unwrap();
    mem.allocate(b, 4 * CHUNK_BYTES).unwrap();
    let mut p = Planner::new(Evictor::new(Eviction::Lru), PlacementKind::TierOrder.build(0));
    let run = |p: &mut Planner, mem: &mut Memory, t: TenantId, need: Vec<ChunkId>| {
        let plan = p.plan(mem, &tenants, &Request { tenant: t, need: &need, required: need.len(), pinned: &|_| false }, &Forecast::default());
        p.apply(mem, &plan).unwrap();
        plan.covered
    };
    assert_eq!(run(&mut p, &mut mem, b, (8..12).map(ChunkId).collect()), 4);
    assert_eq!(run(&mut p, &mut mem, a, (0..3).map(ChunkId).collect()), 3);
    assert_eq!(mem.usage(a).bytes(Tier::Gpu), 6 << 20, "a stops at gmem.limit.high");
    run(&mut p, &mut mem, a, (3..6).map(ChunkId).collect());
    assert_eq!(mem.usage(a).bytes(Tier::Gpu), 6 << 20, "a evicted its own chunks");
    assert_eq!(mem.usage(b).bytes(Tier::Gpu), 8 << 20, "b untouched: at its gmem.limit.low");
    mem.check().unwrap();
}

#[test]
fn one_plan_demotes_as_many_host_chunks_as_it_needs() {
    let caps = Capacities { gpu: Some(2 * CHUNK_BYTES), host: Some(2 * CHUNK_BYTES), disk: None };
    let mut mem = Memory::new(caps);
    let mut tenants = Tenants::default();
    let t = tenants.add("t").unwrap();
    mem.allocate_on_disk(t, 6 * CHUNK_BYTES).unwrap();
    let mut p = Planner::new(Evictor::new(Eviction::Lru), PlacementKind::TierOrder.build(0));
    for (step, pair) in [[0, 1], [2, 3], [4, 5]].iter().enumerate() {
        let need: Vec<ChunkId> = pair.iter().map(|&c| ChunkId(c)).collect();
        let plan = p.plan(&mem, &tenants, &Request { tenant: t, need: &need, required: 2, pinned: &|_| false }, &Forecast::default());
        p.apply(&mut mem, &plan).unwrap();
        for (k, c) in need.iter().enumerate() {
            p.access(&mut mem, *c, (step * 2 + k) as u64 + 1, false);
        }
    }
    let place = |c: u32| mem.chunk(ChunkId(c)).place;
    assert_eq!([place(0), place(1)], [gmux_core::Place::DISK; 2], "both older host chunks demoted");
    assert_eq!([place(2), place(3)], [gmux_core::Place::HOST; 2]);
    assert_eq!([place(4), place(5)], [gmux_core::Place::GPU; 2]);
    mem.check().unwrap();
}

#[test]
fn prefetch_advice_is_followed_only_within_the_rules() {
    struct Advise(Vec<ChunkId>);
    impl gmux_core::hooks::MemoryHooks for Advise {
        fn prefetch(&mut self, _t: TenantId) -> Vec<ChunkId> {
            self.0.clone()
        }
    }
    let mut mem = Memory::new(Capacities { gpu: Some(3 * CHUNK_BYTES), ..Default::default() });
    let mut tenants = Tenants::default();
    let a = tenants.add("a").unwrap();
    let b = tenants.add("b").unwrap();
    mem.allocate(a, 4 * CHUNK_BYTES).unwrap();
    mem.allocate(b, CHUNK_BYTES).unwrap();
    let mut p = Planner::new(Evictor::new(Eviction::Opt), PlacementKind::TierOrder.build(0));
    p.hooks = Box::new(Advise(vec![ChunkId(1), ChunkId(2), ChunkId(4)]));
    let need = [ChunkId(0)];
    let plan = p.plan(&mem, &tenants, &Request { tenant: a, need: &need, required: 1, pinned: &|_| false }, &Forecast::default());
    p.apply(&mut mem, &plan).unwrap();
    assert_eq!(plan.covered, 1);
    assert!(mem.is_resident(ChunkId(1)) && mem.is_resident(ChunkId(2)), "advice fills free memory");
    assert!(!mem.is_resident(ChunkId(4)), "advice naming another tenant's chunk is ignored");
    let need = [ChunkId(3)];
    let forecast = Forecast::from_accesses([ChunkId(3), ChunkId(0), ChunkId(1), ChunkId(2)]);
    let plan = p.plan(&mem, &tenants, &Request { tenant: a, need: &need, required: 1, pinned: &|_| false }, &forecast);
    p.apply(&mut mem, &plan).unwrap();
    assert!(mem.is_resident(ChunkId(3)));
    assert_eq!(mem.used_chunks(gmux_core::Tier::Gpu), 3, "budget holds with advice");
}

/// Where memory is full, a hook's advice evicts only chunks the forecast does not need
/// before the advised one, those it says nothing of included; the rest of a request
/// beyond what is required (a fill) never evicts a chunk the forecast says nothing of.
#[test]
fn advice_evicts_only_what_the_forecast_needs_later() {
    struct Advise;
    impl gmux_core::hooks::MemoryHooks for Advise {
        fn prefetch(&mut self, _t: TenantId) -> Vec<ChunkId> {
            vec![ChunkId(2)]
        }
    }
    // Chunks 0 and 1 resident, room for no more; chunk 0 is the command's.
    let setup = |advise: bool| {
        let mut mem = Memory::new(Capacities { gpu: Some(2 * CHUNK_BYTES), ..Default::default() });
        let mut tenants = Tenants::default();
        let a = tenants.add("a").unwrap();
        mem.allocate(a, 4 * CHUNK_BYTES).unwrap();
        let mut p = Planner::new(Evictor::new(Eviction::Opt), PlacementKind::TierOrder.build(0));
        let both = [ChunkId(0), ChunkId(1)];
        let plan = p.plan(&mem, &tenants, &Request { tenant: a, need: &both, required: 2, pinned: &|_| false }, &Forecast::default());
        p.apply(&mut mem, &plan).unwrap();
        if advise {
            p.hooks = Box::new(Advise);
        }
        (mem, tenants, p, a)
    };
    let brought_2 = |advise: bool, need: &[ChunkId], forecast: &Forecast| {
        let (mut mem, tenants, mut p, a) = setup(advise);
        let plan = p.plan(&mem, &tenants, &Request { tenant: a, need, required: 1, pinned: &|_| false }, forecast);
        p.apply(&mut mem, &plan).unwrap();
        assert_eq!(mem.used_chunks(gmux_core::Tier::Gpu), 2, "within the budget");
        mem.is_resident(ChunkId(2))
    };
    let own = [ChunkId(0)];
    assert!(brought_2(true, &own, &Forecast::default()), "advice may evict a chunk no forecast needs");
    assert!(!brought_2(true, &own, &Forecast::from_accesses([ChunkId(0), ChunkId(1)])), "not one the forecast needs");
    assert!(brought_2(true, &own, &Forecast::from_accesses([ChunkId(0), ChunkId(2), ChunkId(1)])), "one needed after it goes");
    assert!(!brought_2(false, &[ChunkId(0), ChunkId(2)], &Forecast::default()), "a fill does not evict what no forecast covers");
}
