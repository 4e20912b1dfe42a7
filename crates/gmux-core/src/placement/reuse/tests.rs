//! Unit tests of GMT-Reuse: the fit, the predicted classes, and host hits on cyclic scans.

use super::*;
use crate::memory::Capacities;
use crate::placement::{RandomPlacement, TierOrder, TwoTier};
use crate::size::CHUNK_BYTES;
use crate::tenant::TenantId;

const G: u64 = 4;
const H: u64 = 8;

fn memory(chunks: u64) -> Memory {
    let caps = Capacities { gpu: Some(G * CHUNK_BYTES), host: Some(H * CHUNK_BYTES), disk: None };
    let mut m = Memory::new(caps);
    m.allocate_on_disk(TenantId(0), chunks * CHUNK_BYTES).unwrap();
    m
}

fn relocate(m: &mut Memory, p: &mut dyn Placement, c: ChunkId, to: Tier) {
    let from = m.chunk(c).place;
    m.relocate(c, to).unwrap();
    p.on_move(c, from, Place::In(to));
}

/// Evicts one GPU chunk the way the planner does: LRU candidates, bounded Keeps.
fn evict(p: &mut dyn Placement, m: &mut Memory, lru: &mut VecDeque<ChunkId>) {
    let host_full = m.free_chunks(Tier::Host) == Some(0);
    let mut keeps = 0;
    let (victim, decision) = loop {
        let v = lru[keeps];
        match p.place(v, m, host_full) {
            Decision::Keep if keeps + 1 < lru.len() => keeps += 1,
            Decision::Keep => break (v, Decision::Host),
            d => break (v, d),
        }
    };
    lru.retain(|&x| x != victim);
    let to = match decision {
        Decision::Host if host_full => match p.host_victim(m) {
            Some(h) => {
                relocate(m, p, h, Tier::Disk);
                Tier::Host
            }
            None => Tier::Disk,
        },
        Decision::Host => Tier::Host,
        _ => Tier::Disk,
    };
    relocate(m, p, victim, to);
}

/// Host hits over `cycles` passes of chunks `0..s` through an exclusive GPU/host/disk cache.
fn cyclic_scan(p: &mut dyn Placement, m: &mut Memory, s: u32, cycles: u32) -> u64 {
    let mut lru = VecDeque::new();
    let mut host_hits = 0;
    for c in (0..cycles).flat_map(|_| (0..s).map(ChunkId)) {
        p.on_access(c, m);
        let from = m.chunk(c).place;
        if from == Place::GPU {
            lru.retain(|&x| x != c);
        } else {
            host_hits += (from == Place::HOST) as u64;
            if m.free_chunks(Tier::Gpu) == Some(0) {
                evict(p, m, &mut lru);
            }
            relocate(m, p, c, Tier::Gpu);
        }
        lru.push_back(c);
    }
    m.check().unwrap();
    host_hits
}

#[test]
fn ols_of_a_pure_cycle_is_rd_equals_vtd() {
    let k = 10;
    let m = memory(k);
    let mut p = ReusePlacement::default();
    for c in (0..400).flat_map(|_| (0..k as u32).map(ChunkId)) {
        p.on_access(c, &m);
    }
    assert_eq!(p.ols.n, 62.0);
    assert_eq!((p.ols.mean_x, p.ols.mean_y), (9.0, 9.0));
    let (slope, b) = p.ols.fit();
    assert!((slope - 1.0).abs() < 0.05, "m = {slope}");
    assert!(b.abs() < 0.5, "b = {b}");
}

#[test]
fn ols_recovers_slope_and_offset() {
    // Hot chunk 0 between every cold access: hot (VTD 1, RD 1), cold (VTD 2k-1, RD k).
    let k = 12u32;
    let m = memory(k as u64 + 1);
    let mut p = ReusePlacement::with_sample_every(1);
    for c in (0..50).flat_map(|_| (1..=k).flat_map(|c| [ChunkId(0), ChunkId(c)])) {
        p.on_access(c, &m);
    }
    let (slope, b) = p.ols.fit();
    assert!((slope - 0.5).abs() < 1e-9, "m = {slope}");
    assert!((b - 0.5).abs() < 1e-9, "b = {b}");
}

#[test]
fn scan_larger_than_gpu_and_host_is_predicted_long() {
    // Each chunk's RRD after eviction is s - 1 - G = 35 >= G + H.
    let s = 40;
    let mut m = memory(s);
    let mut p = ReusePlacement::default();
    cyclic_scan(&mut p, &mut m, s as u32, 20);
    for c in (0..s as u32).map(ChunkId) {
        assert_eq!(p.hist[c.0 as usize].state, Some(LONG), "chunk {c:?}");
        assert_eq!(p.place(c, &m, true), Decision::Disk, "chunk {c:?}");
        assert_eq!(p.place(c, &m, false), Decision::Host, "chunk {c:?}: mostly-long heuristic");
    }
}

#[test]
fn short_reuse_is_kept_once_per_access() {
    let mut m = memory(4);
    let mut p = ReusePlacement::default();
    let (a, b) = (ChunkId(0), ChunkId(1));
    p.on_access(a, &m);
    relocate(&mut m, &mut p, a, Tier::Gpu);
    assert_eq!(p.place(a, &m, false), Decision::Host, "never seen: medium");
    relocate(&mut m, &mut p, a, Tier::Host);
    p.on_access(b, &m);
    p.on_access(a, &m);
    relocate(&mut m, &mut p, a, Tier::Gpu);
    assert_eq!(p.hist[0].state, Some(SHORT));
    assert_eq!(p.place(a, &m, false), Decision::Keep);
    assert_eq!(p.place(a, &m, false), Decision::Host, "no second Keep without an access");
    assert_eq!(p.place(a, &m, true), Decision::Host);
    p.on_access(a, &m);
    assert_eq!(p.place(a, &m, false), Decision::Keep);
}

#[test]
fn reuse_keeps_part_of_a_scan_in_host_where_tier_order_keeps_none() {
    let (s, cycles) = (32, 30);
    let hits = |p: &mut dyn Placement| cyclic_scan(p, &mut memory(s as u64), s, cycles);
    let reuse = hits(&mut ReusePlacement::default());
    let tier_order = hits(&mut TierOrder::default());
    let random = hits(&mut RandomPlacement::new(1));
    let two_tier = hits(&mut TwoTier);
    eprintln!("host hits: reuse {reuse}, tier-order {tier_order}, random {random}, two-tier {two_tier}");
    assert_eq!(tier_order, 0);
    assert_eq!(two_tier, 0);
    assert!(reuse > tier_order);
    assert!(reuse > 6 * cycles as u64, "about H = 8 host hits per cycle after warm-up");
}
