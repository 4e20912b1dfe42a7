//! A fill step whose mappings are made outside the process's state lock.
//!
//! Granting access to new memory costs about 1 ms per handle while copies keep the link
//! busy, so a fill step of a few hundred MiB spends tens of milliseconds in the driver.
//! The application's launches need the state lock, but not the driver's mapping calls:
//! on an H200 a thread launching small kernels kept 96% of its rate while another thread
//! of its process mapped and granted 24 MiB handles back to back under copy load
//! (`gpu/map_beside_launch_probe.py`). So the agent splits such a flush in three:
//! 1. with the lock, [`CudaDevice::flush`] issues the evictions and keeps the mappings
//!    and populations ([`CudaDevice::defer_next_mapping`]);
//! 2. without it, the agent runs the [`MapBatch`] ([`CudaDevice::take_mapping`]): it
//!    waits for the eviction copies out of the addresses it maps again and unmaps them,
//!    then maps and grants access;
//! 3. with it again, [`CudaDevice::complete_deferred`] issues the populations.
//!
//! Between 1 and 3 the chunk table already counts the chunks resident. Every device call
//! that could observe them first completes the deferral, waiting for the batch; only the
//! calls of a command whose memory is resident and not in the batch go ahead: the
//! deferred populations' events read as not done, and unmaps wait. A batch that fails
//! leaves chunks counted resident that are not mapped, so the device fails every call
//! after it, with the batch's error, rather than let a command reach them.

use super::flush::{grant_access, Call, CallTimes};
use super::{CudaDevice, Op, PendingUnmap, CHUNK};
use crate::cuda::*;
use crate::driver::{check, CudaError};
use gmux_core::device::Event;
use std::collections::HashSet;
use std::sync::{Arc, Condvar, Mutex};

/// The outcome of a batch, shared by the thread that runs it and one that waits for it.
#[derive(Default)]
struct Outcome {
    result: Mutex<Option<Result<String, CudaError>>>,
    ready: Condvar,
}

impl Outcome {
    fn set(&self, r: Result<String, CudaError>) {
        *self.result.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
        self.ready.notify_all();
    }

    fn wait(&self) -> Result<String, CudaError> {
        let mut g = self.result.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(r) = g.as_ref() {
                return r.clone();
            }
            g = self.ready.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Mappings to make, with access granted, before a deferred flush's populations: plain
/// addresses, handles and events, run on any thread without the device.
pub struct MapBatch {
    ordinal: i32,
    /// The peers granted access ([`super::peers`]), as they were when the batch was made:
    /// [`CudaDevice::complete_deferred`] grants the maps again if more joined since.
    mask: u32,
    /// Earlier mappings at these addresses: the eviction copy each waits for, its address
    /// and bytes.
    unmaps: Vec<(usize, CUdeviceptr, usize)>,
    /// Address, bytes and physical memory of each mapping.
    maps: Vec<(CUdeviceptr, usize, u64)>,
    outcome: Arc<Outcome>,
}

impl MapBatch {
    /// Bytes the batch maps.
    pub fn bytes(&self) -> u64 {
        self.maps.iter().map(|m| m.1 as u64).sum()
    }

    /// Unmaps the earlier mappings once their eviction copies are done, maps every
    /// handle and grants access, one call per contiguous run. Returns the driver calls'
    /// times for the debug log.
    pub fn run(self) -> Result<String, CudaError> {
        let r = self.map();
        self.outcome.set(r.clone());
        r
    }

    fn map(&self) -> Result<String, CudaError> {
        let mut times = CallTimes::default();
        for &(done, va, bytes) in &self.unmaps {
            check(times.time(Call::Settle, || crate::real!(cuEventSynchronize(done as CUevent))), "cuEventSynchronize")?;
            check(times.time(Call::Unmap, || crate::real!(cuMemUnmap(va, bytes))), "cuMemUnmap")?;
        }
        for &(va, bytes, phys) in &self.maps {
            check(times.time(Call::Map, || crate::real!(cuMemMap(va, bytes, 0, phys, 0))), "cuMemMap")?;
        }
        grant_access(self.ordinal, self.mask, self.maps.iter().map(|m| (m.0, m.1)).collect(), &mut times)?;
        Ok(times.take())
    }
}

impl Drop for MapBatch {
    /// A batch dropped unrun (its thread failed first) fails its waiter instead of
    /// leaving it waiting forever.
    fn drop(&mut self) {
        let mut g = self.outcome.result.lock().unwrap_or_else(|p| p.into_inner());
        if g.is_none() {
            *g = Some(Err(CudaError { call: "a fill step's mapping (abandoned before it ran)", code: CUDA_ERROR_UNKNOWN }));
            self.outcome.ready.notify_all();
        }
    }
}

/// A flush whose mappings and populations wait for its [`MapBatch`].
pub(super) struct Deferred {
    ops: Vec<Op>,
    keep: Option<HashSet<u64>>,
    /// Events the populations will record: not done until then.
    events: HashSet<u64>,
    /// The earlier mappings the batch unmaps, for their bookkeeping afterwards.
    unmaps: Vec<PendingUnmap>,
    /// The batch, until the agent takes it.
    batch: Option<MapBatch>,
    /// The batch's peer mask and ranges (kept after it is taken).
    mask: u32,
    maps: Vec<(CUdeviceptr, usize)>,
    outcome: Arc<Outcome>,
}

impl Deferred {
    /// The addresses the batch maps.
    pub(super) fn mapped_at(&self) -> HashSet<CUdeviceptr> {
        self.maps.iter().map(|m| m.0).collect()
    }
}

impl CudaDevice {
    /// The next flush that maps device memory defers its mappings and populations
    /// (see the module's documentation).
    pub fn defer_next_mapping(&mut self) {
        self.defer_next = true;
    }

    /// The mappings a deferred flush left to make, to run without the state lock, then
    /// [`CudaDevice::complete_deferred`]. Clears a [`CudaDevice::defer_next_mapping`]
    /// that no flush took.
    pub fn take_mapping(&mut self) -> Option<MapBatch> {
        self.defer_next = false;
        self.deferred.as_mut()?.batch.take()
    }

    /// Whether a deferred flush still waits for its populations.
    pub fn deferring(&self) -> bool {
        self.deferred.is_some()
    }

    /// Whether `e` is recorded by a deferred flush's populations.
    pub(super) fn is_deferred(&self, e: Event) -> bool {
        self.deferred.as_ref().is_some_and(|d| d.events.contains(&e.0))
    }

    /// The CUDA event behind `e`; a deferred population's is recorded first. An error:
    /// the deferred flush failed, and `e` never will be.
    pub fn cu_event(&mut self, e: Event) -> Result<Option<CUevent>, CudaError> {
        if self.is_deferred(e) || self.failed.is_some() {
            self.complete_deferred()?;
        }
        Ok(self.events.get(&e.0).copied())
    }

    /// Issues a deferred flush's populations, after its mappings: waits for the batch
    /// where another thread runs it, or runs it here where no thread took it. Every
    /// device call that could observe the deferred chunks calls this first. After a
    /// batch failed, returns its error for ever.
    pub fn complete_deferred(&mut self) -> Result<(), CudaError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let Some(d) = self.deferred.take() else { return Ok(()) };
        let t0 = std::time::Instant::now();
        let calls = match d.batch {
            Some(b) => b.run(),
            None => d.outcome.wait(),
        };
        let calls = calls.inspect_err(|e| {
            crate::log!(Error, "mapping a fill step failed ({e}); every later call of this device fails with it");
            self.failed = Some(e.clone());
        })?;
        for u in d.unmaps {
            self.unmapped(u);
        }
        // A device that joined while the batch ran was not granted its maps.
        if super::peers::peers() != d.mask {
            self.grant(d.maps)?;
        }
        self.keep = d.keep;
        self.populate_after_evictions(&d.ops)?;
        crate::log!(Debug, "deferred flush of {} ops: mapped ({calls}), completed after {:.2} ms", d.ops.len(), t0.elapsed().as_secs_f64() * 1e3);
        Ok(())
    }

    /// [`CudaDevice::complete_deferred`] where no error can be returned: the error is
    /// logged there, and every later call that can fail fails with it.
    pub(super) fn complete_or_log(&mut self) {
        let _ = self.complete_deferred();
    }

    /// Whether the queued `ops` can be split: they map device memory, and only device
    /// memory (host mappings serve a command over the limit, at once).
    pub(super) fn defers(&self, ops: &[Op]) -> bool {
        let mut maps = ops.iter().filter_map(|op| if let Op::Map(_, _, p) = op { Some(p.0) } else { None }).peekable();
        self.defer_next && !self.mid_plan && maps.peek().is_some() && maps.all(|p| !self.host_phys.contains(&p))
    }

    /// The first part of a split flush (with the lock): takes the earlier mappings at
    /// the addresses to map, issues the evictions, and keeps the rest for a [`MapBatch`]
    /// and [`CudaDevice::complete_deferred`].
    pub(super) fn defer(&mut self, ops: Vec<Op>) -> Result<(), CudaError> {
        self.defer_next = false;
        let (mut maps, mut unmaps) = (Vec::new(), Vec::new());
        for op in &ops {
            if let Op::Map(c, n, p) = *op {
                let bytes = n as usize * CHUNK;
                for va in self.addresses(c) {
                    unmaps.extend(self.take_pending_at(va, bytes));
                    maps.push((va, bytes, p.0));
                }
                self.mapped.insert(c, (p.0, n));
            }
        }
        self.evict_pass(&ops)?;
        let events = ops.iter().filter_map(|op| if let Op::Record(_, e) = op { Some(e.0) } else { None }).collect();
        let outcome = Arc::new(Outcome::default());
        let batch = MapBatch {
            ordinal: self.ordinal,
            mask: super::peers::peers(),
            unmaps: unmaps.iter().map(|u: &PendingUnmap| (u.done as usize, u.va, u.bytes)).collect(),
            maps,
            outcome: outcome.clone(),
        };
        let keep = self.keep.take();
        let (mask, ranges) = (batch.mask, batch.maps.iter().map(|m| (m.0, m.1)).collect());
        self.deferred = Some(Deferred { ops, keep, events, unmaps, batch: Some(batch), outcome, mask, maps: ranges });
        Ok(())
    }
}
