//! The real CUDA driver: entry points resolved once from `libcuda.so.1` (or
//! `GMUX_CUDA_LIB`), called for gmux's own work and to forward the application's calls.

use crate::cuda::*;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::OnceLock;

extern "C" {
    fn dlvsym(handle: *mut c_void, symbol: *const c_char, version: *const c_char) -> *mut c_void;
}

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// glibc's own `dlsym`, bypassing the shim's override.
pub fn real_dlsym() -> DlsymFn {
    static REAL: OnceLock<usize> = OnceLock::new();
    let f = *REAL.get_or_init(|| {
        for v in [c"GLIBC_2.34", c"GLIBC_2.2.5"] {
            // SAFETY: dlvsym with constant, NUL-terminated names.
            let p = unsafe { dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), v.as_ptr()) };
            if !p.is_null() {
                return p as usize;
            }
        }
        crate::log::fatal("cannot find glibc's dlsym (dlvsym RTLD_NEXT failed); gmux needs glibc 2.2.5 or later");
    });
    // SAFETY: the address is glibc's dlsym, whose signature this is.
    unsafe { std::mem::transmute::<usize, DlsymFn>(f) }
}

macro_rules! driver_table {
    ($($name:ident ( $($arg:ty),* );)*) => {
        /// Real driver entry points; `None` where this driver lacks one.
        #[allow(non_snake_case)]
        pub struct Driver {
            /// The `dlopen` handle of the real library.
            pub handle: *mut c_void,
            $(pub $name: Option<unsafe extern "C" fn($($arg),*) -> CUresult>,)*
        }

        impl Driver {
            fn resolve(handle: *mut c_void) -> Driver {
                Driver { handle, $($name: sym(handle, stringify!($name)),)* }
            }
        }
    };
}

driver_table! {
    cuCtxGetCurrent(*mut CUcontext);
    cuCtxSetCurrent(CUcontext);
    cuCtxGetDevice(*mut CUdevice);
    cuCtxPushCurrent_v2(CUcontext);
    cuCtxPopCurrent_v2(*mut CUcontext);
    cuDeviceCanAccessPeer(*mut c_int, CUdevice, CUdevice);
    cuMemcpyPeerAsync(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, usize, CUstream);
    cuStreamSynchronize_ptsz(CUstream);
    cuMemGetInfo_v2(*mut usize, *mut usize);
    cuMemAddressReserve(*mut CUdeviceptr, usize, usize, CUdeviceptr, u64);
    cuMemAddressFree(CUdeviceptr, usize);
    cuMemCreate(*mut CUmemGenericAllocationHandle, usize, *const CUmemAllocationProp, u64);
    cuMemRelease(CUmemGenericAllocationHandle);
    cuMemMap(CUdeviceptr, usize, usize, CUmemGenericAllocationHandle, u64);
    cuMemUnmap(CUdeviceptr, usize);
    cuMemSetAccess(CUdeviceptr, usize, *const CUmemAccessDesc, usize);
    cuMemHostAlloc(*mut *mut c_void, usize, c_uint);
    cuMemHostRegister_v2(*mut c_void, usize, c_uint);
    cuMemFreeHost(*mut c_void);
    cuStreamCreate(*mut CUstream, c_uint);
    cuStreamSynchronize(CUstream);
    cuCtxSynchronize();
    cuStreamWaitEvent(CUstream, CUevent, c_uint);
    cuStreamWaitEvent_ptsz(CUstream, CUevent, c_uint);
    cuEventCreate(*mut CUevent, c_uint);
    cuEventRecord(CUevent, CUstream);
    cuEventRecord_ptsz(CUevent, CUstream);
    cuEventQuery(CUevent);
    cuEventSynchronize(CUevent);
    cuEventDestroy_v2(CUevent);
    cuEventElapsedTime(*mut f32, CUevent, CUevent);
    cuEventElapsedTime_v2(*mut f32, CUevent, CUevent);
    cuMemcpyHtoDAsync_v2(CUdeviceptr, *const c_void, usize, CUstream);
    cuMemcpy3DAsync_v2(*const CUDA_MEMCPY3D, CUstream);
    cuMemcpyDtoHAsync_v2(*mut c_void, CUdeviceptr, usize, CUstream);
    cuMemcpyDtoDAsync_v2(CUdeviceptr, CUdeviceptr, usize, CUstream);
    cuMemcpyAsync(CUdeviceptr, CUdeviceptr, usize, CUstream);
    cuMemsetD8Async(CUdeviceptr, u8, usize, CUstream);
    cuMemsetD16Async(CUdeviceptr, u16, usize, CUstream);
    cuMemsetD32Async(CUdeviceptr, c_uint, usize, CUstream);
    cuFuncGetParamInfo(CUfunction, usize, *mut usize, *mut usize);
    cuKernelGetParamInfo(CUkernel, usize, *mut usize, *mut usize);
    cuFuncGetName(*mut *const c_char, CUfunction);
    cuKernelGetName(*mut *const c_char, CUkernel);
    cuStreamIsCapturing(CUstream, *mut u32);
    cuStreamIsCapturing_ptsz(CUstream, *mut u32);
    cuThreadExchangeStreamCaptureMode(*mut u32);
    cuGraphGetNodes(CUgraph, *mut CUgraphNode, *mut usize);
    cuGraphNodeGetType(CUgraphNode, *mut u32);
    cuGraphKernelNodeGetParams_v2(CUgraphNode, *mut CUDA_KERNEL_NODE_PARAMS_v2);
    cuGraphMemsetNodeGetParams(CUgraphNode, *mut CUDA_MEMSET_NODE_PARAMS);
    cuGraphMemcpyNodeGetParams(CUgraphNode, *mut CUDA_MEMCPY3D);
    cuGraphChildGraphNodeGetGraph(CUgraphNode, *mut CUgraph);
    cuGraphClone(*mut CUgraph, CUgraph);
    cuGraphDestroy(CUgraph);
    cuGraphGetEdges_v2(CUgraph, *mut CUgraphNode, *mut CUgraphNode, *mut CUgraphEdgeData, *mut usize);
    cuGraphNodeFindInClone(*mut CUgraphNode, CUgraphNode, CUgraph);
    cuGraphDestroyNode(CUgraphNode);
    cuGraphInstantiateWithFlags(*mut CUgraphExec, CUgraph, u64);
    cuGraphExecDestroy(CUgraphExec);
    cuGraphLaunch(CUgraphExec, CUstream);
    cuGraphKernelNodeSetParams_v2(CUgraphNode, *const CUDA_KERNEL_NODE_PARAMS_v2);
    cuGraphMemsetNodeSetParams(CUgraphNode, *const CUDA_MEMSET_NODE_PARAMS);
    cuGraphMemcpyNodeSetParams(CUgraphNode, *const CUDA_MEMCPY3D);
}

// SAFETY: the handle and function pointers are process-global and immutable.
unsafe impl Send for Driver {}
// SAFETY: as above.
unsafe impl Sync for Driver {}

fn sym<F>(handle: *mut c_void, name: &str) -> Option<F> {
    let c = CString::new(name).ok()?;
    // SAFETY: real dlsym on a live handle with a NUL-terminated name.
    let p = unsafe { real_dlsym()(handle, c.as_ptr()) };
    // SAFETY: F is an `unsafe extern "C" fn` pointer type of the symbol's C signature.
    (!p.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

/// The real driver, loaded on first use. Dies with a one-line message if it is missing.
pub fn driver() -> &'static Driver {
    static DRIVER: OnceLock<Driver> = OnceLock::new();
    DRIVER.get_or_init(|| {
        let path = cuda_library();
        let c = CString::new(path.clone()).unwrap_or_else(|_| crate::log::fatal("GMUX_CUDA_LIB contains a NUL byte"));
        // SAFETY: dlopen with a NUL-terminated path.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if h.is_null() {
            // SAFETY: dlerror returns a thread-local C string or NULL.
            let why = unsafe { CStr::from_ptr(libc::dlerror()) }.to_string_lossy().into_owned();
            crate::log::fatal(&format!("cannot load the CUDA driver {path}: {why}; install the NVIDIA driver or set GMUX_CUDA_LIB to libcuda.so.1's path"));
        }
        Driver::resolve(h)
    })
}

/// The real driver's address of exported symbol `name`, or null.
pub fn real_symbol(name: &CStr) -> *mut c_void {
    // SAFETY: real dlsym on the driver's live handle.
    unsafe { real_dlsym()(driver().handle, name.as_ptr()) }
}

/// The driver library to load: `GMUX_CUDA_LIB`, else `libcuda.so.1`.
pub fn cuda_library() -> String {
    std::env::var("GMUX_CUDA_LIB").ok().filter(|v| !v.is_empty()).unwrap_or_else(|| "libcuda.so.1".to_string())
}

/// Calls a driver entry point; a missing one answers `CUDA_ERROR_NOT_SUPPORTED`.
///
/// The arguments are evaluated inside the call's unsafe block: they are handles and
/// pointers that gmux (or the application, for a forwarded call) passes through, and every
/// use names a driver entry point whose C contract they follow.
#[macro_export]
macro_rules! real {
    ($name:ident ( $($arg:expr),* )) => {
        match $crate::driver::driver().$name {
            // SAFETY: forwarding to the real driver with the caller's arguments, which
            // follow the entry point's C contract.
            #[allow(clippy::macro_metavars_in_unsafe)]
            Some(f) => unsafe { f($($arg),*) },
            None => $crate::cuda::CUDA_ERROR_NOT_SUPPORTED,
        }
    };
}

/// A failed driver call: its name and result code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaError {
    /// The failing entry point.
    pub call: &'static str,
    /// Its result.
    pub code: CUresult,
}

impl std::fmt::Display for CudaError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{} failed with CUDA error {}", self.call, self.code)
    }
}

/// A CUDA event of gmux's own, destroyed when dropped.
#[derive(Debug)]
pub struct OwnedEvent(CUevent);

impl OwnedEvent {
    /// Takes `ev`, which gmux created and nothing else destroys.
    pub fn new(ev: CUevent) -> Self {
        OwnedEvent(ev)
    }

    /// Waits on the host until the work before it is done.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        check(real!(cuEventSynchronize(self.0)), "cuEventSynchronize")
    }
}

impl Drop for OwnedEvent {
    fn drop(&mut self) {
        real!(cuEventDestroy_v2(self.0));
    }
}

/// Waits on the host until the work before `ev` is done.
pub fn wait_event(ev: CUevent) -> Result<(), CudaError> {
    check(real!(cuEventSynchronize(ev)), "cuEventSynchronize")
}

/// `Ok` on `CUDA_SUCCESS`, else the call's name and code.
pub fn check(code: CUresult, call: &'static str) -> Result<(), CudaError> {
    if code == CUDA_SUCCESS {
        Ok(())
    } else {
        Err(CudaError { call, code })
    }
}
