//! Eviction order: which GPU-resident chunk leaves first.
//!
//! - [`Eviction::Lru`]: least recently used first (the baseline).
//! - [`Eviction::DualClock`]: Ghost's global CLOCK, with a per-tenant recency chain used
//!   when a tenant must evict its own chunks (over `gmem.limit.high`).
//! - [`Eviction::Opt`]: Belady from the timeline (MSched §6): the chunk whose next use
//!   is furthest in the [`Forecast`] leaves first; chunks beyond the forecast leave
//!   before all others, most recently used first (GPU work is iterative: what was
//!   used last in a loop is needed last again).

use crate::memory::{ChunkId, Memory};
use serde::{Deserialize, Serialize};

/// Eviction policies by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Eviction {
    /// Least recently used first.
    Lru,
    /// Global CLOCK, per-tenant recency for self-eviction (Ghost).
    DualClock,
    /// Furthest next use over the timeline first (MSched's OPT).
    Opt,
}

/// Every future access position of each chunk over the timeline, with a cursor: the
/// next use of a chunk is its first access at or after the cursor.
#[derive(Debug, Clone, Default)]
pub struct Forecast {
    start: Vec<u32>,
    positions: Vec<u64>,
    from: u64,
}

impl Forecast {
    /// No known future use.
    pub const NEVER: u64 = u64::MAX;

    /// Builds a forecast from the future accesses in order; the cursor starts at 0.
    pub fn from_accesses(accesses: impl IntoIterator<Item = ChunkId>) -> Self {
        let acc: Vec<ChunkId> = accesses.into_iter().collect();
        let bound = acc.iter().map(|c| c.0 as usize + 1).max().unwrap_or(0);
        let mut start = vec![0u32; bound + 1];
        for c in &acc {
            start[c.0 as usize + 1] += 1;
        }
        for i in 1..start.len() {
            start[i] += start[i - 1];
        }
        let mut fill = start.clone();
        let mut positions = vec![0u64; acc.len()];
        for (pos, c) in acc.iter().enumerate() {
            let slot = &mut fill[c.0 as usize];
            positions[*slot as usize] = pos as u64;
            *slot += 1;
        }
        Forecast { start, positions, from: 0 }
    }

    /// Moves the cursor: accesses before `pos` are in the past.
    pub fn advance_to(&mut self, pos: u64) {
        self.from = pos;
    }

    /// Position of `c`'s next use at or after the cursor, or [`Forecast::NEVER`].
    pub fn next_use(&self, c: ChunkId) -> u64 {
        let i = c.0 as usize;
        if i + 1 >= self.start.len() {
            return Self::NEVER;
        }
        let list = &self.positions[self.start[i] as usize..self.start[i + 1] as usize];
        let k = list.partition_point(|&p| p < self.from);
        list.get(k).copied().unwrap_or(Self::NEVER)
    }
}

/// The eviction policy with the state it needs (CLOCK bits and ring order).
#[derive(Debug, Clone)]
pub struct Evictor {
    kind: Eviction,
    referenced: Vec<bool>,
    ring_pos: Vec<u64>,
    next_pos: u64,
}

impl Evictor {
    /// A policy with empty state.
    pub fn new(kind: Eviction) -> Self {
        Evictor { kind, referenced: Vec::new(), ring_pos: Vec::new(), next_pos: 0 }
    }

    /// `c` became resident: it enters the CLOCK ring behind the hand.
    pub fn on_resident(&mut self, c: ChunkId) {
        self.grow(c);
        self.ring_pos[c.0 as usize] = self.next_pos;
        self.next_pos += 1;
        self.referenced[c.0 as usize] = false;
    }

    /// `c` was accessed: sets its CLOCK reference bit.
    pub fn on_access(&mut self, c: ChunkId) {
        self.grow(c);
        self.referenced[c.0 as usize] = true;
    }

    /// Orders `candidates` (resident chunks) for eviction, first out first.
    ///
    /// `own_tenant` selects Ghost's per-tenant chain (recency) instead of the global CLOCK.
    pub fn order(&self, mem: &Memory, candidates: &mut [ChunkId], forecast: &Forecast, own_tenant: bool) {
        let last = |c: &ChunkId| mem.chunk(*c).last_use;
        match self.kind {
            Eviction::Lru => candidates.sort_by_key(|c| (last(c), *c)),
            Eviction::Opt => candidates.sort_by_key(|c| {
                let next = forecast.next_use(*c);
                let beyond = if next == Forecast::NEVER { std::cmp::Reverse(last(c)) } else { std::cmp::Reverse(0) };
                (std::cmp::Reverse(next), beyond, *c)
            }),
            Eviction::DualClock if own_tenant => candidates.sort_by_key(|c| (last(c), *c)),
            Eviction::DualClock => candidates.sort_by_key(|c| (self.is_referenced(*c), self.pos(*c), *c)),
        }
    }

    /// The chunks in `order[..=last_taken]` left GPU memory as `evicted`; CLOCK clears the
    /// reference bits of the survivors the hand passed, giving them their second chance.
    pub fn commit(&mut self, order: &[ChunkId], evicted: &[ChunkId]) {
        if self.kind != Eviction::DualClock {
            return;
        }
        let Some(last) = evicted.last() else { return };
        let end = order.iter().position(|c| c == last).map_or(0, |i| i + 1);
        for &c in &order[..end] {
            if self.is_referenced(c) {
                self.referenced[c.0 as usize] = false;
                self.ring_pos[c.0 as usize] = self.next_pos;
                self.next_pos += 1;
            }
        }
    }

    fn is_referenced(&self, c: ChunkId) -> bool {
        self.referenced.get(c.0 as usize).copied().unwrap_or(false)
    }

    fn pos(&self, c: ChunkId) -> u64 {
        self.ring_pos.get(c.0 as usize).copied().unwrap_or(0)
    }

    fn grow(&mut self, c: ChunkId) {
        let need = c.0 as usize + 1;
        if self.referenced.len() < need {
            self.referenced.resize(need, false);
            self.ring_pos.resize(need, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{Capacities, Tier};
    use crate::tenant::TenantId;

    fn mem4() -> Memory {
        let mut m = Memory::new(Capacities::default());
        m.allocate(TenantId(0), 4 * crate::CHUNK_BYTES).unwrap();
        for i in 0..4 {
            m.relocate(ChunkId(i), Tier::Gpu).unwrap();
            m.touch(ChunkId(i), 10 - i as u64, false);
        }
        m
    }

    #[test]
    fn lru_and_opt_orders() {
        let m = mem4();
        let mut c: Vec<_> = (0..4).map(ChunkId).collect();
        Evictor::new(Eviction::Lru).order(&m, &mut c, &Forecast::default(), false);
        assert_eq!(c, vec![ChunkId(3), ChunkId(2), ChunkId(1), ChunkId(0)]);
        let mut f = Forecast::from_accesses([ChunkId(2), ChunkId(0), ChunkId(2), ChunkId(1)]);
        Evictor::new(Eviction::Opt).order(&m, &mut c, &f, false);
        assert_eq!(c, vec![ChunkId(3), ChunkId(1), ChunkId(0), ChunkId(2)]);
        f.advance_to(2);
        assert_eq!((f.next_use(ChunkId(2)), f.next_use(ChunkId(0)), f.next_use(ChunkId(1))), (2, Forecast::NEVER, 3));
        Evictor::new(Eviction::Opt).order(&m, &mut c, &f, false);
        assert_eq!(c, vec![ChunkId(0), ChunkId(3), ChunkId(1), ChunkId(2)], "beyond the forecast: most recent first");
    }

    #[test]
    fn clock_gives_referenced_chunks_a_second_chance() {
        let m = mem4();
        let mut e = Evictor::new(Eviction::DualClock);
        for i in 0..4 {
            e.on_resident(ChunkId(i));
        }
        e.on_access(ChunkId(0));
        let mut c: Vec<_> = (0..4).map(ChunkId).collect();
        e.order(&m, &mut c, &Forecast::default(), false);
        assert_eq!(c, vec![ChunkId(1), ChunkId(2), ChunkId(3), ChunkId(0)]);
        e.commit(&c, &[ChunkId(1), ChunkId(2), ChunkId(3), ChunkId(0)]);
        e.on_resident(ChunkId(1));
        let mut c = vec![ChunkId(0), ChunkId(1)];
        e.order(&m, &mut c, &Forecast::default(), false);
        assert_eq!(c, vec![ChunkId(0), ChunkId(1)], "0 lost its bit and sits before the newer 1");
    }
}
