//! Executable graphs: instantiation, launch, update. A `CUgraphExec` is its id in
//! [`crate::graph`].

use std::ffi::c_char;

use cuda_abi::*;

use super::graph::{graph_id, kernel_call, memcpy_params, memset_params, node_id};
use super::{code, put, resolve_stream, NullStream};
use crate::capture::{self, Route};
use crate::graph::{self, ExecId, Op, Segment};
use crate::{ctx, exec};

const KNOWN_FLAGS: u64 = CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH
    | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD
    | CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH
    | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;

fn exec_id(h: CUgraphExec) -> ExecId {
    h as ExecId
}

unsafe fn instantiate(out: *mut CUgraphExec, g: CUgraph, flags: u64) -> Result<(), CUresult> {
    ctx::require_current()?;
    if out.is_null() || flags & !KNOWN_FLAGS != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let e = graph::instantiate(graph_id(g))?;
    put(out, e as CUgraphExec)
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithFlags(out: *mut CUgraphExec, g: CUgraph, flags: u64) -> CUresult {
    code(instantiate(out, g, flags))
}

/// The pre-CUDA 12 signature: an error node and a log buffer, both cleared on success.
#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiate_v2(out: *mut CUgraphExec, g: CUgraph, err_node: *mut CUgraphNode, log: *mut c_char, log_size: usize) -> CUresult {
    tri!(instantiate(out, g, 0));
    if !err_node.is_null() {
        *err_node = std::ptr::null_mut();
    }
    if !log.is_null() && log_size > 0 {
        *log = 0;
    }
    CUDA_SUCCESS
}

unsafe fn instantiate_with_params(out: *mut CUgraphExec, g: CUgraph, p: *mut CUDA_GRAPH_INSTANTIATE_PARAMS) -> CUresult {
    let Some(p) = p.as_mut() else { return CUDA_ERROR_INVALID_VALUE };
    let r = code(instantiate(out, g, p.flags));
    p.h_err_node_out = std::ptr::null_mut();
    p.result_out = if r == CUDA_SUCCESS { CUDA_GRAPH_INSTANTIATE_SUCCESS } else { CUDA_GRAPH_INSTANTIATE_ERROR };
    r
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithParams(out: *mut CUgraphExec, g: CUgraph, p: *mut CUDA_GRAPH_INSTANTIATE_PARAMS) -> CUresult {
    instantiate_with_params(out, g, p)
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithParams_ptsz(out: *mut CUgraphExec, g: CUgraph, p: *mut CUDA_GRAPH_INSTANTIATE_PARAMS) -> CUresult {
    instantiate_with_params(out, g, p)
}

/// Enqueues the executable graph's steps on the stream in their (topological) order: runs of
/// kernel, copy, memset and host steps as one operation each, event steps as the stream
/// operations they stand for. On a capturing stream the launch becomes a child graph node.
unsafe fn launch(e: CUgraphExec, h: CUstream, null: NullStream) -> CUresult {
    tri!(ctx::require_current());
    let s = tri!(resolve_stream(h, null));
    let e = exec_id(e);
    tri!(graph::exec_exists(e));
    if tri!(capture::route(s)) == Route::Capture {
        let g = tri!(graph::graph_of_exec(e));
        let r = capture::add(s, Op::Child(g));
        if r.is_err() {
            let _ = graph::destroy(g);
        }
        return code(r.map(drop));
    }
    for segment in tri!(graph::launch_plan(e)) {
        tri!(match segment {
            Segment::Ops(ops) => {
                let work = move || {
                    for op in &ops {
                        // SAFETY: whoever built the graph vouched for the host memory and
                        // host function data its nodes name, as for the stream calls.
                        unsafe { op.run() }
                    }
                };
                exec::submit(s, Vec::new(), Box::new(work)).map(drop)
            }
            Segment::Record(ev) => {
                capture::forget_event(ev);
                exec::record(ev, s)
            }
            Segment::Wait(ev) => exec::wait_event(s, ev),
        });
    }
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphLaunch(e: CUgraphExec, h: CUstream) -> CUresult {
    launch(e, h, NullStream::Legacy)
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphLaunch_ptsz(e: CUgraphExec, h: CUstream) -> CUresult {
    launch(e, h, NullStream::PerThread)
}

/// Nothing to upload: the stand-in's "device" is host memory.
unsafe fn upload(e: CUgraphExec, h: CUstream, null: NullStream) -> CUresult {
    tri!(ctx::require_current());
    tri!(resolve_stream(h, null));
    code(graph::exec_exists(exec_id(e)))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphUpload(e: CUgraphExec, h: CUstream) -> CUresult {
    upload(e, h, NullStream::Legacy)
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphUpload_ptsz(e: CUgraphExec, h: CUstream) -> CUresult {
    upload(e, h, NullStream::PerThread)
}

/// `node` is a kernel node of the graph `e` was instantiated (or last updated) from; the
/// next launch of `e` uses the new parameters.
#[no_mangle]
pub unsafe extern "C" fn cuGraphExecKernelNodeSetParams_v2(e: CUgraphExec, node: CUgraphNode, p: *const CUDA_KERNEL_NODE_PARAMS_v2) -> CUresult {
    tri!(ctx::require_current());
    let call = tri!(kernel_call(p));
    code(graph::exec_set_op(exec_id(e), node_id(node), Op::Kernel(call)))
}

/// `node` is a memset node of the graph `e` was instantiated (or last updated) from; the
/// next launch of `e` uses the new parameters. As in the driver, the instantiated memset
/// and the new one must both be one-dimensional (one row of at least one element).
#[no_mangle]
pub unsafe extern "C" fn cuGraphExecMemsetNodeSetParams(e: CUgraphExec, node: CUgraphNode, p: *const CUDA_MEMSET_NODE_PARAMS, _ctx: CUcontext) -> CUresult {
    tri!(ctx::require_current());
    let p = tri!(memset_params(p));
    code(graph::exec_set_op(exec_id(e), node_id(node), Op::Memset(p)))
}

/// `node` is a memcpy node of the graph `e` was instantiated (or last updated) from; the
/// next launch of `e` uses the new parameters. As in the driver, the instantiated copy
/// and the new one must both be one-dimensional (one row, one slice, at least one byte).
#[no_mangle]
pub unsafe extern "C" fn cuGraphExecMemcpyNodeSetParams(e: CUgraphExec, node: CUgraphNode, p: *const CUDA_MEMCPY3D, _ctx: CUcontext) -> CUresult {
    tri!(ctx::require_current());
    let c = tri!(memcpy_params(p));
    code(graph::exec_set_op(exec_id(e), node_id(node), Op::Memcpy(c)))
}

/// Succeeds when `g` has the topology of the graph `e` came from (the same node types and
/// edges, in the same order); `e` then takes `g`'s parameters.
#[no_mangle]
pub unsafe extern "C" fn cuGraphExecUpdate_v2(e: CUgraphExec, g: CUgraph, info: *mut CUgraphExecUpdateResultInfo) -> CUresult {
    tri!(ctx::require_current());
    if info.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let (result, node, from, r) = match tri!(graph::update(exec_id(e), graph_id(g))) {
        Ok(()) => (CU_GRAPH_EXEC_UPDATE_SUCCESS, 0, 0, CUDA_SUCCESS),
        Err(u) => (u.result, u.node, u.from, CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE),
    };
    *info = CUgraphExecUpdateResultInfo { result, error_node: node as CUgraphNode, error_from_node: from as CUgraphNode };
    r
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphExecDestroy(e: CUgraphExec) -> CUresult {
    tri!(ctx::require_init());
    code(graph::destroy_exec(exec_id(e)))
}
