//! Graphs built node by node, executable graphs and 3D copies, through the exports.

use std::ffi::{c_char, c_void};
use std::ptr::null_mut;
use std::sync::OnceLock;

use cuda_abi::*;

use super::copy::*;
use super::copy3d::*;
use super::graph::*;
use super::graph_exec::*;
use super::launch::*;
use super::standin::*;
use super::stream::*;
use super::tests::{alloc, setup};

/// `scale(ptr: u64, factor: u32, n: u32)`: multiplies `n` u32s at `ptr` by `factor`.
unsafe extern "C" fn scale(args: *const *mut c_void) {
    let p = *(*args as *const u64);
    let (factor, n) = (*(*args.add(1) as *const u32), *(*args.add(2) as *const u32));
    let mut v = vec![0u8; n as usize * 4];
    gmuxStandinRead(p, v.as_mut_ptr(), v.len());
    for c in v.chunks_mut(4) {
        let x = u32::from_le_bytes(c.try_into().unwrap()).wrapping_mul(factor);
        c.copy_from_slice(&x.to_le_bytes());
    }
    gmuxStandinWrite(p, v.as_ptr(), v.len());
}

/// The `scale` kernel as a `CUfunction`.
pub(super) fn scale_fn() -> CUfunction {
    static F: OnceLock<usize> = OnceLock::new();
    let sizes = [8usize, 4, 4];
    // SAFETY: a static name and a valid kernel with three parameters of these sizes.
    *F.get_or_init(|| unsafe { gmuxStandinRegisterKernel(c"graph_test_scale".as_ptr(), Some(scale), 3, sizes.as_ptr(), 0) } as usize) as CUfunction
}

/// The arguments of one `scale` call, in memory that outlives the call.
pub(super) struct ScaleArgs {
    pub ptr: u64,
    pub factor: u32,
    pub n: u32,
    params: [*mut c_void; 3],
}

impl ScaleArgs {
    pub fn new(ptr: u64, factor: u32, n: u32) -> Box<ScaleArgs> {
        let mut a = Box::new(ScaleArgs { ptr, factor, n, params: [null_mut(); 3] });
        a.params = [&mut a.ptr as *mut u64 as *mut c_void, &mut a.factor as *mut u32 as *mut c_void, &mut a.n as *mut u32 as *mut c_void];
        a
    }

    /// `kernelParams` for the call.
    pub fn params(&mut self) -> *mut *mut c_void {
        self.params.as_mut_ptr()
    }

    /// Kernel node parameters for the call (one block).
    pub fn node(&mut self) -> CUDA_KERNEL_NODE_PARAMS_v2 {
        CUDA_KERNEL_NODE_PARAMS_v2 {
            func: scale_fn(),
            grid_dim_x: 1,
            grid_dim_y: 1,
            grid_dim_z: 1,
            block_dim_x: 32,
            block_dim_y: 1,
            block_dim_z: 1,
            shared_mem_bytes: 0,
            kernel_params: self.params(),
            extra: null_mut(),
            kern: null_mut(),
            ctx: null_mut(),
        }
    }
}

/// `n` u32s of device memory, read synchronously.
pub(super) unsafe fn read_u32s(d: CUdeviceptr, n: usize) -> Vec<u32> {
    let mut v = vec![0u32; n];
    assert_eq!(cuMemcpyDtoH_v2(v.as_mut_ptr() as *mut c_void, d, n * 4), CUDA_SUCCESS);
    v
}

pub(super) unsafe fn stream() -> CUstream {
    let mut s = null_mut();
    assert_eq!(cuStreamCreate(&mut s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    s
}

pub(super) unsafe fn graph() -> CUgraph {
    let mut g = null_mut();
    assert_eq!(cuGraphCreate(&mut g, 0), CUDA_SUCCESS);
    g
}

pub(super) unsafe fn nodes(g: CUgraph) -> Vec<CUgraphNode> {
    let mut n = 0;
    assert_eq!(cuGraphGetNodes(g, null_mut(), &mut n), CUDA_SUCCESS);
    let mut v = vec![null_mut(); n];
    assert_eq!(cuGraphGetNodes(g, v.as_mut_ptr(), &mut n), CUDA_SUCCESS);
    v
}

pub(super) unsafe fn types(g: CUgraph) -> Vec<u32> {
    nodes(g)
        .into_iter()
        .map(|n| {
            let mut t = 99;
            assert_eq!(cuGraphNodeGetType(n, &mut t), CUDA_SUCCESS);
            t
        })
        .collect()
}

pub(super) unsafe fn instantiate(g: CUgraph) -> CUgraphExec {
    let mut e = null_mut();
    assert_eq!(cuGraphInstantiateWithFlags(&mut e, g, 0), CUDA_SUCCESS);
    e
}

pub(super) unsafe fn launch_and_wait(e: CUgraphExec, s: CUstream) {
    assert_eq!(cuGraphLaunch(e, s), CUDA_SUCCESS);
    assert_eq!(cuStreamSynchronize(s), CUDA_SUCCESS);
}

/// Adds a `scale` kernel node for `args` after `deps`.
pub(super) unsafe fn add_kernel(g: CUgraph, deps: &[CUgraphNode], args: &mut ScaleArgs) -> CUgraphNode {
    let mut n = null_mut();
    assert_eq!(cuGraphAddKernelNode_v2(&mut n, g, deps.as_ptr(), deps.len(), &args.node()), CUDA_SUCCESS);
    n
}

/// Adds a memset node after `deps`: `n` u32s of `value` at `dst`.
pub(super) unsafe fn add_memset(g: CUgraph, deps: &[CUgraphNode], dst: u64, value: u32, n: usize) -> CUgraphNode {
    let p = CUDA_MEMSET_NODE_PARAMS { dst, pitch: n * 4, value, element_size: 4, width: n, height: 1 };
    let mut node = null_mut();
    assert_eq!(cuGraphAddMemsetNode(&mut node, g, deps.as_ptr(), deps.len(), &p, null_mut()), CUDA_SUCCESS);
    node
}

/// A copy of `dst.len()` u32s from device address `src` into `dst`.
pub(super) fn dtoh(dst: &mut [u32], src: u64) -> CUDA_MEMCPY3D {
    CUDA_MEMCPY3D {
        src_memory_type: CU_MEMORYTYPE_DEVICE,
        src_device: src,
        dst_memory_type: CU_MEMORYTYPE_HOST,
        dst_host: dst.as_mut_ptr() as *mut c_void,
        width_in_bytes: dst.len() * 4,
        height: 1,
        depth: 1,
        ..Default::default()
    }
}

#[test]
fn node_parameters_round_trip() {
    setup();
    // SAFETY: out-pointers are `&mut` to live locals of the types written; `p` starts
    // zeroed, valid as it holds only integers and raw pointers. `out` (64 bytes) is exactly
    // the memcpy node's host destination and outlives the one launch, which is waited for.
    // `arg` reads `size` bytes at each parameter pointer the node returned, which address
    // its own argument buffer at that parameter's offset, alive while the node keeps those
    // parameters. `args` is a boxed `ScaleArgs` whose pointers address its own fields.
    unsafe {
        let (d, g) = (alloc(4096), graph());
        let mut args = ScaleArgs::new(d, 7, 64);
        let k = add_kernel(g, &[], &mut args);
        args.factor = 1000;
        let m = add_memset(g, &[k], d + 256, 0xabcd, 16);
        let mut out = [0u32; 16];
        let mut c = null_mut();
        assert_eq!(cuGraphAddMemcpyNode(&mut c, g, [k, m].as_ptr(), 2, &dtoh(&mut out, d), null_mut()), CUDA_SUCCESS);
        assert_eq!(nodes(g), [k, m, c]);
        assert_eq!(types(g), [CU_GRAPH_NODE_TYPE_KERNEL, CU_GRAPH_NODE_TYPE_MEMSET, CU_GRAPH_NODE_TYPE_MEMCPY]);

        let mut p: CUDA_KERNEL_NODE_PARAMS_v2 = std::mem::zeroed();
        assert_eq!(cuGraphKernelNodeGetParams_v2(k, &mut p), CUDA_SUCCESS);
        assert_eq!((p.func, p.grid_dim_x, p.block_dim_x), (scale_fn(), 1, 32));
        let arg = |i: usize| {
            let (mut off, mut size) = (0, 0);
            assert_eq!(cuFuncGetParamInfo(p.func, i, &mut off, &mut size), CUDA_SUCCESS);
            let at = *p.kernel_params.add(i) as *const u8;
            assert_eq!(at, (*p.kernel_params as *const u8).add(off), "parameter {i} sits at its offset");
            std::slice::from_raw_parts(at, size).to_vec()
        };
        assert_eq!(arg(0), d.to_le_bytes());
        assert_eq!(arg(1), 7u32.to_le_bytes(), "the node kept the value at add time");
        assert_eq!(arg(2), 64u32.to_le_bytes());

        let mut ms = CUDA_MEMSET_NODE_PARAMS::default();
        assert_eq!(cuGraphMemsetNodeGetParams(m, &mut ms), CUDA_SUCCESS);
        assert_eq!((ms.dst, ms.value, ms.element_size, ms.width), (d + 256, 0xabcd, 4, 16));
        let mut mc = CUDA_MEMCPY3D::default();
        assert_eq!(cuGraphMemcpyNodeGetParams(c, &mut mc), CUDA_SUCCESS);
        assert_eq!((mc.src_device, mc.dst_host, mc.width_in_bytes), (d, out.as_mut_ptr() as *mut c_void, 64));
        assert_eq!(cuGraphMemsetNodeGetParams(k, &mut ms), CUDA_ERROR_INVALID_VALUE, "a kernel node has no memset parameters");

        // Setting the node's parameters changes what a later instantiation runs.
        args.factor = 3;
        assert_eq!(cuGraphKernelNodeSetParams_v2(k, &args.node()), CUDA_SUCCESS);
        assert_eq!(cuMemsetD32_v2(d, 2, 64), CUDA_SUCCESS);
        let s = stream();
        launch_and_wait(instantiate(g), s);
        assert_eq!(out, [6; 16]);
        assert_eq!(read_u32s(d + 256, 16), [0xabcd; 16]);
        assert_eq!(cuGraphDestroy(g), CUDA_SUCCESS);
        assert_eq!(cuGraphNodeGetType(k, &mut 0), CUDA_ERROR_INVALID_VALUE, "nodes go with their graph");
    }
}

#[test]
fn exec_is_a_snapshot_that_set_params_and_update_change() {
    setup();
    // SAFETY: `two`, `five` and `seven` are boxed `ScaleArgs` whose parameter pointers
    // address their own u64/u32/u32 fields, and `info` is a live out-struct. No graph here
    // copies host memory, and every handle passed was made here.
    unsafe {
        let (d, s) = (alloc(64), stream());
        let run = |e: CUgraphExec| {
            assert_eq!(cuMemsetD32_v2(d, 1, 4), CUDA_SUCCESS);
            launch_and_wait(e, s);
            read_u32s(d, 4)
        };
        let g = graph();
        let mut two = ScaleArgs::new(d, 2, 4);
        let k = add_kernel(g, &[], &mut two);
        let e = instantiate(g);
        assert_eq!(run(e), [2; 4]);

        let mut five = ScaleArgs::new(d, 5, 4);
        assert_eq!(cuGraphKernelNodeSetParams_v2(k, &five.node()), CUDA_SUCCESS);
        assert_eq!(run(e), [2; 4], "changing the graph does not reach the executable graph");
        assert_eq!(cuGraphExecKernelNodeSetParams_v2(e, k, &five.node()), CUDA_SUCCESS);
        assert_eq!(run(e), [5; 4]);

        let same = graph();
        let mut seven = ScaleArgs::new(d, 7, 4);
        let k7 = add_kernel(same, &[], &mut seven);
        let mut info = CUgraphExecUpdateResultInfo { result: 99, error_node: null_mut(), error_from_node: null_mut() };
        assert_eq!(cuGraphExecUpdate_v2(e, same, &mut info), CUDA_SUCCESS);
        assert_eq!(info.result, CU_GRAPH_EXEC_UPDATE_SUCCESS);
        assert_eq!(run(e), [7; 4]);
        assert_eq!(cuGraphExecKernelNodeSetParams_v2(e, k7, &two.node()), CUDA_SUCCESS, "the update's nodes name steps");
        assert_eq!(run(e), [2; 4]);

        let longer = graph();
        let k1 = add_kernel(longer, &[], &mut seven);
        add_kernel(longer, &[k1], &mut seven);
        assert_eq!(cuGraphExecUpdate_v2(e, longer, &mut info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
        assert_eq!(info.result, CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
        let other = graph();
        let m = add_memset(other, &[], d, 9, 4);
        assert_eq!(cuGraphExecUpdate_v2(e, other, &mut info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
        assert_eq!((info.result, info.error_node, info.error_from_node), (CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED, m, k));
        assert_eq!(run(e), [2; 4], "a refused update leaves the executable graph as it was");
        assert_eq!(cuGraphExecKernelNodeSetParams_v2(e, m, &two.node()), CUDA_ERROR_INVALID_VALUE);

        assert_eq!(cuGraphExecDestroy(e), CUDA_SUCCESS);
        assert_eq!(cuGraphLaunch(e, s), CUDA_ERROR_INVALID_VALUE);
    }
}

#[test]
fn child_graph_nodes_embed_a_copy() {
    setup();
    // SAFETY: out-pointers are `&mut` to live locals of the types written; `&before` and
    // `&node` are one-entry dependency lists passed with a count of 1, and `log` is the
    // 4 bytes the instantiation is told of. `out` (32 bytes) is exactly the memcpy node's
    // host destination and outlives all three launches, each waited for. `args` is a boxed
    // `ScaleArgs` whose parameter pointers address its own fields.
    unsafe {
        let (d, s) = (alloc(64), stream());
        let child = graph();
        let m = add_memset(child, &[], d, 3, 8);
        let mut args = ScaleArgs::new(d, 10, 8);
        add_kernel(child, &[m], &mut args);

        let parent = graph();
        let mut before = null_mut();
        assert_eq!(cuGraphAddEmptyNode(&mut before, parent, null_mut(), 0), CUDA_SUCCESS);
        let mut node = null_mut();
        assert_eq!(cuGraphAddChildGraphNode(&mut node, parent, &before, 1, child), CUDA_SUCCESS);
        let mut out = [0u32; 8];
        let mut copy = null_mut();
        assert_eq!(cuGraphAddMemcpyNode(&mut copy, parent, &node, 1, &dtoh(&mut out, d), null_mut()), CUDA_SUCCESS);
        assert_eq!(types(parent), [CU_GRAPH_NODE_TYPE_EMPTY, CU_GRAPH_NODE_TYPE_GRAPH, CU_GRAPH_NODE_TYPE_MEMCPY]);

        let mut embedded = null_mut();
        assert_eq!(cuGraphChildGraphNodeGetGraph(node, &mut embedded), CUDA_SUCCESS);
        assert_ne!(embedded, child, "the node holds a clone");
        assert_eq!(types(embedded), [CU_GRAPH_NODE_TYPE_MEMSET, CU_GRAPH_NODE_TYPE_KERNEL]);
        assert_eq!(cuGraphDestroy(embedded), CUDA_ERROR_INVALID_VALUE, "the node owns its graph");
        assert_eq!(cuGraphDestroy(child), CUDA_SUCCESS);

        let mut twin = null_mut();
        assert_eq!(cuGraphClone(&mut twin, parent), CUDA_SUCCESS);
        let (mut e, mut err, mut log) = (null_mut(), 1 as CUgraphNode, [b'x' as c_char; 4]);
        assert_eq!(cuGraphInstantiate_v2(&mut e, parent, &mut err, log.as_mut_ptr(), 4), CUDA_SUCCESS);
        assert_eq!((err, log[0]), (null_mut(), 0));
        launch_and_wait(e, s);
        assert_eq!(out, [30; 8]);
        out.fill(0);
        let mut p = CUDA_GRAPH_INSTANTIATE_PARAMS { flags: 0, h_upload_stream: s, h_err_node_out: err, result_out: 9 };
        assert_eq!(cuGraphInstantiateWithParams(&mut e, twin, &mut p), CUDA_SUCCESS);
        assert_eq!(p.result_out, CUDA_GRAPH_INSTANTIATE_SUCCESS);
        assert_eq!(cuGraphUpload(e, s), CUDA_SUCCESS);
        launch_and_wait(e, s);
        assert_eq!(out, [30; 8], "the clone runs the same nodes");

        // The embedded graph is live: changing it changes the child node.
        let mut args = ScaleArgs::new(d, 4, 8);
        let k = nodes(embedded)[1];
        assert_eq!(cuGraphKernelNodeSetParams_v2(k, &args.node()), CUDA_SUCCESS);
        launch_and_wait(instantiate(parent), s);
        assert_eq!(out, [12; 8]);
        assert_eq!(cuGraphDestroy(parent), CUDA_SUCCESS);
        assert_eq!(cuGraphNodeGetType(k, &mut 0), CUDA_ERROR_INVALID_VALUE, "embedded graphs go with their node");
    }
}

/// The pitched sub-box `(x, y, z)` of `w` x `h` x `depth` bytes of a host volume.
fn sub_box(v: &[u8], pitch: usize, rows: usize, (x, y, z): (usize, usize, usize), (w, h, depth): (usize, usize, usize)) -> Vec<u8> {
    let mut out = Vec::new();
    for k in z..z + depth {
        for j in y..y + h {
            let at = (k * rows + j) * pitch + x;
            out.extend_from_slice(&v[at..at + w]);
        }
    }
    out
}

#[test]
fn copies_3d_round_trip_a_pitched_sub_box() {
    setup();
    // SAFETY: `host` (360 bytes) covers the source box of `up`, whose last byte is at
    // (2 * 5 + 3) * 24 + 14 = 326; `device` takes the 1536 bytes copied into it; `back` is
    // the dense 10 x 3 x 2 box `down` writes and is read only after the stream is
    // synchronized. `bad` is `up` with one field changed and is refused.
    unsafe {
        // Host: 3 slices of 5 rows of 24 bytes. Device: 4 slices of 6 rows of 64 bytes.
        let host: Vec<u8> = (0..3 * 5 * 24).map(|i| (i * 7 % 251) as u8).collect();
        let d = alloc(4 * 6 * 64);
        assert_eq!(cuMemsetD8_v2(d, 0xee, 4 * 6 * 64), CUDA_SUCCESS);
        let extent = (10, 3, 2);
        let up = CUDA_MEMCPY3D {
            src_x_in_bytes: 5,
            src_y: 1,
            src_z: 1,
            src_memory_type: CU_MEMORYTYPE_HOST,
            src_host: host.as_ptr() as *const c_void,
            src_pitch: 24,
            src_height: 5,
            dst_x_in_bytes: 32,
            dst_y: 2,
            dst_z: 1,
            dst_memory_type: CU_MEMORYTYPE_DEVICE,
            dst_device: d,
            dst_pitch: 64,
            dst_height: 6,
            width_in_bytes: extent.0,
            height: extent.1,
            depth: extent.2,
            ..Default::default()
        };
        assert_eq!(cuMemcpy3D_v2(&up), CUDA_SUCCESS);
        let mut device = vec![0u8; 4 * 6 * 64];
        assert_eq!(cuMemcpyDtoH_v2(device.as_mut_ptr() as *mut c_void, d, device.len()), CUDA_SUCCESS);
        let want = sub_box(&host, 24, 5, (5, 1, 1), extent);
        assert_eq!(sub_box(&device, 64, 6, (32, 2, 1), extent), want);
        let outside = device.iter().enumerate().filter(|&(i, _)| {
            let (k, j, x) = (i / (6 * 64), i / 64 % 6, i % 64);
            !((1..3).contains(&k) && (2..5).contains(&j) && (32..42).contains(&x))
        });
        assert!(outside.into_iter().all(|(_, &b)| b == 0xee), "bytes outside the box are untouched");

        // Back down asynchronously into a dense host box, through a stream.
        let mut back = vec![0u8; 10 * 3 * 2];
        let down = CUDA_MEMCPY3D {
            src_x_in_bytes: 32,
            src_y: 2,
            src_z: 1,
            src_memory_type: CU_MEMORYTYPE_UNIFIED,
            src_device: d,
            src_pitch: 64,
            src_height: 6,
            dst_memory_type: CU_MEMORYTYPE_HOST,
            dst_host: back.as_mut_ptr() as *mut c_void,
            dst_pitch: 10,
            dst_height: 3,
            width_in_bytes: extent.0,
            height: extent.1,
            depth: extent.2,
            ..Default::default()
        };
        let s = stream();
        assert_eq!(cuMemcpy3DAsync_v2(&down, s), CUDA_SUCCESS);
        assert_eq!(cuStreamSynchronize(s), CUDA_SUCCESS);
        assert_eq!(back, want);

        let mut bad = up;
        bad.dst_pitch = 8;
        assert_eq!(cuMemcpy3D_v2(&bad), CUDA_ERROR_INVALID_VALUE, "rows wider than the pitch");
        bad = up;
        bad.src_memory_type = CU_MEMORYTYPE_ARRAY;
        assert_eq!(cuMemcpy3D_v2(&bad), CUDA_ERROR_NOT_SUPPORTED);
    }
}
