//! GMT-TierOrder (§2.1.1), the BaM-like two-tier baseline, and the host-tier FIFO
//! that every host-using policy demotes from (§2.2).

use super::{Decision, Placement};
use crate::memory::{ChunkId, Memory, Place};
use std::collections::VecDeque;

/// Host-tier chunks in insertion order.
///
/// Removal is lazy: each insertion gets a sequence number and a queue entry counts only
/// while it matches the chunk's current one, so `on_move` stays O(1).
#[derive(Debug, Clone, Default)]
pub(super) struct HostFifo {
    queue: VecDeque<(ChunkId, u64)>,
    /// Per chunk id: sequence number of its current host insertion, 0 when not in host.
    seq_of: Vec<u64>,
    next_seq: u64,
    live: usize,
}

impl HostFifo {
    /// Follows a move reported to the policy.
    pub(super) fn on_move(&mut self, c: ChunkId, from: Place, to: Place) {
        if from == Place::HOST {
            self.remove(c);
        }
        if to == Place::HOST {
            self.remove(c);
            self.next_seq += 1;
            let i = c.0 as usize;
            if self.seq_of.len() <= i {
                self.seq_of.resize(i + 1, 0);
            }
            self.seq_of[i] = self.next_seq;
            self.queue.push_back((c, self.next_seq));
            self.live += 1;
        }
    }

    /// Number of chunks the FIFO believes are in host.
    pub(super) fn len(&self) -> usize {
        self.live
    }

    /// Oldest chunk in host; stale entries (moved or freed behind our back) are dropped.
    ///
    /// When the queue knows of no host chunk but `mem` has one (moves never reported),
    /// the host chunk with the lowest id is returned so that demotion still makes room.
    pub(super) fn front(&mut self, mem: &Memory) -> Option<ChunkId> {
        while let Some(&(c, s)) = self.queue.front() {
            let current = self.seq_of.get(c.0 as usize) == Some(&s);
            if current && mem.is_live(c) && mem.chunk(c).place == Place::HOST {
                return Some(c);
            }
            self.queue.pop_front();
            if current {
                self.seq_of[c.0 as usize] = 0;
                self.live -= 1;
            }
        }
        mem.chunks().find(|(_, ch)| ch.place == Place::HOST).map(|(c, _)| c)
    }

    /// Removes and returns the oldest host chunk (the planner demotes it).
    pub(super) fn take(&mut self, mem: &Memory) -> Option<ChunkId> {
        let c = self.front(mem)?;
        self.remove(c);
        Some(c)
    }

    /// Moves the front entry to the back (a second chance).
    pub(super) fn rotate(&mut self) {
        if let Some(e) = self.queue.pop_front() {
            self.queue.push_back(e);
        }
    }

    fn remove(&mut self, c: ChunkId) {
        if let Some(s) = self.seq_of.get_mut(c.0 as usize) {
            if *s != 0 {
                *s = 0;
                self.live -= 1;
            }
        }
        if self.queue.len() > 2 * self.live + 64 {
            let seq_of = &self.seq_of;
            self.queue.retain(|&(c, s)| seq_of[c.0 as usize] == s);
        }
    }
}

/// GMT-TierOrder: every GPU victim goes to host; host victims are chosen by CLOCK.
///
/// The host CLOCK is second-chance FIFO over host insertions. A chunk's reference bit is
/// set by an access while it is resident in GPU memory and cleared when it enters GPU
/// memory, so it says "used during its last GPU residency". Host chunks are never
/// accessed in place (an access brings them back to GPU memory), so this is the only
/// recency the host tier can see. If the planner reports accesses after fetching, every
/// bit is set and each chunk gets exactly one second chance, i.e. plain FIFO order.
#[derive(Debug, Clone, Default)]
pub struct TierOrder {
    fifo: HostFifo,
    referenced: Vec<bool>,
}

impl Placement for TierOrder {
    fn name(&self) -> &'static str {
        "tier-order"
    }

    fn on_access(&mut self, chunk: ChunkId, mem: &Memory) {
        if mem.chunk(chunk).place == Place::GPU {
            let i = chunk.0 as usize;
            if self.referenced.len() <= i {
                self.referenced.resize(i + 1, false);
            }
            self.referenced[i] = true;
        }
    }

    fn place(&mut self, _chunk: ChunkId, _mem: &Memory, _host_full: bool) -> Decision {
        Decision::Host
    }

    fn host_victim(&mut self, mem: &Memory) -> Option<ChunkId> {
        // One full sweep clears every bit, so the loop ends by the second visit of any chunk.
        for _ in 0..=self.fifo.len() {
            let c = self.fifo.front(mem)?;
            match self.referenced.get_mut(c.0 as usize) {
                Some(r) if *r => {
                    *r = false;
                    self.fifo.rotate();
                }
                _ => {
                    self.fifo.remove(c);
                    return Some(c);
                }
            }
        }
        self.fifo.take(mem)
    }

    fn on_move(&mut self, chunk: ChunkId, from: Place, to: Place) {
        if to == Place::GPU {
            if let Some(r) = self.referenced.get_mut(chunk.0 as usize) {
                *r = false;
            }
        }
        self.fifo.on_move(chunk, from, to);
    }
}

/// The BaM-like baseline: no host tier, every GPU victim goes to disk.
#[derive(Debug, Clone, Copy, Default)]
pub struct TwoTier;

impl Placement for TwoTier {
    fn name(&self) -> &'static str {
        "two-tier"
    }

    fn on_access(&mut self, _chunk: ChunkId, _mem: &Memory) {}

    fn place(&mut self, _chunk: ChunkId, _mem: &Memory, _host_full: bool) -> Decision {
        Decision::Disk
    }

    fn host_victim(&mut self, _mem: &Memory) -> Option<ChunkId> {
        None
    }

    fn on_move(&mut self, _chunk: ChunkId, _from: Place, _to: Place) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{Capacities, Tier};
    use crate::size::CHUNK_BYTES;
    use crate::tenant::TenantId;

    fn memory(gpu: u64, host: u64, chunks: u64) -> Memory {
        let caps = Capacities { gpu: Some(gpu * CHUNK_BYTES), host: Some(host * CHUNK_BYTES), disk: None };
        let mut m = Memory::new(caps);
        m.allocate_on_disk(TenantId(0), chunks * CHUNK_BYTES).unwrap();
        m
    }

    fn relocate(m: &mut Memory, p: &mut dyn Placement, c: u32, to: Tier) {
        let from = m.chunk(ChunkId(c)).place;
        m.relocate(ChunkId(c), to).unwrap();
        p.on_move(ChunkId(c), from, Place::In(to));
    }

    #[test]
    fn two_tier_never_uses_host() {
        let m = memory(2, 2, 4);
        let mut p = TwoTier;
        for c in 0..4 {
            for host_full in [false, true] {
                assert_eq!(p.place(ChunkId(c), &m, host_full), Decision::Disk);
            }
        }
        assert_eq!(p.host_victim(&m), None);
    }

    #[test]
    fn tier_order_demotes_by_second_chance_fifo() {
        let mut m = memory(4, 3, 5);
        let mut p = TierOrder::default();
        assert_eq!(p.host_victim(&m), None);
        for c in 0..3 {
            relocate(&mut m, &mut p, c, Tier::Gpu);
        }
        p.on_access(ChunkId(0), &m);
        for c in 0..3 {
            assert_eq!(p.place(ChunkId(c), &m, false), Decision::Host);
            relocate(&mut m, &mut p, c, Tier::Host);
        }
        // Host order 0 (referenced), 1, 2: chunk 0 gets a second chance.
        let mut demoted = Vec::new();
        let v = p.host_victim(&m).unwrap();
        demoted.push(v.0);
        relocate(&mut m, &mut p, v.0, Tier::Disk);
        relocate(&mut m, &mut p, 3, Tier::Gpu);
        relocate(&mut m, &mut p, 3, Tier::Host);
        // Host order now 2, 0, 3.
        for _ in 0..3 {
            let v = p.host_victim(&m).unwrap();
            demoted.push(v.0);
            relocate(&mut m, &mut p, v.0, Tier::Disk);
        }
        assert_eq!(demoted, vec![1, 2, 0, 3]);
        assert_eq!(p.host_victim(&m), None);
        m.check().unwrap();
    }

    #[test]
    fn reference_bit_is_cleared_by_a_new_gpu_residency() {
        let mut m = memory(4, 2, 3);
        let mut p = TierOrder::default();
        relocate(&mut m, &mut p, 0, Tier::Gpu);
        p.on_access(ChunkId(0), &m);
        relocate(&mut m, &mut p, 0, Tier::Host);
        relocate(&mut m, &mut p, 0, Tier::Gpu);
        relocate(&mut m, &mut p, 0, Tier::Host);
        relocate(&mut m, &mut p, 1, Tier::Gpu);
        relocate(&mut m, &mut p, 1, Tier::Host);
        assert_eq!(p.host_victim(&m), Some(ChunkId(0)));
    }
}
