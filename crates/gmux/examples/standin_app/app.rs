//! The program's binding to the driver: `libcuda.so.1` opened with `dlopen`, one typed
//! pointer per driver function ([`Cuda`]), the stand-in's own exports ([`Standin`]), and
//! [`App`], which holds them with the context and the kernels and wraps the calls every
//! scenario makes. Any failed step ends the run through [`fail`] or [`check`].

use std::ffi::{c_char, c_int, c_uint, CString};
use std::sync::OnceLock;

use super::*;

#[link(name = "dl")]
extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlerror() -> *const c_char;
}
const RTLD_NOW: c_int = 2;
const RTLD_GLOBAL: c_int = 0x100;
const RTLD_DEFAULT: *mut c_void = null_mut();

// Like a C program's error checks, any failed step ends the run with status 1, from
// wherever it is found (kernels, closures, the threads of `procaddr-ptsz`): the tests read
// that status and the message, and there is no error path back to `main` to return along.
#[allow(clippy::exit)]
pub fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("standin_app: {msg}");
    std::process::exit(1)
}

/// Exits 1 naming `call` unless `res` is `CUDA_SUCCESS`.
pub fn check(res: CUresult, call: &str) {
    if res != CUDA_SUCCESS {
        fail(format!("{call} failed: CUresult {res}"));
    }
}

/// Declares [`Cuda`]: one typed pointer per driver function, with the name
/// `cuGetProcAddress` takes and the versioned name a linked program would bind.
macro_rules! cuda_api {
    ($($field:ident = $proc:literal / $link:literal: fn($($arg:ty),* $(,)?);)*) => {
        pub struct Cuda {
            $(pub $field: unsafe extern "C" fn($($arg),*) -> CUresult,)*
        }

        impl Cuda {
            fn load(resolve: &dyn Fn(&str, &str) -> *mut c_void) -> Cuda {
                Cuda {$(
                    // SAFETY: the symbol has this C signature in cuda.h.
                    $field: unsafe {
                        std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> CUresult>(
                            resolve($proc, $link),
                        )
                    },
                )*}
            }
        }
    };
}

cuda_api! {
    init = "cuInit" / "cuInit": fn(c_uint);
    device_get = "cuDeviceGet" / "cuDeviceGet": fn(*mut CUdevice, c_int);
    primary_ctx_retain = "cuDevicePrimaryCtxRetain" / "cuDevicePrimaryCtxRetain": fn(*mut CUcontext, CUdevice);
    ctx_set_current = "cuCtxSetCurrent" / "cuCtxSetCurrent": fn(CUcontext);
    ctx_synchronize = "cuCtxSynchronize" / "cuCtxSynchronize": fn();
    mem_get_info = "cuMemGetInfo" / "cuMemGetInfo_v2": fn(*mut usize, *mut usize);
    mem_alloc = "cuMemAlloc" / "cuMemAlloc_v2": fn(*mut CUdeviceptr, usize);
    mem_free = "cuMemFree" / "cuMemFree_v2": fn(CUdeviceptr);
    mem_alloc_async = "cuMemAllocAsync" / "cuMemAllocAsync": fn(*mut CUdeviceptr, usize, CUstream);
    mem_free_async = "cuMemFreeAsync" / "cuMemFreeAsync": fn(CUdeviceptr, CUstream);
    mem_get_address_range = "cuMemGetAddressRange" / "cuMemGetAddressRange_v2": fn(*mut CUdeviceptr, *mut usize, CUdeviceptr);
    pointer_get_attribute = "cuPointerGetAttribute" / "cuPointerGetAttribute": fn(*mut c_void, c_uint, CUdeviceptr);
    mem_alloc_host = "cuMemAllocHost" / "cuMemAllocHost_v2": fn(*mut *mut c_void, usize);
    mem_free_host = "cuMemFreeHost" / "cuMemFreeHost": fn(*mut c_void);
    memcpy_htod = "cuMemcpyHtoD" / "cuMemcpyHtoD_v2": fn(CUdeviceptr, *const c_void, usize);
    memcpy_dtoh = "cuMemcpyDtoH" / "cuMemcpyDtoH_v2": fn(*mut c_void, CUdeviceptr, usize);
    memcpy_htod_async = "cuMemcpyHtoDAsync" / "cuMemcpyHtoDAsync_v2": fn(CUdeviceptr, *const c_void, usize, CUstream);
    memcpy_dtoh_async = "cuMemcpyDtoHAsync" / "cuMemcpyDtoHAsync_v2": fn(*mut c_void, CUdeviceptr, usize, CUstream);
    memcpy_dtod_async = "cuMemcpyDtoDAsync" / "cuMemcpyDtoDAsync_v2": fn(CUdeviceptr, CUdeviceptr, usize, CUstream);
    memset_d32 = "cuMemsetD32" / "cuMemsetD32_v2": fn(CUdeviceptr, c_uint, usize);
    memset_d32_async = "cuMemsetD32Async" / "cuMemsetD32Async": fn(CUdeviceptr, c_uint, usize, CUstream);
    stream_create = "cuStreamCreate" / "cuStreamCreate": fn(*mut CUstream, c_uint);
    stream_destroy = "cuStreamDestroy" / "cuStreamDestroy_v2": fn(CUstream);
    stream_synchronize = "cuStreamSynchronize" / "cuStreamSynchronize": fn(CUstream);
    stream_query = "cuStreamQuery" / "cuStreamQuery": fn(CUstream);
    stream_wait_event = "cuStreamWaitEvent" / "cuStreamWaitEvent": fn(CUstream, CUevent, c_uint);
    stream_add_callback = "cuStreamAddCallback" / "cuStreamAddCallback": fn(CUstream, CUstreamCallback, *mut c_void, c_uint);
    event_create = "cuEventCreate" / "cuEventCreate": fn(*mut CUevent, c_uint);
    event_destroy = "cuEventDestroy" / "cuEventDestroy_v2": fn(CUevent);
    event_record = "cuEventRecord" / "cuEventRecord": fn(CUevent, CUstream);
    event_query = "cuEventQuery" / "cuEventQuery": fn(CUevent);
    event_synchronize = "cuEventSynchronize" / "cuEventSynchronize": fn(CUevent);
    event_elapsed_time = "cuEventElapsedTime" / "cuEventElapsedTime_v2": fn(*mut f32, CUevent, CUevent);
    launch_host_func = "cuLaunchHostFunc" / "cuLaunchHostFunc": fn(CUstream, CUhostFn, *mut c_void);
    launch_kernel = "cuLaunchKernel" / "cuLaunchKernel": fn(
        CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CUstream, *mut *mut c_void, *mut *mut c_void,
    );
    launch_kernel_ex = "cuLaunchKernelEx" / "cuLaunchKernelEx": fn(*const CUlaunchConfig, CUfunction, *mut *mut c_void, *mut *mut c_void);
    module_get_function = "cuModuleGetFunction" / "cuModuleGetFunction": fn(*mut CUfunction, CUmodule, *const c_char);
    module_get_global = "cuModuleGetGlobal" / "cuModuleGetGlobal_v2": fn(*mut CUdeviceptr, *mut usize, CUmodule, *const c_char);
    library_get_kernel = "cuLibraryGetKernel" / "cuLibraryGetKernel": fn(*mut CUkernel, CUlibrary, *const c_char);
    func_get_param_info = "cuFuncGetParamInfo" / "cuFuncGetParamInfo": fn(CUfunction, usize, *mut usize, *mut usize);
    kernel_get_param_info = "cuKernelGetParamInfo" / "cuKernelGetParamInfo": fn(CUkernel, usize, *mut usize, *mut usize);
    mem_address_reserve = "cuMemAddressReserve" / "cuMemAddressReserve": fn(*mut CUdeviceptr, usize, usize, CUdeviceptr, u64);
    mem_create = "cuMemCreate" / "cuMemCreate": fn(*mut CUmemGenericAllocationHandle, usize, *const CUmemAllocationProp, u64);
    mem_map = "cuMemMap" / "cuMemMap": fn(CUdeviceptr, usize, usize, CUmemGenericAllocationHandle, u64);
    mem_unmap = "cuMemUnmap" / "cuMemUnmap": fn(CUdeviceptr, usize);
    mem_release = "cuMemRelease" / "cuMemRelease": fn(CUmemGenericAllocationHandle);
    mem_set_access = "cuMemSetAccess" / "cuMemSetAccess": fn(CUdeviceptr, usize, *const CUmemAccessDesc, usize);
    mem_address_free = "cuMemAddressFree" / "cuMemAddressFree": fn(CUdeviceptr, usize);
    memcpy_3d = "cuMemcpy3D" / "cuMemcpy3D_v2": fn(*const CUDA_MEMCPY3D);
    memcpy_dtod = "cuMemcpyDtoD" / "cuMemcpyDtoD_v2": fn(CUdeviceptr, CUdeviceptr, usize);
    memcpy_peer = "cuMemcpyPeer" / "cuMemcpyPeer": fn(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, usize);
    stream_begin_capture = "cuStreamBeginCapture" / "cuStreamBeginCapture_v2": fn(CUstream, c_uint);
    stream_end_capture = "cuStreamEndCapture" / "cuStreamEndCapture": fn(CUstream, *mut CUgraph);
    thread_exchange_stream_capture_mode = "cuThreadExchangeStreamCaptureMode" / "cuThreadExchangeStreamCaptureMode": fn(*mut c_uint);
    graph_create = "cuGraphCreate" / "cuGraphCreate": fn(*mut CUgraph, c_uint);
    graph_add_child_graph_node = "cuGraphAddChildGraphNode" / "cuGraphAddChildGraphNode": fn(*mut CUgraphNode, CUgraph, *const CUgraphNode, usize, CUgraph);
    graph_add_memcpy_node = "cuGraphAddMemcpyNode" / "cuGraphAddMemcpyNode": fn(*mut CUgraphNode, CUgraph, *const CUgraphNode, usize, *const CUDA_MEMCPY3D, CUcontext);
    graph_add_memset_node = "cuGraphAddMemsetNode" / "cuGraphAddMemsetNode": fn(*mut CUgraphNode, CUgraph, *const CUgraphNode, usize, *const CUDA_MEMSET_NODE_PARAMS, CUcontext);
    graph_get_nodes = "cuGraphGetNodes" / "cuGraphGetNodes": fn(CUgraph, *mut CUgraphNode, *mut usize);
    graph_node_get_type = "cuGraphNodeGetType" / "cuGraphNodeGetType": fn(CUgraphNode, *mut c_uint);
    graph_kernel_node_get_params = "cuGraphKernelNodeGetParams" / "cuGraphKernelNodeGetParams_v2": fn(CUgraphNode, *mut CUDA_KERNEL_NODE_PARAMS_v2);
    graph_instantiate = "cuGraphInstantiateWithFlags" / "cuGraphInstantiateWithFlags": fn(*mut CUgraphExec, CUgraph, u64);
    graph_launch = "cuGraphLaunch" / "cuGraphLaunch": fn(CUgraphExec, CUstream);
    graph_exec_kernel_node_set_params = "cuGraphExecKernelNodeSetParams" / "cuGraphExecKernelNodeSetParams_v2": fn(CUgraphExec, CUgraphNode, *const CUDA_KERNEL_NODE_PARAMS_v2);
    graph_exec_update = "cuGraphExecUpdate" / "cuGraphExecUpdate_v2": fn(CUgraphExec, CUgraph, *mut CUgraphExecUpdateResultInfo);
}

pub type GetProcAddress = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> CUresult;

pub type RegisterFn = unsafe extern "C" fn(*const c_char, StandinKernel, u32, *const usize, i32) -> *mut c_void;
pub type ReadFn = unsafe extern "C" fn(u64, *mut u8, usize);
pub type WriteFn = unsafe extern "C" fn(u64, *const u8, usize);
pub type CountersFn = unsafe extern "C" fn(*mut u64, usize);
pub type DeviceMemoryFn = unsafe extern "C" fn(u32, *mut u64);

/// The stand-in's own functions, for the kernels.
pub struct Standin {
    pub register: RegisterFn,
    pub read: ReadFn,
    pub write: WriteFn,
    pub counters: CountersFn,
    pub device_memory: DeviceMemoryFn,
}

pub static STANDIN: OnceLock<Standin> = OnceLock::new();

pub fn cstr(s: &str) -> CString {
    CString::new(s).unwrap()
}

/// The address of `name` in `handle`; exits 1 if there is none.
///
/// # Safety
/// `handle` is a live handle from `dlopen`, or `RTLD_DEFAULT`.
unsafe fn sym(handle: *mut c_void, name: &str) -> *mut c_void {
    // SAFETY: `handle` per this function's contract, and a NUL-terminated name that lives
    // through the call.
    let p = unsafe { dlsym(handle, cstr(name).as_ptr()) };
    if p.is_null() {
        fail(format!("dlsym({name}) found nothing"));
    }
    p
}

// ---------------------------------------------------------------------------------------
// The program's view of the driver

pub struct App {
    pub cu: Cuda,
    pub ctx: CUcontext,
    pub k: Kernels,
    pub get_proc: GetProcAddress,
}

// SAFETY: the handles are plain values the driver accepts from any thread.
unsafe impl Sync for App {}

pub fn ptr<T>(v: &mut T) -> *mut c_void {
    v as *mut T as *mut c_void
}

impl App {
    pub fn start(direct: bool) -> App {
        // SAFETY: a NUL-terminated name.
        let handle = unsafe { dlopen(c"libcuda.so.1".as_ptr(), RTLD_NOW | RTLD_GLOBAL) };
        if handle.is_null() {
            // SAFETY: after a failed `dlopen`, `dlerror` returns a NUL-terminated message.
            fail(format!("dlopen(libcuda.so.1): {}", unsafe { std::ffi::CStr::from_ptr(dlerror()) }.to_string_lossy()));
        }
        // SAFETY: `handle` is live, and `cuGetProcAddress_v2` has this C signature in cuda.h.
        let get_proc: GetProcAddress = unsafe { std::mem::transmute(sym(handle, "cuGetProcAddress_v2")) };
        let cu = if direct {
            // SAFETY: `RTLD_DEFAULT` searches the program's global symbols.
            Cuda::load(&|_, link| unsafe { sym(RTLD_DEFAULT, link) })
        } else {
            Cuda::load(&|name, _| {
                let (mut p, mut status) = (null_mut(), 0);
                // SAFETY: the name is NUL-terminated and lives through the call; the driver
                // writes to `p` and `status`, live locals.
                check(unsafe { get_proc(cstr(name).as_ptr(), &mut p, 13000, 0, &mut status) }, &format!("cuGetProcAddress({name})"));
                if p.is_null() || status != CU_GET_PROC_ADDRESS_SUCCESS {
                    fail(format!("cuGetProcAddress({name}): status {status}"));
                }
                p
            })
        };
        // SAFETY: `handle` is live, and each symbol is the stand-in's export with the C
        // signature of the type it becomes (`cuda-standin`'s `api/standin.rs`).
        let standin = unsafe {
            Standin {
                register: std::mem::transmute::<*mut c_void, RegisterFn>(sym(handle, "gmuxStandinRegisterKernel")),
                read: std::mem::transmute::<*mut c_void, ReadFn>(sym(handle, "gmuxStandinRead")),
                write: std::mem::transmute::<*mut c_void, WriteFn>(sym(handle, "gmuxStandinWrite")),
                counters: std::mem::transmute::<*mut c_void, CountersFn>(sym(handle, "gmuxStandinCounters")),
                device_memory: std::mem::transmute::<*mut c_void, DeviceMemoryFn>(sym(handle, "gmuxStandinDeviceMemory")),
            }
        };
        let _ = STANDIN.set(standin);
        // SAFETY: only a flags value.
        check(unsafe { (cu.init)(0) }, "cuInit");
        let (mut dev, mut ctx) = (0, null_mut());
        // SAFETY: the driver writes the device to `dev`, a live local.
        check(unsafe { (cu.device_get)(&mut dev, 0) }, "cuDeviceGet");
        // SAFETY: the driver writes the context to `ctx`, a live local.
        check(unsafe { (cu.primary_ctx_retain)(&mut ctx, dev) }, "cuDevicePrimaryCtxRetain");
        // SAFETY: only the context this program retained, by value.
        check(unsafe { (cu.ctx_set_current)(ctx) }, "cuCtxSetCurrent");
        let k = Self::kernels(&cu);
        App { cu, ctx, k, get_proc }
    }

    pub fn alloc(&self, bytes: usize) -> u64 {
        let mut p = 0;
        // SAFETY: the driver writes the new address to `p`, a live local.
        check(unsafe { (self.cu.mem_alloc)(&mut p, bytes) }, "cuMemAlloc");
        p
    }

    pub fn free(&self, p: u64) {
        // SAFETY: only values: a device address, which the driver checks.
        check(unsafe { (self.cu.mem_free)(p) }, "cuMemFree");
    }

    /// `cuMemAllocAsync` on `s`.
    pub fn alloc_async(&self, bytes: usize, s: CUstream) -> u64 {
        let mut p = 0;
        // SAFETY: the driver writes the new address to `p`, a live local; `s` is a handle.
        check(unsafe { (self.cu.mem_alloc_async)(&mut p, bytes, s) }, "cuMemAllocAsync");
        p
    }

    /// `cuMemFreeAsync` on `s`.
    pub fn free_async(&self, p: u64, s: CUstream) {
        // SAFETY: only values: a device address and a stream, which the driver checks.
        check(unsafe { (self.cu.mem_free_async)(p, s) }, "cuMemFreeAsync");
    }

    pub fn stream(&self, flags: u32) -> CUstream {
        let mut s = null_mut();
        // SAFETY: the driver writes the new stream to `s`, a live local.
        check(unsafe { (self.cu.stream_create)(&mut s, flags) }, "cuStreamCreate");
        s
    }

    pub fn event(&self) -> CUevent {
        let mut e = null_mut();
        // SAFETY: the driver writes the new event to `e`, a live local.
        check(unsafe { (self.cu.event_create)(&mut e, 0) }, "cuEventCreate");
        e
    }

    pub fn sync(&self, s: CUstream) {
        // SAFETY: only handles, by value, that this program created (or null, the default
        // stream); no host memory.
        check(unsafe { (self.cu.stream_synchronize)(s) }, "cuStreamSynchronize");
    }

    /// Records `e` on `s`.
    pub fn record(&self, e: CUevent, s: CUstream) {
        // SAFETY: only handles, by value, that this program created (or null, the default
        // stream); no host memory.
        check(unsafe { (self.cu.event_record)(e, s) }, "cuEventRecord");
    }

    /// Orders what `s` runs next after the work `e` recorded.
    pub fn wait_event(&self, s: CUstream, e: CUevent) {
        // SAFETY: only handles, by value, that this program created (or null, the default
        // stream); no host memory.
        check(unsafe { (self.cu.stream_wait_event)(s, e, 0) }, "cuStreamWaitEvent");
    }

    /// Waits for all work in the context.
    pub fn ctx_sync(&self) {
        // SAFETY: no arguments.
        check(unsafe { (self.cu.ctx_synchronize)() }, "cuCtxSynchronize");
    }

    pub fn htod(&self, p: u64, data: &[u32]) {
        // SAFETY: the driver reads `data.len() * 4` bytes from `data`, which holds that many,
        // before it returns.
        check(unsafe { (self.cu.memcpy_htod)(p, data.as_ptr() as *const c_void, data.len() * 4) }, "cuMemcpyHtoD");
    }

    pub fn dtoh(&self, p: u64, words: usize) -> Vec<u32> {
        let mut v = vec![0u32; words];
        // SAFETY: the driver writes `words * 4` bytes into `v`, which holds `words` words.
        check(unsafe { (self.cu.memcpy_dtoh)(v.as_mut_ptr() as *mut c_void, p, words * 4) }, "cuMemcpyDtoH");
        v
    }

    pub fn launch(&self, f: CUfunction, s: CUstream, params: &mut [*mut c_void]) {
        // SAFETY: every caller passes in `params` a pointer to a live value for each of `f`'s
        // parameters, of the size it was registered with; the launch copies them. No `extra`.
        let r = unsafe { (self.cu.launch_kernel)(f, 1, 1, 1, 128, 1, 1, 0, s, params.as_mut_ptr(), null_mut()) };
        check(r, "cuLaunchKernel");
    }

    /// Physical memory `cuMemCreate` made on device `dev`: live now, and the most at once.
    pub fn device_memory(&self, dev: u32) -> [u64; 2] {
        let mut m = [0u64; 2];
        // SAFETY: the stand-in writes two numbers into `m`, which holds two.
        unsafe { (STANDIN.get().unwrap().device_memory)(dev, m.as_mut_ptr()) };
        m
    }

    pub fn counters(&self) -> [u64; 9] {
        let mut c = [0u64; 9];
        // SAFETY: the stand-in writes at most `c.len()` counters into `c`.
        unsafe { (STANDIN.get().unwrap().counters)(c.as_mut_ptr(), c.len()) };
        c
    }
}
