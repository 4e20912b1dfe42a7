//! GMT-Reuse (§2.1.3, §2.2): place GPU victims by their predicted remaining reuse distance.
//!
//! * VTD: a global access counter; the VTD of an access is the number of accesses since
//!   the chunk's previous one.
//! * Every Nth access also measures the true reuse distance (distinct chunks since the
//!   previous access) with a Fenwick tree over access slots, and feeds (VTD, RD) to a
//!   running least-squares fit RD = m·VTD + b.
//! * When an evicted chunk is accessed again, its remaining VTD since the eviction gives
//!   RRD = m·RVTD + b, which Eq. 1 turns into the tier it should have gone to: the
//!   "correct" state of a 3-state Markov chain per chunk, whose transition weights
//!   predict the tier at its next eviction.
//!
//! Eq. 1 as written: medium when RRD < size(Tier2). RRD counts from the eviction and a
//! FIFO host keeps a victim only while fewer than H chunks enter after it, so the host
//! size alone is the bound that predicts a host hit (a G + H bound misclassifies cyclic
//! scans of G + H < S <= 2G + H chunks as medium, and they then miss like TierOrder).

use super::tier_order::HostFifo;
use super::{Decision, Placement};
use crate::memory::{ChunkId, Memory, Place, Tier};
use std::collections::VecDeque;

const DEFAULT_SAMPLE_EVERY: u64 = 64;
/// Samples needed before the fit replaces RD = VTD.
const MIN_SAMPLES: f64 = 32.0;
/// Window of recent predictions for the "mostly long" heuristic (§2.2).
const RECENT: usize = 100;
/// Share of long predictions above which a long victim still goes to a free host chunk.
const LONG_SHARE: f64 = 0.8;

const SHORT: usize = 0;
const MEDIUM: usize = 1;
const LONG: usize = 2;

/// Per-chunk history.
#[derive(Debug, Clone, Default)]
struct ChunkHist {
    /// Number of the previous access (accesses are numbered from 1); 0 = never accessed.
    last: u64,
    /// Fenwick slot of the previous access; 0 = none.
    slot: usize,
    /// Access counter when the chunk was last evicted from GPU memory, until its next access.
    evicted_at: Option<u64>,
    /// Last correct class (SHORT, MEDIUM, LONG).
    state: Option<usize>,
    /// Transition weights `weights[from][to]` between successive correct classes.
    weights: [[u8; 3]; 3],
    /// Returned `Keep` since its last access.
    kept: bool,
}

/// Fenwick tree of counts over slots `1..=len`.
#[derive(Debug, Clone, Default)]
struct Fenwick(Vec<i32>);

impl Fenwick {
    fn with_len(n: usize) -> Self {
        Fenwick(vec![0; n + 1])
    }

    fn len(&self) -> usize {
        self.0.len().saturating_sub(1)
    }

    fn add(&mut self, mut i: usize, d: i32) {
        while i < self.0.len() {
            self.0[i] += d;
            i += i & i.wrapping_neg();
        }
    }

    fn prefix(&self, mut i: usize) -> i32 {
        let mut s = 0;
        while i > 0 {
            s += self.0[i];
            i -= i & i.wrapping_neg();
        }
        s
    }
}

/// Running least squares (Welford co-moments, numerically stable for large VTDs).
#[derive(Debug, Clone, Default)]
struct Ols {
    n: f64,
    mean_x: f64,
    mean_y: f64,
    cxx: f64,
    cxy: f64,
}

impl Ols {
    fn add(&mut self, x: f64, y: f64) {
        self.n += 1.0;
        let dx = x - self.mean_x;
        self.mean_x += dx / self.n;
        self.mean_y += (y - self.mean_y) / self.n;
        self.cxx += dx * (x - self.mean_x);
        self.cxy += dx * (y - self.mean_y);
    }

    /// (m, b). With no spread in VTD (e.g. one pure cycle) the line goes through the origin.
    fn fit(&self) -> (f64, f64) {
        if self.n < MIN_SAMPLES {
            return (1.0, 0.0);
        }
        if self.cxx / self.n <= 1e-9 * self.mean_x.powi(2).max(1.0) {
            return if self.mean_x > 0.0 { (self.mean_y / self.mean_x, 0.0) } else { (1.0, 0.0) };
        }
        let m = self.cxy / self.cxx;
        (m, self.mean_y - m * self.mean_x)
    }
}

/// GMT-Reuse: keep, host or disk by predicted remaining reuse distance.
///
/// `place` never returns `Keep` twice for a chunk without an access in between (the second
/// time a short prediction goes to host), so a planner retrying victims cannot spin on it.
/// Host victims leave in FIFO order (§2.2).
#[derive(Debug, Clone)]
pub struct ReusePlacement {
    sample_every: u64,
    counter: u64,
    hist: Vec<ChunkHist>,
    fenwick: Fenwick,
    next_slot: usize,
    tracked: i32,
    ols: Ols,
    recent: VecDeque<bool>,
    recent_long: usize,
    fifo: HostFifo,
}

impl Default for ReusePlacement {
    fn default() -> Self {
        Self::with_sample_every(DEFAULT_SAMPLE_EVERY)
    }
}

impl ReusePlacement {
    /// A policy that measures a (VTD, RD) sample every `n` accesses (at least 1).
    pub fn with_sample_every(n: u64) -> Self {
        ReusePlacement {
            sample_every: n.max(1),
            counter: 0,
            hist: Vec::new(),
            fenwick: Fenwick::default(),
            next_slot: 1,
            tracked: 0,
            ols: Ols::default(),
            recent: VecDeque::with_capacity(RECENT),
            recent_long: 0,
            fifo: HostFifo::default(),
        }
    }

    fn hist_mut(&mut self, c: ChunkId) -> &mut ChunkHist {
        let i = c.0 as usize;
        if self.hist.len() <= i {
            self.hist.resize(i + 1, ChunkHist::default());
        }
        &mut self.hist[i]
    }

    /// Records the correct class of the chunk's last eviction, now that its RVTD is known.
    fn learn(&mut self, c: ChunkId, rvtd: u64, mem: &Memory) {
        let (m, b) = self.ols.fit();
        let rrd = m * rvtd as f64 + b;
        let cap = |t| mem.capacities().chunks(t).map_or(f64::INFINITY, |n| n as f64);
        let correct = if rrd < cap(Tier::Gpu) {
            SHORT
        } else if rrd < cap(Tier::Host) {
            MEDIUM
        } else {
            LONG
        };
        let h = self.hist_mut(c);
        if let Some(prev) = h.state {
            let row = &mut h.weights[prev];
            if row[correct] == u8::MAX {
                row.iter_mut().for_each(|w| *w /= 2);
            }
            row[correct] += 1;
        }
        h.state = Some(correct);
    }

    /// Moves the chunk's mark in the Fenwick tree to a fresh slot, renumbering when full.
    fn restamp(&mut self, i: usize) {
        if self.hist[i].slot != 0 {
            self.fenwick.add(self.hist[i].slot, -1);
        } else {
            self.tracked += 1;
        }
        if self.next_slot > self.fenwick.len() {
            self.hist[i].slot = 0;
            self.compact();
        }
        self.hist[i].slot = self.next_slot;
        self.fenwick.add(self.next_slot, 1);
        self.next_slot += 1;
    }

    fn compact(&mut self) {
        let mut marked: Vec<(usize, usize)> = self.hist.iter().enumerate().filter(|(_, h)| h.slot != 0).map(|(i, h)| (h.slot, i)).collect();
        marked.sort_unstable();
        self.fenwick = Fenwick::with_len((2 * (marked.len() + 1)).max(1024));
        for (k, &(_, i)) in marked.iter().enumerate() {
            self.hist[i].slot = k + 1;
            self.fenwick.add(k + 1, 1);
        }
        self.next_slot = marked.len() + 1;
    }

    fn note_prediction(&mut self, long: bool) {
        if self.recent.len() == RECENT && self.recent.pop_front() == Some(true) {
            self.recent_long -= 1;
        }
        self.recent.push_back(long);
        self.recent_long += long as usize;
    }

    fn mostly_long(&self) -> bool {
        !self.recent.is_empty() && self.recent_long as f64 > LONG_SHARE * self.recent.len() as f64
    }
}

impl Placement for ReusePlacement {
    fn name(&self) -> &'static str {
        "reuse"
    }

    fn on_access(&mut self, chunk: ChunkId, mem: &Memory) {
        self.counter += 1;
        let now = self.counter;
        let h = self.hist_mut(chunk).clone();
        if let Some(ev) = h.evicted_at {
            self.hist_mut(chunk).evicted_at = None;
            self.learn(chunk, now - 1 - ev, mem);
        }
        if h.last != 0 && now.is_multiple_of(self.sample_every) {
            let vtd = now - h.last - 1;
            let rd = self.tracked - self.fenwick.prefix(h.slot);
            self.ols.add(vtd as f64, rd as f64);
        }
        let i = chunk.0 as usize;
        self.restamp(i);
        self.hist[i].last = now;
        self.hist[i].kept = false;
    }

    fn place(&mut self, chunk: ChunkId, _mem: &Memory, host_full: bool) -> Decision {
        let h = self.hist_mut(chunk);
        let predicted = match h.state {
            None => MEDIUM,
            Some(s) => (0..3).fold(s, |best, t| if h.weights[s][t] > h.weights[s][best] { t } else { best }),
        };
        let kept = h.kept;
        h.kept |= predicted == SHORT;
        self.note_prediction(predicted == LONG);
        match predicted {
            SHORT if !kept => Decision::Keep,
            SHORT | MEDIUM => Decision::Host,
            _ if !host_full && self.mostly_long() => Decision::Host,
            _ => Decision::Disk,
        }
    }

    fn host_victim(&mut self, mem: &Memory) -> Option<ChunkId> {
        self.fifo.take(mem)
    }

    fn on_move(&mut self, chunk: ChunkId, from: Place, to: Place) {
        if from == Place::GPU && matches!(to, Place::In(Tier::Host | Tier::Disk)) {
            let now = self.counter;
            self.hist_mut(chunk).evicted_at = Some(now);
        }
        self.fifo.on_move(chunk, from, to);
    }
}

#[cfg(test)]
mod tests {
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
}
