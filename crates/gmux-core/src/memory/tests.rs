//! Unit tests of the chunk table.

use super::*;
use crate::error::CoreError;
use crate::size::CHUNK_BYTES;
use crate::tenant::TenantId;

const T: TenantId = TenantId(0);

#[test]
fn allocation_is_split_into_chunks() {
    let mut m = Memory::new(Capacities::default());
    let a = m.allocate(T, 5 << 20).unwrap();
    let al = m.alloc(a).unwrap().clone();
    assert_eq!(al.count, 3);
    assert_eq!(al.chunks_in(3 << 20, 2 << 20).collect::<Vec<_>>(), vec![ChunkId(1), ChunkId(2)]);
    assert_eq!(al.chunk_at(5 << 20), ChunkId(2));
    assert!(m.chunks().all(|(_, c)| c.place == Place::Unbacked));
}

#[test]
fn extents_are_aligned_runs_within_one_allocation() {
    let mut m = Memory::new(Capacities::default());
    m.allocate(T, 3 * CHUNK_BYTES).unwrap();
    m.allocate(T, 37 * CHUNK_BYTES).unwrap();
    assert_eq!(m.extent(ChunkId(2)), (ChunkId(2), 1), "extent 1 is the chunk itself");
    m.set_extent(16);
    assert_eq!(m.extent(ChunkId(0)), (ChunkId(0), 3));
    assert_eq!(m.extent(ChunkId(2)), (ChunkId(0), 3));
    assert_eq!(m.extent(ChunkId(3)), (ChunkId(3), 16));
    assert_eq!(m.extent(ChunkId(18)), (ChunkId(3), 16));
    assert_eq!(m.extent(ChunkId(19)), (ChunkId(19), 16));
    assert_eq!(m.extent(ChunkId(35)), (ChunkId(35), 5), "the allocation's tail is a short extent");
    assert_eq!(m.extent(ChunkId(39)), (ChunkId(35), 5));
}

#[test]
fn capacity_is_enforced() {
    let mut m = Memory::new(Capacities { gpu: Some(2 * CHUNK_BYTES), ..Default::default() });
    let a = m.allocate(T, 3 * CHUNK_BYTES).unwrap();
    m.relocate(ChunkId(0), Tier::Gpu).unwrap();
    m.relocate(ChunkId(1), Tier::Gpu).unwrap();
    assert!(matches!(m.relocate(ChunkId(2), Tier::Gpu), Err(CoreError::OutOfBudget { .. })));
    m.relocate(ChunkId(0), Tier::Host).unwrap();
    m.relocate(ChunkId(2), Tier::Gpu).unwrap();
    assert_eq!(m.usage(T).bytes(Tier::Gpu), 2 * CHUNK_BYTES);
    assert_eq!(m.usage(T).bytes(Tier::Host), CHUNK_BYTES);
    m.check().unwrap();
    m.free(a).unwrap();
    assert_eq!(m.used_chunks(Tier::Gpu), 0);
    assert_eq!(m.used_chunks(Tier::Host), 0);
    m.check().unwrap();
}

#[test]
fn clean_disk_copy_is_dropped_not_rewritten() {
    let mut m = Memory::new(Capacities { disk: Some(2 * CHUNK_BYTES), ..Default::default() });
    m.allocate_on_disk(T, 2 * CHUNK_BYTES).unwrap();
    assert_eq!(m.free_chunks(Tier::Disk), Some(0));
    m.relocate(ChunkId(0), Tier::Gpu).unwrap();
    assert!(m.chunk(ChunkId(0)).disk_copy);
    m.relocate(ChunkId(0), Tier::Disk).unwrap();
    m.relocate(ChunkId(1), Tier::Gpu).unwrap();
    m.touch(ChunkId(1), 1, true);
    assert!(!m.chunk(ChunkId(1)).disk_copy);
    assert_eq!(m.free_chunks(Tier::Disk), Some(1));
    m.check().unwrap();
}
