//! The runtime over a device that records its calls: bytes moved, limits, the order of
//! evictions after application work, and which stream waits for which population.

use crate::{Error, Settings, TenantMemory, WorkingSet};
use gmux_core::device::{CopyStream, Device, Event, PhysChunk};
use gmux_core::{AllocId, ChunkId, Tier, CHUNK_BYTES};
use proptest::prelude::*;
use std::collections::{HashMap, HashSet};

/// Records calls; events numbered below `done_below` are done.
#[derive(Default)]
pub(crate) struct Calls {
    pub(crate) log: Vec<String>,
    pub(crate) next: u64,
    pub(crate) done_below: u64,
    /// Chunks of GPU memory mapped.
    pub(crate) mapped: u64,
    /// Chunks of host memory mapped.
    pub(crate) host_mapped: u64,
    host_phys: HashSet<u64>,
    phys_at: HashMap<ChunkId, u64>,
}

impl Device for Calls {
    type Error = String;
    type Stream = u32;
    type Fence = u32;

    fn create_chunk(&mut self, _: u32) -> Result<PhysChunk, String> {
        self.next += 1;
        Ok(PhysChunk(self.next))
    }
    fn create_host_chunk(&mut self) -> Result<PhysChunk, String> {
        self.next += 1;
        self.host_phys.insert(self.next);
        Ok(PhysChunk(self.next))
    }
    fn release_chunk(&mut self, _: PhysChunk) -> Result<(), String> {
        Ok(())
    }
    fn map(&mut self, c: ChunkId, n: u32, p: PhysChunk) -> Result<(), String> {
        *(if self.host_phys.contains(&p.0) { &mut self.host_mapped } else { &mut self.mapped }) += u64::from(n);
        self.phys_at.insert(c, p.0);
        self.log.push(format!("map c{} x{n}", c.0));
        Ok(())
    }
    fn unmap(&mut self, c: ChunkId, n: u32) -> Result<(), String> {
        let p = self.phys_at.remove(&c).ok_or(format!("unmap of unmapped c{}", c.0))?;
        *(if self.host_phys.contains(&p) { &mut self.host_mapped } else { &mut self.mapped }) -= u64::from(n);
        self.log.push(format!("unmap c{} x{n}", c.0));
        Ok(())
    }
    fn copy(&mut self, s: CopyStream, c: ChunkId, from: Tier, to: Tier) -> Result<(), String> {
        self.log.push(format!("{s:?} c{} {from:?}->{to:?}", c.0));
        Ok(())
    }
    fn record(&mut self, _: CopyStream) -> Result<Event, String> {
        self.next += 1;
        Ok(Event(self.next))
    }
    fn wait(&mut self, _: CopyStream, _: Event) -> Result<(), String> {
        Ok(())
    }
    fn keep_events(&mut self, _: &[Event]) {}
    fn evict_after(&mut self, after: &[u32]) {
        self.log.push(format!("after {after:?}"));
    }
    fn flush(&mut self) -> Result<(), String> {
        self.log.push("flush".into());
        Ok(())
    }
    fn is_done(&mut self, e: Event) -> bool {
        e.0 < self.done_below
    }
    fn drop_event(&mut self, _: Event) {}
    fn reclaim(&mut self) -> Result<(), String> {
        Ok(())
    }
    fn synchronize(&mut self) -> Result<(), String> {
        Ok(())
    }
    fn forget(&mut self, c: ChunkId) {
        self.log.push(format!("forget c{}", c.0));
    }
}

const MIB: u64 = 1 << 20;

fn settings() -> Settings {
    Settings { history_opt: true, prefetch: 0, extent_chunks: 1, all_events: false, sync_after: false }
}

pub(crate) fn memory(limit_chunks: u64) -> TenantMemory<Calls> {
    TenantMemory::new(Calls::default(), limit_chunks * CHUNK_BYTES, settings())
}

pub(crate) fn run(m: &mut TenantMemory<Calls>, allocs: &[AllocId], on: u32) -> Result<Vec<Event>, Error<String>> {
    let ws = WorkingSet::Allocs(allocs.into());
    let sig = m.signature(7, &ws);
    let waits = m.prepare(&ws, Some(on), sig, || None, || vec![on])?;
    m.released(&ws, sig);
    Ok(waits)
}

/// The allocations a generated command names (indices taken modulo their count), sorted,
/// without repeats.
pub(crate) fn allocs_named(cmd: &[usize], allocs: &[AllocId]) -> Vec<AllocId> {
    let mut ws: Vec<AllocId> = cmd.iter().map(|k| allocs[k % allocs.len()]).collect();
    ws.sort_unstable();
    ws.dedup();
    ws
}

pub(crate) fn copies(m: &TenantMemory<Calls>, what: &str) -> usize {
    m.dev.log.iter().filter(|l| l.contains(what)).count()
}

#[test]
fn a_working_set_over_the_limit_evicts_only_what_it_must() {
    let mut m = memory(8);
    let a = m.allocate(6 * CHUNK_BYTES).unwrap();
    let b = m.allocate(4 * CHUNK_BYTES - MIB).unwrap();
    run(&mut m, &[a], 0).unwrap();
    assert_eq!((m.resident(), m.stats.moved.created), (6 * CHUNK_BYTES, 6), "first use creates, copies nothing");
    run(&mut m, &[b], 0).unwrap();
    assert_eq!(m.resident(), 8 * CHUNK_BYTES, "the limit is full");
    assert_eq!(m.stats.moved.evicted, 2, "two of a's chunks make room for b's four");
    assert_eq!(copies(&m, "Gpu->Host"), 2);
    run(&mut m, &[a], 0).unwrap();
    assert_eq!(m.stats.moved.populated, 2, "a's two chunks come back");
    assert!(m.resident() <= m.limit());
    assert_eq!(m.allocated(), 10 * CHUNK_BYTES - MIB);
}

#[test]
fn evictions_wait_for_the_application_work_first() {
    let mut m = memory(2);
    let a = m.allocate(2 * CHUNK_BYTES).unwrap();
    let b = m.allocate(2 * CHUNK_BYTES).unwrap();
    run(&mut m, &[a], 3).unwrap();
    m.dev.log.clear();
    run(&mut m, &[b], 5).unwrap();
    let log: Vec<&String> = m.dev.log.iter().filter(|l| !l.contains("map c")).collect();
    assert_eq!(log[0], "after [5]", "the fence comes before the eviction copies: {log:?}");
    assert_eq!(log.iter().position(|l| *l == "flush"), Some(3), "one flush after both copies: {log:?}");
}

#[test]
fn a_working_set_larger_than_the_limit_is_refused_with_its_size() {
    let mut m = memory(4);
    let a = m.allocate(5 * CHUNK_BYTES).unwrap();
    match run(&mut m, &[a], 0) {
        Err(Error::NoRoom { need, room }) => assert_eq!((need, room), (5 * CHUNK_BYTES, 4 * CHUNK_BYTES)),
        other => panic!("expected NoRoom, got {other:?}"),
    }
    assert_eq!(m.resident(), 0, "nothing moved");
    let grant = || Some(6 * CHUNK_BYTES);
    let ws = WorkingSet::Allocs(smallvec::smallvec![a]);
    m.prepare(&ws, None, 0, grant, Vec::new).unwrap();
    assert_eq!((m.limit(), m.resident()), (6 * CHUNK_BYTES, 5 * CHUNK_BYTES), "a larger grant raises the limit first");
}

#[test]
fn another_stream_waits_for_a_population_once() {
    let mut m = memory(2);
    let a = m.allocate(2 * CHUNK_BYTES).unwrap();
    let b = m.allocate(2 * CHUNK_BYTES).unwrap();
    run(&mut m, &[a], 1).unwrap();
    run(&mut m, &[b], 1).unwrap();
    m.dev.done_below = m.dev.next + 1;
    let own = run(&mut m, &[a], 1).unwrap();
    assert_eq!(own.len(), 1, "the command waits for its own population");
    assert_eq!(run(&mut m, &[a], 1).unwrap(), vec![], "its stream already waits for it");
    assert_eq!(run(&mut m, &[a], 2).unwrap(), own, "another stream waits for the same event");
    assert_eq!(run(&mut m, &[a], 2).unwrap(), vec![], "once");
    assert_eq!(m.stats.waits_for_others, 1);
    m.dev.done_below = u64::MAX;
    assert!(!m.settle(), "landed populations are forgotten");
}

#[test]
fn shrinking_moves_one_step_at_a_time_down_to_the_cap() {
    let mut m = memory(1024);
    let a = m.allocate(600 * CHUNK_BYTES).unwrap();
    run(&mut m, &[a], 0).unwrap();
    let step = crate::STEP_BYTES / CHUNK_BYTES;
    assert!(m.shrink_step(100 * CHUNK_BYTES, Vec::new).unwrap(), "more must go after one step");
    assert_eq!(m.resident(), (600 - step) * CHUNK_BYTES);
    while m.shrink_step(100 * CHUNK_BYTES, Vec::new).unwrap() {}
    assert_eq!((m.resident(), m.limit()), (100 * CHUNK_BYTES, 100 * CHUNK_BYTES));
    assert!(m.held() <= 100 * CHUNK_BYTES, "spare physical memory goes too: held {}", m.held());
    assert_eq!(m.stats.moved.evicted, 500);
}

#[test]
fn a_whole_fill_brings_everything_back_within_the_limit() {
    let mut m = memory(1024);
    let a = m.allocate(300 * CHUNK_BYTES).unwrap();
    let b = m.allocate(300 * CHUNK_BYTES).unwrap();
    run(&mut m, &[a, b], 0).unwrap();
    while m.shrink_step(0, Vec::new).unwrap() {}
    assert_eq!(m.resident(), 0);
    m.set_limit(400 * CHUNK_BYTES);
    let mut steps = 0;
    while let Some(true) = m.fill_step(true, Vec::new).unwrap() {
        steps += 1;
    }
    assert_eq!(m.resident(), 400 * CHUNK_BYTES, "filled up to the limit");
    assert!(steps >= 400 / (crate::STEP_BYTES / CHUNK_BYTES) as usize - 1, "in steps: {steps}");
}

#[test]
fn a_freed_allocation_leaves_the_table_and_the_device() {
    let mut m = memory(8);
    let a = m.allocate(3 * CHUNK_BYTES).unwrap();
    run(&mut m, &[a], 0).unwrap();
    m.free(a).unwrap();
    assert_eq!((m.resident(), m.allocated(), m.dev.mapped), (0, 0, 0));
    assert_eq!(copies(&m, "forget"), 3);
    assert!(matches!(m.free(a), Err(Error::Unknown(_))));
}

#[test]
fn the_report_counts_bytes() {
    let mut m = memory(4);
    let a = m.allocate(3 * CHUNK_BYTES).unwrap();
    let b = m.allocate(3 * CHUNK_BYTES).unwrap();
    run(&mut m, &[a], 0).unwrap();
    run(&mut m, &[b], 0).unwrap();
    let r = m.report(7, true, 2);
    assert_eq!((r.resident, r.swapped, r.allocated), (4 * CHUNK_BYTES, 2 * CHUNK_BYTES, 6 * CHUNK_BYTES));
    assert_eq!((r.bytes_d2h, r.commands, r.blocked, r.busy, r.finished), (2 * CHUNK_BYTES, 2, 7, true, 2));
    assert_eq!(r.period, 6 * CHUNK_BYTES, "both allocations are in the forecast");
}

/// A forecast that falls short (a new phase whose one command repeats: the history
/// predicts that command again and nothing else) does not shrink what the process asks
/// for, or what its fill brings back, below what its last slice used.
#[test]
fn what_the_last_slice_used_is_a_floor_under_the_forecast() {
    let mut m = memory(64);
    let layers: Vec<AllocId> = (0..4).map(|_| m.allocate(4 * CHUNK_BYTES).unwrap()).collect();
    let e = m.allocate(CHUNK_BYTES).unwrap();
    for _ in 0..10 {
        for a in &layers {
            run(&mut m, &[*a], 0).unwrap();
        }
    }
    m.slot_ended(8);
    for _ in 0..3 {
        run(&mut m, &[e], 0).unwrap();
    }
    let r = m.report(0, true, 0);
    assert_eq!(r.want, 17 * CHUNK_BYTES, "e, and the four allocations of the last 8 commands");
    assert_eq!(r.period, 17 * CHUNK_BYTES);
    while m.shrink_step(0, Vec::new).unwrap() {}
    m.set_limit(64 * CHUNK_BYTES);
    while let Some(true) = m.fill_step(false, Vec::new).unwrap() {}
    assert_eq!(m.resident(), 17 * CHUNK_BYTES, "the fill brings back what the report asks for");
    m.slot_ended(2);
    m.slot_ended(2);
    m.slot_ended(2);
    assert_eq!(m.report(0, true, 0).want, CHUNK_BYTES, "over the last two commands, only e was used");
}

/// What the report asks for is what the fill brings: the next slice's forecast and what
/// the last slice used, also where the forecast has the latter further ahead.
#[test]
fn the_report_wants_what_the_fill_brings() {
    let mut m = memory(64);
    let loop8: Vec<AllocId> = (0..8).map(|_| m.allocate(CHUNK_BYTES).unwrap()).collect();
    for _ in 0..10 {
        for a in &loop8 {
            run(&mut m, &[*a], 0).unwrap();
        }
    }
    m.slot_ended(4);
    let fill: u64 = m.next_slice().iter().map(|_| CHUNK_BYTES).sum();
    assert_eq!(fill, 8 * CHUNK_BYTES, "the next four, and the last four");
    assert_eq!(m.report(0, true, 0).want, fill);
}

proptest! {
    /// Whatever commands run, resident memory stays within the limit, and every chunk of
    /// a command's working set is resident when it is released.
    #[test]
    fn residency_within_the_limit(sizes in prop::collection::vec(1u64..6, 2..6), cmds in prop::collection::vec(prop::collection::vec(0usize..6, 1..3), 1..40), limit in 6u64..16) {
        let mut m = memory(limit);
        let allocs: Vec<AllocId> = sizes.iter().map(|s| m.allocate(s * CHUNK_BYTES).unwrap()).collect();
        for (i, cmd) in cmds.iter().enumerate() {
            let ws = allocs_named(cmd, &allocs);
            let need: u64 = ws.iter().map(|a| m.alloc(*a).unwrap().count as u64).sum();
            let r = run(&mut m, &ws, (i % 2) as u32);
            prop_assert_eq!(r.is_ok(), need <= limit, "need {} of {}", need, limit);
            if r.is_ok() {
                prop_assert!(ws.iter().all(|a| m.is_whole(*a)));
            }
            prop_assert!(m.resident() <= m.limit() && m.held() <= m.limit());
        }
    }

    /// A hit (the launch path's shortcut past `prepare`) is a command that `prepare` would
    /// give no waits and no device work; once every population has landed, a command is a
    /// hit exactly when all of its allocations are resident.
    #[test]
    fn a_hit_is_a_command_prepare_has_nothing_to_do_for(sizes in prop::collection::vec(1u64..4, 2..6), cmds in prop::collection::vec((prop::collection::vec(0usize..6, 1..3), any::<bool>()), 1..40)) {
        let mut m = memory(9);
        let allocs: Vec<AllocId> = sizes.iter().map(|s| m.allocate(s * CHUNK_BYTES).unwrap()).collect();
        for (i, (cmd, landed)) in cmds.iter().enumerate() {
            if *landed {
                m.dev.done_below = u64::MAX;
            }
            let ws = WorkingSet::Allocs(allocs_named(cmd, &allocs).as_slice().into());
            let resident = m.allocs_in(&ws).iter().all(|a| m.is_whole(*a));
            let hit = m.is_hit(&ws);
            if *landed {
                prop_assert_eq!(hit, resident);
            }
            let (calls, on) = (m.dev.log.len(), (i % 2) as u32);
            let waits = m.prepare(&ws, Some(on), 0, || None, || vec![on]).unwrap();
            if hit {
                prop_assert!(waits.is_empty() && m.dev.log.len() == calls, "a hit waited for {:?} or moved: {:?}", waits, &m.dev.log[calls..]);
            }
            m.released(&ws, 0);
            m.dev.done_below = 0;
        }
    }
}
