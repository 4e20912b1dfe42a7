//! What a graph node does, and how a node of each plain kind executes.

use std::ffi::c_void;
use std::sync::Arc;

use cuda_abi::*;

use super::GraphId;
use crate::copy3d::Copy3d;
use crate::kernel::{self, HandleKind, KernelInfo};
use crate::memory::{fault, mem};

/// A kernel call with its parameter values, copied when the node was made.
#[derive(Clone)]
pub struct KernelCall {
    pub info: Arc<KernelInfo>,
    /// The `CUfunction` or `CUkernel` the call names, as given.
    pub handle: usize,
    pub kind: HandleKind,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared: u32,
    /// The packed parameter buffer ([`kernel::pack`]).
    pub args: Vec<u64>,
}

impl KernelCall {
    /// Validates node parameters and copies the argument values they point to.
    ///
    /// # Safety
    /// `kernel_params` / `extra` must be valid as for `cuLaunchKernel`.
    pub unsafe fn from_params(p: &CUDA_KERNEL_NODE_PARAMS_v2) -> Result<KernelCall, CUresult> {
        let handle = if p.kern.is_null() { p.func } else { p.kern };
        let (kind, info) = kernel::lookup(handle).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let grid = [p.grid_dim_x, p.grid_dim_y, p.grid_dim_z];
        let block = [p.block_dim_x, p.block_dim_y, p.block_dim_z];
        if grid.contains(&0) || block.contains(&0) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: the caller vouches for the parameter pointers.
        let args = unsafe { kernel::pack(&info, p.kernel_params, p.extra) }?;
        Ok(KernelCall { info, handle: handle as usize, kind, grid, block, shared: p.shared_mem_bytes, args })
    }
}

/// A host function call.
#[derive(Clone, Copy)]
pub struct HostCall {
    pub f: unsafe extern "C" fn(*mut c_void),
    pub data: usize,
}

/// What a node does.
#[derive(Clone)]
pub enum Op {
    Kernel(KernelCall),
    Memcpy(Copy3d),
    /// Checked by [`check_memset`].
    Memset(CUDA_MEMSET_NODE_PARAMS),
    Host(HostCall),
    /// The embedded graph, owned by the node.
    Child(GraphId),
    Empty,
    WaitEvent(u64),
    EventRecord(u64),
}

impl Op {
    /// The `CUgraphNodeType`.
    pub fn ty(&self) -> u32 {
        match self {
            Op::Kernel(_) => CU_GRAPH_NODE_TYPE_KERNEL,
            Op::Memcpy(_) => CU_GRAPH_NODE_TYPE_MEMCPY,
            Op::Memset(_) => CU_GRAPH_NODE_TYPE_MEMSET,
            Op::Host(_) => CU_GRAPH_NODE_TYPE_HOST,
            Op::Child(_) => CU_GRAPH_NODE_TYPE_GRAPH,
            Op::Empty => CU_GRAPH_NODE_TYPE_EMPTY,
            Op::WaitEvent(_) => CU_GRAPH_NODE_TYPE_WAIT_EVENT,
            Op::EventRecord(_) => CU_GRAPH_NODE_TYPE_EVENT_RECORD,
        }
    }

    /// Whether `cuGraphExec*NodeSetParams` may replace this op, or put it in place: the
    /// driver takes only one-dimensional memsets and copies there (one row, one slice, at
    /// least one element), for the instantiated node and the new parameters alike. Other
    /// kinds have no such rule.
    pub fn exec_settable(&self) -> bool {
        match self {
            Op::Memset(m) => m.height == 1 && m.width > 0,
            Op::Memcpy(c) => c.height == 1 && c.depth == 1 && c.width > 0,
            _ => true,
        }
    }

    /// Executes a kernel, copy, memset or host node on the calling stream thread; other
    /// kinds do nothing here (see [`super::Segment`]).
    ///
    /// # Safety
    /// Host memory a copy names and a host function's data must be valid, as the graph's
    /// builder promised.
    pub unsafe fn run(&self) {
        match self {
            Op::Kernel(k) => kernel::run(&k.info, k.args.clone()),
            // SAFETY: the caller guarantees the host memory the copy names.
            Op::Memcpy(c) => unsafe { c.run("cuGraphLaunch (memcpy node)") },
            Op::Memset(m) => {
                let elem = &m.value.to_le_bytes()[..m.element_size as usize];
                for row in 0..m.height as u64 {
                    if let Err(f) = mem().fill(m.dst + row * m.pitch as u64, elem, m.width) {
                        fault("cuGraphLaunch (memset node)", f)
                    }
                }
            }
            // SAFETY: the caller guarantees the function accepts its data.
            Op::Host(h) => unsafe { (h.f)(h.data as *mut c_void) },
            Op::Child(_) | Op::Empty | Op::WaitEvent(_) | Op::EventRecord(_) => {}
        }
    }
}

/// Checks memset parameters: 1-, 2- or 4-byte elements, aligned, rows within the pitch.
pub fn check_memset(p: &CUDA_MEMSET_NODE_PARAMS) -> Result<(), CUresult> {
    let row = p.width.checked_mul(p.element_size as usize);
    let ok =
        [1, 2, 4].contains(&p.element_size) && p.dst != 0 && p.dst.is_multiple_of(p.element_size as u64) && row.is_some_and(|r| p.height <= 1 || r <= p.pitch);
    ok.then_some(()).ok_or(CUDA_ERROR_INVALID_VALUE)
}
