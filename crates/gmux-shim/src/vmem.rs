//! Virtual device memory: each allocation is a reserved address range of whole 2 MiB
//! chunks; this maps addresses to allocations.

use crate::cuda::CUdeviceptr;
use gmux_core::AllocId;
use std::collections::{BTreeMap, HashMap};

/// One allocation's address range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// First address (2 MiB aligned).
    pub base: CUdeviceptr,
    /// Bytes the application asked for.
    pub bytes: u64,
    /// Bytes reserved: whole chunks.
    pub reserved: u64,
    /// The allocation in gmux-core's chunk table.
    pub alloc: AllocId,
}

/// Address ranges of live allocations.
#[derive(Debug, Default)]
pub struct Vmem {
    by_base: BTreeMap<CUdeviceptr, Region>,
    by_alloc: HashMap<AllocId, CUdeviceptr>,
}

impl Vmem {
    /// Adds a region.
    pub fn insert(&mut self, r: Region) {
        self.by_alloc.insert(r.alloc, r.base);
        self.by_base.insert(r.base, r);
    }

    /// Removes the region that starts at `base`.
    pub fn remove(&mut self, base: CUdeviceptr) -> Option<Region> {
        let r = self.by_base.remove(&base)?;
        self.by_alloc.remove(&r.alloc);
        Some(r)
    }

    /// The region holding address `ptr` (anywhere in its reserved range).
    pub fn find(&self, ptr: CUdeviceptr) -> Option<&Region> {
        let (_, r) = self.by_base.range(..=ptr).next_back()?;
        (ptr < r.base + r.reserved).then_some(r)
    }

    /// The region of an allocation.
    pub fn of(&self, a: AllocId) -> Option<&Region> {
        self.by_alloc.get(&a).and_then(|b| self.by_base.get(b))
    }

    /// Live regions.
    pub fn regions(&self) -> impl Iterator<Item = &Region> {
        self.by_base.values()
    }

    /// Bytes the application asked for, all regions.
    pub fn allocated(&self) -> u64 {
        self.by_base.values().map(|r| r.bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_maps_interior_and_padding_addresses_to_their_region_only() {
        let mut v = Vmem::default();
        v.insert(Region { base: 0x1000_0000, bytes: 3 << 20, reserved: 4 << 20, alloc: AllocId(0) });
        v.insert(Region { base: 0x2000_0000, bytes: 2 << 20, reserved: 2 << 20, alloc: AllocId(1) });
        assert_eq!(v.find(0x1000_0000).map(|r| r.alloc), Some(AllocId(0)));
        assert_eq!(v.find(0x1000_0000 + (4 << 20) - 1).map(|r| r.alloc), Some(AllocId(0)));
        assert_eq!(v.find(0x1000_0000 + (4 << 20)), None);
        assert_eq!(v.find(0x0fff_ffff), None);
        assert_eq!(v.find(0x2000_0000 + 5).map(|r| r.alloc), Some(AllocId(1)));
        assert_eq!(v.allocated(), 5 << 20);
        v.remove(0x1000_0000);
        assert_eq!(v.find(0x1000_0000), None);
        assert!(v.of(AllocId(0)).is_none());
    }
}
