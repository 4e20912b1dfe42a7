//! The simulated device: gmux-core's [`Device`] trait over the lane model.
//!
//! Calls only queue items; [`SimDevice::run_batch`] runs the queued batch on the lanes and
//! fixes the time of every event recorded since the last flush.

use crate::lanes::{Item, Lane, Lanes};
use crate::model::DeviceModel;
use gmux_core::device::{CopyStream, Device, Event, PhysChunk};
use gmux_core::{ChunkId, Tier, CHUNK_BYTES};
use std::collections::HashMap;

/// Threads of one process that call the driver (its application, its agent).
const CALLING_THREADS: u32 = 2;

/// A simulated GPU, host link and disk.
pub struct SimDevice {
    model: DeviceModel,
    lanes: Lanes,
    batch: Vec<Item>,
    /// Batch item that makes a physical chunk free to map.
    phys_free: HashMap<u64, usize>,
    /// Batch item of each chunk's latest operation.
    chunk_last: HashMap<ChunkId, usize>,
    mapped: HashMap<ChunkId, u64>,
    stream_last: [Option<usize>; 2],
    pending_events: Vec<(u64, Option<usize>)>,
    event_time: Vec<f64>,
    ready_at: HashMap<ChunkId, f64>,
    /// When the application work that this batch's eviction copies wait for is done.
    evict_not_before: f64,
    /// When the last work issued on each queue's copy streams (evict, populate) is done.
    stream_done: HashMap<(u32, usize), f64>,
    next_phys: u64,
    at: f64,
    /// The lane queue of the calls now made (one per process).
    queue: u32,
    /// The thread of that process making the driver calls now (create, map, unmap,
    /// release): each thread's calls run in order, beside the other's.
    thread: u32,
    /// Chunks this batch unmaps, with the batch item that does it.
    unmapping: Vec<(ChunkId, usize)>,
    /// When the unmap of each unmapped chunk is done (it waits for the eviction copy out
    /// of it).
    unmapped_at: HashMap<ChunkId, f64>,
    /// The caller's thread waits until then: it mapped an address whose unmap was not
    /// done, which gmux-cuda finishes first, on the host (`settle_at`), or its batch's
    /// mappings are not done (the driver's mapping calls return when they are).
    host_waits_until: f64,
    /// This batch's mappings.
    mapping: Vec<usize>,
    /// A mapping's `cuMemSetAccess` costs `set_access_busy_us` while eviction copies run.
    busy_access: bool,
}

/// A device call that cannot happen in the model (a mover bug).
#[derive(Debug)]
pub struct SimDeviceError(String);

impl std::fmt::Display for SimDeviceError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl SimDevice {
    /// A device with the given constants.
    pub fn new(model: DeviceModel) -> Self {
        SimDevice {
            model,
            lanes: Lanes::default(),
            batch: Vec::new(),
            phys_free: HashMap::new(),
            chunk_last: HashMap::new(),
            mapped: HashMap::new(),
            stream_last: [None, None],
            pending_events: Vec::new(),
            event_time: Vec::new(),
            ready_at: HashMap::new(),
            evict_not_before: 0.0,
            stream_done: HashMap::new(),
            next_phys: 0,
            at: 0.0,
            queue: 0,
            thread: 0,
            unmapping: Vec::new(),
            unmapped_at: HashMap::new(),
            host_waits_until: 0.0,
            mapping: Vec::new(),
            busy_access: false,
        }
    }

    /// A device of processes that map their memory through the driver's VMM API, as the
    /// shim does: granting access to a mapping costs `set_access_busy_us` while eviction
    /// copies run. (The other systems model migration inside the driver.)
    pub fn of_processes(model: DeviceModel) -> Self {
        SimDevice { busy_access: true, ..SimDevice::new(model) }
    }

    /// Starts a batch of calls issued at time `at`.
    pub fn begin(&mut self, at: f64) {
        self.at = at;
        self.host_waits_until = 0.0;
    }

    /// Until when the calls made since [`SimDevice::begin`] held their caller's thread (0
    /// if they did not): the time the last unmap of an address they mapped again is done,
    /// or, after the batch ran, the time its last mapping is done.
    pub fn host_waits_until(&self) -> f64 {
        self.host_waits_until
    }

    /// Puts the calls from now on in lane queue `queue` (a process's streams), its driver
    /// calls on its thread `thread` (a process's application and its agent each call the
    /// driver on their own).
    pub fn set_queue(&mut self, queue: u32, thread: u32) {
        self.queue = queue;
        self.thread = thread;
    }

    /// Runs the queued batch; afterwards every event recorded in it has a time.
    pub fn run_batch(&mut self) {
        // gmux-cuda maps a batch's memory before it issues any copy, so a wait in a
        // mapping delays the whole batch.
        let start = self.at.max(self.host_waits_until);
        for it in &mut self.batch {
            it.earliest = it.earliest.max(start);
        }
        let done = self.lanes.schedule(&self.model, self.at, &self.batch);
        for (ev, item) in self.pending_events.drain(..) {
            let t = item.map_or(self.at, |i| done[i]);
            self.event_time[ev as usize] = t;
        }
        for (c, i) in self.unmapping.drain(..) {
            self.unmapped_at.insert(c, done[i]);
        }
        for i in self.mapping.drain(..) {
            self.host_waits_until = self.host_waits_until.max(done[i]);
        }
        for (c, i) in self.chunk_last.drain() {
            let t = done[i];
            let r = self.ready_at.entry(c).or_insert(0.0);
            *r = r.max(t);
        }
        for (s, last) in self.stream_last.iter().enumerate() {
            if let Some(i) = last {
                let d = self.stream_done.entry((self.queue, s)).or_insert(0.0);
                *d = d.max(done[*i]);
            }
        }
        self.batch.clear();
        self.evict_not_before = 0.0;
        self.phys_free.clear();
        self.stream_last = [None, None];
    }

    /// When the work issued so far on `stream` of the current queue is done (after the
    /// flush of its batch).
    pub fn stream_done(&self, stream: CopyStream) -> f64 {
        self.stream_done.get(&(self.queue, stream as usize)).copied().unwrap_or(0.0).max(self.at)
    }

    /// When `event` completed (after the flush of its batch).
    pub fn time(&self, event: Event) -> f64 {
        self.event_time[event.0 as usize]
    }

    fn push(&mut self, lane: Lane, bytes: u64, fixed_us: f64, deps: [Option<usize>; 2], earliest: f64) -> usize {
        self.push_busy(lane, bytes, [fixed_us, fixed_us], deps, earliest)
    }

    /// [`SimDevice::push`] with a fixed cost that differs while the device→host lane moves
    /// data: `fixed_us` is (idle, busy).
    fn push_busy(&mut self, lane: Lane, bytes: u64, fixed_us: [f64; 2], deps: [Option<usize>; 2], earliest: f64) -> usize {
        let [idle, busy] = fixed_us.map(|us| us * 1e3);
        let queue = if lane == Lane::Ctl { self.queue * CALLING_THREADS + self.thread } else { self.queue };
        self.batch.push(Item { lane, queue, bytes, fixed_ns: idle, busy_fixed_ns: busy, deps, earliest: earliest.max(self.at) });
        self.batch.len() - 1
    }

    fn settled(&self, c: ChunkId) -> f64 {
        self.ready_at.get(&c).copied().unwrap_or(0.0)
    }
}

impl Device for SimDevice {
    type Error = SimDeviceError;
    /// A tenant's stream: the simulator runs one per tenant.
    type Stream = u32;
    /// When the application work ends, in simulated ns.
    type Fence = f64;

    fn create_chunk(&mut self, _chunks: u32) -> Result<PhysChunk, SimDeviceError> {
        self.next_phys += 1;
        let i = self.push(Lane::Ctl, 0, self.model.create_us, [None, None], 0.0);
        self.phys_free.insert(self.next_phys, i);
        Ok(PhysChunk(self.next_phys))
    }

    /// Costs what GPU memory costs; a command's reads of it over the link are not modelled.
    fn create_host_chunk(&mut self) -> Result<PhysChunk, SimDeviceError> {
        self.create_chunk(1)
    }

    fn release_chunk(&mut self, phys: PhysChunk) -> Result<(), SimDeviceError> {
        let dep = self.phys_free.get(&phys.0).copied();
        self.push(Lane::Ctl, 0, self.model.release_us, [dep, None], 0.0);
        Ok(())
    }

    /// One mapping costs `map_us + set_access_us` whatever its length (measured: the
    /// driver's cost is per mapping), on a device [`SimDevice::of_processes`]
    /// `map_us + set_access_busy_us` while eviction copies run, and holds the caller until
    /// it is done; mapping an address whose last unmap is
    /// not done holds it until that is done first ([`SimDevice::host_waits_until`]).
    fn map(&mut self, first: ChunkId, chunks: u32, phys: PhysChunk) -> Result<(), SimDeviceError> {
        let dep = self.phys_free.get(&phys.0).copied();
        let m = &self.model;
        let busy = if self.busy_access { m.set_access_busy_us } else { m.set_access_us };
        let cost = [m.map_us + m.set_access_us, m.map_us + busy];
        let i = self.push_busy(Lane::Ctl, 0, cost, [dep, None], 0.0);
        self.mapping.push(i);
        for c in (first.0..first.0 + chunks).map(ChunkId) {
            if let Some(t) = self.unmapped_at.remove(&c).filter(|t| *t > self.at) {
                self.host_waits_until = self.host_waits_until.max(t);
            }
            self.mapped.insert(c, phys.0);
            self.chunk_last.insert(c, i);
        }
        self.stream_last[1] = Some(i);
        Ok(())
    }

    /// Waits for the latest operation on any chunk of the mapping.
    fn unmap(&mut self, first: ChunkId, chunks: u32) -> Result<(), SimDeviceError> {
        let run: Vec<ChunkId> = (first.0..first.0 + chunks).map(ChunkId).collect();
        let mut phys = None;
        for c in &run {
            phys = Some(self.mapped.remove(c).ok_or_else(|| SimDeviceError(format!("cuMemUnmap of chunk {} that is not mapped", c.0)))?);
        }
        let dep = run.iter().filter_map(|c| self.chunk_last.get(c).copied()).max();
        let earliest = run.iter().map(|c| self.settled(*c)).fold(0.0, f64::max);
        let i = self.push(Lane::Ctl, 0, self.model.unmap_us, [dep, None], earliest);
        self.phys_free.insert(phys.expect("a mapping has a chunk"), i);
        for c in run {
            self.chunk_last.insert(c, i);
            self.unmapping.push((c, i));
        }
        self.stream_last[0] = Some(i);
        Ok(())
    }

    fn copy(&mut self, stream: CopyStream, chunk: ChunkId, from: Tier, to: Tier) -> Result<(), SimDeviceError> {
        let (lane, fixed) = match (from, to) {
            (Tier::Host, Tier::Gpu) => (Lane::H2D, self.model.copy_fixed_us),
            (Tier::Gpu, Tier::Host) => (Lane::D2H, self.model.copy_fixed_us),
            (Tier::Disk, Tier::Host) => (Lane::DiskRead, 0.0),
            (Tier::Host, Tier::Disk) => (Lane::DiskWrite, 0.0),
            _ => return Err(SimDeviceError(format!("no copy path {from:?} -> {to:?}"))),
        };
        let dep = self.chunk_last.get(&chunk).copied();
        let earliest = if lane == Lane::D2H { self.settled(chunk).max(self.evict_not_before) } else { self.settled(chunk) };
        let i = self.push(lane, CHUNK_BYTES, fixed, [dep, None], earliest);
        self.chunk_last.insert(chunk, i);
        self.stream_last[stream as usize] = Some(i);
        Ok(())
    }

    fn record(&mut self, stream: CopyStream) -> Result<Event, SimDeviceError> {
        let ev = self.event_time.len() as u64;
        self.event_time.push(f64::NAN);
        self.pending_events.push((ev, self.stream_last[stream as usize]));
        Ok(Event(ev))
    }

    fn wait(&mut self, _stream: CopyStream, _event: Event) -> Result<(), SimDeviceError> {
        Ok(())
    }

    fn keep_events(&mut self, _keep: &[Event]) {}

    fn evict_after(&mut self, after: &[f64]) {
        self.evict_not_before = after.iter().copied().fold(self.evict_not_before, f64::max);
    }

    fn flush(&mut self) -> Result<(), SimDeviceError> {
        self.run_batch();
        Ok(())
    }

    /// Done once simulated time (the start of the current batch) has passed it.
    fn is_done(&mut self, event: Event) -> bool {
        self.event_time.get(event.0 as usize).is_none_or(|t| *t <= self.at)
    }

    fn drop_event(&mut self, _event: Event) {}

    fn reclaim(&mut self) -> Result<(), SimDeviceError> {
        Ok(())
    }

    /// The model's waits are in the event times; the host never blocks.
    fn synchronize(&mut self) -> Result<(), SimDeviceError> {
        Ok(())
    }

    fn forget(&mut self, chunk: ChunkId) {
        self.ready_at.remove(&chunk);
        self.unmapped_at.remove(&chunk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Maps chunk 0, evicts it after application work that ends at 5 ms, and unmaps it;
    /// returns the device and when the unmap is done.
    fn evicted_at_5ms() -> (SimDevice, f64) {
        let mut d = SimDevice::new(DeviceModel::default());
        d.begin(0.0);
        let phys = d.create_chunk(1).unwrap();
        d.map(ChunkId(0), 1, phys).unwrap();
        d.evict_after(&[5e6]);
        d.copy(CopyStream::Evict, ChunkId(0), Tier::Gpu, Tier::Host).unwrap();
        d.unmap(ChunkId(0), 1).unwrap();
        d.release_chunk(phys).unwrap();
        d.run_batch();
        let unmapped = d.unmapped_at[&ChunkId(0)];
        (d, unmapped)
    }

    /// gmux-cuda finishes the unmap of an address on the host before it maps the address
    /// again, so the caller waits for the eviction copy, which waits for the application.
    #[test]
    fn mapping_an_address_again_waits_for_its_unmap() {
        let (mut d, unmapped) = evicted_at_5ms();
        let copy_ns = CHUNK_BYTES as f64 / d.model.d2h_gbps;
        assert!(unmapped >= 5e6 + copy_ns, "the unmap at {unmapped} ns follows the copy after the application");
        d.begin(1e6);
        assert_eq!(d.host_waits_until(), 0.0, "nothing mapped yet");
        let phys = d.create_chunk(1).unwrap();
        d.map(ChunkId(0), 1, phys).unwrap();
        assert_eq!(d.host_waits_until(), unmapped);
        d.begin(2e6);
        assert_eq!(d.host_waits_until(), 0.0, "each batch starts unheld");

        let (mut d, unmapped) = evicted_at_5ms();
        d.begin(unmapped + 1.0);
        let phys = d.create_chunk(1).unwrap();
        d.map(ChunkId(0), 1, phys).unwrap();
        assert_eq!(d.host_waits_until(), 0.0, "an unmap already done holds nobody");
    }

    /// A mapping holds its caller until it is done, and costs `set_access_busy_us` when it
    /// starts while an eviction copy (another process's here) moves data: 4 GiB leaving
    /// the device keep the link busy for 78 ms.
    #[test]
    fn a_mapping_holds_its_caller_and_costs_more_beside_an_eviction() {
        let mut d = SimDevice::of_processes(DeviceModel::default());
        let m = d.model.clone();
        let idle_us = m.create_us + m.map_us + m.set_access_us;
        d.begin(0.0);
        let phys = d.create_chunk(1).unwrap();
        d.map(ChunkId(0), 1, phys).unwrap();
        d.run_batch();
        assert!((d.host_waits_until() - idle_us * 1e3).abs() < 1e-6, "held {} ns", d.host_waits_until());

        d.set_queue(1, 0);
        d.begin(1e6);
        for c in 0..2048 {
            d.copy(CopyStream::Evict, ChunkId(100 + c), Tier::Gpu, Tier::Host).unwrap();
        }
        d.run_batch();
        d.set_queue(0, 0);
        d.begin(2e6);
        let phys = d.create_chunk(1).unwrap();
        d.map(ChunkId(1), 1, phys).unwrap();
        d.run_batch();
        let busy_us = m.create_us + m.map_us + m.set_access_busy_us;
        assert!((d.host_waits_until() - (2e6 + busy_us * 1e3)).abs() < 1e-6, "held until {} ns", d.host_waits_until());
    }
}
