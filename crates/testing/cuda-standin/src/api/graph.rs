//! Graph construction and inspection entry points. Graph and node handles are their ids
//! in [`crate::graph`].

use std::ffi::c_uint;

use cuda_abi::*;

use super::{code, put};
use crate::copy3d::Copy3d;
use crate::ctx;
use crate::graph::{self, GraphId, KernelCall, NodeId, Op};
use crate::kernel::{self, HandleKind};
use crate::memory::mem;

pub(super) fn graph_id(h: CUgraph) -> GraphId {
    h as GraphId
}

pub(super) fn node_id(h: CUgraphNode) -> NodeId {
    h as NodeId
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphCreate(out: *mut CUgraph, flags: c_uint) -> CUresult {
    tri!(ctx::require_init());
    if flags != 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    code(put(out, graph::create() as CUgraph))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphDestroy(g: CUgraph) -> CUresult {
    tri!(ctx::require_init());
    code(graph::destroy(graph_id(g)))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphClone(out: *mut CUgraph, g: CUgraph) -> CUresult {
    tri!(ctx::require_init());
    if out.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    code(graph::clone_graph(graph_id(g)).and_then(|c| put(out, c as CUgraph)))
}

/// With `nodes` null, writes the node count; otherwise fills up to `*n` nodes in insertion
/// order, nulls the rest, and writes how many it filled.
#[no_mangle]
pub unsafe extern "C" fn cuGraphGetNodes(g: CUgraph, nodes: *mut CUgraphNode, n: *mut usize) -> CUresult {
    tri!(ctx::require_init());
    let all = tri!(graph::nodes(graph_id(g)));
    let Some(n) = n.as_mut() else { return CUDA_ERROR_INVALID_VALUE };
    if nodes.is_null() {
        *n = all.len();
        return CUDA_SUCCESS;
    }
    for i in 0..*n {
        *nodes.add(i) = all.get(i).map_or(std::ptr::null_mut(), |&id| id as CUgraphNode);
    }
    *n = (*n).min(all.len());
    CUDA_SUCCESS
}

/// Writes the graph's edges as parallel arrays: `from[i]` is a dependency of `to[i]`. With
/// `from` and `to` null, writes the edge count; otherwise fills up to `*n` edges (grouped
/// by the dependent node in insertion order), nulls the rest and writes how many it
/// filled. `data`, if not null, gets all-zero edge data (plain dependencies) alongside.
unsafe fn get_edges(g: CUgraph, from: *mut CUgraphNode, to: *mut CUgraphNode, data: *mut CUgraphEdgeData, n: *mut usize) -> CUresult {
    tri!(ctx::require_init());
    let all = tri!(graph::edges(graph_id(g)));
    let Some(n) = n.as_mut() else { return CUDA_ERROR_INVALID_VALUE };
    if from.is_null() != to.is_null() || (from.is_null() && !data.is_null()) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if from.is_null() {
        *n = all.len();
        return CUDA_SUCCESS;
    }
    for i in 0..*n {
        let (f, t) = all.get(i).map_or((0, 0), |&e| e);
        *from.add(i) = f as CUgraphNode;
        *to.add(i) = t as CUgraphNode;
        if !data.is_null() {
            *data.add(i) = CUgraphEdgeData::default();
        }
    }
    *n = (*n).min(all.len());
    CUDA_SUCCESS
}

/// The pre-CUDA 12.3 form, without edge data; see [`get_edges`].
#[no_mangle]
pub unsafe extern "C" fn cuGraphGetEdges(g: CUgraph, from: *mut CUgraphNode, to: *mut CUgraphNode, n: *mut usize) -> CUresult {
    get_edges(g, from, to, std::ptr::null_mut(), n)
}

/// The CUDA 12.3 form, with edge data (may be null); see [`get_edges`].
#[no_mangle]
pub unsafe extern "C" fn cuGraphGetEdges_v2(g: CUgraph, from: *mut CUgraphNode, to: *mut CUgraphNode, data: *mut CUgraphEdgeData, n: *mut usize) -> CUresult {
    get_edges(g, from, to, data, n)
}

/// Writes the node of `clone` that `cuGraphClone` copied from `original`; refused when
/// `clone` is not a clone of `original`'s graph or that copy has been destroyed.
#[no_mangle]
pub unsafe extern "C" fn cuGraphNodeFindInClone(out: *mut CUgraphNode, original: CUgraphNode, clone: CUgraph) -> CUresult {
    tri!(ctx::require_init());
    if out.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    code(graph::find_in_clone(node_id(original), graph_id(clone)).and_then(|n| put(out, n as CUgraphNode)))
}

/// Removes the node and every edge to or from it (a dependent loses the dependency and
/// gains none); a child graph node's embedded graph goes with it. Executable graphs
/// already instantiated keep running it, but can no longer name it.
#[no_mangle]
pub unsafe extern "C" fn cuGraphDestroyNode(node: CUgraphNode) -> CUresult {
    tri!(ctx::require_init());
    code(graph::destroy_node(node_id(node)))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphNodeGetType(node: CUgraphNode, ty: *mut c_uint) -> CUresult {
    tri!(ctx::require_init());
    code(graph::op(node_id(node)).and_then(|op| put(ty, op.ty())))
}

/// Adds `op` to `g` after `deps[..ndeps]` and writes the new node.
unsafe fn add(out: *mut CUgraphNode, g: CUgraph, deps: *const CUgraphNode, ndeps: usize, op: Op) -> Result<(), CUresult> {
    ctx::require_init()?;
    if out.is_null() || (ndeps > 0 && deps.is_null()) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let deps: Vec<NodeId> = (0..ndeps).map(|i| node_id(*deps.add(i))).collect();
    let node = graph::add(graph_id(g), &deps, op)?;
    put(out, node as CUgraphNode)
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddEmptyNode(out: *mut CUgraphNode, g: CUgraph, deps: *const CUgraphNode, ndeps: usize) -> CUresult {
    code(add(out, g, deps, ndeps, Op::Empty))
}

/// Validates kernel node parameters, copying the argument values.
pub(super) unsafe fn kernel_call(p: *const CUDA_KERNEL_NODE_PARAMS_v2) -> Result<KernelCall, CUresult> {
    KernelCall::from_params(p.as_ref().ok_or(CUDA_ERROR_INVALID_VALUE)?)
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddKernelNode_v2(
    out: *mut CUgraphNode,
    g: CUgraph,
    deps: *const CUgraphNode,
    ndeps: usize,
    p: *const CUDA_KERNEL_NODE_PARAMS_v2,
) -> CUresult {
    let call = tri!(kernel_call(p));
    code(add(out, g, deps, ndeps, Op::Kernel(call)))
}

/// `kernel_params` points at the node's own copy of the argument values, valid while the
/// node lives and keeps them. `func` is always set; `kern` too when the node names a
/// `CUkernel`.
#[no_mangle]
pub unsafe extern "C" fn cuGraphKernelNodeGetParams_v2(node: CUgraphNode, p: *mut CUDA_KERNEL_NODE_PARAMS_v2) -> CUresult {
    tri!(ctx::require_init());
    let (call, ptrs) = tri!(graph::kernel_params(node_id(node)));
    let (func, kern) = match call.kind {
        HandleKind::Function => (call.handle as CUfunction, std::ptr::null_mut()),
        HandleKind::Kernel => {
            let func = kernel::find(&call.info.name, HandleKind::Function).unwrap_or(std::ptr::null_mut());
            (func, call.handle as CUkernel)
        }
    };
    let [grid_dim_x, grid_dim_y, grid_dim_z] = call.grid;
    let [block_dim_x, block_dim_y, block_dim_z] = call.block;
    let params = CUDA_KERNEL_NODE_PARAMS_v2 {
        func,
        grid_dim_x,
        grid_dim_y,
        grid_dim_z,
        block_dim_x,
        block_dim_y,
        block_dim_z,
        shared_mem_bytes: call.shared,
        kernel_params: ptrs,
        extra: std::ptr::null_mut(),
        kern,
        ctx: ctx::ambient(),
    };
    code(put(p, params))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphKernelNodeSetParams_v2(node: CUgraphNode, p: *const CUDA_KERNEL_NODE_PARAMS_v2) -> CUresult {
    tri!(ctx::require_init());
    let call = tri!(kernel_call(p));
    code(graph::set_op(node_id(node), Op::Kernel(call)))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddMemsetNode(
    out: *mut CUgraphNode,
    g: CUgraph,
    deps: *const CUgraphNode,
    ndeps: usize,
    p: *const CUDA_MEMSET_NODE_PARAMS,
    _ctx: CUcontext,
) -> CUresult {
    let p = tri!(memset_params(p));
    // The driver checks, when it adds a memset node, that its memory is mapped.
    let len = (p.height.max(1) - 1) * p.pitch + p.width * p.element_size as usize;
    if mem().check(p.dst, len, true).is_err() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    code(add(out, g, deps, ndeps, Op::Memset(p)))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphMemsetNodeGetParams(node: CUgraphNode, p: *mut CUDA_MEMSET_NODE_PARAMS) -> CUresult {
    tri!(ctx::require_init());
    match tri!(graph::op(node_id(node))) {
        Op::Memset(m) => code(put(p, m)),
        _ => CUDA_ERROR_INVALID_VALUE,
    }
}

/// Replaces a memset node's parameters (validated as for `cuGraphAddMemsetNode`); later
/// instantiations use them, executable graphs made before do not.
#[no_mangle]
pub unsafe extern "C" fn cuGraphMemsetNodeSetParams(node: CUgraphNode, p: *const CUDA_MEMSET_NODE_PARAMS) -> CUresult {
    tri!(ctx::require_init());
    let p = tri!(memset_params(p));
    code(graph::set_op(node_id(node), Op::Memset(p)))
}

/// Validated memset node parameters.
pub(super) unsafe fn memset_params(p: *const CUDA_MEMSET_NODE_PARAMS) -> Result<CUDA_MEMSET_NODE_PARAMS, CUresult> {
    let p = *p.as_ref().ok_or(CUDA_ERROR_INVALID_VALUE)?;
    graph::check_memset(&p)?;
    Ok(p)
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddMemcpyNode(
    out: *mut CUgraphNode,
    g: CUgraph,
    deps: *const CUgraphNode,
    ndeps: usize,
    p: *const CUDA_MEMCPY3D,
    _ctx: CUcontext,
) -> CUresult {
    let c = tri!(memcpy_params(p));
    // The driver checks, when it adds a memcpy node, that its device sides are mapped.
    if c.base_unmapped() || c.device_extents().into_iter().any(|(p, n, write)| mem().check(p, n, write).is_err()) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    code(add(out, g, deps, ndeps, Op::Memcpy(c)))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphMemcpyNodeGetParams(node: CUgraphNode, p: *mut CUDA_MEMCPY3D) -> CUresult {
    tri!(ctx::require_init());
    match tri!(graph::op(node_id(node))) {
        Op::Memcpy(c) => code(put(p, c.to_abi())),
        _ => CUDA_ERROR_INVALID_VALUE,
    }
}

/// Replaces a memcpy node's parameters (validated as for `cuGraphAddMemcpyNode`); later
/// instantiations use them, executable graphs made before do not.
#[no_mangle]
pub unsafe extern "C" fn cuGraphMemcpyNodeSetParams(node: CUgraphNode, p: *const CUDA_MEMCPY3D) -> CUresult {
    tri!(ctx::require_init());
    let c = tri!(memcpy_params(p));
    code(graph::set_op(node_id(node), Op::Memcpy(c)))
}

/// Validated memcpy node parameters.
pub(super) unsafe fn memcpy_params(p: *const CUDA_MEMCPY3D) -> Result<Copy3d, CUresult> {
    Copy3d::from_abi(p.as_ref().ok_or(CUDA_ERROR_INVALID_VALUE)?)
}

/// The node embeds a clone of `child`.
#[no_mangle]
pub unsafe extern "C" fn cuGraphAddChildGraphNode(out: *mut CUgraphNode, g: CUgraph, deps: *const CUgraphNode, ndeps: usize, child: CUgraph) -> CUresult {
    tri!(ctx::require_init());
    let copy = tri!(graph::clone_graph(graph_id(child)));
    let r = add(out, g, deps, ndeps, Op::Child(copy));
    if r.is_err() {
        let _ = graph::destroy(copy);
    }
    code(r)
}

/// The embedded graph, owned by the node: changes to it change the node.
#[no_mangle]
pub unsafe extern "C" fn cuGraphChildGraphNodeGetGraph(node: CUgraphNode, out: *mut CUgraph) -> CUresult {
    tri!(ctx::require_init());
    match tri!(graph::op(node_id(node))) {
        Op::Child(g) => code(put(out, g as CUgraph)),
        _ => CUDA_ERROR_INVALID_VALUE,
    }
}
