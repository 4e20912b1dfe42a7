//! Stream capture entry points.

use std::ffi::c_uint;

use cuda_abi::*;

use super::{code, put, resolve_stream, NullStream};
use crate::capture::{self, Info};
use crate::ctx;

unsafe fn begin(h: CUstream, mode: c_uint, null: NullStream) -> CUresult {
    tri!(ctx::require_current());
    code(capture::begin(tri!(resolve_stream(h, null)), mode))
}

/// Begins a capture in global mode (the CUDA 10.0 form).
#[no_mangle]
pub unsafe extern "C" fn cuStreamBeginCapture(h: CUstream) -> CUresult {
    begin(h, CU_STREAM_CAPTURE_MODE_GLOBAL, NullStream::Legacy)
}

/// Begins a capture in global mode (the CUDA 10.0 form).
#[no_mangle]
pub unsafe extern "C" fn cuStreamBeginCapture_ptsz(h: CUstream) -> CUresult {
    begin(h, CU_STREAM_CAPTURE_MODE_GLOBAL, NullStream::PerThread)
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamBeginCapture_v2(h: CUstream, mode: c_uint) -> CUresult {
    begin(h, mode, NullStream::Legacy)
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamBeginCapture_v2_ptsz(h: CUstream, mode: c_uint) -> CUresult {
    begin(h, mode, NullStream::PerThread)
}

/// Writes the captured graph, or null when the capture ends without one.
unsafe fn end(h: CUstream, out: *mut CUgraph, null: NullStream) -> CUresult {
    tri!(ctx::require_current());
    let s = tri!(resolve_stream(h, null));
    if out.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let (graph, r) = match capture::end(s) {
        Ok(g) => (g as CUgraph, CUDA_SUCCESS),
        Err(e) => (std::ptr::null_mut(), e),
    };
    *out = graph;
    r
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamEndCapture(h: CUstream, graph: *mut CUgraph) -> CUresult {
    end(h, graph, NullStream::Legacy)
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamEndCapture_ptsz(h: CUstream, graph: *mut CUgraph) -> CUresult {
    end(h, graph, NullStream::PerThread)
}

unsafe fn info(h: CUstream, null: NullStream) -> Result<Info, CUresult> {
    ctx::require_current()?;
    capture::info(resolve_stream(h, null)?)
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamIsCapturing(h: CUstream, status: *mut c_uint) -> CUresult {
    code(info(h, NullStream::Legacy).and_then(|i| put(status, i.status)))
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamIsCapturing_ptsz(h: CUstream, status: *mut c_uint) -> CUresult {
    code(info(h, NullStream::PerThread).and_then(|i| put(status, i.status)))
}

/// The outputs of `cuStreamGetCaptureInfo*`; only `status` is required. The id is written
/// for any capture, the graph and dependencies only for an active one.
struct Outs {
    status: *mut c_uint,
    id: *mut u64,
    graph: *mut CUgraph,
    deps: *mut *const CUgraphNode,
    edges: *mut *const CUgraphEdgeData,
    ndeps: *mut usize,
}

unsafe fn capture_info(h: CUstream, null: NullStream, o: Outs) -> CUresult {
    let i = tri!(info(h, null));
    if !o.edges.is_null() && o.deps.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    tri!(put(o.status, i.status));
    if i.status != CU_STREAM_CAPTURE_STATUS_NONE && !o.id.is_null() {
        *o.id = i.id;
    }
    if i.status == CU_STREAM_CAPTURE_STATUS_ACTIVE {
        if !o.graph.is_null() {
            *o.graph = i.graph as CUgraph;
        }
        if !o.deps.is_null() {
            // Node ids are pointer-sized and are the node handles.
            *o.deps = i.deps as *const CUgraphNode;
        }
        if !o.edges.is_null() {
            *o.edges = i.edges;
        }
        if !o.ndeps.is_null() {
            *o.ndeps = i.ndeps;
        }
    }
    CUDA_SUCCESS
}

fn outs(status: *mut c_uint, id: *mut u64) -> Outs {
    use std::ptr::null_mut;
    Outs { status, id, graph: null_mut(), deps: null_mut(), edges: null_mut(), ndeps: null_mut() }
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCaptureInfo(h: CUstream, status: *mut c_uint, id: *mut u64) -> CUresult {
    capture_info(h, NullStream::Legacy, outs(status, id))
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCaptureInfo_ptsz(h: CUstream, status: *mut c_uint, id: *mut u64) -> CUresult {
    capture_info(h, NullStream::PerThread, outs(status, id))
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCaptureInfo_v2(
    h: CUstream,
    status: *mut c_uint,
    id: *mut u64,
    graph: *mut CUgraph,
    deps: *mut *const CUgraphNode,
    ndeps: *mut usize,
) -> CUresult {
    capture_info(h, NullStream::Legacy, Outs { graph, deps, ndeps, ..outs(status, id) })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCaptureInfo_v2_ptsz(
    h: CUstream,
    status: *mut c_uint,
    id: *mut u64,
    graph: *mut CUgraph,
    deps: *mut *const CUgraphNode,
    ndeps: *mut usize,
) -> CUresult {
    capture_info(h, NullStream::PerThread, Outs { graph, deps, ndeps, ..outs(status, id) })
}

/// The CUDA 12.3 form, with (all-zero) edge data parallel to the dependencies.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCaptureInfo_v3(
    h: CUstream,
    status: *mut c_uint,
    id: *mut u64,
    graph: *mut CUgraph,
    deps: *mut *const CUgraphNode,
    edges: *mut *const CUgraphEdgeData,
    ndeps: *mut usize,
) -> CUresult {
    capture_info(h, NullStream::Legacy, Outs { status, id, graph, deps, edges, ndeps })
}

/// The CUDA 12.3 form, with (all-zero) edge data parallel to the dependencies.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCaptureInfo_v3_ptsz(
    h: CUstream,
    status: *mut c_uint,
    id: *mut u64,
    graph: *mut CUgraph,
    deps: *mut *const CUgraphNode,
    edges: *mut *const CUgraphEdgeData,
    ndeps: *mut usize,
) -> CUresult {
    capture_info(h, NullStream::PerThread, Outs { status, id, graph, deps, edges, ndeps })
}

/// Sets the calling thread's capture mode to `*mode` and writes the previous one there.
#[no_mangle]
pub unsafe extern "C" fn cuThreadExchangeStreamCaptureMode(mode: *mut c_uint) -> CUresult {
    tri!(ctx::require_init());
    let Some(m) = mode.as_mut() else { return CUDA_ERROR_INVALID_VALUE };
    *m = tri!(capture::exchange_mode(*m));
    CUDA_SUCCESS
}
