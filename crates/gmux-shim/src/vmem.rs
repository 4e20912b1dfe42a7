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
    /// The application reserved the range (its own VMM mapping, [`crate::appvmm`]): gmux
    /// backs it but never frees the addresses.
    pub app: bool,
    /// A second address of an allocation mapped elsewhere too (the application mapped one
    /// physical allocation twice): its bytes count once, at the allocation's own region.
    pub alias: bool,
}

/// Address ranges of live allocations.
#[derive(Debug, Default)]
pub struct Vmem {
    by_base: BTreeMap<CUdeviceptr, Region>,
    by_alloc: HashMap<AllocId, CUdeviceptr>,
    /// The device whose memory this is, noted in the process's map of owners
    /// ([`crate::devices::owner`]).
    device: Option<usize>,
}

impl Vmem {
    /// The address ranges of device `dev`'s memory.
    pub fn owned_by(dev: usize) -> Self {
        Vmem { device: Some(dev), ..Default::default() }
    }

    /// Adds a region; an alias leaves its allocation's own region as it is.
    pub fn insert(&mut self, r: Region) {
        if !r.alias {
            self.by_alloc.insert(r.alloc, r.base);
        }
        if let Some(dev) = self.device {
            crate::devices::own(r.base, r.reserved, dev);
        }
        self.by_base.insert(r.base, r);
    }

    /// Removes the region that starts at `base`.
    pub fn remove(&mut self, base: CUdeviceptr) -> Option<Region> {
        let r = self.by_base.remove(&base)?;
        if self.device.is_some() {
            crate::devices::disown(base);
        }
        if !r.alias {
            self.by_alloc.remove(&r.alloc);
        }
        Some(r)
    }

    /// Sets the bytes asked for of the region at `base`; returns its allocation.
    pub fn resize(&mut self, base: CUdeviceptr, bytes: u64) -> Option<AllocId> {
        let r = self.by_base.get_mut(&base)?;
        r.bytes = bytes;
        Some(r.alloc)
    }

    /// Makes the alias at `base` its allocation's own region, in place of the one there.
    pub fn promote(&mut self, base: CUdeviceptr) {
        let Some(r) = self.by_base.get_mut(&base) else { return };
        let old = self.by_alloc.insert(r.alloc, base);
        r.alias = false;
        if let Some(o) = old.and_then(|b| self.by_base.get_mut(&b)).filter(|o| o.base != base) {
            o.alias = true;
        }
    }

    /// The region holding address `ptr` (anywhere in its reserved range).
    pub fn find(&self, ptr: CUdeviceptr) -> Option<&Region> {
        let (_, r) = self.by_base.range(..=ptr).next_back()?;
        (ptr < r.base + r.reserved).then_some(r)
    }

    /// Whether any of `words` is an address in a region: a bounds check first, so that
    /// data that holds no addresses costs a compare per word.
    pub fn holds_any(&self, mut words: impl Iterator<Item = u64>) -> bool {
        let Some(span) = self.span() else { return false };
        words.any(|w| span.contains(&w) && self.find(w).is_some())
    }

    /// From the first region's base to the last one's end (regions never overlap): no
    /// address outside it is in a region.
    pub fn span(&self) -> Option<std::ops::Range<CUdeviceptr>> {
        let ((&lo, _), (_, last)) = self.by_base.first_key_value().zip(self.by_base.last_key_value())?;
        Some(lo..last.base + last.reserved)
    }

    /// The region of an allocation.
    pub fn of(&self, a: AllocId) -> Option<&Region> {
        self.by_alloc.get(&a).and_then(|b| self.by_base.get(b))
    }

    /// The regions overlapping `len` bytes from `start`.
    pub fn overlapping(&self, start: CUdeviceptr, len: u64) -> impl Iterator<Item = &Region> {
        let first = self.find(start).map_or(start, |r| r.base);
        self.by_base.range(first..start.saturating_add(len.max(1))).map(|(_, r)| r)
    }

    /// The region holding `ptr` and, for the application's own mappings, the mappings back
    /// to back with it that a buffer starting at `ptr` may reach: a buffer the application
    /// carves from its reserved range (a PyTorch expandable segment) may span several
    /// mappings, and a pointer alone does not say how far. Kernels reach forward from a
    /// pointer, so the run goes forward to its end; backward it takes one mapping, for
    /// reads just before a pointer that sits at a mapping's start.
    pub fn extent_of(&self, ptr: CUdeviceptr) -> Vec<&Region> {
        let Some(r) = self.find(ptr) else { return Vec::new() };
        if !r.app {
            return vec![r];
        }
        let before = self.by_base.range(..r.base).next_back().map(|(_, x)| x).filter(|x| x.app && x.base + x.reserved == r.base);
        let mut run: Vec<&Region> = before.into_iter().collect();
        run.push(r);
        let after = self.by_base.range(r.base + 1..).map(|(_, x)| x).scan(r.base + r.reserved, |next, x| {
            (x.app && x.base == *next).then(|| {
                *next = x.base + x.reserved;
                x
            })
        });
        run.extend(after);
        run
    }

    /// Live allocations' own regions (aliases left out).
    pub fn regions(&self) -> impl Iterator<Item = &Region> {
        self.by_base.values().filter(|r| !r.alias)
    }

    /// Bytes the application asked for, all allocations.
    pub fn allocated(&self) -> u64 {
        self.regions().map(|r| r.bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The span rules out only addresses that no region holds: every address a
        /// region holds lies in it, whatever the regions and the address.
        #[test]
        fn the_span_never_rules_out_an_address_a_region_holds(
            gaps in proptest::collection::vec((0u64..8, 1u64..4), 1..12),
            probes in proptest::collection::vec(0u64..(128 << 21), 64),
        ) {
            let mut v = Vmem::default();
            let mut at = 1u64 << 21;
            for (k, (gap, chunks)) in gaps.iter().enumerate() {
                at += gap << 21;
                v.insert(Region { base: at, bytes: chunks << 21, reserved: chunks << 21, alloc: AllocId(k as u32), app: false, alias: false });
                at += chunks << 21;
            }
            let span = v.span().expect("regions");
            for p in probes {
                prop_assert!(v.find(p).is_none() || span.contains(&p), "{p:#x} outside {span:?}");
            }
            prop_assert_eq!(span.end, at);
        }
    }

    #[test]
    fn find_maps_interior_and_padding_addresses_to_their_region_only() {
        let mut v = Vmem::default();
        v.insert(Region { base: 0x1000_0000, bytes: 3 << 20, reserved: 4 << 20, alloc: AllocId(0), app: false, alias: false });
        v.insert(Region { base: 0x2000_0000, bytes: 2 << 20, reserved: 2 << 20, alloc: AllocId(1), app: false, alias: false });
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

    #[test]
    fn an_application_mapping_extends_to_the_mappings_back_to_back_with_it() {
        let mut v = Vmem::default();
        let app = |base: u64, alloc: u32| Region { base, bytes: 2 << 20, reserved: 2 << 20, alloc: AllocId(alloc), app: true, alias: false };
        // Three mappings back to back, a gap, one more; and gmux's own allocation after it.
        for (k, base) in [0x1000_0000u64, 0x1020_0000, 0x1040_0000, 0x1080_0000].into_iter().enumerate() {
            v.insert(app(base, k as u32));
        }
        v.insert(Region { base: 0x10a0_0000, bytes: 2 << 20, reserved: 2 << 20, alloc: AllocId(9), app: false, alias: false });
        let ids = |rs: Vec<&Region>| rs.iter().map(|r| r.alloc.0).collect::<Vec<_>>();
        assert_eq!(ids(v.extent_of(0x1000_0000)), vec![0, 1, 2]);
        assert_eq!(ids(v.extent_of(0x1020_0010)), vec![0, 1, 2]);
        assert_eq!(ids(v.extent_of(0x1040_0000)), vec![1, 2], "one mapping back, the rest forward");
        assert_eq!(ids(v.extent_of(0x1080_0000)), vec![3], "a gap ends the run, and gmux's own allocation is not in it");
        assert_eq!(ids(v.extent_of(0x10a0_0000)), vec![9]);
        assert!(v.extent_of(0x1060_0000).is_empty());
        let over: Vec<u32> = v.overlapping(0x1030_0000, 6 << 20).map(|r| r.alloc.0).collect();
        assert_eq!(over, vec![1, 2, 3], "a copy's byte range meets exactly the regions it crosses");
    }

    #[test]
    fn an_alias_finds_its_allocation_and_counts_once_until_promoted() {
        let mut v = Vmem::default();
        let own = Region { base: 0x1000_0000, bytes: 4 << 20, reserved: 4 << 20, alloc: AllocId(3), app: true, alias: false };
        v.insert(own);
        v.insert(Region { base: 0x3000_0000, alias: true, ..own });
        assert_eq!(v.find(0x3000_0010).map(|r| (r.alloc, r.base)), Some((AllocId(3), 0x3000_0000)));
        assert_eq!(v.of(AllocId(3)).map(|r| r.base), Some(0x1000_0000));
        assert_eq!(v.allocated(), 4 << 20, "an alias adds no bytes");
        assert_eq!(v.regions().count(), 1);
        v.promote(0x3000_0000);
        assert_eq!(v.of(AllocId(3)).map(|r| r.base), Some(0x3000_0000));
        assert!(v.find(0x1000_0000).is_some_and(|r| r.alias), "the old region is now the alias");
        v.remove(0x1000_0000);
        assert_eq!(v.of(AllocId(3)).map(|r| r.base), Some(0x3000_0000), "removing an alias keeps the allocation's region");
        assert_eq!(v.allocated(), 4 << 20);
        v.remove(0x3000_0000);
        assert!(v.of(AllocId(3)).is_none());
        assert_eq!(v.allocated(), 0);
    }
}
