//! The exported C entry points, grouped as in `cuda.h`, plus the stand-in's own
//! `gmuxStandin*` functions.

use std::ffi::c_void;

use cuda_abi::*;

use crate::exec::{self, StreamId, LEGACY};

mod capture;
mod context;
mod copy;
mod copy3d;
mod device;
mod graph;
mod graph_exec;
mod launch;
mod memory;
mod module;
mod procaddr;
mod standin;
mod stream;
mod vmm;

const STREAM_HANDLE_BASE: usize = 0x5300_0000_0000;
const EVENT_HANDLE_BASE: usize = 0x5400_0000_0000;
const HANDLE_SPAN: usize = 1 << 40;

/// Which stream a null handle means: the legacy one, or the calling thread's own one
/// (`_ptsz` / `_ptds` entry points).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NullStream {
    Legacy,
    PerThread,
}

pub(crate) fn stream_handle(id: StreamId) -> CUstream {
    (STREAM_HANDLE_BASE + id as usize) as CUstream
}

/// The stream a handle names, checking that it exists.
pub(crate) fn resolve_stream(h: CUstream, null: NullStream) -> Result<StreamId, CUresult> {
    let id = match h as usize {
        0 if null == NullStream::PerThread => exec::per_thread_stream(),
        0 => LEGACY,
        1 => LEGACY,
        2 => exec::per_thread_stream(),
        v if v > STREAM_HANDLE_BASE && v < STREAM_HANDLE_BASE + HANDLE_SPAN => (v - STREAM_HANDLE_BASE) as StreamId,
        _ => return Err(CUDA_ERROR_INVALID_HANDLE),
    };
    exec::stream_info(id).map(|_| id).ok_or(CUDA_ERROR_INVALID_HANDLE)
}

pub(crate) fn event_handle(id: u64) -> CUevent {
    (EVENT_HANDLE_BASE + id as usize) as CUevent
}

pub(crate) fn event_id(h: CUevent) -> Result<u64, CUresult> {
    match h as usize {
        v if v > EVENT_HANDLE_BASE && v < EVENT_HANDLE_BASE + HANDLE_SPAN => Ok((v - EVENT_HANDLE_BASE) as u64),
        _ => Err(CUDA_ERROR_INVALID_HANDLE),
    }
}

/// Writes `v` through an out-pointer, or `CUDA_ERROR_INVALID_VALUE` if it is null.
pub(crate) unsafe fn put<T>(out: *mut T, v: T) -> Result<(), CUresult> {
    if out.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    out.write(v);
    Ok(())
}

/// `CUDA_SUCCESS` or the error.
pub(crate) fn code(r: Result<(), CUresult>) -> CUresult {
    r.err().unwrap_or(CUDA_SUCCESS)
}

/// A raw pointer moved into a stream operation.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr(pub *mut c_void);
// SAFETY: the caller of the async API guarantees the memory outlives the operation.
unsafe impl Send for SendPtr {}

impl SendPtr {
    /// The pointer (a method, so closures capture the whole `Send` wrapper).
    pub fn get(self) -> *mut c_void {
        self.0
    }
}

#[cfg(test)]
mod capture_tests;
#[cfg(test)]
mod device_tests;
#[cfg(test)]
mod graph_tests;
#[cfg(test)]
mod graph_topology_tests;
#[cfg(test)]
mod tests;
