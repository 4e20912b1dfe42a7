//! CUDA graphs: the working set of a graph launch is read from the graph's nodes when it
//! is instantiated, whether the graph was captured from streams or built node by node.
//!
//! Kernel nodes are scanned like launches ([`crate::predict`]), memset and memcpy nodes
//! give their device addresses, child graphs are walked. Updates of an executable graph
//! (`cuGraphExecUpdate`, `cuGraphExec*NodeSetParams`) re-read what they change. A node
//! gmux cannot analyse (a kernel without a parameter layout, a conditional node, …)
//! makes the launch touch all memory, which is safe whenever all memory fits the limit.
//! Addresses, not allocations, are kept, so a graph that outlives an allocation follows
//! whatever is allocated at its addresses at launch. A graph larger than the limit runs
//! in parts ([`crate::graph_split`]).

use crate::cuda::*;
use crate::driver::{check, CudaError};
pub use crate::graph_split::{Part, Splittable};
use crate::predict::{kernel_name, scan, Layouts};
use std::collections::HashMap;

/// What one node touches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Touches {
    /// Device addresses (any number of them may be outside gmux memory).
    Addresses(Vec<CUdeviceptr>),
    /// Unknown: the node may touch any memory. The reason, for the log.
    Anything(String),
}

/// The working set of one executable graph, by node of the graph it came from.
#[derive(Debug, Default)]
pub struct ExecGraph {
    nodes: HashMap<usize, Touches>,
    /// Why gmux cannot run this graph at all (memory it cannot count).
    pub refused: Option<String>,
    /// A copy of the graph to run in parts when it does not fit the limit; `None` once an
    /// update could not be carried over to it.
    pub split: Option<Splittable>,
    /// The union of `nodes`, made at the first launch after a change.
    union: std::cell::OnceCell<Result<Vec<CUdeviceptr>, String>>,
}

impl ExecGraph {
    /// Every address the graph's nodes touch, or why that cannot be known.
    pub fn touches(&self) -> Result<&[CUdeviceptr], &str> {
        let union = self.union.get_or_init(|| {
            let mut all = Vec::new();
            for t in self.nodes.values() {
                match t {
                    Touches::Addresses(a) => all.extend_from_slice(a),
                    Touches::Anything(why) => return Err(why.clone()),
                }
            }
            all.sort_unstable();
            all.dedup();
            Ok(all)
        });
        union.as_deref().map_err(String::as_str)
    }

    /// Replaces what `node` touches.
    pub fn set(&mut self, node: CUgraphNode, t: Touches) {
        self.nodes.insert(node as usize, t);
        self.union = Default::default();
    }
}

/// Executable graphs by handle.
#[derive(Debug, Default)]
pub struct Graphs {
    execs: HashMap<usize, ExecGraph>,
}

impl Graphs {
    /// Records (or, after an update, replaces) what `exec` touches.
    pub fn insert(&mut self, exec: CUgraphExec, g: ExecGraph) {
        self.execs.insert(exec as usize, g);
    }

    /// The executable graph `exec`, if gmux saw it instantiated.
    pub fn get_mut(&mut self, exec: CUgraphExec) -> Option<&mut ExecGraph> {
        self.execs.get_mut(&(exec as usize))
    }

    /// The executable graph `exec`, if gmux saw it instantiated.
    pub fn get(&self, exec: CUgraphExec) -> Option<&ExecGraph> {
        self.execs.get(&(exec as usize))
    }

    /// Forgets a destroyed executable graph.
    pub fn remove(&mut self, exec: CUgraphExec) {
        self.execs.remove(&(exec as usize));
    }
}

/// Reads every node of `graph`, child graphs included, and keeps a copy of the graph to
/// split when it is too large for the limit (unless a node cannot be analysed).
pub fn read(graph: CUgraph, layouts: &mut Layouts) -> Result<ExecGraph, CudaError> {
    let mut out = ExecGraph::default();
    let top = walk(graph, layouts, &mut out, 0)?;
    let addresses: Option<Vec<(CUgraphNode, Vec<CUdeviceptr>)>> = top
        .into_iter()
        .map(|(n, t)| match t {
            Touches::Addresses(a) => Some((n, a)),
            Touches::Anything(_) => None,
        })
        .collect();
    if let Some(top) = addresses.filter(|_| out.refused.is_none()) {
        match Splittable::new(graph, top) {
            Ok(s) => out.split = Some(s),
            Err(e) => crate::log!(Debug, "a graph gmux cannot copy ({e}) runs whole, never in parts"),
        }
    }
    Ok(out)
}

/// Child graphs nest at most this deep (a cycle would be a driver bug).
const MAX_DEPTH: usize = 64;

/// Records what each node of `graph` touches in `out`, and returns the graph's own nodes,
/// each with what it touches (a child graph node: all its child's nodes do).
fn walk(graph: CUgraph, layouts: &mut Layouts, out: &mut ExecGraph, depth: usize) -> Result<Vec<(CUgraphNode, Touches)>, CudaError> {
    let mut n = 0usize;
    check(crate::real!(cuGraphGetNodes(graph, std::ptr::null_mut(), &mut n)), "cuGraphGetNodes")?;
    let mut nodes = vec![std::ptr::null_mut(); n];
    check(crate::real!(cuGraphGetNodes(graph, nodes.as_mut_ptr(), &mut n)), "cuGraphGetNodes")?;
    nodes.truncate(n);
    let mut top = Vec::with_capacity(n);
    for node in nodes {
        let mut ty = 0u32;
        check(crate::real!(cuGraphNodeGetType(node, &mut ty)), "cuGraphNodeGetType")?;
        let t = match ty {
            CU_GRAPH_NODE_TYPE_KERNEL => kernel_node(node, layouts)?,
            CU_GRAPH_NODE_TYPE_MEMSET => memset_node(node)?,
            CU_GRAPH_NODE_TYPE_MEMCPY => memcpy_node(node)?,
            CU_GRAPH_NODE_TYPE_GRAPH if depth < MAX_DEPTH => {
                let mut child = std::ptr::null_mut();
                check(crate::real!(cuGraphChildGraphNodeGetGraph(node, &mut child)), "cuGraphChildGraphNodeGetGraph")?;
                let inner = walk(child, layouts, out, depth + 1)?;
                top.push((node, union(inner.into_iter().map(|(_, t)| t))));
                continue;
            }
            CU_GRAPH_NODE_TYPE_EMPTY | CU_GRAPH_NODE_TYPE_HOST | CU_GRAPH_NODE_TYPE_WAIT_EVENT | CU_GRAPH_NODE_TYPE_EVENT_RECORD => {
                Touches::Addresses(Vec::new())
            }
            CU_GRAPH_NODE_TYPE_MEM_ALLOC => {
                out.refused = Some("its memory allocation node (cudaMallocAsync captured into a graph) allocates device memory outside gmux, which the limit cannot count; allocate before capture instead".into());
                Touches::Addresses(Vec::new())
            }
            other => Touches::Anything(format!("a graph node of type {} ({other})", node_type_name(other))),
        };
        out.set(node, t.clone());
        top.push((node, t));
    }
    Ok(top)
}

/// What several nodes touch together.
fn union(all: impl Iterator<Item = Touches>) -> Touches {
    let mut v = Vec::new();
    for t in all {
        match t {
            Touches::Addresses(a) => v.extend(a),
            anything => return anything,
        }
    }
    Touches::Addresses(v)
}

/// What a kernel node with these parameters touches.
///
/// # Safety
/// `p`'s parameter pointers are valid as `cuGraphKernelNodeGetParams` returns them (or as
/// an application passes them to a set-params call).
pub unsafe fn kernel_params(p: &CUDA_KERNEL_NODE_PARAMS_v2, layouts: &mut Layouts) -> Touches {
    let f = if p.kern.is_null() { p.func } else { p.kern };
    let kernel = layouts.of(f);
    if kernel.opaque {
        return Touches::Anything(format!("kernel {}, which finds its memory outside its parameters", kernel_name(f)));
    }
    let mut found = Vec::new();
    // SAFETY: per this function's contract.
    let ok = unsafe { scan(kernel.layout.as_ref(), p.kernel_params, p.extra, |w| found.push(w)) };
    if ok {
        Touches::Addresses(found)
    } else {
        Touches::Anything(format!("kernel {} without a parameter layout", kernel_name(f)))
    }
}

fn kernel_node(node: CUgraphNode, layouts: &mut Layouts) -> Result<Touches, CudaError> {
    // SAFETY: a plain C struct, all zeros is a valid value.
    let mut p: CUDA_KERNEL_NODE_PARAMS_v2 = unsafe { std::mem::zeroed() };
    check(crate::real!(cuGraphKernelNodeGetParams_v2(node, &mut p)), "cuGraphKernelNodeGetParams")?;
    // SAFETY: the driver's own copy of the node's parameters, valid while the node lives.
    Ok(unsafe { kernel_params(&p, layouts) })
}

/// What a memset node with these parameters touches.
pub fn memset_params(p: &CUDA_MEMSET_NODE_PARAMS) -> Touches {
    Touches::Addresses(vec![p.dst])
}

fn memset_node(node: CUgraphNode) -> Result<Touches, CudaError> {
    // SAFETY: a plain C struct, all zeros is a valid value.
    let mut p: CUDA_MEMSET_NODE_PARAMS = unsafe { std::mem::zeroed() };
    check(crate::real!(cuGraphMemsetNodeGetParams(node, &mut p)), "cuGraphMemsetNodeGetParams")?;
    Ok(memset_params(&p))
}

/// What a memcpy node (or `cuMemcpy3D`) with these parameters touches.
pub fn memcpy_params(p: &CUDA_MEMCPY3D) -> Touches {
    Touches::Addresses(memcpy3d_devices(p))
}

/// The device addresses of a 3D copy's two sides (arrays and host memory have none).
pub fn memcpy3d_devices(p: &CUDA_MEMCPY3D) -> Vec<CUdeviceptr> {
    let dev = |ty: u32, ptr: CUdeviceptr| matches!(ty, CU_MEMORYTYPE_DEVICE | CU_MEMORYTYPE_UNIFIED).then_some(ptr);
    dev(p.src_memory_type, p.src_device).into_iter().chain(dev(p.dst_memory_type, p.dst_device)).collect()
}

/// The device byte ranges a memcpy node needs mapped: the bytes it copies
/// ([`memcpy3d_ranges`]) and each device side's address before its offsets, which the
/// driver checks too.
pub fn memcpy_node_ranges(p: &CUDA_MEMCPY3D) -> Vec<(CUdeviceptr, u64)> {
    let mut r = memcpy3d_ranges(p);
    r.extend(memcpy3d_devices(p).into_iter().map(|d| (d, 1)));
    r
}

/// The device byte ranges a 3D copy reads and writes: each device side from the first
/// byte of its box to the last.
pub fn memcpy3d_ranges(p: &CUDA_MEMCPY3D) -> Vec<(CUdeviceptr, u64)> {
    let (w, rows, slices) = (p.width_in_bytes as u64, (p.height as u64).max(1), (p.depth as u64).max(1));
    let side = |ty: u32, dev: CUdeviceptr, x: usize, y: usize, z: usize, pitch: usize, height: usize| {
        if !matches!(ty, CU_MEMORYTYPE_DEVICE | CU_MEMORYTYPE_UNIFIED) {
            return None;
        }
        let pitch = (pitch as u64).max(w);
        let height = (height as u64).max(rows);
        let first = (y as u64).saturating_add((z as u64).saturating_mul(height)).saturating_mul(pitch).saturating_add(x as u64);
        let len = (slices - 1).saturating_mul(height).saturating_add(rows - 1).saturating_mul(pitch).saturating_add(w);
        Some((dev.saturating_add(first), len))
    };
    let src = side(p.src_memory_type, p.src_device, p.src_x_in_bytes, p.src_y, p.src_z, p.src_pitch, p.src_height);
    let dst = side(p.dst_memory_type, p.dst_device, p.dst_x_in_bytes, p.dst_y, p.dst_z, p.dst_pitch, p.dst_height);
    src.into_iter().chain(dst).collect()
}

/// The device byte range a memset node sets.
pub fn memset_range(p: &CUDA_MEMSET_NODE_PARAMS) -> (CUdeviceptr, u64) {
    let row = (p.width as u64).saturating_mul(p.element_size as u64);
    let len = ((p.height as u64).max(1) - 1).saturating_mul((p.pitch as u64).max(row)).saturating_add(row);
    (p.dst, len)
}

fn memcpy_node(node: CUgraphNode) -> Result<Touches, CudaError> {
    // SAFETY: a plain C struct, all zeros is a valid value.
    let mut p: CUDA_MEMCPY3D = unsafe { std::mem::zeroed() };
    check(crate::real!(cuGraphMemcpyNodeGetParams(node, &mut p)), "cuGraphMemcpyNodeGetParams")?;
    Ok(memcpy_params(&p))
}

fn node_type_name(t: u32) -> &'static str {
    match t {
        8 => "external semaphore signal",
        9 => "external semaphore wait",
        CU_GRAPH_NODE_TYPE_MEM_ALLOC => "memory allocation",
        CU_GRAPH_NODE_TYPE_MEM_FREE => "memory free",
        12 => "batched memory operation",
        13 => "conditional",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_and_memset_ranges_span_their_boxes() {
        // A 100-byte x 3-row x 2-slice box at (8, 1, 1) of a side with 256-byte rows and
        // 4-row slices; the host side has no device range.
        let p = CUDA_MEMCPY3D {
            src_memory_type: CU_MEMORYTYPE_HOST,
            dst_memory_type: CU_MEMORYTYPE_DEVICE,
            dst_device: 0x10_0000,
            dst_x_in_bytes: 8,
            dst_y: 1,
            dst_z: 1,
            dst_pitch: 256,
            dst_height: 4,
            width_in_bytes: 100,
            height: 3,
            depth: 2,
            ..Default::default()
        };
        let first = 0x10_0000 + (1 + 4) * 256 + 8;
        // Last byte: slice 2, row 1 + 2 of it, byte 8 + 99.
        let last = 0x10_0000 + (2 * 4 + 3) * 256 + 8 + 99;
        assert_eq!(memcpy3d_ranges(&p), vec![(first, last - first + 1)]);
        let linear = CUDA_MEMCPY3D { src_memory_type: CU_MEMORYTYPE_DEVICE, src_device: 0x20_0000, width_in_bytes: 4096, height: 1, depth: 1, ..p };
        assert_eq!(memcpy3d_ranges(&linear)[0], (0x20_0000, 4096), "pitch 0 and one row: the width");
        let m = CUDA_MEMSET_NODE_PARAMS { dst: 0x30_0000, pitch: 1024, value: 0, element_size: 4, width: 10, height: 3 };
        assert_eq!(memset_range(&m), (0x30_0000, 2 * 1024 + 40));
    }
}
