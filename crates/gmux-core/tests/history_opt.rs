//! OPT from a tenant's own history against LRU on a loop larger than GPU memory: LRU
//! evicts exactly what the loop needs next, OPT with the recurrence keeps most of it.

use gmux_core::evict::{Eviction, Evictor, Forecast};
use gmux_core::history::{signature, History};
use gmux_core::memory::Capacities;
use gmux_core::placement::PlacementKind;
use gmux_core::planner::{Planner, Request};
use gmux_core::{AllocId, ChunkId, Memory, Tenants, CHUNK_BYTES};

/// Runs `rounds` of a loop over `allocs` allocations of `chunks` chunks each under a
/// budget of `budget` chunks; returns chunks populated after the first round and chunks
/// evicted in all.
fn loop_moves(use_history: bool, allocs: u32, chunks: u64, budget: u64, rounds: usize) -> (u64, u64) {
    let mut mem = Memory::new(Capacities { gpu: Some(budget * CHUNK_BYTES), ..Default::default() });
    let mut tenants = Tenants::default();
    let t = tenants.add("t").unwrap();
    let ids: Vec<AllocId> = (0..allocs).map(|_| mem.allocate(t, chunks * CHUNK_BYTES).unwrap()).collect();
    let mut planner = Planner::new(Evictor::new(Eviction::Lru), PlacementKind::TierOrder.build(0));
    let mut history = History::new(10_000, 10_000);
    let (mut populated, mut evicted) = (0, 0);
    let mut tick = 0;
    for round in 0..rounds {
        for &a in &ids {
            let sig = signature(1, &[a]);
            let predicted = if use_history { history.predict(sig) } else { None };
            let forecast = match &predicted {
                Some(order) => {
                    planner.evictor = Evictor::new(Eviction::Opt);
                    Forecast::from_accesses(order.iter().flat_map(|(p, _)| mem.alloc(*p).unwrap().chunks()))
                }
                None => {
                    planner.evictor = Evictor::new(Eviction::Lru);
                    Forecast::default()
                }
            };
            let need: Vec<ChunkId> = mem.alloc(a).unwrap().chunks().collect();
            let plan = planner.plan(&mem, &tenants, &Request { tenant: t, need: &need, required: need.len(), pinned: &|_| false }, &forecast);
            assert_eq!(plan.covered, need.len());
            let moved = planner.apply(&mut mem, &plan).unwrap();
            if round > 0 {
                populated += moved.populated;
            }
            evicted += moved.evicted;
            tick += 1;
            for c in &need {
                planner.access(&mut mem, *c, tick, true);
            }
            history.record(sig, &[a]);
            mem.check().unwrap();
        }
    }
    (populated, evicted)
}

#[test]
fn history_opt_moves_far_less_than_lru_on_a_loop() {
    // 8 allocations of 2 chunks, room for 5 of them: LRU misses all 8 every round;
    // Belady misses 8 - 5 + 1 = 4 once the loop is known (from the third round).
    let rounds = 12;
    let (lru, _) = loop_moves(false, 8, 2, 10, rounds);
    let (opt, _) = loop_moves(true, 8, 2, 10, rounds);
    println!("chunks populated after the first round: LRU {lru}, OPT with history {opt}");
    assert_eq!(lru, (rounds as u64 - 1) * 8 * 2, "LRU refetches every allocation every round");
    assert!(opt <= (rounds as u64 - 1) * 4 * 2 + 2 * 8 * 2, "OPT with history moved {opt} chunks, LRU {lru}");
    assert!(opt * 10 <= lru * 6, "OPT with history moved {opt} chunks, LRU {lru}");
}

#[test]
fn without_a_repeat_history_changes_nothing() {
    // Every allocation once: no context recurs, so the forecast is never used.
    let once = |h| loop_moves(h, 12, 1, 4, 1).1;
    assert_eq!(once(false), 8, "12 chunks through a budget of 4");
    assert_eq!(once(true), once(false));
}
