//! Frees, in the order CUDA gives them, and the reuse of freed ranges.
//!
//! `cuMemFree` waits on the host for the commands that use the allocation, as the
//! driver's does. `cuMemFreeAsync` returns at once, as the driver's does: what it frees
//! waits among the pending frees until the last command that used it has finished, which
//! the next allocation or free polls for. A range of chunks of its own is then kept,
//! mapped as it is, among the recycled ranges for the next request of as many chunks.
//! PyTorch's stream-ordered allocator (`backend:cudaMallocAsync`, one allocation per
//! tensor) frees and allocates tensors of the same sizes at every step, and mapping fresh
//! memory for each would cost more than the kernels that use it. The recycled ranges
//! hold at most `GMUX_RECYCLE` bytes, by default the room under the limit that live
//! allocations leave, so that what they keep never pushes live data out; the oldest are
//! freed beyond that, and before a new range is made. `GMUX_RECYCLE=0` reuses nothing.

use super::{Shim, ShimError, WorkingSet};
use crate::cuda::*;
use crate::inflight::{StreamKey, Ticket};
use gmux_core::CHUNK_BYTES;
use std::collections::{HashMap, HashSet, VecDeque};

/// Freed ranges kept with their memory, newest last.
#[derive(Debug, Default)]
pub struct Recycled {
    ranges: VecDeque<(u32, CUdeviceptr)>,
    bases: HashSet<CUdeviceptr>,
    chunks: u64,
    /// Ranges handed out again, in total.
    pub reused: u64,
}

impl Recycled {
    /// The most recently kept range of `count` chunks, taken out.
    pub fn take(&mut self, count: u32) -> Option<CUdeviceptr> {
        let i = self.ranges.iter().rposition(|&(n, _)| n == count)?;
        let (_, base) = self.ranges.remove(i).expect("found");
        self.bases.remove(&base);
        self.chunks -= u64::from(count);
        self.reused += 1;
        Some(base)
    }

    /// Keeps the range of `count` chunks at `base`; returns the oldest ranges that no
    /// longer fit in `cap` bytes, for the caller to free (`base` itself when it alone
    /// does not fit).
    pub fn keep(&mut self, count: u32, base: CUdeviceptr, cap: u64) -> Vec<CUdeviceptr> {
        if u64::from(count) > cap / CHUNK_BYTES {
            return vec![base];
        }
        self.ranges.push_back((count, base));
        self.bases.insert(base);
        self.chunks += u64::from(count);
        self.trim(cap)
    }

    /// Takes out the oldest ranges until at most `cap` bytes are kept; returns them, for
    /// the caller to free.
    pub fn trim(&mut self, cap: u64) -> Vec<CUdeviceptr> {
        let mut out = Vec::new();
        while self.chunks > cap / CHUNK_BYTES {
            out.push(self.oldest().expect("over the cap, so not empty"));
        }
        out
    }

    /// The oldest range kept, taken out.
    pub fn oldest(&mut self) -> Option<CUdeviceptr> {
        let (n, base) = self.ranges.pop_front()?;
        self.bases.remove(&base);
        self.chunks -= u64::from(n);
        Some(base)
    }

    /// Whether the range at `base` is kept here.
    pub fn holds(&self, base: CUdeviceptr) -> bool {
        self.bases.contains(&base)
    }

    /// Bytes kept.
    pub fn bytes(&self) -> u64 {
        self.chunks * CHUNK_BYTES
    }
}

/// An allocation the application freed in stream order.
#[derive(Debug, Clone, Copy)]
pub struct PendingFree {
    /// The last command that used it.
    last_use: Ticket,
    /// The stream it was freed on.
    on: StreamKey,
}

/// Allocations freed in stream order whose commands may still run, by address.
pub type Pending = HashMap<CUdeviceptr, PendingFree>;

impl Shim {
    /// Frees the allocation at `base` (a slot of a pack or a range of its own): at once
    /// when no unfinished command uses it; else, when `on` names the stream of a
    /// `cuMemFreeAsync`, once those commands finish, and otherwise after waiting for them
    /// here.
    pub fn free(&mut self, base: CUdeviceptr, on: Option<StreamKey>) -> Result<(), ShimError> {
        let alloc = match self.packs.find(base) {
            Some(s) if s.base == base => self.vmem.find(s.pack).map(|r| r.alloc),
            _ if self.packs.is_pack_address(base) => None,
            _ => self.vmem.find(base).filter(|r| r.base == base && !r.app).map(|r| r.alloc),
        };
        let Some(alloc) = alloc.filter(|_| !self.pending.contains_key(&base) && !self.recycled.holds(base)) else {
            return Err(ShimError::Invalid(CUDA_ERROR_INVALID_VALUE));
        };
        if !self.packs.is_pack_address(base) {
            crate::record::free(base);
            self.memory.retire(alloc)?;
        }
        // Commands of other devices over it end first (rare: a copy between devices).
        self.inflight.held.wait_for(alloc)?;
        match (self.inflight.last_use(alloc), on) {
            (Some(last_use), Some(on)) if !self.inflight.passed(last_use)? => {
                self.pending.insert(base, PendingFree { last_use, on });
                self.reap()
            }
            (Some(last_use), _) => {
                self.inflight.wait(last_use)?;
                self.release(base)
            }
            (None, _) => self.release(base),
        }
    }

    /// Keeps the allocation at `base` for the rest of the process: CUDA graphs captured
    /// with it may use it at every launch ([`crate::api::memory::alloc_async`]).
    pub fn keep_for_graphs(&mut self, base: CUdeviceptr) {
        if self.graph_memory.insert(base) && self.graph_memory.len() == 1 {
            crate::log!(
                Info,
                "memory allocated or freed in stream order inside stream capture stays allocated for the rest of the process, for the graphs that use it"
            );
        }
    }

    /// Whether the allocation at `base` is kept for CUDA graphs.
    pub fn is_kept_for_graphs(&self, base: CUdeviceptr) -> bool {
        self.graph_memory.contains(&base)
    }

    /// Releases the pending frees whose commands have finished.
    pub(crate) fn reap(&mut self) -> Result<(), ShimError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.inflight.poll()?;
        let done: Vec<CUdeviceptr> = self.pending.iter().filter(|(_, p)| self.inflight.seen_passed(p.last_use)).map(|(b, _)| *b).collect();
        for base in done {
            self.pending.remove(&base);
            self.release(base)?;
        }
        Ok(())
    }

    /// Gives back an allocation that no unfinished command uses: a slot to its pack (and
    /// an emptied pack's range), a range to the recycled ones.
    fn release(&mut self, base: CUdeviceptr) -> Result<(), ShimError> {
        if !self.packs.is_pack_address(base) {
            return self.recycle(base);
        }
        self.slot_refs.remove(&base);
        match self.packs.free(base) {
            Some(pack) => {
                crate::record::free(pack);
                let alloc = self.vmem.find(pack).map(|r| r.alloc).expect("a pack is a range");
                self.memory.retire(alloc)?;
                self.recycle(pack)
            }
            None => Ok(()),
        }
    }

    /// Keeps the retired range at `base` for reuse, freeing what the cap leaves out.
    fn recycle(&mut self, base: CUdeviceptr) -> Result<(), ShimError> {
        let r = *self.vmem.find(base).expect("a released range is live");
        self.forget_refs(r.alloc);
        let cap = self.recycle_cap(0);
        for b in self.recycled.keep((r.reserved / CHUNK_BYTES) as u32, base, cap) {
            self.free_range(b)?;
        }
        Ok(())
    }

    /// The bytes the recycled ranges may hold when `more` bytes of new allocation are
    /// about to be used: `GMUX_RECYCLE`, or by default the room under the limit that live
    /// allocations leave, so that kept ranges never push live data out.
    fn recycle_cap(&self, more: u64) -> u64 {
        let live = self.memory.resident().saturating_sub(self.recycled.bytes());
        crate::config::config().recycle.unwrap_or_else(|| self.limit().saturating_sub(live + more))
    }

    /// While `ws` would not fit beside what is resident, frees the oldest recycled range,
    /// or, with none left, waits for the commands of the pending frees and releases them:
    /// memory the application has freed goes before a plan would evict live data for it,
    /// or copy its dead contents out. Returns whether anything was freed: a stale pointer
    /// in a command's parameters may have named it, so `ws` must drop what is gone.
    pub(crate) fn room_for(&mut self, ws: &WorkingSet) -> Result<bool, ShimError> {
        if self.recycled.bytes() == 0 && self.pending.is_empty() {
            return Ok(false);
        }
        let absent = self.memory.absent_bytes(ws);
        let mut freed = false;
        while absent > 0 && self.memory.resident() + absent > self.room() {
            if let Some(base) = self.recycled.oldest() {
                self.free_range(base)?;
            } else if !self.pending.is_empty() {
                for (base, p) in std::mem::take(&mut self.pending) {
                    self.inflight.wait(p.last_use)?;
                    self.release(base)?;
                }
            } else {
                break;
            }
            freed = true;
        }
        Ok(freed)
    }

    /// Frees the oldest recycled ranges that a new allocation of `bytes` leaves no room
    /// for.
    pub(crate) fn trim_recycled(&mut self, bytes: u64) -> Result<(), ShimError> {
        if self.recycled.bytes() == 0 {
            return Ok(());
        }
        let cap = self.recycle_cap(bytes.div_ceil(CHUNK_BYTES) * CHUNK_BYTES);
        for b in self.recycled.trim(cap) {
            self.free_range(b)?;
        }
        Ok(())
    }

    /// A range freed before, of as many chunks as `bytes` needs, handed out again for
    /// `bytes`: a recycled one, or for use in stream order on `on`, one freed on that
    /// stream whose commands may still run (work on `on` follows them, as CUDA orders a
    /// free and an allocation on one stream).
    pub(crate) fn reuse(&mut self, bytes: u64, on: Option<StreamKey>) -> Result<Option<CUdeviceptr>, ShimError> {
        self.reap()?;
        if crate::config::config().recycle == Some(0) {
            return Ok(None);
        }
        let count = bytes.div_ceil(CHUNK_BYTES) as u32;
        let base = match self.recycled.take(count) {
            Some(base) => base,
            None => {
                let same = |b: &CUdeviceptr, p: &PendingFree| {
                    Some(p.on) == on && !self.packs.is_pack_address(*b) && self.vmem.find(*b).is_some_and(|r| r.reserved == u64::from(count) * CHUNK_BYTES)
                };
                let Some(base) = self.pending.iter().find(|(b, p)| same(b, p)).map(|(b, _)| *b) else { return Ok(None) };
                self.pending.remove(&base);
                self.forget_refs(self.vmem.find(base).expect("pending").alloc);
                self.recycled.reused += 1;
                base
            }
        };
        let alloc = self.vmem.resize(base, bytes).expect("a freed range is live until freed for good");
        self.memory.reuse(alloc, bytes)?;
        Ok(Some(base))
    }

    /// Frees the allocation whose range starts at `base`, addresses and memory.
    pub(crate) fn free_range(&mut self, base: CUdeviceptr) -> Result<(), ShimError> {
        let r = match self.vmem.find(base) {
            Some(r) if r.base == base => *r,
            _ => return Err(ShimError::Invalid(CUDA_ERROR_INVALID_VALUE)),
        };
        if let Some(ev) = self.inflight.busy(r.alloc)? {
            gmux_cuda::driver::wait_event(ev)?;
        }
        self.memory.free(r.alloc)?;
        self.vmem.remove(base);
        self.forget_refs(r.alloc);
        self.inflight.forget(r.alloc);
        if !r.app {
            gmux_cuda::vm::release(base, r.reserved)?;
        }
        Ok(())
    }

    /// Forgets the pointers found in an allocation's contents, and to it.
    fn forget_refs(&mut self, a: gmux_core::AllocId) {
        self.refs.remove(&a);
        self.global_refs.retain(|_, v| {
            v.retain(|x| *x != a);
            !v.is_empty()
        });
        for set in self.refs.values_mut().chain(self.slot_refs.values_mut()) {
            set.remove(&a);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = CHUNK_BYTES;

    #[test]
    fn the_newest_range_of_a_size_is_reused_and_the_oldest_go_past_the_cap() {
        let mut r = Recycled::default();
        assert!(r.keep(2, 0x10, 8 * M).is_empty());
        assert!(r.keep(1, 0x20, 8 * M).is_empty());
        assert!(r.keep(2, 0x30, 8 * M).is_empty());
        assert_eq!(r.bytes(), 5 * M);
        assert!(r.holds(0x10));
        assert_eq!(r.take(2), Some(0x30), "newest first");
        assert_eq!(r.take(3), None, "only the same number of chunks");
        assert_eq!(r.reused, 1);
        assert_eq!(r.keep(4, 0x40, 8 * M), Vec::<u64>::new());
        assert_eq!(r.keep(3, 0x50, 8 * M), vec![0x10], "the oldest go until 8 chunks are kept");
        assert_eq!(r.bytes(), 8 * M);
        assert!(!r.holds(0x10));
        assert_eq!(r.keep(9, 0x60, 8 * M), vec![0x60], "a range over the cap is not kept");
        assert_eq!(r.keep(1, 0x70, 0), vec![0x70], "a cap of 0 keeps nothing");
        assert_eq!(r.oldest(), Some(0x20));
        assert_eq!(r.bytes(), 7 * M);
        assert_eq!(r.trim(0), vec![0x40, 0x50]);
        assert_eq!(r.oldest(), None);
    }
}
