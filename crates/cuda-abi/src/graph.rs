//! CUDA graphs: node types, instantiation and exec-update flags and results, and the
//! structs the graph entry points take by pointer.

use std::ffi::c_void;

use crate::{CUcontext, CUdeviceptr, CUfunction, CUgraphNode, CUkernel, CUstream};

/// `CUgraphNodeType`.
pub const CU_GRAPH_NODE_TYPE_KERNEL: u32 = 0;
pub const CU_GRAPH_NODE_TYPE_MEMCPY: u32 = 1;
pub const CU_GRAPH_NODE_TYPE_MEMSET: u32 = 2;
pub const CU_GRAPH_NODE_TYPE_HOST: u32 = 3;
pub const CU_GRAPH_NODE_TYPE_GRAPH: u32 = 4;
pub const CU_GRAPH_NODE_TYPE_EMPTY: u32 = 5;
pub const CU_GRAPH_NODE_TYPE_WAIT_EVENT: u32 = 6;
pub const CU_GRAPH_NODE_TYPE_EVENT_RECORD: u32 = 7;
pub const CU_GRAPH_NODE_TYPE_MEM_ALLOC: u32 = 10;
pub const CU_GRAPH_NODE_TYPE_MEM_FREE: u32 = 11;

/// `CUgraphInstantiate_flags`.
pub const CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH: u64 = 1;
pub const CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD: u64 = 2;
pub const CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH: u64 = 4;
pub const CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY: u64 = 8;
/// `CUgraphInstantiateResult`.
pub const CUDA_GRAPH_INSTANTIATE_SUCCESS: u32 = 0;
pub const CUDA_GRAPH_INSTANTIATE_ERROR: u32 = 1;

/// `CUgraphExecUpdateResult`.
pub const CU_GRAPH_EXEC_UPDATE_SUCCESS: u32 = 0;
pub const CU_GRAPH_EXEC_UPDATE_ERROR: u32 = 1;
pub const CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED: u32 = 2;
pub const CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED: u32 = 3;
pub const CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED: u32 = 4;
pub const CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED: u32 = 5;
pub const CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED: u32 = 6;

/// `CUDA_KERNEL_NODE_PARAMS_v2` (72 bytes). A non-null `kern` takes precedence over
/// `func`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUDA_KERNEL_NODE_PARAMS_v2 {
    pub func: CUfunction,
    pub grid_dim_x: u32,
    pub grid_dim_y: u32,
    pub grid_dim_z: u32,
    pub block_dim_x: u32,
    pub block_dim_y: u32,
    pub block_dim_z: u32,
    pub shared_mem_bytes: u32,
    pub kernel_params: *mut *mut c_void,
    pub extra: *mut *mut c_void,
    pub kern: CUkernel,
    pub ctx: CUcontext,
}

/// `CUDA_MEMSET_NODE_PARAMS` (40 bytes): `height` rows of `width` elements of
/// `element_size` (1, 2 or 4) bytes, rows `pitch` bytes apart.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CUDA_MEMSET_NODE_PARAMS {
    pub dst: CUdeviceptr,
    pub pitch: usize,
    pub value: u32,
    pub element_size: u32,
    pub width: usize,
    pub height: usize,
}

/// `CUDA_GRAPH_INSTANTIATE_PARAMS` (32 bytes) of `cuGraphInstantiateWithParams`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUDA_GRAPH_INSTANTIATE_PARAMS {
    pub flags: u64,
    pub h_upload_stream: CUstream,
    pub h_err_node_out: CUgraphNode,
    pub result_out: u32,
}

/// `CUgraphExecUpdateResultInfo` (24 bytes) of `cuGraphExecUpdate_v2`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUgraphExecUpdateResultInfo {
    pub result: u32,
    pub error_node: CUgraphNode,
    pub error_from_node: CUgraphNode,
}

/// `CUgraphEdgeData` (8 bytes); all zero is a plain dependency.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CUgraphEdgeData {
    pub from_port: u8,
    pub to_port: u8,
    pub type_: u8,
    pub reserved: [u8; 5],
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn graph_struct_layouts_match_cuda_h() {
        assert_eq!(size_of::<CUDA_KERNEL_NODE_PARAMS_v2>(), 72);
        assert_eq!(offset_of!(CUDA_KERNEL_NODE_PARAMS_v2, kernel_params), 40);
        assert_eq!(size_of::<CUDA_MEMSET_NODE_PARAMS>(), 40);
        assert_eq!(size_of::<CUDA_GRAPH_INSTANTIATE_PARAMS>(), 32);
        assert_eq!(size_of::<CUgraphExecUpdateResultInfo>(), 24);
        assert_eq!(size_of::<CUgraphEdgeData>(), 8);
    }
}
