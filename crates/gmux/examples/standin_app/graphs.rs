//! `graph`: CUDA graphs over six buffers whose working sets exclude each other under an
//! 8 MiB limit (two 4 MiB buffers): captured graphs with kernel, copy and memset nodes, a
//! launch on another stream in the middle of a capture (gmux must evict without
//! disturbing the capture), a kernel node changed with `cuGraphExecKernelNodeSetParams`,
//! an executable graph updated with `cuGraphExecUpdate`, and a child graph node. Every
//! buffer is checked against a host model at the end.
//!
//! `graph-split --buffers N --bytes B`: one graph over N buffers, chained by copies, launched
//! twice: under a limit below their sum gmux runs it in parts; a single buffer above the
//! limit cannot be split, and gmux refuses the launch by name.
//!
//! `graph-temp [--ordered]`: a buffer allocated in the middle of a capture (in relaxed
//! mode, as PyTorch's allocator does; with `--ordered`, with `cuMemAllocAsync` on the
//! capturing stream and freed with `cuMemFreeAsync` at its end, as PyTorch's
//! `backend:cudaMallocAsync` does) and copied to and from in it: the driver checks at
//! capture that a copy's memory is mapped. A stray `cuStreamEndCapture` on a stream that
//! is not capturing comes before the copies. With `--ordered`, a buffer allocated between
//! the two launches must not get the temporary's address.
//!
//! `graph-nodes --bytes B --copy C [--offset O]`: a graph built node by node over two
//! buffers of B bytes, one written and one never touched: a memcpy node copies C bytes at
//! offset O (given as the copy's x offset on both sides) of one to the other, then a
//! memset node sets the next C bytes. The driver checks, as each node
//! is added, that its memory is mapped. Prints `nodes added` before the launch.

use super::*;

struct Graph<'a> {
    app: &'a App,
    s: CUstream,
    n: u64,
    bytes: usize,
}

impl Graph<'_> {
    /// Captures what `body` enqueues on the capture stream into a graph.
    fn capture(&self, body: impl FnOnce()) -> CUgraph {
        let cu = &self.app.cu;
        // SAFETY: only values: a stream this program created, and a capture mode.
        check(unsafe { (cu.stream_begin_capture)(self.s, CU_STREAM_CAPTURE_MODE_GLOBAL) }, "cuStreamBeginCapture");
        body();
        let mut g = null_mut();
        // SAFETY: the driver writes the captured graph to `g`, a live local.
        check(unsafe { (cu.stream_end_capture)(self.s, &mut g) }, "cuStreamEndCapture");
        g
    }

    fn instantiate(&self, g: CUgraph) -> CUgraphExec {
        let mut e = null_mut();
        // SAFETY: the driver writes the executable graph to `e`, a live local.
        check(unsafe { (self.app.cu.graph_instantiate)(&mut e, g, 0) }, "cuGraphInstantiateWithFlags");
        e
    }

    fn launch(&self, e: CUgraphExec) {
        // SAFETY: only handles, by value, that this program created (or null, the default
        // stream); no host memory.
        check(unsafe { (self.app.cu.graph_launch)(e, self.s) }, "cuGraphLaunch");
    }

    fn add(&self, p: u64, v: u32) {
        self.app.add(self.s, p, self.n, v);
    }

    fn memset(&self, p: u64, v: u32) {
        // SAFETY: only values: a device range, which the driver checks, and a stream.
        check(unsafe { (self.app.cu.memset_d32_async)(p, v, self.n as usize, self.s) }, "cuMemsetD32Async");
    }

    fn copy(&self, dst: u64, src: u64) {
        // SAFETY: only values: two device ranges, which the driver checks, and a stream.
        check(unsafe { (self.app.cu.memcpy_dtod_async)(dst, src, self.bytes, self.s) }, "cuMemcpyDtoDAsync");
    }

    /// The first kernel node of `g`.
    fn kernel_node(&self, g: CUgraph) -> CUgraphNode {
        let cu = &self.app.cu;
        let mut count = 0;
        // SAFETY: with a null node array the driver only writes the count, to `count`, a live
        // local.
        check(unsafe { (cu.graph_get_nodes)(g, null_mut(), &mut count) }, "cuGraphGetNodes");
        let mut nodes = vec![null_mut(); count];
        // SAFETY: `nodes` has room for `count` nodes, as many as the driver writes.
        check(unsafe { (cu.graph_get_nodes)(g, nodes.as_mut_ptr(), &mut count) }, "cuGraphGetNodes");
        let kernel = nodes.into_iter().find(|&node| {
            let mut t = u32::MAX;
            // SAFETY: the driver writes the node's type to `t`, a live local.
            check(unsafe { (cu.graph_node_get_type)(node, &mut t) }, "cuGraphNodeGetType");
            t == CU_GRAPH_NODE_TYPE_KERNEL
        });
        kernel.unwrap_or_else(|| fail("the captured graph has no kernel node"))
    }
}

pub fn rounds(app: &App, o: &Opts) -> bool {
    let bytes = o.bytes("bytes", 4 << 20) as usize;
    let rounds = o.num("rounds", 3);
    let n = (bytes / 4) as u64;
    let g = Graph { app, s: app.stream(CU_STREAM_NON_BLOCKING), n, bytes };
    let s2 = app.stream(CU_STREAM_NON_BLOCKING);
    let b: Vec<u64> = (0..6).map(|_| app.alloc(bytes)).collect();
    let mut model: Vec<Vec<u32>> = (0..6).map(|i| (0..n as u32).map(|j| i * 1_000_000 + j).collect()).collect();
    for (p, m) in b.iter().zip(&model) {
        app.htod(*p, m);
    }
    let add = |m: &mut Vec<u32>, v: u32| m.iter_mut().for_each(|w| *w = w.wrapping_add(v));
    let mut launches = 0;

    // b2 and b3 in use, so that the launch on s2 inside the next capture must evict.
    g.add(b[2], 0);
    g.add(b[3], 0);
    app.sync(g.s);
    let ga = g.capture(|| {
        g.add(b[0], 1);
        app.add(s2, b[5], n, 5);
        g.copy(b[1], b[0]);
        g.add(b[1], 2);
    });
    add(&mut model[5], 5);
    app.sync(s2);
    let gb = g.capture(|| {
        g.add(b[2], 3);
        g.memset(b[3], 7);
    });
    let (ea, eb) = (g.instantiate(ga), g.instantiate(gb));
    let run_a = |model: &mut Vec<Vec<u32>>| {
        add(&mut model[0], 1);
        model[1] = model[0].iter().map(|w| w.wrapping_add(2)).collect();
    };
    for _ in 0..rounds {
        g.launch(ea);
        g.launch(eb);
        launches += 2;
        run_a(&mut model);
        add(&mut model[2], 3);
        model[3] = vec![7; n as usize];
    }

    // The add node of B now adds 4 to b4, a buffer B never touched.
    let node = g.kernel_node(gb);
    // SAFETY: a plain C struct of integers and pointers, for which all zeros is a valid value.
    let mut p = unsafe { std::mem::zeroed::<CUDA_KERNEL_NODE_PARAMS_v2>() };
    // SAFETY: the driver writes the node's parameters to `p`, a live local.
    check(unsafe { (app.cu.graph_kernel_node_get_params)(node, &mut p) }, "cuGraphKernelNodeGetParams");
    let (mut ptr4, mut n4, mut v4) = (b[4], n, 4u32);
    let mut args = [ptr(&mut ptr4), ptr(&mut n4), ptr(&mut v4)];
    p.kernel_params = args.as_mut_ptr();
    // SAFETY: `p` holds the node's parameters as the driver gave them, and its `kernel_params`
    // points to `args`: a pointer to a live value for each of `add`'s parameters (8, 8 and 4
    // bytes).
    check(unsafe { (app.cu.graph_exec_kernel_node_set_params)(eb, node, &p) }, "cuGraphExecKernelNodeSetParams");
    g.launch(ea);
    g.launch(eb);
    launches += 2;
    run_a(&mut model);
    add(&mut model[4], 4);

    // B becomes a graph of the same shape over b5.
    let gb2 = g.capture(|| {
        g.add(b[5], 6);
        g.memset(b[3], 7);
    });
    // SAFETY: a plain C struct of integers and pointers, for which all zeros is a valid value.
    let mut info = unsafe { std::mem::zeroed::<CUgraphExecUpdateResultInfo>() };
    // SAFETY: the driver writes the update's result to `info`, a live local.
    check(unsafe { (app.cu.graph_exec_update)(eb, gb2, &mut info) }, "cuGraphExecUpdate");
    g.launch(ea);
    g.launch(eb);
    launches += 2;
    run_a(&mut model);
    add(&mut model[5], 6);

    // A as the child of another graph.
    let mut gc = null_mut();
    // SAFETY: the driver writes the new graph to `gc`, a live local.
    check(unsafe { (app.cu.graph_create)(&mut gc, 0) }, "cuGraphCreate");
    let mut child = null_mut();
    // SAFETY: no dependencies (null, 0); the driver writes the new node to `child`, a live
    // local.
    check(unsafe { (app.cu.graph_add_child_graph_node)(&mut child, gc, std::ptr::null(), 0, ga) }, "cuGraphAddChildGraphNode");
    let ec = g.instantiate(gc);
    g.launch(eb);
    g.launch(ec);
    launches += 2;
    add(&mut model[5], 6);
    run_a(&mut model);

    app.sync(g.s);
    for (i, (p, m)) in b.iter().zip(&model).enumerate() {
        let got = app.dtoh(*p, n as usize);
        if let Some(j) = (0..m.len()).find(|&j| got[j] != m[j]) {
            eprintln!("standin_app: graph: buffer {i} word {j} is {} where {} was expected", got[j], m[j]);
            return false;
        }
    }
    println!("graph: all 6 buffers checked after {launches} graph launches");
    true
}

pub fn split(app: &App, o: &Opts) -> bool {
    let bytes = o.bytes("bytes", 4 << 20) as usize;
    let buffers = o.num("buffers", 4) as usize;
    let n = (bytes / 4) as u64;
    let g = Graph { app, s: app.stream(CU_STREAM_NON_BLOCKING), n, bytes };
    let b: Vec<u64> = (0..buffers).map(|_| app.alloc(bytes)).collect();
    for (i, p) in b.iter().enumerate() {
        app.htod(*p, &vec![i as u32 * 100; n as usize]);
    }
    // Each buffer gets 1, then the next buffer gets what the last one holds: a chain of
    // dependencies through every buffer.
    let all = g.capture(|| {
        for (i, &p) in b.iter().enumerate() {
            g.add(p, 1);
            if let Some(&next) = b.get(i + 1) {
                g.copy(next, p);
            }
        }
    });
    let e = g.instantiate(all);
    // SAFETY: only handles, by value, that this program created (or null, the default stream);
    // no host memory.
    let r = unsafe { (app.cu.graph_launch)(e, g.s) };
    println!("graph-split: launch result: {r}");
    if r != CUDA_SUCCESS {
        return false;
    }
    g.launch(e);
    app.sync(g.s);
    // Each launch adds 1 to buffer 0 (which starts at 0), and buffer i gets buffer i - 1
    // plus 1: after two launches buffer i holds 2 + i.
    let model: Vec<u32> = (0..buffers as u32).map(|i| 2 + i).collect();
    for (i, p) in b.iter().enumerate() {
        let got = app.dtoh(*p, n as usize);
        if got.iter().any(|&w| w != model[i]) {
            eprintln!("standin_app: graph-split: buffer {i} holds {} where {} was expected", got[0], model[i]);
            return false;
        }
    }
    println!("graph-split: {buffers} buffers checked after 2 launches");
    true
}

pub fn temporary(app: &App, o: &Opts) -> bool {
    let bytes = o.bytes("bytes", 4 << 20) as usize;
    let n = (bytes / 4) as u64;
    let g = Graph { app, s: app.stream(CU_STREAM_NON_BLOCKING), n, bytes };
    let b = app.alloc(bytes);
    let model: Vec<u32> = (0..n as u32).map(|j| j.wrapping_mul(7)).collect();
    app.htod(b, &model);
    let ordered = o.get("ordered").is_some();
    let mut temp = 0;
    let graph = g.capture(|| {
        let mut mode = CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: the driver swaps the thread's mode with `mode`, a live local.
        check(unsafe { (app.cu.thread_exchange_stream_capture_mode)(&mut mode) }, "cuThreadExchangeStreamCaptureMode");
        let t = if ordered { app.alloc_async(bytes, g.s) } else { app.alloc(bytes) };
        temp = t;
        // SAFETY: the driver swaps the thread's mode with `mode`, a live local.
        check(unsafe { (app.cu.thread_exchange_stream_capture_mode)(&mut mode) }, "cuThreadExchangeStreamCaptureMode");
        // Ending a capture on a stream that is not capturing fails and ends none.
        let (idle, mut none) = (app.stream(CU_STREAM_NON_BLOCKING), null_mut());
        // SAFETY: the driver may write a graph to `none`, a live local.
        if unsafe { (app.cu.stream_end_capture)(idle, &mut none) } == CUDA_SUCCESS {
            fail("cuStreamEndCapture on a stream that is not capturing succeeded");
        }
        g.copy(t, b);
        g.add(t, 1);
        g.copy(b, t);
        if ordered {
            app.free_async(t, g.s);
        }
    });
    let e = g.instantiate(graph);
    g.launch(e);
    if ordered {
        // The temporary is the graph's: a new allocation must not take its address.
        let other = app.alloc_async(bytes, g.s);
        if other == temp {
            fail("graph-temp: an allocation after the capture got the captured temporary's address");
        }
        g.memset(other, 0xffff_ffff);
    }
    g.launch(e);
    app.sync(g.s);
    let got = app.dtoh(b, n as usize);
    match (0..n as usize).find(|&j| got[j] != model[j].wrapping_add(2)) {
        Some(j) => {
            eprintln!("standin_app: graph-temp: word {j} is {} where {} was expected", got[j], model[j].wrapping_add(2));
            false
        }
        None => {
            println!("graph-temp: {bytes} bytes checked after 2 launches");
            true
        }
    }
}

pub fn nodes(app: &App, o: &Opts) -> bool {
    let cu = &app.cu;
    let (bytes, c, off) = (o.bytes("bytes", 8 << 20) as usize, o.bytes("copy", 2 << 20) as usize, o.bytes("offset", 0) as usize);
    if off + 2 * c > bytes {
        fail("graph-nodes needs --offset plus twice --copy at most --bytes");
    }
    let (src, dst) = (app.alloc(bytes), app.alloc(bytes));
    let model: Vec<u32> = (0..(bytes / 4) as u32).map(|j| j.wrapping_mul(11)).collect();
    app.htod(src, &model);
    let mut g = null_mut();
    // SAFETY: the driver writes the new graph to `g`, a live local.
    check(unsafe { (cu.graph_create)(&mut g, 0) }, "cuGraphCreate");
    let copy = CUDA_MEMCPY3D {
        src_x_in_bytes: off,
        src_memory_type: CU_MEMORYTYPE_DEVICE,
        src_device: src,
        src_pitch: bytes,
        dst_x_in_bytes: off,
        dst_memory_type: CU_MEMORYTYPE_DEVICE,
        dst_device: dst,
        dst_pitch: bytes,
        width_in_bytes: c,
        height: 1,
        depth: 1,
        ..Default::default()
    };
    let mut first = null_mut();
    // SAFETY: no dependencies (null, 0); `copy` is a complete `CUDA_MEMCPY3D` that lives
    // through the call; the driver writes the new node to `first`, a live local.
    check(unsafe { (cu.graph_add_memcpy_node)(&mut first, g, null_mut(), 0, &copy, null_mut()) }, "cuGraphAddMemcpyNode");
    let set = CUDA_MEMSET_NODE_PARAMS { dst: dst + (off + c) as u64, pitch: c, value: 7, element_size: 4, width: c / 4, height: 1 };
    let mut second = null_mut();
    // SAFETY: one dependency, `first`; `set` lives through the call; the driver writes the new
    // node to `second`, a live local.
    check(unsafe { (cu.graph_add_memset_node)(&mut second, g, &first, 1, &set, null_mut()) }, "cuGraphAddMemsetNode");
    println!("graph-nodes: nodes added");
    let s = app.stream(CU_STREAM_NON_BLOCKING);
    let mut e = null_mut();
    // SAFETY: the driver writes the executable graph to `e`, a live local.
    check(unsafe { (cu.graph_instantiate)(&mut e, g, 0) }, "cuGraphInstantiateWithFlags");
    // SAFETY: only handles, by value, that this program created (or null, the default stream);
    // no host memory.
    check(unsafe { (cu.graph_launch)(e, s) }, "cuGraphLaunch");
    app.sync(s);
    let got = app.dtoh(dst + off as u64, 2 * c / 4);
    let want = |j: usize| if j < c / 4 { model[off / 4 + j] } else { 7 };
    match (0..2 * c / 4).find(|&j| got[j] != want(j)) {
        Some(j) => {
            eprintln!("standin_app: graph-nodes: word {j} is {} where {} was expected", got[j], want(j));
            false
        }
        None => {
            println!("graph-nodes: {} bytes checked", 2 * c);
            true
        }
    }
}
