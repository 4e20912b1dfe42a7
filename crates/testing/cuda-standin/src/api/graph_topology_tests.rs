//! A graph's shape through the exports: edges, clones' nodes, node removal, and memset and
//! memcpy node parameters set on graphs and executable graphs.

use std::ptr::null_mut;

use cuda_abi::*;

use super::capture::*;
use super::capture_tests::{event, launch};
use super::copy::*;
use super::copy3d::*;
use super::graph::*;
use super::graph_exec::*;
use super::graph_tests::{add_kernel, add_memset, dtoh, graph, instantiate, launch_and_wait, nodes, read_u32s, stream, types, ScaleArgs};
use super::stream::*;
use super::tests::{alloc, setup};

type Edge = (CUgraphNode, CUgraphNode);

/// The graph's edges through `cuGraphGetEdges_v2`, checking that their data is all zero.
unsafe fn edges(g: CUgraph) -> Vec<Edge> {
    let mut n = 0;
    assert_eq!(cuGraphGetEdges_v2(g, null_mut(), null_mut(), null_mut(), &mut n), CUDA_SUCCESS);
    let (mut from, mut to) = (vec![null_mut(); n], vec![null_mut(); n]);
    let mut data = vec![CUgraphEdgeData { type_: 9, ..Default::default() }; n];
    assert_eq!(cuGraphGetEdges_v2(g, from.as_mut_ptr(), to.as_mut_ptr(), data.as_mut_ptr(), &mut n), CUDA_SUCCESS);
    assert_eq!(n, from.len());
    assert!(data.iter().all(|d| *d == CUgraphEdgeData::default()), "plain dependencies");
    from.into_iter().zip(to).collect()
}

unsafe fn empty(g: CUgraph, deps: &[CUgraphNode]) -> CUgraphNode {
    let mut n = null_mut();
    assert_eq!(cuGraphAddEmptyNode(&mut n, g, deps.as_ptr(), deps.len()), CUDA_SUCCESS);
    n
}

unsafe fn clone(g: CUgraph) -> CUgraph {
    let mut c = null_mut();
    assert_eq!(cuGraphClone(&mut c, g), CUDA_SUCCESS);
    c
}

/// The node of `clone` copied from `node`.
unsafe fn find(node: CUgraphNode, clone: CUgraph) -> CUgraphNode {
    let mut c = null_mut();
    assert_eq!(cuGraphNodeFindInClone(&mut c, node, clone), CUDA_SUCCESS);
    c
}

#[test]
fn edges_of_a_captured_fork_join_and_a_diamond() {
    setup();
    // SAFETY: the exports are called as a C program would: every pointer passed is valid
    // for the call, and host buffers that graph nodes copy into outlive their launches.
    unsafe {
        let (d, s, side) = (alloc(64), stream(), stream());
        let (fork, join) = (event(), event());
        let (mut x2, mut x3) = (ScaleArgs::new(d, 2, 4), ScaleArgs::new(d + 16, 3, 4));
        let mut out = [0u32; 8];
        let copy = dtoh(&mut out, d);
        assert_eq!(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
        assert_eq!(cuMemsetD32Async(d, 1, 8, s), CUDA_SUCCESS);
        assert_eq!(cuEventRecord(fork, s), CUDA_SUCCESS);
        assert_eq!(cuStreamWaitEvent(side, fork, 0), CUDA_SUCCESS);
        assert_eq!(launch(&mut x3, side), CUDA_SUCCESS);
        assert_eq!(cuEventRecord(join, side), CUDA_SUCCESS);
        assert_eq!(launch(&mut x2, s), CUDA_SUCCESS);
        assert_eq!(cuStreamWaitEvent(s, join, 0), CUDA_SUCCESS);
        assert_eq!(cuMemcpy3DAsync_v2(&copy, s), CUDA_SUCCESS);
        let mut g = null_mut();
        assert_eq!(cuStreamEndCapture(s, &mut g), CUDA_SUCCESS);
        let [m, k3, k2, c] = nodes(g)[..] else { panic!("four nodes") };
        assert_eq!(types(g)[3], CU_GRAPH_NODE_TYPE_MEMCPY);
        let want = [(m, k3), (m, k2), (k2, c), (k3, c)];
        assert_eq!(edges(g), want, "fork from the memset, join into the copy");
        launch_and_wait(instantiate(g), s);
        assert_eq!(out, [2, 2, 2, 2, 3, 3, 3, 3]);

        // The CUDA 12.0 form, a short buffer and a long one.
        let (mut from, mut to, mut n) = ([null_mut(); 6], [null_mut(); 6], 0);
        assert_eq!(cuGraphGetEdges(g, null_mut(), null_mut(), &mut n), CUDA_SUCCESS);
        assert_eq!(n, 4);
        n = 2;
        assert_eq!(cuGraphGetEdges(g, from.as_mut_ptr(), to.as_mut_ptr(), &mut n), CUDA_SUCCESS);
        assert_eq!((n, from[..2].to_vec(), to[..2].to_vec()), (2, vec![m, m], vec![k3, k2]));
        assert_eq!(from[2], null_mut(), "nothing past the count given");
        from.fill(1 as CUgraphNode);
        to.fill(1 as CUgraphNode);
        n = 6;
        assert_eq!(cuGraphGetEdges(g, from.as_mut_ptr(), to.as_mut_ptr(), &mut n), CUDA_SUCCESS);
        assert_eq!(n, 4, "the count actually written");
        assert_eq!((from[3], to[3], from[4], to[5]), (k3, c, null_mut(), null_mut()), "the rest nulled");

        let mut data = [CUgraphEdgeData::default(); 6];
        assert_eq!(cuGraphGetEdges(g, from.as_mut_ptr(), null_mut(), &mut n), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuGraphGetEdges(g, from.as_mut_ptr(), to.as_mut_ptr(), null_mut()), CUDA_ERROR_INVALID_VALUE);
        let r = cuGraphGetEdges_v2(g, null_mut(), null_mut(), data.as_mut_ptr(), &mut n);
        assert_eq!(r, CUDA_ERROR_INVALID_VALUE, "edge data needs the edges");
        assert_eq!(cuGraphDestroy(g), CUDA_SUCCESS);
        assert_eq!(cuGraphGetEdges(g, null_mut(), null_mut(), &mut n), CUDA_ERROR_INVALID_VALUE);

        let g = graph();
        let a = empty(g, &[]);
        let (b, c) = (empty(g, &[a]), empty(g, &[a]));
        let d = empty(g, &[c, b]);
        assert_eq!(edges(g), [(a, b), (a, c), (c, d), (b, d)], "each node's dependencies in the order given");
        assert_eq!(edges(graph()), [], "no nodes, no edges");
    }
}

#[test]
fn find_in_clone_maps_each_node() {
    setup();
    // SAFETY: the exports are called as a C program would: every pointer passed is valid
    // for the call, and host buffers that graph nodes copy into outlive their launches.
    unsafe {
        let inner = graph();
        let (i1, i2) = (empty(inner, &[]), empty(inner, &[]));
        let g = graph();
        let a = empty(g, &[]);
        let mut child = null_mut();
        assert_eq!(cuGraphAddChildGraphNode(&mut child, g, &a, 1, inner), CUDA_SUCCESS);
        let b = empty(g, &[a, child]);
        let c = clone(g);
        let copies: Vec<CUgraphNode> = nodes(g).into_iter().map(|n| find(n, c)).collect();
        assert_eq!(copies, nodes(c), "each node maps to its copy");
        let mapped: Vec<Edge> = edges(g).into_iter().map(|(f, t)| (find(f, c), find(t, c))).collect();
        assert_eq!(edges(c), mapped, "with the same edges");

        let (mut embedded, mut copied) = (null_mut(), null_mut());
        assert_eq!(cuGraphChildGraphNodeGetGraph(child, &mut embedded), CUDA_SUCCESS);
        assert_eq!(cuGraphChildGraphNodeGetGraph(find(child, c), &mut copied), CUDA_SUCCESS);
        let inside = nodes(embedded);
        assert_eq!(inside.iter().map(|&n| find(n, copied)).collect::<Vec<_>>(), nodes(copied), "embedded graphs too");

        let mut out = null_mut();
        assert_eq!(cuGraphNodeFindInClone(&mut out, a, g), CUDA_ERROR_INVALID_VALUE, "a graph is not its own clone");
        assert_eq!(cuGraphNodeFindInClone(&mut out, a, inner), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuGraphNodeFindInClone(&mut out, i1, c), CUDA_ERROR_INVALID_VALUE, "a node of another graph");
        assert_eq!(cuGraphNodeFindInClone(&mut out, a, clone(c)), CUDA_ERROR_INVALID_VALUE, "a clone of a clone");
        assert_eq!(cuGraphNodeFindInClone(null_mut(), a, c), CUDA_ERROR_INVALID_VALUE);
        let later = empty(g, &[b]);
        assert_eq!(cuGraphNodeFindInClone(&mut out, later, c), CUDA_ERROR_INVALID_VALUE, "added after the clone");
        assert_eq!(cuGraphDestroyNode(find(b, c)), CUDA_SUCCESS);
        assert_eq!(cuGraphNodeFindInClone(&mut out, b, c), CUDA_ERROR_INVALID_VALUE, "its copy was destroyed");

        // A child graph node takes its embedded graph with it.
        assert_eq!(cuGraphDestroyNode(find(child, c)), CUDA_SUCCESS);
        let mut n = 0;
        assert_eq!(cuGraphGetNodes(copied, null_mut(), &mut n), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(nodes(c), [find(a, c)]);
        assert_eq!(nodes(inner), [i1, i2], "the original graphs are untouched");
        assert_eq!(nodes(g).len(), 4);
    }
}

#[test]
fn destroyed_nodes_leave_the_graph_and_its_launches() {
    setup();
    // SAFETY: the exports are called as a C program would: every pointer passed is valid
    // for the call, and host buffers that graph nodes copy into outlive their launches.
    unsafe {
        let (d, s) = (alloc(64), stream());
        let (mut x2, mut x3) = (ScaleArgs::new(d, 2, 4), ScaleArgs::new(d + 16, 3, 4));
        let mut out = [0u32; 8];
        // a: memset 1 -> b: first half x2, c: second half x3 -> copy out -> e: memset 9.
        let g = graph();
        let a = add_memset(g, &[], d, 1, 8);
        let (b, c) = (add_kernel(g, &[a], &mut x2), add_kernel(g, &[a], &mut x3));
        let (mut copy, p) = (null_mut(), dtoh(&mut out, d));
        assert_eq!(cuGraphAddMemcpyNode(&mut copy, g, [b, c].as_ptr(), 2, &p, null_mut()), CUDA_SUCCESS);
        let e = add_memset(g, &[copy], d, 9, 8);
        let all = edges(g);

        let part = clone(g);
        let before = instantiate(part);
        let [a2, b2, c2, copy2, e2] = [a, b, c, copy, e].map(|n| find(n, part));
        assert_eq!(cuGraphDestroyNode(c2), CUDA_SUCCESS);
        assert_eq!(nodes(part), [a2, b2, copy2, e2]);
        assert_eq!(edges(part), [(a2, b2), (b2, copy2), (copy2, e2)], "no edge to or from the node");
        assert_eq!(cuGraphNodeGetType(c2, &mut 0), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuGraphDestroyNode(c2), CUDA_ERROR_INVALID_VALUE, "already gone");

        launch_and_wait(instantiate(part), s);
        assert_eq!(out, [2, 2, 2, 2, 1, 1, 1, 1], "the copy ran after b, without c");
        assert_eq!(read_u32s(d, 8), [9; 8], "and before e");
        launch_and_wait(before, s);
        assert_eq!(out, [2, 2, 2, 2, 3, 3, 3, 3], "an executable graph made before still runs the node");
        let mut x5 = ScaleArgs::new(d, 5, 4);
        let r = cuGraphExecKernelNodeSetParams_v2(before, c2, &x5.node());
        assert_eq!(r, CUDA_ERROR_INVALID_VALUE, "but cannot name it");
        assert_eq!(cuGraphExecKernelNodeSetParams_v2(before, b2, &x5.node()), CUDA_SUCCESS);

        // Without its root, b and c start the graph; the copy still waits for both.
        let part = clone(g);
        assert_eq!(cuGraphDestroyNode(find(a, part)), CUDA_SUCCESS);
        let [b2, c2, copy2, e2] = [b, c, copy, e].map(|n| find(n, part));
        assert_eq!(edges(part), [(b2, copy2), (c2, copy2), (copy2, e2)]);
        assert_eq!(cuMemsetD32_v2(d, 10, 8), CUDA_SUCCESS);
        launch_and_wait(instantiate(part), s);
        assert_eq!(out, [20, 20, 20, 20, 30, 30, 30, 30]);
        assert_eq!(read_u32s(d, 8), [9; 8]);

        assert_eq!(edges(g), all, "the original keeps every node and edge");
        launch_and_wait(instantiate(g), s);
        assert_eq!(out, [2, 2, 2, 2, 3, 3, 3, 3]);
    }
}

#[test]
fn memset_and_memcpy_set_params_change_the_next_launch() {
    setup();
    // SAFETY: the exports are called as a C program would: every pointer passed is valid
    // for the call, and host buffers that graph nodes copy into outlive their launches.
    unsafe {
        let (d, s) = (alloc(64), stream());
        let (mut out, mut other) = ([0u32; 4], [0u32; 4]);
        let g = graph();
        let m = add_memset(g, &[], d, 1, 4);
        let mut c = null_mut();
        assert_eq!(cuGraphAddMemcpyNode(&mut c, g, &m, 1, &dtoh(&mut out, d), null_mut()), CUDA_SUCCESS);
        let e = instantiate(g);
        launch_and_wait(e, s);
        assert_eq!(out, [1; 4]);

        let memset = |value, height| CUDA_MEMSET_NODE_PARAMS { dst: d, pitch: 16, value, element_size: 4, width: 4, height };
        assert_eq!(cuGraphMemsetNodeSetParams(m, &memset(7, 1)), CUDA_SUCCESS);
        assert_eq!(cuGraphMemcpyNodeSetParams(c, &dtoh(&mut other, d)), CUDA_SUCCESS);
        let mut p = CUDA_MEMSET_NODE_PARAMS::default();
        assert_eq!(cuGraphMemsetNodeGetParams(m, &mut p), CUDA_SUCCESS);
        assert_eq!(p, memset(7, 1));
        launch_and_wait(e, s);
        assert_eq!((out, other), ([1; 4], [0; 4]), "the executable graph keeps its snapshot");
        launch_and_wait(instantiate(g), s);
        assert_eq!((out, other), ([1; 4], [7; 4]), "a new one takes the node's parameters");

        assert_eq!(cuGraphExecMemsetNodeSetParams(e, m, &memset(5, 1), null_mut()), CUDA_SUCCESS);
        launch_and_wait(e, s);
        assert_eq!((out, other), ([5; 4], [7; 4]));
        assert_eq!(cuGraphExecMemcpyNodeSetParams(e, c, &dtoh(&mut other, d), null_mut()), CUDA_SUCCESS);
        assert_eq!(cuGraphExecMemsetNodeSetParams(e, m, &memset(6, 1), null_mut()), CUDA_SUCCESS);
        launch_and_wait(e, s);
        assert_eq!((out, other), ([5; 4], [6; 4]), "the next launch copies into the new buffer");

        let copy = dtoh(&mut other, d);
        assert_eq!(cuGraphMemsetNodeSetParams(c, &memset(7, 1)), CUDA_ERROR_INVALID_VALUE, "not a memset node");
        assert_eq!(cuGraphMemcpyNodeSetParams(m, &copy), CUDA_ERROR_INVALID_VALUE, "not a memcpy node");
        assert_eq!(cuGraphExecMemsetNodeSetParams(e, c, &memset(7, 1), null_mut()), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuGraphExecMemcpyNodeSetParams(e, m, &copy, null_mut()), CUDA_ERROR_INVALID_VALUE);
        let odd = CUDA_MEMSET_NODE_PARAMS { element_size: 3, ..memset(7, 1) };
        assert_eq!(cuGraphMemsetNodeSetParams(m, &odd), CUDA_ERROR_INVALID_VALUE, "checked as when added");
        assert_eq!(cuGraphMemsetNodeSetParams(m, null_mut()), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuGraphExecMemcpyNodeSetParams(e, c, null_mut(), null_mut()), CUDA_ERROR_INVALID_VALUE);

        // Executable graphs take only one-dimensional memsets and copies.
        let r = cuGraphExecMemsetNodeSetParams(e, m, &memset(8, 2), null_mut());
        assert_eq!(r, CUDA_ERROR_INVALID_VALUE, "two rows");
        let rows = CUDA_MEMCPY3D { height: 2, width_in_bytes: 8, src_pitch: 8, dst_pitch: 8, ..copy };
        assert_eq!(cuGraphExecMemcpyNodeSetParams(e, c, &rows, null_mut()), CUDA_ERROR_INVALID_VALUE);
        let none = CUDA_MEMSET_NODE_PARAMS { width: 0, ..memset(8, 1) };
        assert_eq!(cuGraphExecMemsetNodeSetParams(e, m, &none, null_mut()), CUDA_ERROR_INVALID_VALUE, "zero length");
        assert_eq!(cuGraphMemsetNodeSetParams(m, &memset(8, 2)), CUDA_SUCCESS, "a graph's node takes two rows");
        assert_eq!(cuGraphMemcpyNodeSetParams(c, &rows), CUDA_SUCCESS, "for copies too");
        let two_rows = instantiate(g);
        let r = cuGraphExecMemsetNodeSetParams(two_rows, m, &memset(8, 1), null_mut());
        assert_eq!(r, CUDA_ERROR_INVALID_VALUE, "nor replaces one instantiated with two rows");
        launch_and_wait(e, s);
        assert_eq!((out, other), ([5; 4], [6; 4]), "refused parameters change nothing");
    }
}
