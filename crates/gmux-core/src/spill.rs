//! Commands larger than the limit. Such a command still runs: what the room holds of its
//! working set is made resident, and the rest is mapped on the host
//! ([`Place::HostMapped`]), host memory at the chunks' own addresses that the command
//! reaches over the link. A chunk mapped on the host stays there until a command that
//! fits the limit needs it; then it is copied back to the host tier and unmapped before
//! it is brought in.

use crate::memory::{ChunkId, Memory, Place};
use crate::planner::{Move, Plan};

/// A working set split between GPU memory and host memory mapped in place.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Split {
    /// Chunks to make resident, in first-use order.
    pub gpu: Vec<ChunkId>,
    /// Chunks to map on the host, in first-use order.
    pub host: Vec<ChunkId>,
}

/// Splits `need` (first-use order, no repeats) with room for `room` chunks in GPU
/// memory. Nothing moves that need not: resident chunks stay resident and chunks mapped
/// on the host stay there; the others fill the room in first-use order and the rest go
/// to the host. `None` when the resident chunks alone exceed the room (a limit lowered
/// below what the command holds).
pub fn split(mem: &Memory, need: &[ChunkId], room: u64) -> Option<Split> {
    let resident = need.iter().filter(|c| mem.is_resident(**c)).count() as u64;
    let mut left = room.checked_sub(resident)?;
    let mut out = Split::default();
    for &c in need {
        let to_gpu = match mem.chunk(c).place {
            Place::GPU => true,
            Place::HostMapped => false,
            _ if left > 0 => {
                left -= 1;
                true
            }
            _ => false,
        };
        if to_gpu {
            out.gpu.push(c);
        } else {
            out.host.push(c);
        }
    }
    Some(out)
}

/// The plan that maps `host` on the host, leaving out chunks already there.
pub fn map_on_host(mem: &Memory, host: &[ChunkId]) -> Plan {
    let moves: Vec<Move> = host.iter().filter(|c| mem.chunk(**c).place != Place::HostMapped).map(|c| Move::MapHost(*c)).collect();
    Plan { covered: moves.len(), moves }
}

/// The plan that brings the chunks of `need` mapped on the host back to the host tier,
/// so that a later plan can make them resident.
pub fn unmap_from_host(mem: &Memory, need: &[ChunkId]) -> Plan {
    let moves: Vec<Move> = need.iter().filter(|c| mem.chunk(**c).place == Place::HostMapped).map(|c| Move::UnmapHost(*c)).collect();
    Plan { covered: moves.len(), moves }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{Capacities, Tier};
    use crate::tenant::TenantId;
    use crate::CHUNK_BYTES;

    fn table(places: &[Place]) -> (Memory, Vec<ChunkId>) {
        let mut mem = Memory::new(Capacities::default());
        let a = mem.allocate(TenantId(0), places.len() as u64 * CHUNK_BYTES).unwrap();
        let chunks: Vec<ChunkId> = mem.alloc(a).unwrap().chunks().collect();
        for (c, p) in chunks.iter().zip(places) {
            if *p != Place::Unbacked {
                mem.relocate_to(*c, *p).unwrap();
            }
        }
        (mem, chunks)
    }

    #[test]
    fn resident_and_host_mapped_chunks_stay_and_the_rest_fill_the_room_in_order() {
        let (mem, c) = table(&[Place::Unbacked, Place::HOST, Place::GPU, Place::HostMapped, Place::Unbacked, Place::HOST]);
        let s = split(&mem, &c, 3).unwrap();
        assert_eq!(s.gpu, vec![c[0], c[1], c[2]], "the resident chunk plus the first two others");
        assert_eq!(s.host, vec![c[3], c[4], c[5]]);
        let plan = map_on_host(&mem, &s.host);
        assert_eq!(plan.moves, vec![Move::MapHost(c[4]), Move::MapHost(c[5])], "the mapped chunk does not move");
        assert_eq!(unmap_from_host(&mem, &c).moves, vec![Move::UnmapHost(c[3])]);
    }

    #[test]
    fn no_split_when_resident_chunks_exceed_the_room() {
        let (mem, c) = table(&[Place::GPU, Place::GPU, Place::Unbacked]);
        assert_eq!(split(&mem, &c, 1), None);
        assert_eq!(split(&mem, &c, 2).unwrap().host, vec![c[2]]);
    }

    #[test]
    fn host_mapped_chunks_count_as_host_memory() {
        let (mut mem, c) = table(&[Place::Unbacked, Place::HOST, Place::GPU]);
        for x in &c {
            mem.relocate_to(*x, Place::HostMapped).unwrap_or_else(|_| panic!("chunk {}", x.0));
        }
        assert_eq!((mem.used_chunks(Tier::Gpu), mem.used_chunks(Tier::Host)), (0, 3));
        mem.check().unwrap();
        mem.relocate(c[0], Tier::Gpu).unwrap();
        assert_eq!((mem.used_chunks(Tier::Gpu), mem.used_chunks(Tier::Host)), (1, 2));
        mem.check().unwrap();
        assert!(mem.relocate_to(c[1], Place::Unbacked).is_err());
    }
}
