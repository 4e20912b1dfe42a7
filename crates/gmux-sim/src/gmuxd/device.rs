//! One process's view of the shared simulated device: its chunk ids moved into a range
//! of their own, so that every process's runtime numbers chunks from 0 as on a GPU while
//! all of them share one link.

use crate::device::{SimDevice, SimDeviceError};
use gmux_core::device::{CopyStream, Device, Event, PhysChunk};
use gmux_core::{ChunkId, Tier};
use std::cell::RefCell;
use std::rc::Rc;

/// Chunks each process may number (2^24 chunks, 32 TiB).
const CHUNKS_PER_PROCESS: u32 = 1 << 24;

/// A process's handle on the shared device.
pub struct ProcessDevice {
    dev: Rc<RefCell<SimDevice>>,
    index: u32,
    base: u32,
}

impl ProcessDevice {
    /// The handle of process number `index`.
    pub fn new(dev: Rc<RefCell<SimDevice>>, index: u32) -> Self {
        ProcessDevice { dev, index, base: index * CHUNKS_PER_PROCESS }
    }

    fn at(&self, c: ChunkId) -> ChunkId {
        ChunkId(self.base + c.0)
    }

    /// Starts the calls the application makes at time `now`, on this process's own queues.
    pub fn begin(&self, now: f64) {
        self.begin_on(now, 0);
    }

    /// Starts the calls the agent makes at time `now`: its driver calls run beside the
    /// application's, not behind them.
    pub fn begin_agent(&self, now: f64) {
        self.begin_on(now, 1);
    }

    fn begin_on(&self, now: f64, thread: u32) {
        let mut dev = self.dev.borrow_mut();
        dev.begin(now);
        dev.set_queue(self.index, thread);
    }

    /// When the work issued so far on `stream` is done.
    pub fn stream_done(&self, stream: CopyStream) -> f64 {
        self.dev.borrow().stream_done(stream)
    }

    /// Until when the calls made since [`ProcessDevice::begin`] held the caller's thread
    /// (0: they did not).
    pub fn host_waits_until(&self) -> f64 {
        self.dev.borrow().host_waits_until()
    }

    /// When `event` completed.
    pub fn time(&self, event: Event) -> f64 {
        self.dev.borrow().time(event)
    }
}

impl Device for ProcessDevice {
    type Error = SimDeviceError;
    type Stream = u32;
    type Fence = f64;

    fn create_chunk(&mut self, chunks: u32) -> Result<PhysChunk, SimDeviceError> {
        self.dev.borrow_mut().create_chunk(chunks)
    }
    fn create_host_chunk(&mut self) -> Result<PhysChunk, SimDeviceError> {
        self.dev.borrow_mut().create_host_chunk()
    }
    fn release_chunk(&mut self, phys: PhysChunk) -> Result<(), SimDeviceError> {
        self.dev.borrow_mut().release_chunk(phys)
    }
    fn map(&mut self, first: ChunkId, chunks: u32, phys: PhysChunk) -> Result<(), SimDeviceError> {
        let first = self.at(first);
        self.dev.borrow_mut().map(first, chunks, phys)
    }
    fn unmap(&mut self, first: ChunkId, chunks: u32) -> Result<(), SimDeviceError> {
        let first = self.at(first);
        self.dev.borrow_mut().unmap(first, chunks)
    }
    fn copy(&mut self, stream: CopyStream, chunk: ChunkId, from: Tier, to: Tier) -> Result<(), SimDeviceError> {
        let chunk = self.at(chunk);
        self.dev.borrow_mut().copy(stream, chunk, from, to)
    }
    fn record(&mut self, stream: CopyStream) -> Result<Event, SimDeviceError> {
        self.dev.borrow_mut().record(stream)
    }
    fn wait(&mut self, stream: CopyStream, event: Event) -> Result<(), SimDeviceError> {
        self.dev.borrow_mut().wait(stream, event)
    }
    fn keep_events(&mut self, keep: &[Event]) {
        self.dev.borrow_mut().keep_events(keep);
    }
    fn evict_after(&mut self, after: &[f64]) {
        self.dev.borrow_mut().evict_after(after);
    }
    fn flush(&mut self) -> Result<(), SimDeviceError> {
        Device::flush(&mut *self.dev.borrow_mut())
    }
    fn is_done(&mut self, event: Event) -> bool {
        self.dev.borrow_mut().is_done(event)
    }
    fn drop_event(&mut self, event: Event) {
        self.dev.borrow_mut().drop_event(event);
    }
    fn reclaim(&mut self) -> Result<(), SimDeviceError> {
        self.dev.borrow_mut().reclaim()
    }
    fn synchronize(&mut self) -> Result<(), SimDeviceError> {
        self.dev.borrow_mut().synchronize()
    }
    fn forget(&mut self, chunk: ChunkId) {
        let chunk = self.at(chunk);
        self.dev.borrow_mut().forget(chunk);
    }
}
