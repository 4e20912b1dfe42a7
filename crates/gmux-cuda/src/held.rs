//! Commands of other devices that use this device's gmux memory (a copy between two
//! devices, a kernel that reads a peer's buffer): for each, an event recorded after it
//! on its own stream, and the allocations of this device it uses. The device's
//! evictions wait for the events on the GPU and a free of such an allocation waits for
//! them on the host, as for the device's own commands ([`crate::inflight`]).

use crate::cuda::*;
use crate::driver::{check, CudaError};
use gmux_core::AllocId;

/// The holds of one device.
#[derive(Debug, Default)]
pub struct Held {
    held: Vec<(CUevent, Vec<AllocId>)>,
}

// SAFETY: CUDA events may be used from any thread; the shim serializes access.
unsafe impl Send for Held {}

impl Held {
    /// A command of another device, after which `ev` (owned from now on) completes, uses
    /// `allocs`.
    pub fn hold(&mut self, ev: CUevent, allocs: Vec<AllocId>) {
        self.held.push((ev, allocs));
    }

    /// The events of holds still running; the finished ones are let go.
    pub fn running(&mut self) -> Vec<CUevent> {
        self.held.retain(|(ev, _)| {
            let done = crate::real!(cuEventQuery(*ev)) != CUDA_ERROR_NOT_READY;
            if done {
                crate::real!(cuEventDestroy_v2(*ev));
            }
            !done
        });
        self.held.iter().map(|h| h.0).collect()
    }

    /// An event after which no command of another device uses `a`, if one may still run.
    pub fn busy(&mut self, a: AllocId) -> Option<CUevent> {
        self.running();
        self.held.iter().rev().find(|h| h.1.contains(&a)).map(|h| h.0)
    }

    /// Waits until no command of another device uses `a`.
    pub fn wait_for(&mut self, a: AllocId) -> Result<(), CudaError> {
        while let Some(ev) = self.busy(a) {
            check(crate::real!(cuEventSynchronize(ev)), "cuEventSynchronize")?;
        }
        Ok(())
    }

    /// Whether no hold may still be running (as last seen).
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}
