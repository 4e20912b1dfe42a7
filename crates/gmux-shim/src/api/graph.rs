//! Graph entry points: instantiation and updates read what an executable graph touches
//! ([`crate::graph`]); a graph launch is a command whose working set is that.

use crate::cuda::*;
use crate::driver::CudaError;
use crate::graph::{self, ExecGraph, Splittable, Touches};
use crate::state::{shim, ShimError, WorkingSet};
use std::ffi::c_void;

/// `cuGraphInstantiate*`: reads the graph, refuses one whose memory gmux cannot count,
/// instantiates, and remembers what the executable graph touches.
///
/// # Safety
/// `exec` is writable or null, as the driver requires.
pub unsafe fn instantiate(real: impl FnOnce() -> CUresult, exec: *mut CUgraphExec, g: CUgraph) -> CUresult {
    let Ok(mut guard) = shim() else { return real() };
    let st = guard.as_mut().expect("created");
    let read = crate::capture::relaxed(|| graph::read(g, &mut st.layouts));
    let read = match read {
        Ok(r) => r,
        Err(e) => {
            crate::log!(Warn, "cannot read the graph's nodes ({e}); its launches make all memory resident");
            let mut r = ExecGraph::default();
            r.set(std::ptr::null_mut(), Touches::Anything(format!("a graph gmux could not read ({e})")));
            r
        }
    };
    if let Some(why) = &read.refused {
        return super::refuse::call("cuGraphInstantiate", &format!("this graph cannot run under gmux: {why}"));
    }
    let r = real();
    if r == CUDA_SUCCESS && !exec.is_null() {
        // SAFETY: the driver wrote the new executable graph there.
        st.graphs.insert(unsafe { *exec }, read);
    }
    r
}

/// `cuGraphExecUpdate*`: refuses a graph whose memory gmux cannot count, as
/// instantiation does; on success the executable graph touches what `g` does.
pub fn update(real: impl FnOnce() -> CUresult, exec: CUgraphExec, g: CUgraph) -> CUresult {
    let mut guard = crate::state::existing();
    let Some(st) = guard.as_mut() else {
        drop(guard);
        return real();
    };
    let read = crate::capture::relaxed(|| graph::read(g, &mut st.layouts));
    let read = read.unwrap_or_else(|e| {
        let mut r = ExecGraph::default();
        r.set(std::ptr::null_mut(), Touches::Anything(format!("a graph gmux could not read ({e})")));
        r
    });
    if let Some(why) = &read.refused {
        return super::refuse::call("cuGraphExecUpdate", &format!("this graph cannot run under gmux: {why}"));
    }
    let r = real();
    if r == CUDA_SUCCESS {
        st.graphs.insert(exec, read);
    }
    r
}

/// A change to an executable graph's node that the copy kept for running it in parts
/// does not follow (enabling a node, host, event and semaphore nodes): the copy goes, and
/// a launch that does not fit is refused by name.
pub fn changed(real: impl FnOnce() -> CUresult, exec: CUgraphExec) -> CUresult {
    let r = real();
    if r == CUDA_SUCCESS {
        if let Some(e) = crate::state::existing().as_mut().and_then(|st| st.graphs.get_mut(exec)) {
            e.split = None;
        }
    }
    r
}

/// A set-params call on one node of an executable graph: on success, `touches` says what
/// the node touches now, and `carry` applies the same change to the copy kept for running
/// the graph in parts (which is dropped where it cannot).
fn set_node(
    real: impl FnOnce() -> CUresult,
    exec: CUgraphExec,
    node: CUgraphNode,
    touches: impl FnOnce(&mut crate::state::Shim) -> Touches,
    carry: impl FnOnce(&mut Splittable) -> Result<(), CudaError>,
) -> CUresult {
    let r = real();
    if r != CUDA_SUCCESS {
        return r;
    }
    let mut g = crate::state::existing();
    if let Some(st) = g.as_mut() {
        let t = touches(st);
        if let Some(e) = st.graphs.get_mut(exec) {
            e.set(node, t.clone());
            if let Some(split) = e.split.as_mut() {
                match (split.copied(node), t) {
                    (Some(c), Touches::Addresses(a)) if carry(split).is_ok() => split.updated(c, a),
                    _ => e.split = None,
                }
            }
        }
    }
    r
}

/// For set-params calls gmux cannot carry over to the copy.
fn cannot(_: &mut Splittable) -> Result<(), CudaError> {
    Err(CudaError { call: "carrying an update over", code: CUDA_ERROR_NOT_SUPPORTED })
}

/// `cuGraphExecKernelNodeSetParams_v2`.
///
/// # Safety
/// `p` is a valid `CUDA_KERNEL_NODE_PARAMS_v2` (or null, which the driver refuses).
pub unsafe fn set_kernel(real: impl FnOnce() -> CUresult, exec: CUgraphExec, node: CUgraphNode, p: *const CUDA_KERNEL_NODE_PARAMS_v2) -> CUresult {
    // SAFETY: read only after the driver accepted the parameters.
    set_node(real, exec, node, |st| unsafe { graph::kernel_params(&*p, &mut st.layouts) }, |split| unsafe { split.set_kernel(node, p) })
}

/// `cuGraphExecKernelNodeSetParams` (the version-1 struct, a prefix of version 2).
///
/// # Safety
/// `p` is a valid `CUDA_KERNEL_NODE_PARAMS` (or null, which the driver refuses).
pub unsafe fn set_kernel_v1(real: impl FnOnce() -> CUresult, exec: CUgraphExec, node: CUgraphNode, p: *const c_void) -> CUresult {
    set_node(
        real,
        exec,
        node,
        |st| {
            // SAFETY: a plain C struct, all zeros is a valid value.
            let mut v2: CUDA_KERNEL_NODE_PARAMS_v2 = unsafe { std::mem::zeroed() };
            // SAFETY: version 1 is version 2 without its last two fields (`kern`, `ctx`),
            // which stay null here; the driver accepted `p`, so it is readable.
            unsafe { std::ptr::copy_nonoverlapping(p as *const u8, &mut v2 as *mut _ as *mut u8, KERNEL_NODE_PARAMS_V1_BYTES) };
            // SAFETY: as the caller's parameters.
            unsafe { graph::kernel_params(&v2, &mut st.layouts) }
        },
        cannot,
    )
}

/// Size of `CUDA_KERNEL_NODE_PARAMS` (version 1).
const KERNEL_NODE_PARAMS_V1_BYTES: usize = 56;

/// `cuGraphExecMemsetNodeSetParams`.
///
/// # Safety
/// `p` is a valid `CUDA_MEMSET_NODE_PARAMS`.
pub unsafe fn set_memset(real: impl FnOnce() -> CUresult, exec: CUgraphExec, node: CUgraphNode, p: *const CUDA_MEMSET_NODE_PARAMS) -> CUresult {
    // SAFETY: null or valid, per this function's contract.
    let Some(params) = (unsafe { p.as_ref() }) else { return real() };
    if let Err(r) = mapped(&[graph::memset_range(params)], "cuGraphExecMemsetNodeSetParams") {
        return r;
    }
    set_node(real, exec, node, |_| graph::memset_params(params), |split| split.set_memset(node, p))
}

/// `cuGraphExecMemcpyNodeSetParams`.
///
/// # Safety
/// `p` is a valid `CUDA_MEMCPY3D`.
pub unsafe fn set_memcpy(real: impl FnOnce() -> CUresult, exec: CUgraphExec, node: CUgraphNode, p: *const CUDA_MEMCPY3D) -> CUresult {
    // SAFETY: null or valid, per this function's contract.
    let Some(params) = (unsafe { p.as_ref() }) else { return real() };
    if let Err(r) = mapped(&graph::memcpy_node_ranges(params), "cuGraphExecMemcpyNodeSetParams") {
        return r;
    }
    set_node(real, exec, node, |_| graph::memcpy_params(params), |split| split.set_memcpy(node, p))
}

/// `cuGraphExecChildGraphNodeSetParams`: the child's nodes are read anew.
pub fn set_child(real: impl FnOnce() -> CUresult, exec: CUgraphExec, node: CUgraphNode, child: CUgraph) -> CUresult {
    set_node(
        real,
        exec,
        node,
        |st| match crate::capture::relaxed(|| graph::read(child, &mut st.layouts)) {
            Ok(c) => match c.touches() {
                Ok(a) => Touches::Addresses(a.to_vec()),
                Err(why) => Touches::Anything(why.to_string()),
            },
            Err(e) => Touches::Anything(format!("a child graph gmux could not read ({e})")),
        },
        cannot,
    )
}

/// `cuGraphExecNodeSetParams` (any node type): the node may touch anything from now on.
pub fn set_any(real: impl FnOnce() -> CUresult, exec: CUgraphExec, node: CUgraphNode) -> CUresult {
    set_node(real, exec, node, |_| Touches::Anything("a node changed with cuGraphExecNodeSetParams".into()), cannot)
}

/// `cuGraphExecDestroy`.
pub fn destroy(real: impl FnOnce() -> CUresult, exec: CUgraphExec) -> CUresult {
    let r = real();
    if r == CUDA_SUCCESS {
        if let Some(st) = crate::state::existing().as_mut() {
            st.graphs.remove(exec);
        }
    }
    r
}

/// Makes the gmux memory over byte ranges `(start, len)` resident (mapped) now: the
/// driver checks, when a graph's memcpy or memset node is created or changed, that its
/// addresses are mapped, and gmux backs memory only on first use. Whole allocations where
/// they fit the limit (and the daemon's grant), else only the bytes the node touches; the
/// graph's launch brings the memory in again. Memory that cannot be mapped even so is reported as an oversized command
/// named `what`: the driver would refuse the node with a bare `CUDA_ERROR_INVALID_VALUE`.
fn mapped(ranges: &[(CUdeviceptr, u64)], what: &str) -> Result<(), CUresult> {
    let whole = |st: &mut crate::state::Shim| WorkingSet::Allocs(st.allocs_over(ranges));
    let spans = |st: &mut crate::state::Shim| WorkingSet::Spans(st.spans_over(ranges));
    let result = match crate::capture::relaxed(|| super::command::try_map(whole)) {
        Err(ShimError::TooBig { .. } | ShimError::Wait { .. }) => crate::capture::relaxed(|| super::command::try_map(spans)),
        other => other,
    };
    match result {
        Ok(()) => Ok(()),
        Err(e @ ShimError::TooBig { .. }) => Err(super::report(e, what)),
        Err(e) => {
            crate::log!(Debug, "a graph node's memory was not mapped: {e:?}");
            Ok(())
        }
    }
}

/// A call named `what` that creates or changes a memcpy or memset node over byte ranges
/// `(start, len)`: the memory is mapped first ([`mapped`]).
pub fn node_over(real: impl FnOnce() -> CUresult, what: &str, ranges: &[(CUdeviceptr, u64)]) -> CUresult {
    match mapped(ranges, what) {
        Ok(()) => real(),
        Err(r) => r,
    }
}

/// The device byte ranges of a `CUgraphNodeParams` (the generic node parameters of
/// `cuGraphAddNode`, `cuGraphNodeSetParams`, `cuGraphExecNodeSetParams`): a memcpy
/// node's sides or a memset node's destination; none for other node types.
///
/// # Safety
/// `p` is null or points to a valid `CUgraphNodeParams` (256 bytes).
pub unsafe fn generic_ranges(p: *const c_void) -> Vec<(CUdeviceptr, u64)> {
    /// The union of node parameters starts after the type and three reserved ints (a
    /// memset node's parameters begin as `CUDA_MEMSET_NODE_PARAMS`); a memcpy node's
    /// `CUDA_MEMCPY3D` after its flags, a reserved int and its context.
    const UNION: usize = 16;
    const MEMCPY3D: usize = UNION + 16;
    if p.is_null() {
        return Vec::new();
    }
    // SAFETY: per this function's contract, the type comes first and the union follows.
    unsafe {
        match std::ptr::read_unaligned(p as *const u32) {
            CU_GRAPH_NODE_TYPE_MEMSET => vec![graph::memset_range(&std::ptr::read_unaligned((p as *const u8).add(UNION) as *const CUDA_MEMSET_NODE_PARAMS))],
            CU_GRAPH_NODE_TYPE_MEMCPY => graph::memcpy_node_ranges(&std::ptr::read_unaligned((p as *const u8).add(MEMCPY3D) as *const CUDA_MEMCPY3D)),
            _ => Vec::new(),
        }
    }
}
