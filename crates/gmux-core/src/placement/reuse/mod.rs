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

mod fenwick;
mod ols;

use self::fenwick::Fenwick;
use self::ols::Ols;
use super::tier_order::HostFifo;
use super::{Decision, Placement};
use crate::memory::{ChunkId, Memory, Place, Tier};
use std::collections::VecDeque;

const DEFAULT_SAMPLE_EVERY: u64 = 64;
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
mod tests;
