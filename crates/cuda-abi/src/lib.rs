//! The slice of the CUDA driver ABI (`cuda.h`, CUDA 12/13) that gmux touches: handle
//! types, result codes, flags and the structs passed by pointer. Types only; no symbols,
//! so linking it never shadows the driver.
#![allow(non_camel_case_types)]

use std::ffi::c_void;

/// `CUresult`.
pub type CUresult = i32;
/// `CUdeviceptr`: a device virtual address.
pub type CUdeviceptr = u64;
/// `CUdevice`: a device ordinal.
pub type CUdevice = i32;
/// `CUcontext`.
pub type CUcontext = *mut c_void;
/// `CUstream`; see [`CU_STREAM_LEGACY`] and [`CU_STREAM_PER_THREAD`] for the special values.
pub type CUstream = *mut c_void;
/// `CUevent`.
pub type CUevent = *mut c_void;
/// `CUfunction`.
pub type CUfunction = *mut c_void;
/// `CUkernel` (a context-independent kernel from `cuLibraryGetKernel`; the runtime passes
/// it to `cuLaunchKernel` cast to `CUfunction`).
pub type CUkernel = *mut c_void;
/// `CUmodule`.
pub type CUmodule = *mut c_void;
/// `CUlibrary`.
pub type CUlibrary = *mut c_void;
/// `CUgraph`.
pub type CUgraph = *mut c_void;
/// `CUgraphExec`.
pub type CUgraphExec = *mut c_void;
/// `CUmemGenericAllocationHandle`: a physical allocation from `cuMemCreate`.
pub type CUmemGenericAllocationHandle = u64;
/// `CUhostFn`.
pub type CUhostFn = Option<unsafe extern "C" fn(user_data: *mut c_void)>;
/// `CUstreamCallback` of `cuStreamAddCallback`.
pub type CUstreamCallback = Option<unsafe extern "C" fn(stream: CUstream, status: CUresult, user_data: *mut c_void)>;

pub const CUDA_SUCCESS: CUresult = 0;
/// The driver is shutting down (the process is exiting).
pub const CUDA_ERROR_DEINITIALIZED: CUresult = 4;
pub const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
pub const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
pub const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
pub const CUDA_ERROR_NO_DEVICE: CUresult = 100;
pub const CUDA_ERROR_INVALID_DEVICE: CUresult = 101;
pub const CUDA_ERROR_INVALID_CONTEXT: CUresult = 201;
pub const CUDA_ERROR_NOT_MAPPED: CUresult = 211;
pub const CUDA_ERROR_INVALID_HANDLE: CUresult = 400;
pub const CUDA_ERROR_NOT_FOUND: CUresult = 500;
pub const CUDA_ERROR_NOT_READY: CUresult = 600;
pub const CUDA_ERROR_ILLEGAL_ADDRESS: CUresult = 700;
pub const CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: CUresult = 712;
pub const CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: CUresult = 713;
pub const CUDA_ERROR_LAUNCH_FAILED: CUresult = 719;
pub const CUDA_ERROR_NOT_PERMITTED: CUresult = 800;
pub const CUDA_ERROR_NOT_SUPPORTED: CUresult = 801;
pub const CUDA_ERROR_UNKNOWN: CUresult = 999;

/// The legacy default stream, usable from any thread.
pub const CU_STREAM_LEGACY: CUstream = 0x1 as CUstream;
/// The calling thread's per-thread default stream.
pub const CU_STREAM_PER_THREAD: CUstream = 0x2 as CUstream;
/// `cuStreamCreate` flag: no implicit synchronization with the legacy default stream.
pub const CU_STREAM_NON_BLOCKING: u32 = 0x1;
/// `cuEventCreate` flag: no timing data (cheaper).
pub const CU_EVENT_DISABLE_TIMING: u32 = 0x2;

/// `cuGetProcAddress` flags.
pub const CU_GET_PROC_ADDRESS_DEFAULT: u64 = 0;
pub const CU_GET_PROC_ADDRESS_LEGACY_STREAM: u64 = 1;
pub const CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM: u64 = 2;
/// `CUdriverProcAddressQueryResult`.
pub const CU_GET_PROC_ADDRESS_SUCCESS: i32 = 0;
pub const CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND: i32 = 1;
pub const CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT: i32 = 2;

/// `extra` array markers of `cuLaunchKernel` (passed as pointer values).
pub const CU_LAUNCH_PARAM_END: usize = 0x00;
pub const CU_LAUNCH_PARAM_BUFFER_POINTER: usize = 0x01;
pub const CU_LAUNCH_PARAM_BUFFER_SIZE: usize = 0x02;

/// `CUmemorytype`.
pub const CU_MEMORYTYPE_HOST: u32 = 1;
pub const CU_MEMORYTYPE_DEVICE: u32 = 2;
pub const CU_MEMORYTYPE_UNIFIED: u32 = 4;

/// `CUpointer_attribute`.
pub const CU_POINTER_ATTRIBUTE_CONTEXT: u32 = 1;
pub const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: u32 = 2;
pub const CU_POINTER_ATTRIBUTE_DEVICE_POINTER: u32 = 3;
pub const CU_POINTER_ATTRIBUTE_HOST_POINTER: u32 = 4;
pub const CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: u32 = 6;
pub const CU_POINTER_ATTRIBUTE_BUFFER_ID: u32 = 7;
pub const CU_POINTER_ATTRIBUTE_IS_MANAGED: u32 = 8;
pub const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: u32 = 9;
pub const CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: u32 = 11;
pub const CU_POINTER_ATTRIBUTE_RANGE_SIZE: u32 = 12;
pub const CU_POINTER_ATTRIBUTE_MAPPED: u32 = 13;

/// `CUmemAllocationType`: pinned device memory.
pub const CU_MEM_ALLOCATION_TYPE_PINNED: u32 = 1;
/// `CUmemLocationType`: a device.
pub const CU_MEM_LOCATION_TYPE_DEVICE: u32 = 1;
/// `CUmemAccess_flags`: no access.
pub const CU_MEM_ACCESS_FLAGS_PROT_NONE: u32 = 0;
/// `CUmemAccess_flags`: read only.
pub const CU_MEM_ACCESS_FLAGS_PROT_READ: u32 = 1;
/// `CUmemAccess_flags`: read and write.
pub const CU_MEM_ACCESS_FLAGS_PROT_READWRITE: u32 = 3;
/// `CUmemAllocationGranularity_flags`.
pub const CU_MEM_ALLOC_GRANULARITY_MINIMUM: u32 = 0;
pub const CU_MEM_ALLOC_GRANULARITY_RECOMMENDED: u32 = 1;
/// `cuMemHostAlloc` flag: portable across contexts.
pub const CU_MEMHOSTALLOC_PORTABLE: u32 = 0x1;
/// `cuMemHostRegister` flag: portable across contexts.
pub const CU_MEMHOSTREGISTER_PORTABLE: u32 = 0x1;

/// `CUmemLocation`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CUmemLocation {
    pub type_: u32,
    pub id: i32,
}

/// `allocFlags` of [`CUmemAllocationProp`].
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CUmemAllocationPropFlags {
    pub compression_type: u8,
    pub gpu_direct_rdma_capable: u8,
    pub usage: u16,
    pub reserved: [u8; 4],
}

/// `CUmemAllocationProp` (32 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUmemAllocationProp {
    pub type_: u32,
    pub requested_handle_types: u32,
    pub location: CUmemLocation,
    pub win32_handle_meta_data: *mut c_void,
    pub alloc_flags: CUmemAllocationPropFlags,
}

impl CUmemAllocationProp {
    /// Pinned device memory on device `ordinal`, no exportable handle.
    pub fn device(ordinal: i32) -> Self {
        CUmemAllocationProp {
            type_: CU_MEM_ALLOCATION_TYPE_PINNED,
            requested_handle_types: 0,
            location: CUmemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: ordinal },
            win32_handle_meta_data: std::ptr::null_mut(),
            alloc_flags: CUmemAllocationPropFlags::default(),
        }
    }
}

/// `CUmemAccessDesc` (12 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CUmemAccessDesc {
    pub location: CUmemLocation,
    pub flags: u32,
}

/// `CUlaunchAttribute`: an id and a 64-byte value union.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUlaunchAttribute {
    pub id: u32,
    pub pad: [u8; 4],
    pub value: [u8; 64],
}

/// `CUlaunchConfig` of `cuLaunchKernelEx`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUlaunchConfig {
    pub grid_dim_x: u32,
    pub grid_dim_y: u32,
    pub grid_dim_z: u32,
    pub block_dim_x: u32,
    pub block_dim_y: u32,
    pub block_dim_z: u32,
    pub shared_mem_bytes: u32,
    pub h_stream: CUstream,
    pub attrs: *mut CUlaunchAttribute,
    pub num_attrs: u32,
}

/// The stand-in's kernel ABI: a "kernel" is a host function called with the launch's
/// parameter pointers (`args[i]` points to parameter `i`, as in `cuLaunchKernel`'s
/// `kernelParams`). It reaches device memory only through `gmuxStandinRead` /
/// `gmuxStandinWrite`, which abort the process on any unmapped byte.
pub type StandinKernel = unsafe extern "C" fn(args: *const *mut c_void);

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::size_of;

    #[test]
    fn struct_sizes_match_cuda_h() {
        assert_eq!(size_of::<CUmemAllocationProp>(), 32);
        assert_eq!(size_of::<CUmemAccessDesc>(), 12);
        assert_eq!(size_of::<CUlaunchAttribute>(), 72);
        assert_eq!(size_of::<CUlaunchConfig>(), 56);
    }
}

// ---------------------------------------------------------------------------------------
// Stream capture and CUDA graphs (`cuda.h`, CUDA 12/13): handles, enums, error codes and
// the structs the graph and 3D-copy entry points take by pointer.
// ---------------------------------------------------------------------------------------

pub use graph_abi::*;

mod graph_abi {
    use std::ffi::c_void;

    use super::{CUcontext, CUdeviceptr, CUfunction, CUkernel, CUresult, CUstream};

    /// `CUgraphNode`.
    pub type CUgraphNode = *mut c_void;
    /// `CUarray`.
    pub type CUarray = *mut c_void;

    /// The operation is not permitted while the stream (or a stream it would synchronize
    /// with) is capturing; the capture is invalidated.
    pub const CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: CUresult = 900;
    /// The capture was invalidated by an earlier error.
    pub const CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: CUresult = 901;
    /// The operation would merge two independent captures.
    pub const CUDA_ERROR_STREAM_CAPTURE_MERGE: CUresult = 902;
    /// The capture was not begun in this stream.
    pub const CUDA_ERROR_STREAM_CAPTURE_UNMATCHED: CUresult = 903;
    /// A stream forked into the capture has not joined back into the origin stream.
    pub const CUDA_ERROR_STREAM_CAPTURE_UNJOINED: CUresult = 904;
    /// A dependency would cross the capture boundary.
    pub const CUDA_ERROR_STREAM_CAPTURE_ISOLATION: CUresult = 905;
    /// An implicit dependency of the legacy stream on a capturing blocking stream.
    pub const CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: CUresult = 906;
    /// The event was last recorded in a capturing stream.
    pub const CUDA_ERROR_CAPTURED_EVENT: CUresult = 907;
    /// A non-relaxed capture was ended from another thread than the one that began it.
    pub const CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD: CUresult = 908;
    /// `cuGraphExecUpdate` could not apply the graph to the executable graph.
    pub const CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE: CUresult = 910;
    /// The handle is not in a state the call needs (e.g. ending a capture never begun).
    pub const CUDA_ERROR_ILLEGAL_STATE: CUresult = 401;

    /// `CUstreamCaptureMode`.
    pub const CU_STREAM_CAPTURE_MODE_GLOBAL: u32 = 0;
    pub const CU_STREAM_CAPTURE_MODE_THREAD_LOCAL: u32 = 1;
    pub const CU_STREAM_CAPTURE_MODE_RELAXED: u32 = 2;
    /// `CUstreamCaptureStatus`.
    pub const CU_STREAM_CAPTURE_STATUS_NONE: u32 = 0;
    pub const CU_STREAM_CAPTURE_STATUS_ACTIVE: u32 = 1;
    pub const CU_STREAM_CAPTURE_STATUS_INVALIDATED: u32 = 2;

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

    /// `cuEventRecordWithFlags` flag: during capture, add an event record node.
    pub const CU_EVENT_RECORD_EXTERNAL: u32 = 0x1;
    /// `cuStreamWaitEvent` flag: during capture, add an event wait node.
    pub const CU_EVENT_WAIT_EXTERNAL: u32 = 0x1;
    /// `CUmemorytype`: a CUDA array.
    pub const CU_MEMORYTYPE_ARRAY: u32 = 3;

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

    /// `CUDA_MEMCPY3D` (`_v2`, 200 bytes): a box of `width_in_bytes` x `height` x `depth`
    /// bytes; each side gives its memory type, base, offsets and row pitch / slice height.
    #[repr(C)]
    #[derive(Debug, Clone, Copy)]
    pub struct CUDA_MEMCPY3D {
        pub src_x_in_bytes: usize,
        pub src_y: usize,
        pub src_z: usize,
        pub src_lod: usize,
        pub src_memory_type: u32,
        pub src_host: *const c_void,
        pub src_device: CUdeviceptr,
        pub src_array: CUarray,
        pub reserved0: *mut c_void,
        pub src_pitch: usize,
        pub src_height: usize,
        pub dst_x_in_bytes: usize,
        pub dst_y: usize,
        pub dst_z: usize,
        pub dst_lod: usize,
        pub dst_memory_type: u32,
        pub dst_host: *mut c_void,
        pub dst_device: CUdeviceptr,
        pub dst_array: CUarray,
        pub reserved1: *mut c_void,
        pub dst_pitch: usize,
        pub dst_height: usize,
        pub width_in_bytes: usize,
        pub height: usize,
        pub depth: usize,
    }

    impl Default for CUDA_MEMCPY3D {
        fn default() -> Self {
            // SAFETY: every field is an integer or a raw pointer, for which zero is valid.
            unsafe { std::mem::zeroed() }
        }
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
            assert_eq!(size_of::<CUDA_MEMCPY3D>(), 200);
            assert_eq!(offset_of!(CUDA_MEMCPY3D, src_host), 40);
            assert_eq!(offset_of!(CUDA_MEMCPY3D, dst_x_in_bytes), 88);
            assert_eq!(offset_of!(CUDA_MEMCPY3D, width_in_bytes), 176);
            assert_eq!(size_of::<CUDA_GRAPH_INSTANTIATE_PARAMS>(), 32);
            assert_eq!(size_of::<CUgraphExecUpdateResultInfo>(), 24);
            assert_eq!(size_of::<CUgraphEdgeData>(), 8);
        }
    }
}
