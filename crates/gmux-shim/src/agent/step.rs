//! One step of a device's worker: the shrink, fill or drain the switch state machine
//! chose, with the copies waited for and new memory mapped outside the state lock.

use super::{Agent, StateGuard, UNLOCKED};
use crate::driver::{CudaError, OwnedEvent};
use crate::log::stamp;
use gmux_core::size::format_size;
use gmux_cuda::device::CudaDevice;
use gmux_runtime::switch::{Action, Switch, View};
use gmux_runtime::{TenantMemory, Wants};
use std::time::{Duration, Instant};

/// How long a forecast serves the steps after it under the same grant.
const FORECAST_EVERY: Duration = Duration::from_millis(100);

/// The last forecast, given again by the steps within [`FORECAST_EVERY`] of it while the
/// grant stays the same and no command waits for memory. A forecast walks the history
/// (0.2 ms for a transformers decoder's) under the state lock, which the application's
/// launches wait for; the steps between two switches only report counters.
#[derive(Default)]
pub(super) struct Forecasts {
    last: Option<(Instant, u64, Wants)>,
}

impl Forecasts {
    /// The forecast for a step under grant `generation`, and whether it was made now;
    /// `waiting`: a command waits for memory (the daemon sizes its next grant by this
    /// report).
    pub fn wants(&mut self, memory: &TenantMemory<CudaDevice>, generation: u64, waiting: bool) -> (Wants, bool) {
        match self.last {
            Some((at, g, w)) if g == generation && !waiting && at.elapsed() < FORECAST_EVERY => (w, false),
            _ => {
                let w = memory.wants();
                self.last = Some((Instant::now(), generation, w));
                (w, true)
            }
        }
    }
}

/// Carries out `action` for the grant seen in `v`. Returns the state lock (copies are
/// waited for without it) and whether another step follows at once.
pub(super) fn act(
    a: &Agent,
    guard: StateGuard,
    switch: &mut Switch<OwnedEvent>,
    action: Action<OwnedEvent>,
    v: &View,
) -> (StateGuard, Result<bool, CudaError>) {
    let mut guard = guard;
    let st = guard.as_mut().expect("created");
    let (t0, before) = (stamp(), st.resident());
    let step = match action {
        Action::Rest => Ok(false),
        Action::Shrink { cap } => match st.shrink_to(cap) {
            Ok((more, done)) => {
                let freed = format_size(before.saturating_sub(st.resident()));
                crate::log!(Debug, "agent {t0:.3}: shrink step to {}: {freed} issued in {:.2} ms", format_size(cap), (stamp() - t0) * 1e3);
                match switch.shrunk(more, done) {
                    Some(ev) => {
                        guard = wait_unlocked(guard, ev, "a shrink step's copies");
                        let st = guard.as_mut().expect("created");
                        st.released_memory().map(|()| more || st.limit() != cap)
                    }
                    None => Ok(true),
                }
            }
            Err(e) => Err(e),
        },
        Action::Drain(ev) => {
            guard = wait_unlocked(guard, ev, "a shrink step's copies");
            guard.as_mut().expect("created").released_memory().map(|()| true)
        }
        Action::Fill { whole } => {
            let filled = st.fill(whole);
            let mapping = st.take_fill_mapping();
            if let Some(batch) = mapping {
                guard = map_unlocked(guard, batch);
            }
            let st = guard.as_mut().expect("created");
            let (more, done) = match filled {
                Ok(Some(more)) => match st.fill_issued() {
                    Ok(ev) => (Ok(more), Some(ev)),
                    Err(e) => (Err(e), None),
                },
                Ok(None) => (Ok(false), None),
                Err(e) => (Err(e), None),
            };
            if done.is_some() {
                let brought = format_size(st.resident().saturating_sub(before));
                crate::log!(Debug, "agent {t0:.3}: fill step within {}: {brought} issued in {:.2} ms", format_size(v.cap), (stamp() - t0) * 1e3);
            }
            let (wait, complete) = switch.filled(matches!(more, Ok(true)), done, v.generation);
            if let Some(ev) = wait {
                guard = wait_unlocked(guard, ev, "a fill step's copies");
            }
            if complete && whole {
                let mut l = a.lock();
                let open = l.grant.run;
                a.set_open(&mut l, open);
                a.changed.notify_all();
            }
            more
        }
    };
    (guard, step)
}

/// Maps a fill step's new memory without the state lock (the application keeps
/// launching meanwhile), then takes the lock back.
fn map_unlocked(guard: StateGuard, batch: gmux_cuda::device::MapBatch) -> StateGuard {
    let dev = guard.as_ref().expect("created").device();
    drop(guard);
    let (t0, unlocked, bytes) = (stamp(), Instant::now(), batch.bytes());
    match batch.run() {
        Ok(calls) => crate::log!(Debug, "agent {t0:.3}: mapped {} outside the lock in {:.2} ms ({calls})", format_size(bytes), (stamp() - t0) * 1e3),
        // The process is exiting: the driver is shutting down under the worker.
        Err(e) if e.code == crate::cuda::CUDA_ERROR_DEINITIALIZED => {}
        Err(e) => crate::log!(Warn, "mapping a fill step failed ({e})"),
    }
    let guard = crate::devices::on(dev);
    UNLOCKED.set(UNLOCKED.get() + unlocked.elapsed());
    guard
}

/// Waits for `ev` without the state lock (the application keeps launching meanwhile),
/// then takes the lock back; `what` names the copies for the debug log.
fn wait_unlocked(guard: StateGuard, ev: OwnedEvent, what: &str) -> StateGuard {
    let dev = guard.as_ref().expect("created").device();
    drop(guard);
    let (t0, unlocked) = (stamp(), Instant::now());
    if let Err(e) = ev.synchronize() {
        crate::log!(Warn, "waiting for {what} failed ({e})");
    }
    crate::log!(Debug, "agent {t0:.3}: waited {:.2} ms for {what}", (stamp() - t0) * 1e3);
    let guard = crate::devices::on(dev);
    UNLOCKED.set(UNLOCKED.get() + unlocked.elapsed());
    guard
}
