//! GMT-Random (§2.1.2): a coin flip between host and disk for every GPU victim.

use super::tier_order::HostFifo;
use super::{Decision, Placement};
use crate::memory::{ChunkId, Memory, Place};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Sends each GPU victim to host or disk with probability 1/2; host victims leave in FIFO order.
///
/// GMT sends a clean page "to SSD" by dropping it, so disk is always a valid outcome.
#[derive(Debug, Clone)]
pub struct RandomPlacement {
    rng: ChaCha8Rng,
    fifo: HostFifo,
}

impl RandomPlacement {
    /// A policy whose coin flips are fixed by `seed`.
    pub fn new(seed: u64) -> Self {
        RandomPlacement { rng: ChaCha8Rng::seed_from_u64(seed), fifo: HostFifo::default() }
    }
}

impl Placement for RandomPlacement {
    fn name(&self) -> &'static str {
        "random"
    }

    fn on_access(&mut self, _chunk: ChunkId, _mem: &Memory) {}

    fn place(&mut self, _chunk: ChunkId, _mem: &Memory, _host_full: bool) -> Decision {
        if self.rng.gen_bool(0.5) {
            Decision::Host
        } else {
            Decision::Disk
        }
    }

    fn host_victim(&mut self, mem: &Memory) -> Option<ChunkId> {
        self.fifo.take(mem)
    }

    fn on_move(&mut self, chunk: ChunkId, from: Place, to: Place) {
        self.fifo.on_move(chunk, from, to);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{Capacities, Tier};
    use crate::size::CHUNK_BYTES;
    use crate::tenant::TenantId;

    fn memory() -> Memory {
        let caps = Capacities { gpu: Some(4 * CHUNK_BYTES), host: Some(2 * CHUNK_BYTES), disk: None };
        let mut m = Memory::new(caps);
        m.allocate_on_disk(TenantId(0), 4 * CHUNK_BYTES).unwrap();
        m
    }

    fn decisions(seed: u64, m: &Memory) -> Vec<Decision> {
        let mut p = RandomPlacement::new(seed);
        (0..1000).map(|i| p.place(ChunkId(i % 4), m, false)).collect()
    }

    #[test]
    fn deterministic_and_about_half_host() {
        let m = memory();
        let a = decisions(7, &m);
        assert_eq!(a, decisions(7, &m));
        assert_ne!(a, decisions(8, &m));
        let host = a.iter().filter(|d| **d == Decision::Host).count();
        assert!((400..=600).contains(&host), "{host} of 1000 to host");
        assert!(a.iter().all(|d| *d != Decision::Keep));
    }

    #[test]
    fn host_victims_leave_in_insertion_order() {
        let mut m = memory();
        let mut p = RandomPlacement::new(1);
        for c in [2, 0] {
            m.relocate(ChunkId(c), Tier::Gpu).unwrap();
            p.on_move(ChunkId(c), Place::DISK, Place::GPU);
            m.relocate(ChunkId(c), Tier::Host).unwrap();
            p.on_move(ChunkId(c), Place::GPU, Place::HOST);
        }
        assert_eq!(p.host_victim(&m), Some(ChunkId(2)));
        m.relocate(ChunkId(2), Tier::Disk).unwrap();
        p.on_move(ChunkId(2), Place::HOST, Place::DISK);
        assert_eq!(p.host_victim(&m), Some(ChunkId(0)));
    }
}
