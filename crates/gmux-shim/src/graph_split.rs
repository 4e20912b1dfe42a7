//! Graphs larger than the limit run in parts: the graph's nodes in a topological order,
//! cut into consecutive parts whose memory fits ([`gmux_core::graph_cut`]), each part a graph of its own (a copy of
//! the graph with every other node removed, so each node keeps its parameters and the
//! edges among the part's nodes). Launched one after another on the launch's stream, the
//! parts keep every dependency: a node never depends on a node of a later part. Each part
//! is a command of its own, so the memory of one part replaces the last one's.
//!
//! The copy is taken at instantiation, because programs may destroy a graph once it is
//! instantiated (PyTorch does), and is kept up to date by the updates gmux can carry over.

use crate::cuda::*;
use crate::driver::{check, CudaError};
use gmux_core::graph_cut;
use std::collections::HashMap;
use std::sync::Arc;

/// A copy of a graph, its nodes in a topological order with what each touches.
#[derive(Debug)]
pub struct Splittable {
    copy: CUgraph,
    /// Nodes of the copy, by the original node they copy (for updates).
    by_original: HashMap<usize, CUgraphNode>,
    order: Vec<(CUgraphNode, Vec<CUdeviceptr>)>,
    parts: Option<Parts>,
    /// Recorded after the last part of each launch: the next launch's first part waits for
    /// it, as CUDA orders launches of one executable graph even across streams.
    done: Option<CUevent>,
}

/// The graph cut into parts for one budget. Shared with launches under way, so that a
/// new cut never destroys a part a launch is about to issue.
#[derive(Debug)]
struct Parts {
    budget: u64,
    parts: Arc<[Part]>,
}

/// One part: an executable graph and the addresses its nodes touch.
#[derive(Debug)]
pub struct Part {
    /// The part's executable graph.
    pub exec: CUgraphExec,
    /// Addresses its nodes touch.
    pub touches: Vec<CUdeviceptr>,
}

impl Drop for Part {
    fn drop(&mut self) {
        crate::real!(cuGraphExecDestroy(self.exec));
    }
}

impl Drop for Splittable {
    fn drop(&mut self) {
        self.parts = None;
        crate::real!(cuGraphDestroy(self.copy));
        if let Some(e) = self.done.take() {
            crate::real!(cuEventDestroy_v2(e));
        }
    }
}

/// The nodes of `graph`, as the driver lists them.
fn nodes_of(graph: CUgraph) -> Result<Vec<CUgraphNode>, CudaError> {
    let mut n = 0usize;
    check(crate::real!(cuGraphGetNodes(graph, std::ptr::null_mut(), &mut n)), "cuGraphGetNodes")?;
    let mut nodes = vec![std::ptr::null_mut(); n];
    check(crate::real!(cuGraphGetNodes(graph, nodes.as_mut_ptr(), &mut n)), "cuGraphGetNodes")?;
    nodes.truncate(n);
    Ok(nodes)
}

/// `nodes` in a topological order of `graph`'s edges, ties in the order given.
fn topological(graph: CUgraph, nodes: &[CUgraphNode]) -> Result<Vec<usize>, CudaError> {
    let mut n = 0usize;
    let none: CUgraphNode = std::ptr::null_mut();
    let (null, no_data) = (std::ptr::null_mut(), std::ptr::null_mut());
    check(crate::real!(cuGraphGetEdges_v2(graph, null, null, no_data, &mut n)), "cuGraphGetEdges")?;
    // Edge data must be asked for: the driver refuses a lossy query of edges that carry
    // some (programmatic dependent launch ports, as XLA's graphs have).
    let (mut from, mut to, mut data) = (vec![none; n], vec![none; n], vec![CUgraphEdgeData::default(); n]);
    check(crate::real!(cuGraphGetEdges_v2(graph, from.as_mut_ptr(), to.as_mut_ptr(), data.as_mut_ptr(), &mut n)), "cuGraphGetEdges")?;
    let index: HashMap<usize, usize> = nodes.iter().enumerate().map(|(i, x)| (*x as usize, i)).collect();
    let edges: Vec<(usize, usize)> =
        from.iter().zip(&to).take(n).filter_map(|(f, t)| Some((*index.get(&(*f as usize))?, *index.get(&(*t as usize))?))).collect();
    graph_cut::topological(nodes.len(), &edges).ok_or(CudaError { call: "cuGraphGetEdges (a cycle)", code: CUDA_ERROR_INVALID_VALUE })
}

impl Splittable {
    /// Copies `graph`, whose own nodes touch the addresses `top` gives.
    pub fn new(graph: CUgraph, top: Vec<(CUgraphNode, Vec<CUdeviceptr>)>) -> Result<Splittable, CudaError> {
        let mut copy = std::ptr::null_mut();
        check(crate::real!(cuGraphClone(&mut copy, graph)), "cuGraphClone")?;
        let mut s = Splittable { copy, by_original: HashMap::new(), order: Vec::new(), parts: None, done: None };
        let originals: Vec<CUgraphNode> = top.iter().map(|(n, _)| *n).collect();
        let mut copied = Vec::with_capacity(top.len());
        for (node, t) in top {
            let mut c = std::ptr::null_mut();
            check(crate::real!(cuGraphNodeFindInClone(&mut c, node, copy)), "cuGraphNodeFindInClone")?;
            s.by_original.insert(node as usize, c);
            copied.push((c, t));
        }
        let order = topological(graph, &originals)?;
        s.order = order.into_iter().map(|i| std::mem::take(&mut copied[i])).collect();
        Ok(s)
    }

    /// The node of the copy that copies `original` (a node of the graph itself, not of a
    /// child graph).
    pub fn copied(&self, original: CUgraphNode) -> Option<CUgraphNode> {
        self.by_original.get(&(original as usize)).copied()
    }

    /// Drops the parts cut so far (a change the copy does not follow was made to the
    /// executable graph; the caller drops the whole copy then).
    pub fn invalidate(&mut self) {
        self.parts = None;
    }

    /// Sets what a node of the copy touches after an update, dropping parts cut before.
    pub fn updated(&mut self, copied: CUgraphNode, touches: Vec<CUdeviceptr>) {
        if let Some(e) = self.order.iter_mut().find(|(n, _)| *n == copied) {
            e.1 = touches;
        }
        self.parts = None;
    }

    /// The parts for `budget` bytes, cut anew if the last cut was for another budget or
    /// a part no longer fits it (allocations at its addresses changed). `bytes` gives, for
    /// a set of addresses, the memory each allocation they reach takes (allocation,
    /// bytes). Fails naming the first node that does not fit alone.
    pub fn parts(&mut self, budget: u64, bytes: impl Fn(&[CUdeviceptr]) -> Vec<(u64, u64)>) -> Result<Arc<[Part]>, String> {
        let size = |p: &Part| bytes(&p.touches).iter().map(|(_, b)| b).sum::<u64>();
        let fits = |cut: &Parts| cut.budget == budget && cut.parts.iter().all(|p| size(p) <= budget);
        if !self.parts.as_ref().is_some_and(fits) {
            self.parts = None;
            let cut = self.cut(budget, &bytes)?;
            let parts = cut.into_iter().map(|idx| self.instantiate(&idx)).collect::<Result<Vec<Part>, CudaError>>().map_err(|e| e.to_string())?;
            crate::log!(Debug, "a graph of {} nodes runs in {} parts of at most {budget} bytes", self.order.len(), parts.len());
            self.parts = Some(Parts { budget, parts: parts.into() });
        }
        Ok(self.parts.as_ref().expect("just cut").parts.clone())
    }

    /// The event recorded after each launch's last part (created on first use).
    pub fn done_event(&mut self) -> Result<CUevent, CudaError> {
        if let Some(e) = self.done {
            return Ok(e);
        }
        let mut e = std::ptr::null_mut();
        check(crate::real!(cuEventCreate(&mut e, CU_EVENT_DISABLE_TIMING)), "cuEventCreate")?;
        self.done = Some(e);
        Ok(e)
    }

    /// Indexes into `order` of each part ([`graph_cut::cut`]).
    fn cut(&self, budget: u64, bytes: &impl Fn(&[CUdeviceptr]) -> Vec<(u64, u64)>) -> Result<Vec<Vec<usize>>, String> {
        let nodes: Vec<Vec<(u64, u64)>> = self.order.iter().map(|(_, touches)| bytes(touches)).collect();
        let parts = graph_cut::cut(&nodes, budget).map_err(|e| format!("its node {} alone needs {}", e.node, gmux_core::size::format_size(e.bytes)))?;
        Ok(parts.into_iter().map(|r| r.collect()).collect())
    }

    /// A part holding the nodes at `keep` (indexes into `order`).
    fn instantiate(&self, keep: &[usize]) -> Result<Part, CudaError> {
        let mut g = std::ptr::null_mut();
        check(crate::real!(cuGraphClone(&mut g, self.copy)), "cuGraphClone")?;
        let kept: std::collections::HashSet<usize> = keep.iter().map(|&i| self.order[i].0 as usize).collect();
        let result = (|| {
            for node in nodes_of(self.copy)? {
                if !kept.contains(&(node as usize)) {
                    let mut c = std::ptr::null_mut();
                    check(crate::real!(cuGraphNodeFindInClone(&mut c, node, g)), "cuGraphNodeFindInClone")?;
                    check(crate::real!(cuGraphDestroyNode(c)), "cuGraphDestroyNode")?;
                }
            }
            let mut exec = std::ptr::null_mut();
            check(crate::real!(cuGraphInstantiateWithFlags(&mut exec, g, 0)), "cuGraphInstantiateWithFlags")?;
            let mut touches: Vec<CUdeviceptr> = keep.iter().flat_map(|&i| self.order[i].1.iter().copied()).collect();
            touches.sort_unstable();
            touches.dedup();
            Ok(Part { exec, touches })
        })();
        crate::real!(cuGraphDestroy(g));
        result
    }

    /// Applies a kernel node's new parameters to the copy.
    ///
    /// # Safety
    /// `p` is valid as `cuGraphExecKernelNodeSetParams` requires.
    pub unsafe fn set_kernel(&mut self, original: CUgraphNode, p: *const CUDA_KERNEL_NODE_PARAMS_v2) -> Result<(), CudaError> {
        let c = self.copied(original).ok_or(CudaError { call: "cuGraphKernelNodeSetParams", code: CUDA_ERROR_INVALID_VALUE })?;
        check(crate::real!(cuGraphKernelNodeSetParams_v2(c, p)), "cuGraphKernelNodeSetParams")
    }

    /// Applies a memset node's new parameters to the copy.
    pub fn set_memset(&mut self, original: CUgraphNode, p: *const CUDA_MEMSET_NODE_PARAMS) -> Result<(), CudaError> {
        let c = self.copied(original).ok_or(CudaError { call: "cuGraphMemsetNodeSetParams", code: CUDA_ERROR_INVALID_VALUE })?;
        check(crate::real!(cuGraphMemsetNodeSetParams(c, p)), "cuGraphMemsetNodeSetParams")
    }

    /// Applies a memcpy node's new parameters to the copy.
    pub fn set_memcpy(&mut self, original: CUgraphNode, p: *const CUDA_MEMCPY3D) -> Result<(), CudaError> {
        let c = self.copied(original).ok_or(CudaError { call: "cuGraphMemcpyNodeSetParams", code: CUDA_ERROR_INVALID_VALUE })?;
        check(crate::real!(cuGraphMemcpyNodeSetParams(c, p)), "cuGraphMemcpyNodeSetParams")
    }
}

// SAFETY: graph handles may be used from any thread; the shim's lock serializes access.
unsafe impl Send for Splittable {}
// SAFETY: as above.
unsafe impl Send for Part {}
