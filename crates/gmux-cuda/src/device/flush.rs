//! A flush: the queued calls issued as mappings first, then eviction copies and the
//! unmaps that wait for them, then population copies, with neighbouring chunks merged.
//! A deferred flush ([`super::defer`]) issues its evictions first and leaves the mappings
//! and populations for later.

use super::{CudaDevice, MoverMode, Op, PendingUnmap, CHUNK};
use crate::cuda::*;
use crate::driver::{check, CudaError};
use gmux_core::device::CopyStream;
use gmux_core::{ChunkId, Tier};
use std::ffi::c_void;

/// Consecutive chunks whose device and host addresses are both contiguous: one copy.
#[derive(Debug, Default)]
struct Run {
    va: CUdeviceptr,
    slot: usize,
    len: usize,
    waits: Vec<CUevent>,
    unmaps: Vec<(ChunkId, u32)>,
}

impl Run {
    /// Whether the chunk at `va` with host slot `slot` continues this run of at most
    /// `most` chunks.
    fn extends(&self, va: CUdeviceptr, slot: usize, most: usize) -> bool {
        self.len > 0 && self.len < most * CHUNK && self.va + self.len as u64 == va && self.slot + self.len == slot
    }
}

/// Sorted address ranges with touching neighbours joined.
fn merge(sorted: Vec<(CUdeviceptr, usize)>) -> Vec<(CUdeviceptr, usize)> {
    let mut out: Vec<(CUdeviceptr, usize)> = Vec::new();
    for (va, len) in sorted {
        match out.last_mut() {
            Some((s, l)) if *s + *l as u64 == va => *l += len,
            _ => out.push((va, len)),
        }
    }
    out
}

/// Makes `stream` wait for each distinct event of `waits`, which it empties.
fn wait_all(stream: CUstream, waits: &mut Vec<CUevent>) -> Result<(), CudaError> {
    waits.sort_unstable();
    waits.dedup();
    for w in waits.drain(..) {
        check(crate::real!(cuStreamWaitEvent(stream, w, 0)), "cuStreamWaitEvent")?;
    }
    Ok(())
}

/// Grants device `ordinal` and the peers of `mask` ([`super::peers`]) access to the
/// mapped ranges `runs`, one call per contiguous run.
pub(super) fn grant_access(ordinal: i32, mask: u32, mut runs: Vec<(CUdeviceptr, usize)>, times: &mut CallTimes) -> Result<(), CudaError> {
    runs.sort_unstable();
    let descs = super::peers::access(ordinal, mask);
    for (va, len) in merge(runs) {
        check(times.time(Call::Access, || crate::real!(cuMemSetAccess(va, len, descs.as_ptr(), descs.len()))), "cuMemSetAccess")?;
    }
    Ok(())
}

fn unsupported() -> CudaError {
    CudaError { call: "a disk-tier copy (the disk tier is not in the shim yet)", code: CUDA_ERROR_NOT_SUPPORTED }
}

/// Host time spent in the driver's VMM and copy calls, for the debug log of a flush.
#[derive(Debug, Default)]
pub(super) struct CallTimes {
    /// (calls, seconds) for `cuMemMap`, `cuMemSetAccess`, `cuMemUnmap`, copies, and host
    /// waits for eviction copies before an address is mapped again.
    t: [(u32, f64); 5],
}

#[derive(Clone, Copy)]
pub(super) enum Call {
    Map,
    Access,
    Unmap,
    Copy,
    Settle,
}

impl CallTimes {
    pub(super) fn time<T>(&mut self, c: Call, f: impl FnOnce() -> T) -> T {
        let t = std::time::Instant::now();
        let r = f();
        let e = &mut self.t[c as usize];
        e.0 += 1;
        e.1 += t.elapsed().as_secs_f64();
        r
    }

    pub(super) fn take(&mut self) -> String {
        let names = ["map", "access", "unmap", "copy", "settle"];
        let s = names
            .iter()
            .zip(self.t)
            .filter(|(_, (n, _))| *n > 0)
            .map(|(name, (n, secs))| format!("{name} {n}× {:.1} ms", secs * 1e3))
            .collect::<Vec<_>>()
            .join(", ");
        self.t = Default::default();
        s
    }
}

impl CudaDevice {
    /// Runs the queued calls: maps every incoming chunk with batched access, then the
    /// eviction stream's copies, then the population stream's, each in plan order with
    /// neighbouring chunks merged into one copy (up to [`super::RUN_CHUNKS`]).
    ///
    /// Mapping comes first because granting access is the costly step (about 37 µs per
    /// chunk on an H100) and costs twice as much while copies run: page tables are
    /// written through the copy engines the mover's copies occupy. After
    /// [`CudaDevice::defer_next_mapping`], the flush defers instead.
    pub(super) fn issue_queued(&mut self) -> Result<(), CudaError> {
        if self.ops.is_empty() {
            self.keep = None;
            return Ok(());
        }
        debug_assert!(self.deferred.is_none(), "a flush while another is deferred");
        let ops = std::mem::take(&mut self.ops);
        let t0 = std::time::Instant::now();
        self.reap(false)?;
        if self.defers(&ops) {
            return self.defer(ops);
        }
        self.map_all(&ops)?;
        let t1 = std::time::Instant::now();
        self.evict_pass(&ops)?;
        self.populate_after_evictions(&ops)?;
        crate::log!(
            Debug,
            "flush of {} ops: mapped in {:.2} ms, copies issued in {:.2} ms; driver calls since the last flush: {}",
            ops.len(),
            (t1 - t0).as_secs_f64() * 1e3,
            t1.elapsed().as_secs_f64() * 1e3,
            self.times.take()
        );
        Ok(())
    }

    /// The population copies of `ops`, whose evictions are issued (after all of them, in
    /// [`MoverMode::Sequential`]).
    pub(super) fn populate_after_evictions(&mut self, ops: &[Op]) -> Result<(), CudaError> {
        if self.mode == MoverMode::Sequential {
            let all_out = self.new_event(CopyStream::Evict)?;
            check(crate::real!(cuStreamWaitEvent(self.streams[1], all_out, 0)), "cuStreamWaitEvent")?;
            crate::real!(cuEventDestroy_v2(all_out));
        }
        self.populate_pass(ops)?;
        self.keep = None;
        Ok(())
    }

    /// Maps every incoming chunk, then grants access: GPU memory in merged runs, host
    /// memory mapping by mapping (a run never mixes the two).
    fn map_all(&mut self, ops: &[Op]) -> Result<(), CudaError> {
        let mut runs: Vec<(CUdeviceptr, usize)> = Vec::new();
        let mut host_runs: Vec<(CUdeviceptr, usize)> = Vec::new();
        for op in ops {
            if let Op::Map(c, n, p) = *op {
                let bytes = n as usize * CHUNK;
                for va in self.addresses(c) {
                    self.settle_at(va, bytes)?;
                    check(self.times.time(Call::Map, || crate::real!(cuMemMap(va, bytes, 0, p.0, 0))), "cuMemMap")?;
                    if self.host_phys.contains(&p.0) {
                        host_runs.push((va, bytes));
                    } else {
                        runs.push((va, bytes));
                    }
                }
                self.mapped.insert(c, (p.0, n));
            }
        }
        for run in host_runs {
            self.grant(vec![run])?;
        }
        self.grant(runs)
    }

    /// Grants this device and its peers access to the mapped ranges `runs`, one call per
    /// contiguous run.
    pub(super) fn grant(&mut self, runs: Vec<(CUdeviceptr, usize)>) -> Result<(), CudaError> {
        grant_access(self.ordinal, super::peers::peers(), runs, &mut self.times)
    }

    /// Finishes the pending unmaps of `bytes` from `va`, so that the range can be mapped.
    pub(super) fn settle_at(&mut self, va: CUdeviceptr, bytes: usize) -> Result<(), CudaError> {
        for at in (va..va + bytes as u64).step_by(CHUNK) {
            if self.pending_vas.contains(&at) {
                self.settle_unmap(|u| u.holds(at))?;
            }
        }
        Ok(())
    }

    /// Eviction copies and the unmaps that wait for them.
    pub(super) fn evict_pass(&mut self, ops: &[Op]) -> Result<(), CudaError> {
        let mut app = std::mem::take(&mut self.evict_wait);
        wait_all(self.streams[CopyStream::Evict as usize], &mut app)?;
        if ops.iter().any(|op| matches!(op, Op::Copy(CopyStream::Evict, ..) | Op::Unmap(..))) {
            if let Some(ev) = self.populated.take() {
                check(crate::real!(cuStreamWaitEvent(self.streams[CopyStream::Evict as usize], ev, 0)), "cuStreamWaitEvent")?;
                crate::real!(cuEventDestroy_v2(ev));
            }
        }
        let mut run = Run::default();
        for op in ops {
            match *op {
                Op::Copy(CopyStream::Evict, c, Tier::Gpu, Tier::Host) => {
                    let (va, slot) = (self.va(c), self.slot_for(c)?);
                    if !run.extends(va, slot, self.run_chunks) {
                        self.end_evict_run(&mut run)?;
                        run = Run { va, slot, ..Run::default() };
                    }
                    run.len += CHUNK;
                }
                Op::Copy(CopyStream::Evict, ..) => return Err(unsupported()),
                // The mover unmaps a mapping right after the copy of its last chunk, so
                // the run's copy is the last one out of it; the copies before are ahead
                // of it on the same stream.
                Op::Unmap(c, n) if run.len > 0 => run.unmaps.push((c, n)),
                Op::Unmap(c, n) => {
                    self.end_evict_run(&mut run)?;
                    run.unmaps.push((c, n));
                    self.end_evict_run(&mut run)?;
                }
                _ => {}
            }
        }
        self.end_evict_run(&mut run)
    }

    fn end_evict_run(&mut self, run: &mut Run) -> Result<(), CudaError> {
        let s = self.streams[CopyStream::Evict as usize];
        wait_all(s, &mut run.waits)?;
        if run.len > 0 {
            check(self.times.time(Call::Copy, || crate::real!(cuMemcpyDtoHAsync_v2(run.slot as *mut c_void, run.va, run.len, s))), "cuMemcpyDtoHAsync")?;
        }
        if !run.unmaps.is_empty() {
            let done = self.new_event(CopyStream::Evict)?;
            let mut unmaps = Vec::new();
            for (c, n) in run.unmaps.drain(..) {
                let (phys, mapped_n) = self.mapped.remove(&c).expect("unmap of a mapping the mover made");
                assert_eq!(n, mapped_n, "gmux: unmap of part of a mapping (chunk {})", c.0);
                unmaps.extend(self.addresses(c).into_iter().map(|va| PendingUnmap { va, bytes: n as usize * CHUNK, phys, done }));
                self.phys_free_after.insert(phys, done);
            }
            self.event_refs.insert(done as usize, unmaps.len());
            for u in unmaps {
                self.pending_vas.extend((u.va..u.va + u.bytes as u64).step_by(CHUNK));
                self.pending_unmap.push(u);
            }
            if self.strict_unmap {
                self.settle_unmap(|u| u.done == done)?;
            }
        }
        *run = Run::default();
        Ok(())
    }

    /// Population copies, each after the evictions out of its physical chunk, and the
    /// events that commands wait for.
    fn populate_pass(&mut self, ops: &[Op]) -> Result<(), CudaError> {
        let mut run = Run::default();
        let mut waits: Vec<CUevent> = Vec::new();
        for op in ops {
            match *op {
                Op::Map(_, _, p) => waits.extend(self.phys_free_after.remove(&p.0)),
                Op::Copy(CopyStream::Populate, c, Tier::Host, Tier::Gpu) => {
                    let va = self.va(c);
                    let slot = *self.slot.get(&c).expect("population of a chunk that was never evicted");
                    if !run.extends(va, slot, self.run_chunks) {
                        self.end_populate_run(&mut run)?;
                        run = Run { va, slot, ..Run::default() };
                    }
                    run.len += CHUNK;
                    run.waits.append(&mut waits);
                }
                Op::Copy(CopyStream::Populate, ..) => return Err(unsupported()),
                Op::Record(stream, e) => {
                    let wanted = stream == CopyStream::Evict || self.keep.as_ref().is_none_or(|k| k.contains(&e.0));
                    if wanted {
                        self.end_populate_run(&mut run)?;
                        run.waits.append(&mut waits);
                        self.end_populate_run(&mut run)?;
                        let ev = self.new_event(stream)?;
                        self.events.insert(e.0, ev);
                        if self.mid_plan && stream == CopyStream::Populate {
                            self.early_events.push(e.0);
                        }
                    }
                }
                Op::Wait(stream, e) => {
                    self.end_populate_run(&mut run)?;
                    if let Some(ev) = self.events.get(&e.0).copied() {
                        check(crate::real!(cuStreamWaitEvent(self.streams[stream as usize], ev, 0)), "cuStreamWaitEvent")?;
                    }
                }
                _ => {}
            }
        }
        run.waits.append(&mut waits);
        self.end_populate_run(&mut run)?;
        if ops.iter().any(|op| matches!(op, Op::Copy(CopyStream::Populate, ..) | Op::Map(..))) {
            // The event object may go as soon as the evict stream's wait on it is queued.
            let tail = self.new_event(CopyStream::Populate)?;
            if let Some(old) = self.populated.replace(tail) {
                crate::real!(cuEventDestroy_v2(old));
            }
        }
        Ok(())
    }

    fn end_populate_run(&mut self, run: &mut Run) -> Result<(), CudaError> {
        let s = self.streams[CopyStream::Populate as usize];
        wait_all(s, &mut run.waits)?;
        if run.len > 0 {
            check(self.times.time(Call::Copy, || crate::real!(cuMemcpyHtoDAsync_v2(run.va, run.slot as *const c_void, run.len, s))), "cuMemcpyHtoDAsync")?;
        }
        *run = Run::default();
        Ok(())
    }
}
