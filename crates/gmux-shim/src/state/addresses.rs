//! From addresses to working sets: the allocations that pointers and byte ranges reach,
//! and the allocations that pointers uploaded into memory refer to.

use super::Shim;
use crate::cuda::CUdeviceptr;
use gmux_core::AllocId;
use gmux_runtime::{Allocs, Span};

impl Shim {
    /// The allocations that any of `ptrs` points into, with the allocations they refer to
    /// (see [`Shim::add_refs`]). A pointer into the application's own mappings brings the
    /// mappings back to back with it that a buffer there may reach
    /// ([`crate::vmem::Vmem::extent_of`]). Pointers into other devices' gmux memory are
    /// noted ([`crate::devices::note_reach`]), as the two below note byte ranges.
    pub fn allocs_of(&self, ptrs: &[CUdeviceptr]) -> Allocs {
        let mut v = Allocs::new();
        // Most parameter words are sizes, strides and flags: one compare rules them out.
        let span = self.vmem.span().unwrap_or_default();
        for &p in ptrs {
            let Some(r) = span.contains(&p).then(|| self.vmem.find(p)).flatten() else {
                crate::devices::note_reach(self.device(), p, 1);
                continue;
            };
            if r.app {
                v.extend(self.vmem.extent_of(r.base).into_iter().map(|x| x.alloc));
            } else {
                v.push(r.alloc);
            }
            if !self.slot_refs.is_empty() {
                if let Some(s) = self.packs.find(p) {
                    v.extend(self.slot_refs.get(&s.base).into_iter().flatten().copied());
                }
            }
        }
        self.with_referred(&mut v);
        v
    }

    /// The allocations that byte ranges `(start, len)` cross, with the allocations they
    /// refer to (see [`Shim::add_refs`]).
    pub fn allocs_over(&self, ranges: &[(CUdeviceptr, u64)]) -> Allocs {
        for &(p, n) in ranges {
            crate::devices::note_reach(self.device(), p, n);
        }
        let mut v: Allocs = ranges.iter().flat_map(|&(p, n)| self.vmem.overlapping(p, n)).map(|r| r.alloc).collect();
        for &(p, n) in ranges.iter().filter(|_| !self.slot_refs.is_empty()) {
            for s in self.packs.overlapping(p, n) {
                v.extend(self.slot_refs.get(&s.base).into_iter().flatten().copied());
            }
        }
        self.with_referred(&mut v);
        v
    }

    /// The parts of allocations that byte ranges `(start, len)` cover (a range may cross
    /// from one of the application's mappings into the next).
    pub fn spans_over(&self, ranges: &[(CUdeviceptr, u64)]) -> Vec<Span> {
        let mut spans = Vec::new();
        for &(start, len) in ranges {
            crate::devices::note_reach(self.device(), start, len);
            let end = start.saturating_add(len);
            for r in self.vmem.overlapping(start, len) {
                let (from, to) = (start.max(r.base), end.min(r.base + r.reserved));
                if from < to {
                    spans.push(Span { alloc: r.alloc, offset: from - r.base, len: to - from });
                }
            }
        }
        spans
    }

    fn with_referred(&self, v: &mut Allocs) {
        if !self.refs.is_empty() {
            let referred: Vec<AllocId> = v.iter().filter_map(|a| self.refs.get(a)).flatten().copied().collect();
            v.extend(referred);
        }
        if !self.global_refs.is_empty() {
            v.extend(self.global_refs.values().flatten().copied());
        }
        if v.len() > 1 {
            v.sort_unstable();
            v.dedup();
        }
    }

    /// Records that allocation `holder` now holds `ptrs` (pointers or tensor-map
    /// addresses uploaded into it): a command that reads `holder` may follow them, so
    /// their allocations join its working set from now on.
    ///
    /// A holder outside gmux memory (a module's `__device__` or `__constant__` variable,
    /// written with `cudaMemcpyToSymbol`) may be read by any kernel: its pointers join
    /// every command's working set until the holder is written again.
    pub fn add_refs(&mut self, holder: CUdeviceptr, ptrs: &[CUdeviceptr]) {
        let Some(h) = self.vmem.find(holder).map(|r| r.alloc) else {
            let found: Vec<AllocId> = ptrs.iter().filter_map(|p| self.vmem.find(*p)).map(|r| r.alloc).collect();
            if found.is_empty() {
                self.global_refs.remove(&holder);
            } else {
                crate::log!(Debug, "{} pointers uploaded to {holder:#x}, outside gmux memory, join every working set", found.len());
                self.global_refs.insert(holder, found);
            }
            return;
        };
        let found: Vec<AllocId> = ptrs.iter().filter_map(|p| self.vmem.find(*p)).map(|r| r.alloc).filter(|a| *a != h).collect();
        if !found.is_empty() {
            crate::log!(Debug, "{} pointers uploaded to {holder:#x} refer to other allocations", found.len());
            // A slot's pointers are its own: the other slots of its pack do not hold them.
            let set = match self.packs.find(holder) {
                Some(s) => self.slot_refs.entry(s.base).or_default(),
                None => self.refs.entry(h).or_default(),
            };
            set.extend(found);
        }
    }
}
