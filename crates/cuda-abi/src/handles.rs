//! Handle types: the opaque pointers, addresses and ordinals the driver hands out, and
//! the host callbacks it calls.

use std::ffi::c_void;

use crate::CUresult;

/// `CUdeviceptr`: a device virtual address.
pub type CUdeviceptr = u64;
/// `CUdevice`: a device ordinal.
pub type CUdevice = i32;
/// `CUcontext`.
pub type CUcontext = *mut c_void;
/// `CUstream`; see [`CU_STREAM_LEGACY`](crate::CU_STREAM_LEGACY) and
/// [`CU_STREAM_PER_THREAD`](crate::CU_STREAM_PER_THREAD) for the special values.
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
/// `CUgraphNode`.
pub type CUgraphNode = *mut c_void;
/// `CUarray`.
pub type CUarray = *mut c_void;
/// `CUmemGenericAllocationHandle`: a physical allocation from `cuMemCreate`.
pub type CUmemGenericAllocationHandle = u64;
/// `CUhostFn`.
pub type CUhostFn = Option<unsafe extern "C" fn(user_data: *mut c_void)>;
/// `CUstreamCallback` of `cuStreamAddCallback`.
pub type CUstreamCallback = Option<unsafe extern "C" fn(stream: CUstream, status: CUresult, user_data: *mut c_void)>;
