//! What the process does for the daemon, over the CUDA device: the runtime's shrink and
//! fill steps (see [`gmux_runtime`]), each with an event after its copies that the
//! daemon agent waits for without the state lock, and the report it sends.

use crate::cuda::CUDA_ERROR_UNKNOWN;
use crate::driver::{CudaError, OwnedEvent};
use crate::state::Shim;
use gmux_core::protocol::ShimReport;
use gmux_runtime::Wants;

/// The CUDA error behind a runtime error of a shrink or a fill (which never lack room).
fn cuda(e: gmux_runtime::Error<CudaError>) -> CudaError {
    match e {
        gmux_runtime::Error::Device(e) => e,
        gmux_runtime::Error::NoRoom { .. } | gmux_runtime::Error::Unknown(_) | gmux_runtime::Error::ZeroBytes => {
            CudaError { call: "gmux's planning of a shrink or fill step", code: CUDA_ERROR_UNKNOWN }
        }
    }
}

impl Shim {
    /// Sets the memory limit to `cap` and issues the eviction of at most one step of own
    /// chunks towards it. Returns whether more must go, and an event after the step's
    /// copies: the caller waits for it without the state lock (the application keeps
    /// launching meanwhile), then calls [`Shim::released_memory`].
    pub fn shrink_to(&mut self, cap: u64) -> Result<(bool, OwnedEvent), CudaError> {
        let Shim { memory, inflight, .. } = self;
        let more = memory.shrink_step(cap, || inflight.newest()).map_err(cuda)?;
        self.log_plan();
        Ok((more, OwnedEvent::new(self.memory.dev.evictions_done()?)))
    }

    /// Brings in one step of the allocations the next slice uses (`whole`: all of them);
    /// see [`gmux_runtime::TenantMemory::fill_step`]. Returns `None` when nothing is
    /// missing, else whether anything is left that fits. The step's new memory may still
    /// be mapping: the caller runs [`Shim::take_fill_mapping`]'s batch without the state
    /// lock, then calls [`Shim::fill_issued`].
    pub fn fill(&mut self, whole: bool) -> Result<Option<bool>, CudaError> {
        let Shim { memory, inflight, .. } = self;
        memory.dev.defer_next_mapping();
        let more = memory.fill_step(whole, || inflight.newest()).map_err(cuda)?;
        if more.is_some() {
            self.log_plan();
        }
        Ok(more)
    }

    /// The mappings of the fill step just issued, to make without the state lock (`None`:
    /// it made them, or moved nothing).
    pub fn take_fill_mapping(&mut self) -> Option<gmux_cuda::device::MapBatch> {
        self.memory.dev.take_mapping()
    }

    /// Issues a fill step's populations once its memory is mapped. Returns an event after
    /// its copies (a paused tenant waits for it before the step after next, so that its
    /// copies never queue far ahead of the running tenant's).
    pub fn fill_issued(&mut self) -> Result<OwnedEvent, CudaError> {
        Ok(OwnedEvent::new(self.memory.dev.populations_done()?))
    }

    /// After a shrink step's copies: unmaps what they evicted, which frees its memory.
    pub fn released_memory(&mut self) -> Result<(), CudaError> {
        self.memory.dev.reap(false)
    }

    /// Sets the memory limit to `cap`; see [`gmux_runtime::TenantMemory::set_limit`].
    pub fn set_limit(&mut self, cap: u64) {
        self.memory.set_limit(cap);
    }

    /// Physical GPU memory held, mapped or spare.
    pub fn held(&self) -> u64 {
        self.memory.held()
    }

    /// The size of host block to pin next, while less host memory is pinned than the
    /// process has allocated on the GPU (all of it may have to be evicted).
    pub fn host_short(&self) -> Option<u64> {
        (self.memory.dev.pinned_bytes() < self.allocated()).then(|| self.memory.dev.host_block())
    }

    /// The state the daemon divides memory by; `blocked`: bytes a command waits for;
    /// `wants`: the forecast's ([`gmux_runtime::TenantMemory::wants`]).
    pub fn report(&mut self, blocked: u64, wants: Wants) -> ShimReport {
        let finished = self.inflight.finished().unwrap_or(0);
        let busy = !self.inflight.idle();
        self.memory.report_with(wants, blocked, busy, finished)
    }
}
