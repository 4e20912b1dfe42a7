//! The mover: turns a [`Plan`] into device operations on the two copy streams.
//!
//! Evictions go on the evict stream and hand their physical memory to the next
//! population (no release and re-create); populations go on the populate stream in plan
//! order, which is first-use order, so each command can start once its own chunks are in.
//!
//! What a plan brings in of an extent ([`Memory::extent`]), each contiguous run of it,
//! is mapped with as few physical handles as the spares allow (one of its length when
//! new), because the driver's cost of mapping, granting access and unmapping is per
//! handle. A mapping is unmapped when the last of its chunks is evicted (the planner
//! evicts extents whole).
//! Physical memory held, mapped or spare, is kept within the GPU tier's capacity at the
//! end of every plan.
//!
//! A chunk mapped on the host ([`Move::MapHost`]) gets host memory of its own, kept as a
//! host spare when it leaves and never counted as GPU memory held.

use crate::device::{CopyStream, Device, Event, PhysChunk};
use crate::memory::{ChunkId, Memory, Tier};
use crate::planner::{Move, Plan};
use std::collections::{HashMap, VecDeque};

/// Physical memory mapped at a run of chunks.
#[derive(Debug, Clone, Copy)]
struct Mapping {
    chunks: u32,
    phys: PhysChunk,
    /// Chunks of the run not yet evicted or discarded.
    live: u32,
    /// Host memory (one chunk, [`Move::MapHost`]), not GPU memory.
    host: bool,
}

/// Mappings of resident chunks, and spare physical memory freed by eviction.
#[derive(Debug, Default)]
pub struct Mover {
    /// Mappings by their first chunk.
    maps: HashMap<ChunkId, Mapping>,
    /// The first chunk of the mapping of every mapped chunk.
    mapping_of: HashMap<ChunkId, ChunkId>,
    /// Spare physical memory and its length in chunks, oldest first.
    spare: VecDeque<(PhysChunk, u32)>,
    /// Chunks of physical memory held, mapped or spare.
    held: u64,
    /// Spare host memory of one chunk each, for the next [`Move::MapHost`].
    host_spare: Vec<PhysChunk>,
    /// Chunks mapped on the host.
    host_mapped: u64,
}

impl Mover {
    /// Issues `plan` on `dev`; `mem` is the chunk table before the plan is applied.
    /// Returns, for every chunk the plan brings in, the event after which it is usable.
    pub fn issue<D: Device>(&mut self, plan: &Plan, mem: &Memory, dev: &mut D) -> Result<Vec<(ChunkId, Event)>, D::Error> {
        // Chunks the plan brings in, by extent: they are not mapped (nothing resident is).
        let mut arriving: HashMap<ChunkId, usize> = HashMap::new();
        for mv in &plan.moves {
            if let Move::Create(c) | Move::Populate { chunk: c, .. } = *mv {
                *arriving.entry(mem.extent(c).0).or_default() += 1;
            }
        }
        let mut ready = Vec::new();
        // The chunks of an extent wait for the last one's turn in the plan: by then the
        // plan's evictions have made room for all of them, so spares can back them. Then
        // each contiguous run of them is mapped at once.
        let mut held_back: HashMap<ChunkId, Vec<(ChunkId, Option<Tier>)>> = HashMap::new();
        for mv in &plan.moves {
            match *mv {
                Move::Create(c) | Move::Populate { chunk: c, .. } => {
                    let from = if let Move::Populate { from, .. } = *mv { Some(from) } else { None };
                    let first = mem.extent(c).0;
                    let waiting = held_back.entry(first).or_default();
                    waiting.push((c, from));
                    if waiting.len() == arriving[&first] {
                        let waiting = held_back.remove(&first).expect("just filled");
                        let mut ids: Vec<u32> = waiting.iter().map(|(c, _)| c.0).collect();
                        ids.sort_unstable();
                        for run in ids.chunk_by(|a, b| a + 1 == *b) {
                            self.map(ChunkId(run[0]), run.len() as u32, dev, mem)?;
                        }
                        for (c, from) in waiting {
                            ready.push(self.fill(c, from, dev)?);
                        }
                    }
                }
                Move::Evict { chunk, to } => {
                    let drop = to == Tier::Disk && mem.chunk(chunk).disk_copy;
                    if !drop {
                        dev.copy(CopyStream::Evict, chunk, Tier::Gpu, Tier::Host)?;
                        if to == Tier::Disk {
                            dev.copy(CopyStream::Evict, chunk, Tier::Host, Tier::Disk)?;
                        }
                    }
                    if let Some((first, m)) = self.unlink(chunk) {
                        debug_assert!(!m.host, "an eviction is of GPU memory");
                        dev.unmap(first, m.chunks)?;
                        self.spare.push_back((m.phys, m.chunks));
                    }
                }
                Move::Demote(chunk) => {
                    if !mem.chunk(chunk).disk_copy {
                        dev.copy(CopyStream::Evict, chunk, Tier::Host, Tier::Disk)?;
                    }
                }
                Move::MapHost(c) => {
                    let phys = match self.host_spare.pop() {
                        Some(p) => p,
                        None => dev.create_host_chunk()?,
                    };
                    dev.map(c, 1, phys)?;
                    self.host_mapped += 1;
                    self.maps.insert(c, Mapping { chunks: 1, phys, live: 1, host: true });
                    self.mapping_of.insert(c, c);
                    ready.push(self.fill(c, mem.chunk(c).place.tier(), dev)?);
                }
                Move::UnmapHost(c) => {
                    // The copy to the host tier reads the chunk at its address, as an
                    // eviction does.
                    dev.copy(CopyStream::Evict, c, Tier::Gpu, Tier::Host)?;
                    if let Some((first, m)) = self.unlink(c) {
                        dev.unmap(first, m.chunks)?;
                        self.host_spare.push(m.phys);
                        self.host_mapped -= 1;
                    }
                }
            }
        }
        debug_assert!(held_back.is_empty(), "a plan brings each chunk in once");
        let cap = mem.capacities().chunks(Tier::Gpu);
        self.trim(cap.unwrap_or(u64::MAX), dev)?;
        Ok(ready)
    }

    /// Forgets a chunk whose allocation was freed; the last chunk of a mapping unmaps it
    /// and releases its physical memory.
    pub fn discard<D: Device>(&mut self, chunk: ChunkId, dev: &mut D) -> Result<(), D::Error> {
        if let Some((first, m)) = self.unlink(chunk) {
            dev.unmap(first, m.chunks)?;
            dev.release_chunk(m.phys)?;
            if m.host {
                self.host_mapped -= 1;
            } else {
                self.held -= u64::from(m.chunks);
            }
        }
        Ok(())
    }

    /// Chunks mapped on the host.
    pub fn host_mapped(&self) -> u64 {
        self.host_mapped
    }

    /// Chunks of physical memory held, mapped or spare.
    pub fn held(&self) -> u64 {
        self.held
    }

    /// Maps chunks `first..first + len`: spare memory covers them first, longest pieces
    /// first, and new memory of the length still uncovered does the rest.
    fn map<D: Device>(&mut self, first: ChunkId, len: u32, dev: &mut D, mem: &Memory) -> Result<(), D::Error> {
        let (mut at, end) = (first.0, first.0 + len);
        while at < end {
            let (phys, n) = self.take(end - at, mem, dev)?;
            dev.map(ChunkId(at), n, phys)?;
            self.maps.insert(ChunkId(at), Mapping { chunks: n, phys, live: n, host: false });
            for x in at..at + n {
                self.mapping_of.insert(ChunkId(x), ChunkId(at));
            }
            at += n;
        }
        Ok(())
    }

    /// Fills mapped chunk `c`: copies it in from `from` (nothing for a new chunk) and
    /// records the event after which it is usable. A copy to [`Tier::Gpu`] writes the
    /// chunk at its address, whatever memory is mapped there.
    fn fill<D: Device>(&mut self, c: ChunkId, from: Option<Tier>, dev: &mut D) -> Result<(ChunkId, Event), D::Error> {
        if let Some(from) = from {
            if from == Tier::Disk {
                dev.copy(CopyStream::Populate, c, Tier::Disk, Tier::Host)?;
            }
            dev.copy(CopyStream::Populate, c, Tier::Host, Tier::Gpu)?;
        }
        Ok((c, dev.record(CopyStream::Populate)?))
    }

    /// Removes `c` from its mapping; returns the mapping and its first chunk when `c` was
    /// its last live chunk.
    fn unlink(&mut self, c: ChunkId) -> Option<(ChunkId, Mapping)> {
        let first = self.mapping_of.remove(&c)?;
        let m = self.maps.get_mut(&first).expect("a mapped chunk's mapping exists");
        m.live -= 1;
        if m.live > 0 {
            return None;
        }
        Some((first, self.maps.remove(&first).expect("just seen")))
    }

    /// The longest spare of at most `want` chunks (the oldest of equals), or new memory of
    /// `want` chunks once older spares have made room for it under the GPU capacity.
    fn take<D: Device>(&mut self, want: u32, mem: &Memory, dev: &mut D) -> Result<(PhysChunk, u32), D::Error> {
        let fit = self.spare.iter().enumerate().filter(|(_, (_, n))| *n <= want).max_by_key(|(i, (_, n))| (*n, std::cmp::Reverse(*i)));
        if let Some((i, _)) = fit {
            return Ok(self.spare.remove(i).expect("found"));
        }
        let cap = mem.capacities().chunks(Tier::Gpu).unwrap_or(u64::MAX);
        self.trim(cap.saturating_sub(u64::from(want)), dev)?;
        self.held += u64::from(want);
        Ok((dev.create_chunk(want)?, want))
    }

    /// Releases spares, oldest first, until at most `most` chunks are held.
    fn trim<D: Device>(&mut self, most: u64, dev: &mut D) -> Result<(), D::Error> {
        while self.held > most {
            let Some((phys, n)) = self.spare.pop_front() else { break };
            dev.release_chunk(phys)?;
            self.held -= u64::from(n);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Capacities;
    use crate::planner::Move;
    use crate::tenant::TenantId;
    use crate::CHUNK_BYTES;

    /// Records every call as text.
    #[derive(Default)]
    struct Log {
        calls: Vec<String>,
        next: u64,
    }

    impl Device for Log {
        type Error = String;
        type Stream = u32;
        type Fence = ();
        fn create_chunk(&mut self, n: u32) -> Result<PhysChunk, String> {
            self.next += 1;
            self.calls.push(format!("create p{} x{n}", self.next));
            Ok(PhysChunk(self.next))
        }
        fn create_host_chunk(&mut self) -> Result<PhysChunk, String> {
            self.next += 1;
            self.calls.push(format!("create host p{}", self.next));
            Ok(PhysChunk(self.next))
        }
        fn release_chunk(&mut self, p: PhysChunk) -> Result<(), String> {
            self.calls.push(format!("release p{}", p.0));
            Ok(())
        }
        fn map(&mut self, c: ChunkId, n: u32, p: PhysChunk) -> Result<(), String> {
            self.calls.push(format!("map c{} x{n} p{}", c.0, p.0));
            Ok(())
        }
        fn unmap(&mut self, c: ChunkId, n: u32) -> Result<(), String> {
            self.calls.push(format!("unmap c{} x{n}", c.0));
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

    impl Log {
        fn count(&self, prefix: &str) -> usize {
            self.calls.iter().filter(|c| c.starts_with(prefix)).count()
        }
    }

    fn creates(chunks: std::ops::Range<u32>) -> Plan {
        Plan { moves: chunks.clone().map(|c| Move::Create(ChunkId(c))).collect(), covered: chunks.len() }
    }

    fn swap(out: std::ops::Range<u32>, into: std::ops::Range<u32>) -> Plan {
        let mut moves: Vec<Move> = out.map(|c| Move::Evict { chunk: ChunkId(c), to: Tier::Host }).collect();
        moves.extend(into.clone().map(|c| Move::Populate { chunk: ChunkId(c), from: Tier::Host }));
        Plan { moves, covered: into.len() }
    }

    #[test]
    fn eviction_hands_its_physical_chunk_to_the_next_population() {
        let mut mem = Memory::new(Capacities::default());
        mem.allocate(TenantId(0), 3 * CHUNK_BYTES).unwrap();
        let mut dev = Log::default();
        let mut mover = Mover::default();
        mover.issue(&creates(0..2), &mem, &mut dev).unwrap();
        let plan = Plan { moves: vec![Move::Evict { chunk: ChunkId(0), to: Tier::Host }, Move::Populate { chunk: ChunkId(2), from: Tier::Host }], covered: 1 };
        let ready = mover.issue(&plan, &mem, &mut dev).unwrap();
        assert_eq!(
            dev.calls,
            vec![
                "create p1 x1",
                "map c0 x1 p1",
                "record Populate",
                "create p2 x1",
                "map c1 x1 p2",
                "record Populate",
                "Evict c0 Gpu->Host",
                "unmap c0 x1",
                "map c2 x1 p1",
                "Populate c2 Host->Gpu",
                "record Populate",
            ]
        );
        assert_eq!(ready.len(), 1);
        assert_eq!(mover.held(), 2, "two physical chunks serve three virtual ones");
    }

    #[test]
    fn a_whole_extent_moves_with_one_handle_and_one_mapping() {
        let mut mem = Memory::new(Capacities { gpu: Some(8 * CHUNK_BYTES), ..Default::default() });
        mem.set_extent(4);
        mem.allocate(TenantId(0), 8 * CHUNK_BYTES).unwrap();
        mem.allocate(TenantId(0), 8 * CHUNK_BYTES).unwrap();
        let mut dev = Log::default();
        let mut mover = Mover::default();
        let ready = mover.issue(&creates(0..8), &mem, &mut dev).unwrap();
        assert_eq!(ready.len(), 8, "every chunk gets its ready event");
        assert_eq!((dev.count("create"), dev.count("map")), (2, 2));
        assert!(dev.calls.contains(&"map c4 x4 p2".to_string()));
        dev.calls.clear();
        mover.issue(&swap(0..8, 8..16), &mem, &mut dev).unwrap();
        assert_eq!(dev.count("unmap"), 2, "one unmap per extent, after its last chunk leaves");
        assert_eq!(dev.count("Evict"), 8, "copies stay per chunk (the CUDA device merges them)");
        assert_eq!(dev.count("create"), 0, "the evicted handles are reused");
        assert_eq!(dev.calls.iter().filter(|c| c.starts_with("map")).cloned().collect::<Vec<_>>(), vec!["map c8 x4 p1", "map c12 x4 p2"]);
        assert_eq!(mover.held(), 8);
    }

    #[test]
    fn part_of_an_extent_is_mapped_run_by_run() {
        let mut mem = Memory::new(Capacities::default());
        mem.set_extent(8);
        mem.allocate(TenantId(0), 8 * CHUNK_BYTES).unwrap();
        let mut dev = Log::default();
        let mut mover = Mover::default();
        let plan = Plan { moves: [1, 2, 3, 6].into_iter().map(|c| Move::Create(ChunkId(c))).collect(), covered: 4 };
        let ready = mover.issue(&plan, &mem, &mut dev).unwrap();
        assert_eq!(ready.iter().map(|(c, _)| c.0).collect::<Vec<_>>(), vec![1, 2, 3, 6], "filled in plan order");
        assert_eq!(dev.calls.iter().filter(|c| c.starts_with("map")).cloned().collect::<Vec<_>>(), vec!["map c1 x3 p1", "map c6 x1 p2"]);
        let more = Plan { moves: vec![Move::Create(ChunkId(4)), Move::Create(ChunkId(0)), Move::Create(ChunkId(5))], covered: 3 };
        mover.issue(&more, &mem, &mut dev).unwrap();
        assert_eq!(
            dev.calls.iter().filter(|c| c.starts_with("map")).skip(2).cloned().collect::<Vec<_>>(),
            vec!["map c0 x1 p3", "map c4 x2 p4"],
            "the rest, around what is mapped"
        );
        for c in [0, 1, 2, 3, 4, 5] {
            mover.discard(ChunkId(c), &mut dev).unwrap();
        }
        assert_eq!((dev.count("unmap"), dev.count("release"), mover.held()), (3, 3, 1), "a mapping goes with its last chunk");
    }

    #[test]
    fn host_mappings_reuse_their_memory_and_never_count_as_gpu_memory() {
        let mut mem = Memory::new(Capacities { gpu: Some(CHUNK_BYTES), ..Default::default() });
        mem.allocate(TenantId(0), 3 * CHUNK_BYTES).unwrap();
        mem.relocate(ChunkId(2), Tier::Host).unwrap();
        let mut dev = Log::default();
        let mut mover = Mover::default();
        let plan = Plan { moves: vec![Move::MapHost(ChunkId(0)), Move::MapHost(ChunkId(1))], covered: 2 };
        assert_eq!(mover.issue(&plan, &mem, &mut dev).unwrap().len(), 2, "each gets its ready event");
        assert_eq!(dev.calls, vec!["create host p1", "map c0 x1 p1", "record Populate", "create host p2", "map c1 x1 p2", "record Populate"]);
        assert_eq!((mover.held(), mover.host_mapped()), (0, 2));
        for c in [0, 1] {
            mem.relocate_to(ChunkId(c), crate::memory::Place::HostMapped).unwrap();
        }
        dev.calls.clear();
        mover.issue(&Plan { moves: vec![Move::UnmapHost(ChunkId(0))], covered: 1 }, &mem, &mut dev).unwrap();
        assert_eq!(dev.calls, vec!["Evict c0 Gpu->Host", "unmap c0 x1"], "copied out through its address, then unmapped");
        mem.relocate(ChunkId(0), Tier::Host).unwrap();
        dev.calls.clear();
        mover.issue(&Plan { moves: vec![Move::MapHost(ChunkId(2))], covered: 1 }, &mem, &mut dev).unwrap();
        assert_eq!(dev.calls, vec!["map c2 x1 p1", "Populate c2 Host->Gpu", "record Populate"], "the spare is reused and filled from the host tier");
        dev.calls.clear();
        mover.discard(ChunkId(1), &mut dev).unwrap();
        assert_eq!(dev.calls, vec!["unmap c1 x1", "release p2"]);
        assert_eq!((mover.held(), mover.host_mapped()), (0, 1));
    }

    /// Four 1-chunk allocations fill a 4-chunk budget and are evicted for a 4-chunk
    /// extent: their spares back it (four mappings, nothing created or released).
    #[test]
    fn spares_of_other_lengths_cover_an_extent() {
        let mut mem = Memory::new(Capacities { gpu: Some(4 * CHUNK_BYTES), ..Default::default() });
        mem.set_extent(4);
        for _ in 0..4 {
            mem.allocate(TenantId(0), CHUNK_BYTES).unwrap();
        }
        mem.allocate(TenantId(0), 4 * CHUNK_BYTES).unwrap();
        let mut dev = Log::default();
        let mut mover = Mover::default();
        mover.issue(&creates(0..4), &mem, &mut dev).unwrap();
        dev.calls.clear();
        mover.issue(&swap(0..4, 4..8), &mem, &mut dev).unwrap();
        assert_eq!((dev.count("create"), dev.count("release"), dev.count("map")), (0, 0, 4), "{:?}", dev.calls);
        assert_eq!(mover.held(), 4);
    }

    /// A spare longer than anything wanted is given back before new memory would exceed
    /// the budget.
    #[test]
    fn held_memory_stays_within_the_gpu_capacity() {
        let mut mem = Memory::new(Capacities { gpu: Some(4 * CHUNK_BYTES), ..Default::default() });
        mem.set_extent(4);
        mem.allocate(TenantId(0), 4 * CHUNK_BYTES).unwrap();
        for _ in 0..4 {
            mem.allocate(TenantId(0), CHUNK_BYTES).unwrap();
        }
        let mut dev = Log::default();
        let mut mover = Mover::default();
        mover.issue(&creates(0..4), &mem, &mut dev).unwrap();
        dev.calls.clear();
        let mut plan = swap(0..4, 4..8);
        for m in &mut plan.moves {
            if let Move::Populate { chunk, .. } = *m {
                *m = Move::Create(chunk);
            }
        }
        mover.issue(&plan, &mem, &mut dev).unwrap();
        assert_eq!((dev.count("release p1"), dev.count("create")), (1, 4), "{:?}", dev.calls);
        assert!(dev.calls.iter().position(|c| c.starts_with("release p1")) < dev.calls.iter().position(|c| c.starts_with("create")));
        assert_eq!(mover.held(), 4);
    }
}
