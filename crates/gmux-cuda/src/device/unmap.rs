//! Deferred unmaps: an evicted mapping goes once the eviction copies out of it are done,
//! so that the host never waits for a copy to unmap.

use super::flush::Call;
use super::{CudaDevice, CHUNK};
use crate::cuda::*;
use crate::driver::{check, CudaError};

/// A mapping whose `cuMemUnmap` waits for the eviction copies out of it.
#[derive(Debug)]
pub(super) struct PendingUnmap {
    pub(super) va: CUdeviceptr,
    pub(super) bytes: usize,
    pub(super) phys: u64,
    pub(super) done: CUevent,
}

impl PendingUnmap {
    pub(super) fn holds(&self, va: CUdeviceptr) -> bool {
        va >= self.va && va < self.va + self.bytes as u64
    }
}

impl CudaDevice {
    /// Unmaps the addresses whose eviction copies are done (all of them if `wait`), so
    /// that an evicted address stops reaching its old physical chunk as soon as possible.
    /// The copies run in order on one stream, so the first unfinished one ends the scan.
    /// While a flush is deferred, nothing is unmapped: its batch may be mapping the
    /// physical memory of these very mappings at their new addresses.
    pub fn reap(&mut self, wait: bool) -> Result<(), CudaError> {
        if self.pending_unmap.is_empty() || self.deferring() {
            return Ok(());
        }
        let pending = std::mem::take(&mut self.pending_unmap);
        let mut rest = pending.into_iter().peekable();
        while let Some(u) = rest.peek() {
            if !wait && crate::real!(cuEventQuery(u.done)) != CUDA_SUCCESS {
                break;
            }
            let u = rest.next().expect("peeked");
            self.finish_unmap(u)?;
        }
        self.pending_unmap = rest.collect();
        Ok(())
    }

    /// Waits for and completes the pending unmaps that `pick` selects.
    pub(super) fn settle_unmap(&mut self, pick: impl Fn(&PendingUnmap) -> bool) -> Result<(), CudaError> {
        let (now, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending_unmap).into_iter().partition(|u| pick(u));
        self.pending_unmap = rest;
        for u in now {
            check(self.times.time(Call::Settle, || crate::real!(cuEventSynchronize(u.done))), "cuEventSynchronize")?;
            self.finish_unmap(u)?;
        }
        Ok(())
    }

    /// The pending unmaps holding any of the `bytes` from `va`, taken out for a deferred
    /// flush's batch to finish ([`super::defer`]).
    pub(super) fn take_pending_at(&mut self, va: CUdeviceptr, bytes: usize) -> Vec<PendingUnmap> {
        let hit = |u: &PendingUnmap| (va..va + bytes as u64).step_by(CHUNK).any(|at| u.holds(at));
        let (now, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending_unmap).into_iter().partition(|u| hit(u));
        self.pending_unmap = rest;
        now
    }

    fn finish_unmap(&mut self, u: PendingUnmap) -> Result<(), CudaError> {
        check(self.times.time(Call::Unmap, || crate::real!(cuMemUnmap(u.va, u.bytes))), "cuMemUnmap")?;
        self.unmapped(u);
        Ok(())
    }

    /// The bookkeeping after `u`'s `cuMemUnmap`.
    pub(super) fn unmapped(&mut self, u: PendingUnmap) {
        for at in (u.va..u.va + u.bytes as u64).step_by(CHUNK) {
            self.pending_vas.remove(&at);
        }
        if self.phys_free_after.get(&u.phys) == Some(&u.done) {
            self.phys_free_after.remove(&u.phys);
        }
        let refs = self.event_refs.entry(u.done as usize).or_insert(1);
        *refs -= 1;
        if *refs == 0 {
            self.event_refs.remove(&(u.done as usize));
            crate::real!(cuEventDestroy_v2(u.done));
        }
    }
}
