//! The mover: turns a [`Plan`] into device operations on the two copy streams.
//!
//! Evictions go on the evict stream and hand their physical chunk to the next
//! population (no release and re-create); populations go on the populate stream in plan
//! order, which is first-use order, so each command can start once its own chunks are in.

use crate::device::{CopyStream, Device, Event, PhysChunk};
use crate::memory::{ChunkId, Memory, Tier};
use crate::planner::{Move, Plan};
use std::collections::{HashMap, VecDeque};

/// Physical chunks of mapped chunks, and spare ones freed by eviction.
#[derive(Debug, Default)]
pub struct Mover {
    mapped: HashMap<ChunkId, PhysChunk>,
    spare: VecDeque<PhysChunk>,
}

impl Mover {
    /// Issues `plan` on `dev`; `mem` is the chunk table before the plan is applied.
    /// Returns, for every chunk the plan brings in, the event after which it is usable.
    pub fn issue<D: Device>(&mut self, plan: &Plan, mem: &Memory, dev: &mut D) -> Result<Vec<(ChunkId, Event)>, D::Error> {
        let mut ready = Vec::new();
        for mv in &plan.moves {
            match *mv {
                Move::Create(c) => {
                    self.map(c, dev)?;
                    ready.push((c, dev.record(CopyStream::Populate)?));
                }
                Move::Populate { chunk, from } => {
                    self.map(chunk, dev)?;
                    if from == Tier::Disk {
                        dev.copy(CopyStream::Populate, chunk, Tier::Disk, Tier::Host)?;
                    }
                    dev.copy(CopyStream::Populate, chunk, Tier::Host, Tier::Gpu)?;
                    ready.push((chunk, dev.record(CopyStream::Populate)?));
                }
                Move::Evict { chunk, to } => {
                    let drop = to == Tier::Disk && mem.chunk(chunk).disk_copy;
                    if !drop {
                        dev.copy(CopyStream::Evict, chunk, Tier::Gpu, Tier::Host)?;
                        if to == Tier::Disk {
                            dev.copy(CopyStream::Evict, chunk, Tier::Host, Tier::Disk)?;
                        }
                    }
                    dev.unmap(chunk)?;
                    if let Some(phys) = self.mapped.remove(&chunk) {
                        self.spare.push_back(phys);
                    }
                }
                Move::Demote(chunk) => {
                    if !mem.chunk(chunk).disk_copy {
                        dev.copy(CopyStream::Evict, chunk, Tier::Host, Tier::Disk)?;
                    }
                }
            }
        }
        Ok(ready)
    }

    /// Forgets a chunk whose allocation was freed: unmaps it and releases its physical chunk.
    pub fn discard<D: Device>(&mut self, chunk: ChunkId, dev: &mut D) -> Result<(), D::Error> {
        if let Some(phys) = self.mapped.remove(&chunk) {
            dev.unmap(chunk)?;
            dev.release_chunk(phys)?;
        }
        Ok(())
    }

    /// Physical chunks held, mapped or spare.
    pub fn held(&self) -> usize {
        self.mapped.len() + self.spare.len()
    }

    fn map<D: Device>(&mut self, chunk: ChunkId, dev: &mut D) -> Result<(), D::Error> {
        let phys = match self.spare.pop_front() {
            Some(p) => p,
            None => dev.create_chunk()?,
        };
        dev.map(chunk, phys)?;
        self.mapped.insert(chunk, phys);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Capacities;
    use crate::planner::Move;
    use crate::tenant::TenantId;

    /// Records every call as text.
    #[derive(Default)]
    struct Log {
        calls: Vec<String>,
        next: u64,
    }

    impl Device for Log {
        type Error = String;
        fn create_chunk(&mut self) -> Result<PhysChunk, String> {
            self.next += 1;
            self.calls.push(format!("create p{}", self.next));
            Ok(PhysChunk(self.next))
        }
        fn release_chunk(&mut self, p: PhysChunk) -> Result<(), String> {
            self.calls.push(format!("release p{}", p.0));
            Ok(())
        }
        fn map(&mut self, c: ChunkId, p: PhysChunk) -> Result<(), String> {
            self.calls.push(format!("map c{} p{}", c.0, p.0));
            Ok(())
        }
        fn unmap(&mut self, c: ChunkId) -> Result<(), String> {
            self.calls.push(format!("unmap c{}", c.0));
            Ok(())
        }
        fn copy(&mut self, s: CopyStream, c: ChunkId, from: Tier, to: Tier) -> Result<(), String> {
            self.calls.push(format!("{s:?} c{} {from:?}->{to:?}", c.0));
            Ok(())
        }
        fn record(&mut self, s: CopyStream) -> Result<Event, String> {
            self.calls.push(format!("record {s:?}"));
            Ok(Event(self.calls.len() as u64))
        }
        fn wait(&mut self, _: CopyStream, _: Event) -> Result<(), String> {
            Ok(())
        }
        fn release_command(&mut self, _: crate::device::CommandId, _: &[Event]) -> Result<(), String> {
            Ok(())
        }
    }

    #[test]
    fn eviction_hands_its_physical_chunk_to_the_next_population() {
        let mut mem = Memory::new(Capacities::default());
        mem.allocate(TenantId(0), 3 * crate::CHUNK_BYTES).unwrap();
        let (a, b, c) = (ChunkId(0), ChunkId(1), ChunkId(2));
        let mut dev = Log::default();
        let mut mover = Mover::default();
        let plan = Plan { moves: vec![Move::Create(a), Move::Create(b)], covered: 2 };
        mover.issue(&plan, &mem, &mut dev).unwrap();
        let plan = Plan { moves: vec![Move::Evict { chunk: a, to: Tier::Host }, Move::Populate { chunk: c, from: Tier::Host }], covered: 1 };
        let ready = mover.issue(&plan, &mem, &mut dev).unwrap();
        assert_eq!(
            dev.calls,
            vec![
                "create p1", "map c0 p1", "record Populate", "create p2", "map c1 p2", "record Populate",
                "Evict c0 Gpu->Host", "unmap c0", "map c2 p1", "Populate c2 Host->Gpu", "record Populate",
            ]
        );
        assert_eq!(ready.len(), 1);
        assert_eq!(mover.held(), 2, "two physical chunks serve three virtual ones");
    }
}
