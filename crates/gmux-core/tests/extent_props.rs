//! Extents on random traces of whole-allocation working sets (what the shim predicts):
//! extents are resident whole or not at all, the mover's physical memory never exceeds
//! the GPU budget, and its mappings are consistent (checked by a strict device).

use gmux_core::device::{CopyStream, Device, Event, PhysChunk};
use gmux_core::evict::{Eviction, Evictor, Forecast};
use gmux_core::memory::{Capacities, Tier};
use gmux_core::mover::Mover;
use gmux_core::placement::PlacementKind;
use gmux_core::planner::{Planner, Request};
use gmux_core::{AllocId, ChunkId, Memory, Place, Tenants, CHUNK_BYTES};
use proptest::prelude::*;
use std::collections::HashMap;

/// A device that refuses what the driver would refuse: mapping over a mapped chunk,
/// mapping a handle twice or with another length, unmapping anything but a whole
/// mapping, copying out of an unmapped chunk.
#[derive(Default)]
struct Strict {
    sizes: HashMap<u64, u32>,
    mapped_at: HashMap<u64, ChunkId>,
    chunk_map: HashMap<ChunkId, (ChunkId, u32)>,
    next: u64,
    maps: u64,
    longest: u32,
    held: u64,
}

impl Device for Strict {
    type Error = String;
    type Stream = u32;
    type Fence = ();
    fn create_chunk(&mut self, n: u32) -> Result<PhysChunk, String> {
        self.next += 1;
        self.sizes.insert(self.next, n);
        self.held += u64::from(n);
        Ok(PhysChunk(self.next))
    }
    fn create_host_chunk(&mut self) -> Result<PhysChunk, String> {
        Err("no command here exceeds the budget".into())
    }
    fn release_chunk(&mut self, p: PhysChunk) -> Result<(), String> {
        if self.mapped_at.contains_key(&p.0) {
            return Err(format!("release of mapped p{}", p.0));
        }
        self.held -= u64::from(self.sizes.remove(&p.0).ok_or("release of unknown handle")?);
        Ok(())
    }
    fn map(&mut self, first: ChunkId, n: u32, p: PhysChunk) -> Result<(), String> {
        if self.sizes.get(&p.0) != Some(&n) {
            return Err(format!("map of p{} with length {n}", p.0));
        }
        if self.mapped_at.insert(p.0, first).is_some() {
            return Err(format!("p{} mapped twice", p.0));
        }
        for c in (first.0..first.0 + n).map(ChunkId) {
            if self.chunk_map.insert(c, (first, n)).is_some() {
                return Err(format!("chunk {} mapped twice", c.0));
            }
        }
        self.maps += 1;
        self.longest = self.longest.max(n);
        Ok(())
    }
    fn unmap(&mut self, first: ChunkId, n: u32) -> Result<(), String> {
        for c in (first.0..first.0 + n).map(ChunkId) {
            if self.chunk_map.remove(&c) != Some((first, n)) {
                return Err(format!("unmap of chunks {}+{n}, not one mapping", first.0));
            }
        }
        self.mapped_at.retain(|_, f| *f != first);
        Ok(())
    }
    fn copy(&mut self, _: CopyStream, c: ChunkId, from: Tier, _: Tier) -> Result<(), String> {
        if from == Tier::Gpu && !self.chunk_map.contains_key(&c) {
            return Err(format!("copy out of unmapped chunk {}", c.0));
        }
        Ok(())
    }
    fn record(&mut self, _: CopyStream) -> Result<Event, String> {
        Ok(Event(0))
    }
    fn wait(&mut self, _: CopyStream, _: Event) -> Result<(), String> {
        Ok(())
    }
    fn keep_events(&mut self, _: &[Event]) {}
    fn evict_after(&mut self, _: &[()]) {}
    fn flush(&mut self) -> Result<(), String> {
        Ok(())
    }
    fn is_done(&mut self, _: Event) -> bool {
        true
    }
    fn drop_event(&mut self, _: Event) {}
    fn reclaim(&mut self) -> Result<(), String> {
        Ok(())
    }
    fn synchronize(&mut self) -> Result<(), String> {
        Ok(())
    }
    fn forget(&mut self, _: ChunkId) {}
}

fn trace() -> impl Strategy<Value = (u32, Vec<u32>, Vec<Vec<usize>>)> {
    (prop_oneof![Just(1u32), Just(4), Just(16)], prop::collection::vec(1u32..40, 2..8)).prop_flat_map(|(extent, sizes)| {
        let n = sizes.len();
        (Just(extent), Just(sizes), prop::collection::vec(prop::collection::vec(0..n, 1..3), 1..40))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn extents_move_whole_within_the_budget((extent, sizes, cmds) in trace()) {
        let budget = cmds.iter().map(|c| { let mut c = c.clone(); c.sort_unstable(); c.dedup(); c.iter().map(|&a| sizes[a] as u64).sum::<u64>() }).max().unwrap();
        let mut mem = Memory::new(Capacities { gpu: Some(budget * CHUNK_BYTES), ..Default::default() });
        mem.set_extent(extent);
        let mut tenants = Tenants::default();
        let t = tenants.add("t").unwrap();
        let allocs: Vec<AllocId> = sizes.iter().map(|&s| mem.allocate(t, s as u64 * CHUNK_BYTES).unwrap()).collect();
        let mut planner = Planner::new(Evictor::new(Eviction::Lru), PlacementKind::TierOrder.build(0));
        let (mut mover, mut dev) = (Mover::default(), Strict::default());
        for (i, cmd) in cmds.iter().enumerate() {
            let need: Vec<ChunkId> = cmd.iter().flat_map(|&a| mem.alloc(allocs[a]).unwrap().chunks()).collect();
            let plan = planner.plan(&mem, &tenants, &Request { tenant: t, need: &need, required: need.len(), pinned: &|_| false }, &Forecast::default());
            prop_assert_eq!(plan.covered, need.len());
            mover.issue(&plan, &mem, &mut dev).map_err(TestCaseError::fail)?;
            planner.apply(&mut mem, &plan).unwrap();
            mem.check().unwrap();
            prop_assert!(dev.held <= budget, "physical memory {} chunks over the budget {budget}", dev.held);
            prop_assert_eq!(dev.held, mover.held());
            for (c, ch) in mem.chunks() {
                let (first, len) = mem.extent(c);
                let whole = (first.0..first.0 + len).all(|x| mem.chunk(ChunkId(x)).place == ch.place);
                prop_assert!(ch.place != Place::GPU || whole, "extent of chunk {} split", c.0);
                prop_assert_eq!(ch.place == Place::GPU, dev.chunk_map.contains_key(&c), "chunk {} mapped iff resident", c.0);
            }
            for (k, c) in need.iter().enumerate() {
                planner.access(&mut mem, *c, (i * 1000 + k) as u64 + 1, true);
            }
        }
        prop_assert!(dev.longest <= extent, "a mapping of {} chunks with extents of {extent}", dev.longest);
    }
}

#[test]
fn a_sixteen_chunk_extent_is_one_mapping() {
    let mut mem = Memory::new(Capacities { gpu: Some(32 * CHUNK_BYTES), ..Default::default() });
    mem.set_extent(16);
    let mut tenants = Tenants::default();
    let t = tenants.add("t").unwrap();
    let a = mem.allocate(t, 32 * CHUNK_BYTES).unwrap();
    let b = mem.allocate(t, 32 * CHUNK_BYTES).unwrap();
    let mut planner = Planner::new(Evictor::new(Eviction::Lru), PlacementKind::TierOrder.build(0));
    let (mut mover, mut dev) = (Mover::default(), Strict::default());
    for (tick, id) in [a, b, a, b].into_iter().enumerate() {
        let need: Vec<ChunkId> = mem.alloc(id).unwrap().chunks().collect();
        let plan = planner.plan(&mem, &tenants, &Request { tenant: t, need: &need, required: need.len(), pinned: &|_| false }, &Forecast::default());
        mover.issue(&plan, &mem, &mut dev).unwrap();
        planner.apply(&mut mem, &plan).unwrap();
        for c in &need {
            planner.access(&mut mem, *c, tick as u64 + 1, true);
        }
    }
    assert_eq!(dev.maps, 8, "4 plans × 2 extents of 32 MiB, not 128 chunk mappings");
    assert_eq!(dev.next, 2, "two handles created, then reused");
}
