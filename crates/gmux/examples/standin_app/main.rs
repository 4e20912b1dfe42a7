//! An "unmodified CUDA program" for gmux's tests on the CPU stand-in of the driver.
//!
//! It links no CUDA symbol: it `dlopen`s `libcuda.so.1` (found through
//! `LD_LIBRARY_PATH`), gets `cuGetProcAddress_v2` with `dlsym` and resolves every other
//! driver function through it, as the CUDA runtime does (`dlsym-direct` resolves with
//! `dlsym(RTLD_DEFAULT, ...)` instead, as a program linked against libcuda would). Its
//! "kernels" are host functions registered with the stand-in, which reach device memory
//! through `gmuxStandinRead` / `gmuxStandinWrite`.
//!
//! Subcommands print one summary line and exit 0, or exit 1 with a message:
//! `oversub --total BYTES --buffers N --ops K --seed S [--streams M] [--counters]`
//! (`--counters` adds a line with the stand-in's VMM call counters after the ops, before
//! the final read-backs and frees), `sync`,
//! `info [--total BYTES]`, `dlsym-direct`, `procaddr-ptsz`,
//! `extra-params [--ballast BYTES]` (a buffer filled before each launch, to push the
//! others out under a memory limit), `too-big --bytes N` (one `add` over N bytes; exits 0
//! if the launch returns CUDA_ERROR_OUT_OF_MEMORY),
//! `fault-unmapped [--mode launch|noaccess|copy|stale]` (expected to be aborted),
//! `loop --buffers N --bytes B --rounds R [--reverse-every K] [--free]` (a training-like loop:
//! every round adds 1 to each buffer in the same order, reversed every K rounds if K is
//! given, so that a forecast from history is sometimes wrong; then every buffer is
//! checked, and freed with `--free`), `graph --bytes B --rounds R`, `graph-split
//! --buffers N --bytes B`, `graph-temp --bytes B`, `graph-nodes --bytes B --copy C` (CUDA graphs: see `graphs.rs`), `app-vmm --handles N --bytes B` and
//! `big-copy --bytes B`, `global-refs --buffers N --bytes B --rounds R` (see `memory.rs`).

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use cuda_abi::*;

mod graphs;
mod memory;

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
fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("standin_app: {msg}");
    std::process::exit(1)
}

/// Exits 1 naming `call` unless `res` is `CUDA_SUCCESS`.
fn check(res: CUresult, call: &str) {
    if res != CUDA_SUCCESS {
        fail(format!("{call} failed: CUresult {res}"));
    }
}

/// Declares [`Cuda`]: one typed pointer per driver function, with the name
/// `cuGetProcAddress` takes and the versioned name a linked program would bind.
macro_rules! cuda_api {
    ($($field:ident = $proc:literal / $link:literal: fn($($arg:ty),* $(,)?);)*) => {
        struct Cuda {
            $($field: unsafe extern "C" fn($($arg),*) -> CUresult,)*
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

type GetProcAddress = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> CUresult;

type RegisterFn = unsafe extern "C" fn(*const c_char, StandinKernel, u32, *const usize, i32) -> *mut c_void;
type ReadFn = unsafe extern "C" fn(u64, *mut u8, usize);
type WriteFn = unsafe extern "C" fn(u64, *const u8, usize);
type CountersFn = unsafe extern "C" fn(*mut u64, usize);

/// The stand-in's own functions, for the kernels.
struct Standin {
    register: RegisterFn,
    read: ReadFn,
    write: WriteFn,
    counters: CountersFn,
}

static STANDIN: OnceLock<Standin> = OnceLock::new();

fn cstr(s: &str) -> CString {
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
// Kernels

/// Kernels completed so far (for host-callback ordering checks).
static KERNELS_DONE: AtomicU64 = AtomicU64::new(0);
const BLOCK_WORDS: u64 = 16 * 1024;

fn hash(seed: u32, i: u64) -> u32 {
    let mut x = ((seed as u64) << 32 ^ i).wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (x ^ (x >> 31)) as u32
}

/// Parameter `i` of a kernel, read from where the stand-in's argument array points.
///
/// # Safety
/// `args` holds at least `i + 1` pointers, the `i`th to a value of `T` (the stand-in calls
/// a kernel with a pointer to each parameter, of the size it was registered with).
unsafe fn arg<T: Copy>(args: *const *mut c_void, i: usize) -> T {
    // SAFETY: per this function's contract; the read is unaligned, as the stand-in packs
    // parameters at the offsets their sizes give.
    unsafe { (*args.add(i) as *const T).read_unaligned() }
}

fn dev_read(p: u64, out: &mut [u32]) {
    let s = STANDIN.get().unwrap();
    // SAFETY: the stand-in writes `out.len() * 4` bytes into `out`, which holds that many; it
    // checks the device range itself.
    unsafe { (s.read)(p, out.as_mut_ptr() as *mut u8, out.len() * 4) }
}

fn dev_write(p: u64, data: &[u32]) {
    let s = STANDIN.get().unwrap();
    // SAFETY: the stand-in reads `data.len() * 4` bytes from `data`, which holds that many; it
    // checks the device range itself.
    unsafe { (s.write)(p, data.as_ptr() as *const u8, data.len() * 4) }
}

/// Calls `f(first_index, block)` for each block of `n` words at `p`, writing back if asked.
fn blocks(p: u64, n: u64, read: bool, mut f: impl FnMut(u64, &mut [u32])) {
    let mut buf = vec![0u32; BLOCK_WORDS.min(n) as usize];
    let mut i = 0;
    while i < n {
        let b = &mut buf[..(n - i).min(BLOCK_WORDS) as usize];
        if read {
            dev_read(p + i * 4, b);
        }
        f(i, b);
        dev_write(p + i * 4, b);
        i += b.len() as u64;
    }
}

/// `fill(u32* p, u64 n, u32 seed)`: p[i] = hash(seed, i).
unsafe extern "C" fn k_fill(args: *const *mut c_void) {
    // SAFETY: the stand-in calls a kernel with a pointer to each of its parameters, of the
    // sizes registered in `App::kernels` (8, 8, 4), which these types have.
    let (p, n, seed) = unsafe { (arg::<u64>(args, 0), arg::<u64>(args, 1), arg::<u32>(args, 2)) };
    blocks(p, n, false, |start, b| b.iter_mut().enumerate().for_each(|(j, w)| *w = hash(seed, start + j as u64)));
    KERNELS_DONE.fetch_add(1, Ordering::SeqCst);
}

/// `add(u32* p, u64 n, u32 v)`: p[i] += v.
unsafe extern "C" fn k_add(args: *const *mut c_void) {
    // SAFETY: the stand-in calls a kernel with a pointer to each of its parameters, of the
    // sizes registered in `App::kernels` (8, 8, 4), which these types have.
    let (p, n, v) = unsafe { (arg::<u64>(args, 0), arg::<u64>(args, 1), arg::<u32>(args, 2)) };
    blocks(p, n, true, |_, b| b.iter_mut().for_each(|w| *w = w.wrapping_add(v)));
    KERNELS_DONE.fetch_add(1, Ordering::SeqCst);
}

/// `gather(u32** table, u64 count, u32 v)`: adds v to the first 1024 words of each of the
/// `count` buffers whose addresses `table` holds: pointers the kernel finds in memory, not
/// in its parameters.
unsafe extern "C" fn k_gather(args: *const *mut c_void) {
    // SAFETY: the stand-in calls a kernel with a pointer to each of its parameters, of the
    // sizes registered in `App::kernels` (8, 8, 4), which these types have.
    let (table, count, v) = unsafe { (arg::<u64>(args, 0), arg::<u64>(args, 1), arg::<u32>(args, 2)) };
    let mut ptrs = vec![0u64; count as usize];
    // SAFETY: the `count` `u64`s of `ptrs` are `2 * count` `u32`s of the same bytes, and a
    // `u64`'s alignment suffices for a `u32`.
    dev_read(table, unsafe { std::slice::from_raw_parts_mut(ptrs.as_mut_ptr() as *mut u32, count as usize * 2) });
    for p in ptrs {
        blocks(p, 1024, true, |_, b| b.iter_mut().for_each(|w| *w = w.wrapping_add(v)));
    }
    KERNELS_DONE.fetch_add(1, Ordering::SeqCst);
}

/// `copy(u32* dst, u32* src, u64 n)`.
unsafe extern "C" fn k_copy(args: *const *mut c_void) {
    // SAFETY: the stand-in calls a kernel with a pointer to each of its parameters, of the
    // sizes registered in `App::kernels` (8, 8, 8), which these types have.
    let (dst, src, n) = unsafe { (arg::<u64>(args, 0), arg::<u64>(args, 1), arg::<u64>(args, 2)) };
    blocks(dst, n, false, |start, b| dev_read(src + start * 4, b));
    KERNELS_DONE.fetch_add(1, Ordering::SeqCst);
}

/// The struct parameter of `mix`.
#[repr(C)]
#[derive(Clone, Copy)]
struct MixArgs {
    a_ptr: u64,
    b_ptr: u64,
    n: u64,
}

/// `mix(MixArgs s, u32 salt)`: a[i] ^= b[i] + salt.
unsafe extern "C" fn k_mix(args: *const *mut c_void) {
    // SAFETY: the stand-in calls a kernel with a pointer to each of its parameters, of the
    // sizes registered in `App::kernels` (`size_of::<MixArgs>()`, 4), which these types have.
    let (s, salt) = unsafe { (arg::<MixArgs>(args, 0), arg::<u32>(args, 1)) };
    let mut other = vec![0u32; BLOCK_WORDS.min(s.n) as usize];
    blocks(s.a_ptr, s.n, true, |start, b| {
        let o = &mut other[..b.len()];
        dev_read(s.b_ptr + start * 4, o);
        b.iter_mut().zip(o.iter()).for_each(|(w, x)| *w ^= x.wrapping_add(salt));
    });
    KERNELS_DONE.fetch_add(1, Ordering::SeqCst);
}

/// `slow(u32* p, u32 ms)`: sleeps, then p[0] = 1.
unsafe extern "C" fn k_slow(args: *const *mut c_void) {
    // SAFETY: the stand-in calls a kernel with a pointer to each of its parameters, of the
    // sizes registered in `App::kernels` (8, 4), which these types have.
    let (p, ms) = unsafe { (arg::<u64>(args, 0), arg::<u32>(args, 1)) };
    std::thread::sleep(Duration::from_millis(ms as u64));
    dev_write(p, &[1]);
    KERNELS_DONE.fetch_add(1, Ordering::SeqCst);
}

struct Kernels {
    fill: CUfunction,
    add: CUfunction,
    copy: CUfunction,
    slow: CUfunction,
    gather: CUfunction,
    /// A `CUkernel`, launched cast to `CUfunction` as the runtime does.
    mix: CUkernel,
}

// ---------------------------------------------------------------------------------------
// The program's view of the driver

struct App {
    cu: Cuda,
    ctx: CUcontext,
    k: Kernels,
    get_proc: GetProcAddress,
}

// SAFETY: the handles are plain values the driver accepts from any thread.
unsafe impl Sync for App {}

fn ptr<T>(v: &mut T) -> *mut c_void {
    v as *mut T as *mut c_void
}

impl App {
    fn start(direct: bool) -> App {
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

    fn kernels(cu: &Cuda) -> Kernels {
        let s = STANDIN.get().unwrap();
        let table: [(&str, StandinKernel, &[usize], i32); 6] = [
            ("fill", k_fill, &[8, 8, 4], 0),
            ("add", k_add, &[8, 8, 4], 0),
            ("copy", k_copy, &[8, 8, 8], 0),
            ("slow", k_slow, &[8, 4], 0),
            ("gather", k_gather, &[8, 8, 4], 0),
            ("mix", k_mix, &[std::mem::size_of::<MixArgs>(), 4], 1),
        ];
        for (name, f, sizes, as_kernel) in table {
            // SAFETY: a NUL-terminated name and `sizes.len()` sizes, both live through the
            // call, and a kernel that reads its parameters at those sizes.
            if unsafe { (s.register)(cstr(name).as_ptr(), f, sizes.len() as u32, sizes.as_ptr(), as_kernel) }.is_null() {
                fail(format!("gmuxStandinRegisterKernel({name}) failed"));
            }
        }
        let func = |name: &str| {
            let mut f = null_mut();
            // SAFETY: a NUL-terminated name that lives through the call; the driver writes
            // the function to `f`, a live local.
            check(unsafe { (cu.module_get_function)(&mut f, null_mut(), cstr(name).as_ptr()) }, "cuModuleGetFunction");
            f
        };
        let mut mix = null_mut();
        // SAFETY: a NUL-terminated name; the driver writes the kernel to `mix`, a live local.
        check(unsafe { (cu.library_get_kernel)(&mut mix, null_mut(), c"mix".as_ptr()) }, "cuLibraryGetKernel");
        Kernels { fill: func("fill"), add: func("add"), copy: func("copy"), slow: func("slow"), gather: func("gather"), mix }
    }

    fn alloc(&self, bytes: usize) -> u64 {
        let mut p = 0;
        // SAFETY: the driver writes the new address to `p`, a live local.
        check(unsafe { (self.cu.mem_alloc)(&mut p, bytes) }, "cuMemAlloc");
        p
    }

    fn free(&self, p: u64) {
        // SAFETY: only values: a device address, which the driver checks.
        check(unsafe { (self.cu.mem_free)(p) }, "cuMemFree");
    }

    fn stream(&self, flags: u32) -> CUstream {
        let mut s = null_mut();
        // SAFETY: the driver writes the new stream to `s`, a live local.
        check(unsafe { (self.cu.stream_create)(&mut s, flags) }, "cuStreamCreate");
        s
    }

    fn event(&self) -> CUevent {
        let mut e = null_mut();
        // SAFETY: the driver writes the new event to `e`, a live local.
        check(unsafe { (self.cu.event_create)(&mut e, 0) }, "cuEventCreate");
        e
    }

    fn sync(&self, s: CUstream) {
        // SAFETY: only handles, by value, that this program created (or null, the default
        // stream); no host memory.
        check(unsafe { (self.cu.stream_synchronize)(s) }, "cuStreamSynchronize");
    }

    fn htod(&self, p: u64, data: &[u32]) {
        // SAFETY: the driver reads `data.len() * 4` bytes from `data`, which holds that many,
        // before it returns.
        check(unsafe { (self.cu.memcpy_htod)(p, data.as_ptr() as *const c_void, data.len() * 4) }, "cuMemcpyHtoD");
    }

    fn dtoh(&self, p: u64, words: usize) -> Vec<u32> {
        let mut v = vec![0u32; words];
        // SAFETY: the driver writes `words * 4` bytes into `v`, which holds `words` words.
        check(unsafe { (self.cu.memcpy_dtoh)(v.as_mut_ptr() as *mut c_void, p, words * 4) }, "cuMemcpyDtoH");
        v
    }

    fn launch(&self, f: CUfunction, s: CUstream, params: &mut [*mut c_void]) {
        // SAFETY: every caller passes in `params` a pointer to a live value for each of `f`'s
        // parameters, of the size it was registered with; the launch copies them. No `extra`.
        let r = unsafe { (self.cu.launch_kernel)(f, 1, 1, 1, 128, 1, 1, 0, s, params.as_mut_ptr(), null_mut()) };
        check(r, "cuLaunchKernel");
    }

    fn fill(&self, s: CUstream, mut p: u64, mut n: u64, mut seed: u32) {
        self.launch(self.k.fill, s, &mut [ptr(&mut p), ptr(&mut n), ptr(&mut seed)]);
    }

    fn add(&self, s: CUstream, mut p: u64, mut n: u64, mut v: u32) {
        self.launch(self.k.add, s, &mut [ptr(&mut p), ptr(&mut n), ptr(&mut v)]);
    }

    fn copy(&self, s: CUstream, mut dst: u64, mut src: u64, mut n: u64) {
        self.launch(self.k.copy, s, &mut [ptr(&mut dst), ptr(&mut src), ptr(&mut n)]);
    }

    fn mix(&self, s: CUstream, a_ptr: u64, b_ptr: u64, n: u64, mut salt: u32) {
        let mut m = MixArgs { a_ptr, b_ptr, n };
        self.launch(self.k.mix as CUfunction, s, &mut [ptr(&mut m), ptr(&mut salt)]);
    }

    fn slow(&self, s: CUstream, mut p: u64, mut ms: u32) {
        self.launch(self.k.slow, s, &mut [ptr(&mut p), ptr(&mut ms)]);
    }

    fn counters(&self) -> [u64; 9] {
        let mut c = [0u64; 9];
        // SAFETY: the stand-in writes at most `c.len()` counters into `c`.
        unsafe { (STANDIN.get().unwrap().counters)(c.as_mut_ptr(), c.len()) };
        c
    }
}

// ---------------------------------------------------------------------------------------
// Command line

struct Opts(HashMap<String, String>);

impl Opts {
    fn parse(args: &[String]) -> Opts {
        let mut m = HashMap::new();
        let mut it = args.iter().peekable();
        while let Some(k) = it.next() {
            let Some(key) = k.strip_prefix("--") else { fail(format!("unexpected argument {k:?}")) };
            // A key followed by another key (or nothing) is a flag, with an empty value.
            let v = it.next_if(|v| !v.starts_with("--")).cloned().unwrap_or_default();
            m.insert(key.to_owned(), v);
        }
        Opts(m)
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    fn bytes(&self, key: &str, default: u64) -> u64 {
        let Some(v) = self.get(key) else { return default };
        let (num, shift) = match v.as_bytes().last() {
            Some(b'K' | b'k') => (&v[..v.len() - 1], 10),
            Some(b'M' | b'm') => (&v[..v.len() - 1], 20),
            Some(b'G' | b'g') => (&v[..v.len() - 1], 30),
            _ => (v, 0),
        };
        num.parse::<u64>().map(|n| n << shift).unwrap_or_else(|_| fail(format!("--{key}: bad size {v:?}")))
    }

    fn num(&self, key: &str, default: u64) -> u64 {
        self.get(key).map_or(default, |v| v.parse().unwrap_or_else(|_| fail(format!("--{key}: bad number {v:?}"))))
    }
}

/// A small deterministic generator (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut x = self.0;
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn u32(&mut self) -> u32 {
        self.next() as u32
    }
}

fn main() {
    // As a C or C++ program: SIGPIPE ends it (Rust's runtime ignores it), so that nothing
    // gmux writes to a socket whose peer is gone may do so unnoticed.
    // SAFETY: setting a signal's disposition to the default, before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else { fail("usage: standin_app SUBCOMMAND [--option value]...") };
    let opts = Opts::parse(&args[1..]);
    let app = App::start(cmd == "dlsym-direct");
    let ok = match cmd.as_str() {
        "oversub" => oversub(&app, &opts),
        "sync" => sync_checks(&app),
        "info" => info(&app, &opts),
        "dlsym-direct" => dlsym_direct(&app),
        "procaddr-ptsz" => procaddr_ptsz(&app),
        "extra-params" => extra_params(&app, &opts),
        "too-big" => too_big(&app, &opts),
        "fault-unmapped" => fault_unmapped(&app, &opts),
        "shared-read" => shared_read(&app, &opts),
        "loop" => loop_rounds(&app, &opts),
        "graph" => graphs::rounds(&app, &opts),
        "graph-split" => graphs::split(&app, &opts),
        "graph-temp" => graphs::temporary(&app, &opts),
        "graph-nodes" => graphs::nodes(&app, &opts),
        "app-vmm" => memory::app_vmm(&app, &opts),
        "app-alias" => memory::app_alias(&app, &opts),
        "big-copy" => memory::big_copy(&app, &opts),
        "big-box" => memory::big_box(&app, &opts),
        "global-refs" => memory::global_refs(&app, &opts),
        other => fail(format!("unknown subcommand {other:?}")),
    };
    std::process::exit(if ok { 0 } else { 1 })
}

// ---------------------------------------------------------------------------------------
// oversub

/// A device buffer, its exact expected contents, and the stream index that touched it last.
struct Buf {
    ptr: u64,
    model: Vec<u32>,
    last: Option<usize>,
}

/// Streams (index 0 is the legacy default stream) and the event pool that orders them.
struct Sched<'a> {
    app: &'a App,
    streams: Vec<CUstream>,
    events: Vec<CUevent>,
    next_event: usize,
}

impl Sched<'_> {
    /// Orders the next op on stream `s` after every earlier access to buffers `which`.
    fn order(&mut self, bufs: &mut [Buf], which: &[usize], s: usize) {
        for &i in which {
            if let Some(last) = bufs[i].last.filter(|&l| l != s) {
                let e = self.events[self.next_event % self.events.len()];
                self.next_event += 1;
                let cu = &self.app.cu;
                // SAFETY: only handles, by value, that this program created (or null, the
                // default stream); no host memory.
                check(unsafe { (cu.event_record)(e, self.streams[last]) }, "cuEventRecord");
                // SAFETY: only handles, by value, that this program created (or null, the
                // default stream); no host memory.
                check(unsafe { (cu.stream_wait_event)(self.streams[s], e, 0) }, "cuStreamWaitEvent");
            }
            bufs[i].last = Some(s);
        }
    }

    /// Waits until every access to `b` has completed.
    fn quiesce(&self, b: &Buf) {
        if let Some(l) = b.last {
            self.app.sync(self.streams[l]);
        }
    }
}

/// Buffer sizes (bytes, multiples of 4) summing to about `total`: a mix of small ones,
/// sub-2 MiB ones, exact multiples of 2 MiB and large ones that are not.
fn buffer_sizes(total: u64, n: usize, rng: &mut Rng) -> Vec<usize> {
    const MIB2: u64 = 2 << 20;
    let weights: Vec<f64> = (0..n).map(|i| [0.05, 0.4, 1.0, 2.5][(i + rng.below(2) * 2) % 4]).collect();
    let sum: f64 = weights.iter().sum();
    weights
        .iter()
        .map(|w| {
            let raw = (total as f64 * w / sum) as u64;
            let size = if *w == 1.0 && raw >= MIB2 {
                raw / MIB2 * MIB2
            } else {
                let s = (raw / 4 * 4).max(4096);
                if s.is_multiple_of(MIB2) {
                    s + 4096
                } else {
                    s
                }
            };
            size as usize
        })
        .collect()
}

fn new_buffer(app: &App, sched: &mut Sched, bytes: usize, rng: &mut Rng) -> Buf {
    let words = bytes / 4;
    let ptr = app.alloc(bytes);
    let seed = rng.u32();
    let model: Vec<u32> = (0..words as u64).map(|i| hash(seed, i)).collect();
    if rng.below(3) == 0 {
        app.htod(ptr, &model);
        Buf { ptr, model, last: Some(0) }
    } else {
        let s = rng.below(sched.streams.len());
        app.fill(sched.streams[s], ptr, words as u64, seed);
        Buf { ptr, model, last: Some(s) }
    }
}

fn mismatch(what: &str, got: &[u32], want: &[u32]) -> bool {
    match got.iter().zip(want).position(|(g, w)| g != w) {
        None if got.len() == want.len() => false,
        at => {
            let i = at.unwrap_or(got.len().min(want.len()));
            eprintln!("standin_app: {what}: word {i} is {:?}, expected {:?}", got.get(i), want.get(i));
            true
        }
    }
}

fn oversub(app: &App, o: &Opts) -> bool {
    let total = o.bytes("total", 64 << 20);
    let n = o.num("buffers", 16).max(2) as usize;
    let ops = o.num("ops", 500) as usize;
    let nstreams = o.num("streams", 3).max(1) as usize;
    let mut rng = Rng(o.num("seed", 1));
    let cu = &app.cu;

    let mut streams = vec![null_mut()];
    streams.extend((0..nstreams).map(|i| app.stream(if i % 2 == 0 { 0 } else { CU_STREAM_NON_BLOCKING })));
    let events = (0..8).map(|_| app.event()).collect();
    let mut sched = Sched { app, streams, events, next_event: 0 };
    let mut bufs: Vec<Buf> = buffer_sizes(total, n, &mut rng).into_iter().map(|b| new_buffer(app, &mut sched, b, &mut rng)).collect();
    let mut pinned_in_flight: Vec<*mut c_void> = Vec::new();
    let mut readback: (*mut c_void, usize) = (null_mut(), 0);
    let mut mismatches = 0;
    // 2 MiB chunks of the buffers freed during the run (an upper bound on what a driver
    // layer releases because of them).
    let mut freed_chunks = 0u64;

    for op in 0..ops {
        let s = rng.below(sched.streams.len());
        let stream = sched.streams[s];
        let i = rng.below(n);
        let mut j = rng.below(n - 1);
        if j >= i {
            j += 1;
        }
        match rng.below(100) {
            0..=19 => {
                let v = rng.u32();
                sched.order(&mut bufs, &[i], s);
                app.add(stream, bufs[i].ptr, bufs[i].model.len() as u64, v);
                bufs[i].model.iter_mut().for_each(|w| *w = w.wrapping_add(v));
            }
            20..=34 => {
                let words = bufs[i].model.len().min(bufs[j].model.len());
                sched.order(&mut bufs, &[i, j], s);
                if rng.below(2) == 0 {
                    app.copy(stream, bufs[i].ptr, bufs[j].ptr, words as u64);
                } else {
                    // SAFETY: only values: two device ranges, which the driver checks, and a
                    // stream.
                    let r = unsafe { (cu.memcpy_dtod_async)(bufs[i].ptr, bufs[j].ptr, words * 4, stream) };
                    check(r, "cuMemcpyDtoDAsync");
                }
                let src = bufs[j].model[..words].to_vec();
                bufs[i].model[..words].copy_from_slice(&src);
            }
            35..=49 => {
                let words = bufs[i].model.len().min(bufs[j].model.len());
                let salt = rng.u32();
                sched.order(&mut bufs, &[i, j], s);
                app.mix(stream, bufs[i].ptr, bufs[j].ptr, words as u64, salt);
                let b = bufs[j].model[..words].to_vec();
                bufs[i].model[..words].iter_mut().zip(b).for_each(|(w, x)| *w ^= x.wrapping_add(salt));
            }
            50..=59 => {
                let len = bufs[i].model.len();
                let off = rng.below(len);
                let count = 1 + rng.below((len - off).min(256 << 10));
                let v = rng.u32();
                sched.order(&mut bufs, &[i], s);
                // SAFETY: only values: a device range, which the driver checks, the word to
                // set, and a stream.
                let r = unsafe { (cu.memset_d32_async)(bufs[i].ptr + off as u64 * 4, v, count, stream) };
                check(r, "cuMemsetD32Async");
                bufs[i].model[off..off + count].fill(v);
            }
            60..=69 => {
                let len = bufs[i].model.len();
                let off = rng.below(len);
                let count = 1 + rng.below((len - off).min(64 << 10));
                let data: Vec<u32> = (0..count).map(|_| rng.u32()).collect();
                sched.order(&mut bufs, &[i], s);
                let dst = bufs[i].ptr + off as u64 * 4;
                if rng.below(2) == 0 {
                    let mut h = null_mut();
                    // SAFETY: the driver writes the new pinned allocation's address to `h`, a
                    // live local.
                    check(unsafe { (cu.mem_alloc_host)(&mut h, count * 4) }, "cuMemAllocHost");
                    // SAFETY: `h` is a new pinned allocation of `count * 4` bytes
                    // (page-aligned, so aligned for `u32`), apart from `data`, which holds
                    // `count` words.
                    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), h as *mut u32, count) };
                    // SAFETY: `h` holds `count * 4` bytes and is freed only at the end, after
                    // `cuCtxSynchronize` (it is kept in `pinned_in_flight`).
                    check(unsafe { (cu.memcpy_htod_async)(dst, h, count * 4, stream) }, "cuMemcpyHtoDAsync");
                    pinned_in_flight.push(h);
                } else {
                    let mut pageable = data.clone();
                    // SAFETY: the driver takes a pageable source's `count * 4` bytes, all in
                    // `pageable`, before it returns.
                    let r = unsafe { (cu.memcpy_htod_async)(dst, pageable.as_ptr() as *const c_void, count * 4, stream) };
                    check(r, "cuMemcpyHtoDAsync");
                    // The copy took its source at call time: reusing the buffer is allowed.
                    pageable.fill(0xdead_beef);
                }
                bufs[i].model[off..off + count].copy_from_slice(&data);
            }
            70..=79 => {
                let words = bufs[i].model.len();
                sched.order(&mut bufs, &[i], s);
                let got = if rng.below(2) == 0 {
                    if readback.1 < words * 4 {
                        if !readback.0.is_null() {
                            // SAFETY: `readback.0` is a pinned allocation of this program's,
                            // with no copy into it in flight: each is waited for right after it
                            // is issued.
                            check(unsafe { (cu.mem_free_host)(readback.0) }, "cuMemFreeHost");
                        }
                        let mut h = null_mut();
                        // SAFETY: the driver writes the new pinned allocation's address to `h`,
                        // a live local.
                        check(unsafe { (cu.mem_alloc_host)(&mut h, words * 4) }, "cuMemAllocHost");
                        readback = (h, words * 4);
                    }
                    // SAFETY: `readback.0` holds at least `words * 4` bytes (made so above) and
                    // lives until after the `sync` below.
                    check(unsafe { (cu.memcpy_dtoh_async)(readback.0, bufs[i].ptr, words * 4, stream) }, "cuMemcpyDtoHAsync");
                    app.sync(stream);
                    // SAFETY: the copy into `readback.0` wrote its `words` words and has
                    // completed (`sync` above); pinned memory is page-aligned, so aligned for
                    // `u32`.
                    unsafe { std::slice::from_raw_parts(readback.0 as *const u32, words) }.to_vec()
                } else {
                    // Pageable destination: the call returns once the copy is done.
                    let mut v = vec![0u32; words];
                    // SAFETY: `v` holds the `words * 4` bytes the driver writes, and with a
                    // pageable destination the call returns once the copy is done.
                    let r = unsafe { (cu.memcpy_dtoh_async)(v.as_mut_ptr() as *mut c_void, bufs[i].ptr, words * 4, stream) };
                    check(r, "cuMemcpyDtoHAsync");
                    v
                };
                if mismatch(&format!("op {op}: read-back of buffer {i}"), &got, &bufs[i].model) {
                    mismatches += 1;
                }
            }
            80..=84 => app.sync(stream),
            85..=89 => {
                sched.quiesce(&bufs[i]);
                app.free(bufs[i].ptr);
                freed_chunks += (bufs[i].model.len() as u64 * 4).div_ceil(2 << 20);
                bufs[i] = new_buffer(app, &mut sched, bufs[i].model.len() * 4, &mut rng);
            }
            _ => {
                let seed = rng.u32();
                sched.order(&mut bufs, &[i], s);
                app.fill(stream, bufs[i].ptr, bufs[i].model.len() as u64, seed);
                bufs[i].model.iter_mut().enumerate().for_each(|(k, w)| *w = hash(seed, k as u64));
            }
        }
    }

    // SAFETY: no arguments.
    check(unsafe { (cu.ctx_synchronize)() }, "cuCtxSynchronize");
    // Before the final read-backs and frees: what the run itself cost in VMM calls.
    if o.get("counters").is_some() {
        let c = app.counters();
        println!(
            "counters: creates={} maps={} unmaps={} set_access={} releases={} live={} peak_live={} freed_chunks={freed_chunks}",
            c[0], c[1], c[2], c[3], c[6], c[7], c[8]
        );
    }
    for (i, b) in bufs.iter().enumerate() {
        if mismatch(&format!("final read-back of buffer {i}"), &app.dtoh(b.ptr, b.model.len()), &b.model) {
            mismatches += 1;
        }
        app.free(b.ptr);
    }
    for h in pinned_in_flight.into_iter().chain((!readback.0.is_null()).then_some(readback.0)) {
        // SAFETY: each is a pinned allocation of this program's, freed once, after
        // `cuCtxSynchronize` waited for every copy from it.
        check(unsafe { (cu.mem_free_host)(h) }, "cuMemFreeHost");
    }
    for &e in &sched.events {
        // SAFETY: only a handle this program created, by value; no host memory.
        check(unsafe { (cu.event_destroy)(e) }, "cuEventDestroy");
    }
    for &s in &sched.streams[1..] {
        // SAFETY: only a handle this program created, by value; no host memory.
        check(unsafe { (cu.stream_destroy)(s) }, "cuStreamDestroy");
    }
    let c = app.counters();
    eprintln!("standin_app: counters [creates, maps, unmaps, set_access, h2d, d2h, releases, live, peak live] = {c:?}");
    println!("oversub: {n} buffers, {ops} ops, checksum mismatches: {mismatches}");
    mismatches == 0
}

// ---------------------------------------------------------------------------------------
// shared-read

/// Memory written once, then read from two streams with no event between them, as
/// PyTorch reads its weights: legal in CUDA because nothing writes it any more. Under a
/// small limit the weights are pushed out every round; stream A's read brings them back,
/// and stream B's read, issued right after, must see their contents too. B's output
/// buffer is filled on A just before (B waits for that fill only), so it is resident and
/// B's copy needs no migration of its own that would order it after A's.
fn shared_read(app: &App, o: &Opts) -> bool {
    let bytes = o.bytes("bytes", 4 << 20) as usize;
    let rounds = o.num("rounds", 12);
    let others = o.num("others", 6) as usize;
    let words = (bytes / 4) as u64;
    let (a, b) = (app.stream(CU_STREAM_NON_BLOCKING), app.stream(CU_STREAM_NON_BLOCKING));
    let weights = app.alloc(bytes);
    app.fill(a, weights, words, 7);
    app.sync(a);
    let model: Vec<u32> = (0..words).map(|i| hash(7, i)).collect();
    let scratch: Vec<u64> = (0..others).map(|_| app.alloc(bytes)).collect();
    let out = app.alloc(bytes);
    let filled = app.event();
    let cu = &app.cu;
    let mut mismatches = 0;
    for round in 0..rounds {
        for (k, &p) in scratch.iter().enumerate() {
            app.fill(a, p, words, round as u32 * 31 + k as u32);
        }
        app.fill(a, out, words, 0);
        // SAFETY: only handles, by value, that this program created (or null, the default
        // stream); no host memory.
        check(unsafe { (cu.event_record)(filled, a) }, "cuEventRecord");
        app.copy(a, scratch[0], weights, words);
        // SAFETY: only handles, by value, that this program created (or null, the default
        // stream); no host memory.
        check(unsafe { (cu.stream_wait_event)(b, filled, 0) }, "cuStreamWaitEvent");
        app.copy(b, out, weights, words);
        app.sync(b);
        if mismatch(&format!("round {round}: stream B's copy of the weights"), &app.dtoh(out, words as usize), &model) {
            mismatches += 1;
        }
        app.sync(a);
    }
    println!("shared-read: {rounds} rounds, mismatches: {mismatches}");
    mismatches == 0
}

/// `loop`: the same sequence of kernels over the same buffers every round, as a training
/// loop runs; under a limit below the buffers' total, the order of eviction decides how
/// much comes back every round.
fn loop_rounds(app: &App, o: &Opts) -> bool {
    let (n, bytes, rounds) = (o.num("buffers", 8) as usize, o.bytes("bytes", 4 << 20) as usize, o.num("rounds", 10) as u32);
    let flip = o.num("reverse-every", 0) as u32;
    let words = (bytes / 4) as u64;
    let s = app.stream(CU_STREAM_NON_BLOCKING);
    let bufs: Vec<u64> = (0..n).map(|_| app.alloc(bytes)).collect();
    for (k, &p) in bufs.iter().enumerate() {
        app.fill(s, p, words, k as u32);
    }
    for round in 0..rounds {
        let reversed = flip > 0 && (round / flip) % 2 == 1;
        for k in 0..n {
            app.add(s, bufs[if reversed { n - 1 - k } else { k }], words, 1);
        }
    }
    app.sync(s);
    let mut mismatches = 0;
    for (k, &p) in bufs.iter().enumerate() {
        let want: Vec<u32> = (0..words).map(|i| hash(k as u32, i).wrapping_add(rounds)).collect();
        if mismatch(&format!("buffer {k}"), &app.dtoh(p, words as usize), &want) {
            mismatches += 1;
        }
    }
    if o.get("free").is_some() {
        bufs.iter().for_each(|&p| app.free(p));
    }
    println!("loop: {n} buffers, {rounds} rounds, mismatches: {mismatches}");
    mismatches == 0
}

// ---------------------------------------------------------------------------------------
// sync

static HOST_LOG: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());

unsafe extern "C" fn log_host_func(tag: *mut c_void) {
    HOST_LOG.lock().unwrap().push((tag as u64, KERNELS_DONE.load(Ordering::SeqCst)));
}

unsafe extern "C" fn log_callback(_s: CUstream, status: CUresult, tag: *mut c_void) {
    if status == CUDA_SUCCESS {
        // SAFETY: `log_host_func` uses its argument as a tag, never as a pointer.
        unsafe { log_host_func(tag) };
    }
}

fn expect(ok: bool, what: &str) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(what.to_owned())
    }
}

fn sync_checks(app: &App) -> bool {
    let cu = &app.cu;
    let p = app.alloc(4096);
    let word = |p: u64| app.dtoh(p, 1)[0];
    // SAFETY: only values: a device address, which the driver checks, and the word to set.
    let zero = |p: u64| check(unsafe { (cu.memset_d32)(p, 0, 1) }, "cuMemsetD32");
    let (s, s1, s2) = (app.stream(0), app.stream(0), app.stream(CU_STREAM_NON_BLOCKING));
    let e = app.event();
    type Check<'a> = (&'a str, Box<dyn Fn() -> Result<(), String> + 'a>);
    let checks: Vec<Check> = vec![
        (
            "stream query",
            Box::new(|| {
                zero(p);
                app.slow(s, p, 200);
                // SAFETY: only a handle this program created, by value; no host memory.
                expect(unsafe { (cu.stream_query)(s) } == CUDA_ERROR_NOT_READY, "cuStreamQuery during a 200 ms kernel is not NOT_READY")?;
                app.sync(s);
                // SAFETY: only a handle this program created, by value; no host memory.
                expect(unsafe { (cu.stream_query)(s) } == CUDA_SUCCESS, "cuStreamQuery after cuStreamSynchronize is not SUCCESS")?;
                expect(word(p) == 1, "the kernel's write is missing after cuStreamSynchronize")
            }),
        ),
        (
            "event query",
            Box::new(|| {
                zero(p);
                app.slow(s, p, 200);
                // SAFETY: only handles, by value, that this program created (or null, the default
                // stream); no host memory.
                check(unsafe { (cu.event_record)(e, s) }, "cuEventRecord");
                // SAFETY: only a handle this program created, by value; no host memory.
                expect(unsafe { (cu.event_query)(e) } == CUDA_ERROR_NOT_READY, "cuEventQuery during a 200 ms kernel is not NOT_READY")?;
                // SAFETY: only a handle this program created, by value; no host memory.
                check(unsafe { (cu.event_synchronize)(e) }, "cuEventSynchronize");
                // SAFETY: only a handle this program created, by value; no host memory.
                expect(unsafe { (cu.event_query)(e) } == CUDA_SUCCESS, "cuEventQuery after cuEventSynchronize is not SUCCESS")?;
                expect(word(p) == 1, "the kernel's write is missing after cuEventSynchronize")
            }),
        ),
        (
            "stream wait event",
            Box::new(|| {
                zero(p);
                app.slow(s1, p, 150);
                // SAFETY: only handles, by value, that this program created (or null, the default
                // stream); no host memory.
                check(unsafe { (cu.event_record)(e, s1) }, "cuEventRecord");
                // SAFETY: only handles, by value, that this program created (or null, the default
                // stream); no host memory.
                check(unsafe { (cu.stream_wait_event)(s2, e, 0) }, "cuStreamWaitEvent");
                app.add(s2, p, 1, 5);
                app.sync(s2);
                expect(word(p) == 6, "add on s2 did not see slow's write on s1 (cuStreamWaitEvent)")
            }),
        ),
        (
            "legacy stream",
            Box::new(|| {
                zero(p);
                app.slow(s1, p, 150);
                expect(word(p) == 1, "a legacy-stream cuMemcpyDtoH did not wait for the blocking stream")
            }),
        ),
        (
            "context synchronize",
            Box::new(|| {
                let ps: Vec<u64> = (0..3).map(|k| p + 4 * (k + 1)).collect();
                ps.iter().for_each(|&q| zero(q));
                for (k, st) in [s, s1, s2].into_iter().enumerate() {
                    app.slow(st, ps[k], 100 + 20 * k as u32);
                }
                // SAFETY: no arguments.
                check(unsafe { (cu.ctx_synchronize)() }, "cuCtxSynchronize");
                for st in [s, s1, s2] {
                    // SAFETY: only a handle this program created, by value; no host memory.
                    expect(unsafe { (cu.stream_query)(st) } == CUDA_SUCCESS, "a stream is busy after cuCtxSynchronize")?;
                }
                expect(ps.iter().all(|&q| word(q) == 1), "a kernel's write is missing after cuCtxSynchronize")
            }),
        ),
        (
            "host functions in order",
            Box::new(|| {
                zero(p);
                HOST_LOG.lock().unwrap().clear();
                let base = KERNELS_DONE.load(Ordering::SeqCst);
                app.slow(s, p, 100);
                // SAFETY: `log_host_func` uses its argument as a tag, never as a pointer.
                check(unsafe { (cu.launch_host_func)(s, Some(log_host_func), std::ptr::without_provenance_mut(1)) }, "cuLaunchHostFunc");
                app.add(s, p, 1, 1);
                // SAFETY: `log_callback` uses its last argument as a tag, never as a pointer.
                check(unsafe { (cu.stream_add_callback)(s, Some(log_callback), std::ptr::without_provenance_mut(2), 0) }, "cuStreamAddCallback");
                app.sync(s);
                let log = HOST_LOG.lock().unwrap().clone();
                expect(log == [(1, base + 1), (2, base + 2)], &format!("host functions ran as {log:?}, kernels done before: {base}"))?;
                expect(word(p) == 2, "slow then add did not leave 2")
            }),
        ),
        (
            "elapsed time",
            Box::new(|| {
                let e2 = app.event();
                // SAFETY: only handles, by value, that this program created (or null, the default
                // stream); no host memory.
                check(unsafe { (cu.event_record)(e, s) }, "cuEventRecord");
                app.slow(s, p, 100);
                // SAFETY: only handles, by value, that this program created (or null, the default
                // stream); no host memory.
                check(unsafe { (cu.event_record)(e2, s) }, "cuEventRecord");
                // SAFETY: only a handle this program created, by value; no host memory.
                check(unsafe { (cu.event_synchronize)(e2) }, "cuEventSynchronize");
                let mut ms = 0f32;
                // SAFETY: the driver writes the time to `ms`, a live local.
                check(unsafe { (cu.event_elapsed_time)(&mut ms, e, e2) }, "cuEventElapsedTime");
                // SAFETY: only a handle this program created, by value; no host memory.
                check(unsafe { (cu.event_destroy)(e2) }, "cuEventDestroy");
                expect(ms >= 90.0, &format!("elapsed time around a 100 ms kernel is {ms} ms"))
            }),
        ),
        (
            "synchronize a stream with no work",
            Box::new(|| {
                let idle = app.stream(CU_STREAM_NON_BLOCKING);
                // SAFETY: only handles, by value, that this program created (or null, the default
                // stream); no host memory.
                expect(unsafe { (cu.stream_synchronize)(idle) } == CUDA_SUCCESS, "cuStreamSynchronize of a stream that never ran anything failed")
            }),
        ),
        (
            "pageable async read-back",
            Box::new(|| {
                zero(p);
                app.slow(s, p, 150);
                let mut v = 0u32;
                // SAFETY: `v` holds the 4 bytes the driver writes, and with a pageable destination
                // the call returns once the copy is done.
                let r = unsafe { (cu.memcpy_dtoh_async)(ptr(&mut v), p, 4, s) };
                check(r, "cuMemcpyDtoHAsync");
                expect(v == 1, "cuMemcpyDtoHAsync to pageable memory returned before the copy")
            }),
        ),
    ];
    let n = checks.len();
    for (name, f) in checks {
        if let Err(msg) = f() {
            eprintln!("standin_app: sync check '{name}' failed: {msg}");
            return false;
        }
    }
    println!("sync: all {n} checks passed");
    true
}

// ---------------------------------------------------------------------------------------
// info, dlsym-direct, procaddr-ptsz, extra-params, fault-unmapped

fn info(app: &App, o: &Opts) -> bool {
    let cu = &app.cu;
    let bytes = (5 << 20) + 100;
    let p = app.alloc(bytes);
    let (mut free, mut total) = (0, 0);
    // SAFETY: the driver writes to `free` and `total`, live locals.
    check(unsafe { (cu.mem_get_info)(&mut free, &mut total) }, "cuMemGetInfo");
    let (mut base, mut size) = (0, 0);
    // SAFETY: the driver writes to `base` and `size`, live locals.
    check(unsafe { (cu.mem_get_address_range)(&mut base, &mut size, p + 12345) }, "cuMemGetAddressRange");
    let (mut mem_type, mut start) = (0u32, 0u64);
    // SAFETY: the memory type is a `u32` (`CUmemorytype`), written to `mem_type`, a live `u32`.
    let r = unsafe { (cu.pointer_get_attribute)(ptr(&mut mem_type), CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p + 12345) };
    check(r, "cuPointerGetAttribute(MEMORY_TYPE)");
    // SAFETY: the range start is a `CUdeviceptr`, written to `start`, a live `u64`.
    let r = unsafe { (cu.pointer_get_attribute)(ptr(&mut start), CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p + 12345) };
    check(r, "cuPointerGetAttribute(RANGE_START_ADDR)");
    println!("info: free {free} total {total} base {base:#x} size {size} memory_type {mem_type} range_start {start:#x}");
    let mut problems = Vec::new();
    if base != p || size != bytes {
        problems.push(format!("cuMemGetAddressRange gave ({base:#x}, {size}), expected ({p:#x}, {bytes})"));
    }
    if mem_type != CU_MEMORYTYPE_DEVICE || start != p {
        problems.push(format!("pointer attributes: memory type {mem_type}, range start {start:#x}"));
    }
    if free > total {
        problems.push(format!("free {free} > total {total}"));
    }
    if let Some(want) = o.get("total").map(|_| o.bytes("total", 0)) {
        if total as u64 != want {
            problems.push(format!("total {total} != --total {want}"));
        }
    }
    app.free(p);
    problems.iter().for_each(|m| eprintln!("standin_app: info: {m}"));
    problems.is_empty()
}

fn dlsym_direct(app: &App) -> bool {
    let s = app.stream(0);
    let sizes = [1 << 20, (3 << 20) + 12, 64 << 10];
    let bufs: Vec<(u64, usize)> = sizes.iter().map(|&b| (app.alloc(b), b / 4)).collect();
    for (k, &(p, words)) in bufs.iter().enumerate() {
        app.fill(s, p, words as u64, k as u32);
        app.add(s, p, words as u64, 7 + k as u32);
    }
    app.sync(s);
    let mut mismatches = 0;
    for (k, &(p, words)) in bufs.iter().enumerate() {
        let want: Vec<u32> = (0..words as u64).map(|i| hash(k as u32, i).wrapping_add(7 + k as u32)).collect();
        if mismatch(&format!("buffer {k}"), &app.dtoh(p, words), &want) {
            mismatches += 1;
        }
        app.free(p);
    }
    println!("dlsym-direct: {} buffers, mismatches: {mismatches}", bufs.len());
    mismatches == 0
}

type LaunchFn =
    unsafe extern "C" fn(CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CUstream, *mut *mut c_void, *mut *mut c_void) -> CUresult;
type HtoDAsyncFn = unsafe extern "C" fn(CUdeviceptr, *const c_void, usize, CUstream) -> CUresult;
type SyncFn = unsafe extern "C" fn(CUstream) -> CUresult;

fn procaddr_ptsz(app: &App) -> bool {
    let resolve = |name: &str| {
        let (mut p, mut status) = (null_mut(), 0);
        let flags = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
        // SAFETY: the name is NUL-terminated and lives through the call; the driver writes to
        // `p` and `status`, live locals.
        check(unsafe { (app.get_proc)(cstr(name).as_ptr(), &mut p, 13000, flags, &mut status) }, "cuGetProcAddress");
        p as usize
    };
    let (launch, htod, sync) = (resolve("cuLaunchKernel"), resolve("cuMemcpyHtoDAsync"), resolve("cuStreamSynchronize"));
    const ROUNDS: u32 = 10;
    const WORDS: usize = 64 << 10;
    let mismatches = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for t in 0..2u32 {
            let mismatches = &mismatches;
            scope.spawn(move || {
                // SAFETY: each address is the driver's entry point of that name, which has
                // the C signature of the type it becomes in cuda.h (the `_ptsz` variants
                // share their ABI with the plain ones).
                let (launch, htod, sync) = unsafe {
                    (
                        std::mem::transmute::<usize, LaunchFn>(launch),
                        std::mem::transmute::<usize, HtoDAsyncFn>(htod),
                        std::mem::transmute::<usize, SyncFn>(sync),
                    )
                };
                // SAFETY: only the context this program retained, by value.
                check(unsafe { (app.cu.ctx_set_current)(app.ctx) }, "cuCtxSetCurrent");
                let p = app.alloc(WORDS * 4);
                for round in 0..ROUNDS {
                    let data: Vec<u32> = (0..WORDS as u64).map(|i| hash(t * 1000 + round, i)).collect();
                    // SAFETY: the driver reads `WORDS * 4` bytes from `data`, which holds
                    // that many; a pageable source is taken before the call returns.
                    check(unsafe { htod(p, data.as_ptr() as *const c_void, WORDS * 4, null_mut()) }, "cuMemcpyHtoDAsync_ptsz");
                    let (mut q, mut n, mut v) = (p, WORDS as u64, round + t);
                    let mut params = [ptr(&mut q), ptr(&mut n), ptr(&mut v)];
                    // SAFETY: `params` holds a pointer to a live value for each of `add`'s
                    // parameters (8, 8 and 4 bytes), which the launch copies. No `extra`.
                    check(unsafe { launch(app.k.add, 1, 1, 1, 1, 1, 1, 0, null_mut(), params.as_mut_ptr(), null_mut()) }, "cuLaunchKernel_ptsz");
                    // SAFETY: only a value: null, the (per-thread) default stream.
                    check(unsafe { sync(null_mut()) }, "cuStreamSynchronize_ptsz");
                    let want: Vec<u32> = data.iter().map(|w| w.wrapping_add(round + t)).collect();
                    if mismatch(&format!("thread {t} round {round}"), &app.dtoh(p, WORDS), &want) {
                        mismatches.fetch_add(1, Ordering::SeqCst);
                    }
                }
                app.free(p);
            });
        }
    });
    let m = mismatches.load(Ordering::SeqCst);
    println!("procaddr-ptsz: 2 threads, {ROUNDS} rounds each, mismatches: {m}");
    m == 0
}

fn extra_params(app: &App, o: &Opts) -> bool {
    let cu = &app.cu;
    let words = 1000usize;
    let p = app.alloc(words * 4);
    let s = app.stream(0);
    // Filled on `s` right before each checked launch, so that under a memory limit the
    // launch must bring its buffers back (found through `extra` or the struct parameter).
    let ballast_words = o.bytes("ballast", 0) / 4;
    let ballast = (ballast_words > 0).then(|| app.alloc(ballast_words as usize * 4));
    let churn = |seed: u32| {
        if let Some(b) = ballast {
            app.fill(s, b, ballast_words, seed);
        }
    };
    let base: Vec<u32> = (0..words as u64).map(|i| hash(99, i)).collect();
    let mut expected = base.clone();
    app.htod(p, &base);
    let mut problems = Vec::new();
    let verify = |expected: &mut Vec<u32>, problems: &mut Vec<String>, what: &str, add: u32| {
        app.sync(s);
        expected.iter_mut().for_each(|w| *w = w.wrapping_add(add));
        if mismatch(what, &app.dtoh(p, words), expected) {
            problems.push(what.to_owned());
        }
    };

    // The parameter buffer is laid out at the offsets the driver reports.
    let info = |i: usize| {
        let (mut off, mut size) = (0, 0);
        // SAFETY: the driver writes to `off` and `size`, live locals.
        check(unsafe { (cu.func_get_param_info)(app.k.add, i, &mut off, &mut size) }, "cuFuncGetParamInfo");
        (off, size)
    };
    let layout = [info(0), info(1), info(2)];
    let mut buf_size = layout[2].0 + layout[2].1;
    let mut buf = vec![0u8; buf_size];
    let put = |buf: &mut [u8], i: usize, bytes: &[u8]| buf[layout[i].0..layout[i].0 + bytes.len()].copy_from_slice(bytes);
    put(&mut buf, 0, &p.to_le_bytes());
    put(&mut buf, 1, &(words as u64).to_le_bytes());
    put(&mut buf, 2, &3u32.to_le_bytes());
    let mut extra = [
        CU_LAUNCH_PARAM_BUFFER_POINTER as *mut c_void,
        buf.as_mut_ptr() as *mut c_void,
        CU_LAUNCH_PARAM_BUFFER_SIZE as *mut c_void,
        ptr(&mut buf_size),
        CU_LAUNCH_PARAM_END as *mut c_void,
    ];
    app.slow(s, p + words as u64 * 4 - 4, 50);
    expected[words - 1] = 1;
    churn(1);
    // SAFETY: `extra` is a well-formed array ending with `CU_LAUNCH_PARAM_END`: `buf`, laid out
    // at the offsets the driver reported, and its size in `buf_size`, both live through the
    // call, which copies them.
    let r = unsafe { (cu.launch_kernel)(app.k.add, 1, 1, 1, 1, 1, 1, 0, s, null_mut(), extra.as_mut_ptr()) };
    check(r, "cuLaunchKernel(extra)");
    // The driver copied the buffer at launch: changing it now must not matter.
    put(&mut buf, 2, &1000u32.to_le_bytes());
    verify(&mut expected, &mut problems, "cuLaunchKernel with extra", 3);

    let config = CUlaunchConfig {
        grid_dim_x: 2,
        grid_dim_y: 1,
        grid_dim_z: 1,
        block_dim_x: 64,
        block_dim_y: 1,
        block_dim_z: 1,
        shared_mem_bytes: 0,
        h_stream: s,
        attrs: null_mut(),
        num_attrs: 0,
    };
    let (mut q, mut n, mut v) = (p, words as u64, 11u32);
    let mut params = [ptr(&mut q), ptr(&mut n), ptr(&mut v)];
    churn(2);
    // SAFETY: `config` lives through the call; `params` holds a pointer to a live value for
    // each of `add`'s parameters (8, 8 and 4 bytes), which the launch copies.
    check(unsafe { (cu.launch_kernel_ex)(&config, app.k.add, params.as_mut_ptr(), null_mut()) }, "cuLaunchKernelEx");
    verify(&mut expected, &mut problems, "cuLaunchKernelEx with kernelParams", 11);

    put(&mut buf, 2, &5u32.to_le_bytes());
    churn(3);
    // SAFETY: `config` lives through the call; `extra` is as for the `cuLaunchKernel` above,
    // with `buf` and `buf_size` still live.
    check(unsafe { (cu.launch_kernel_ex)(&config, app.k.add, null_mut(), extra.as_mut_ptr()) }, "cuLaunchKernelEx(extra)");
    verify(&mut expected, &mut problems, "cuLaunchKernelEx with extra", 5);

    // mix, a CUkernel with a struct parameter, through extra at cuKernelGetParamInfo's offsets.
    let kinfo = |i: usize| {
        let (mut off, mut size) = (0, 0);
        // SAFETY: the driver writes to `off` and `size`, live locals.
        check(unsafe { (cu.kernel_get_param_info)(app.k.mix, i, &mut off, &mut size) }, "cuKernelGetParamInfo");
        (off, size)
    };
    let (m0, m1) = (kinfo(0), kinfo(1));
    if m0 != (0, 24) || m1 != (24, 4) {
        problems.push(format!("mix parameter layout {m0:?} {m1:?}"));
    }
    let other = app.alloc(words * 4);
    let ones = vec![1u32; words];
    app.htod(other, &ones);
    let mut mbuf = vec![0u8; m1.0 + m1.1];
    let mut msize = mbuf.len();
    mbuf[..8].copy_from_slice(&p.to_le_bytes());
    mbuf[8..16].copy_from_slice(&other.to_le_bytes());
    mbuf[16..24].copy_from_slice(&(words as u64).to_le_bytes());
    mbuf[m1.0..m1.0 + 4].copy_from_slice(&6u32.to_le_bytes());
    let mut mextra = [
        CU_LAUNCH_PARAM_BUFFER_POINTER as *mut c_void,
        mbuf.as_mut_ptr() as *mut c_void,
        CU_LAUNCH_PARAM_BUFFER_SIZE as *mut c_void,
        ptr(&mut msize),
        CU_LAUNCH_PARAM_END as *mut c_void,
    ];
    churn(4);
    // SAFETY: `mextra` is a well-formed array ending with `CU_LAUNCH_PARAM_END`: `mbuf`, laid
    // out at the offsets the driver reported, and its size in `msize`, both live through the
    // call, which copies them.
    let r = unsafe { (cu.launch_kernel)(app.k.mix as CUfunction, 1, 1, 1, 1, 1, 1, 0, s, null_mut(), mextra.as_mut_ptr()) };
    check(r, "cuLaunchKernel(mix, extra)");
    app.sync(s);
    let want: Vec<u32> = expected.iter().map(|w| w ^ 7).collect();
    if mismatch("mix through extra", &app.dtoh(p, words), &want) {
        problems.push("mix through extra".to_owned());
    }
    app.free(other);
    app.free(p);
    if let Some(b) = ballast {
        app.sync(s);
        app.free(b);
    }
    problems.iter().for_each(|m| eprintln!("standin_app: extra-params: {m}"));
    if problems.is_empty() {
        println!("extra-params: all 4 checks passed");
    }
    problems.is_empty()
}

/// One `add` over `--bytes` bytes: under a limit below them the launch cannot run and must
/// fail with CUDA_ERROR_OUT_OF_MEMORY (printed; anything else is a failure).
fn too_big(app: &App, o: &Opts) -> bool {
    let bytes = o.bytes("bytes", 64 << 20) / 4 * 4;
    let p = app.alloc(bytes as usize);
    let (mut q, mut n, mut v) = (p, bytes / 4, 1u32);
    let mut params = [ptr(&mut q), ptr(&mut n), ptr(&mut v)];
    // SAFETY: `params` holds a pointer to a live value for each of `add`'s parameters (8, 8 and
    // 4 bytes), which the launch copies. No `extra`.
    let r = unsafe { (app.cu.launch_kernel)(app.k.add, 1, 1, 1, 128, 1, 1, 0, null_mut(), params.as_mut_ptr(), null_mut()) };
    // SAFETY: no arguments.
    check(unsafe { (app.cu.ctx_synchronize)() }, "cuCtxSynchronize");
    app.free(p);
    println!("too-big: {bytes} bytes, launch result: {r}");
    r == CUDA_ERROR_OUT_OF_MEMORY
}

fn fault_unmapped(app: &App, o: &Opts) -> bool {
    let cu = &app.cu;
    let mode = o.get("mode").unwrap_or("launch");
    let s = app.stream(0);
    let reserve = |size: usize| {
        let mut va = 0;
        // SAFETY: the driver writes the reserved address to `va`, a live local.
        check(unsafe { (cu.mem_address_reserve)(&mut va, size, 0, 0, 0) }, "cuMemAddressReserve");
        va
    };
    match mode {
        "launch" => app.add(s, reserve(4 << 20), 1024, 1),
        "noaccess" => {
            let va = reserve(2 << 20);
            let mut h = 0;
            // SAFETY: `prop` is a temporary that lives through the call; the driver writes the
            // new handle to `h`, a live local.
            check(unsafe { (cu.mem_create)(&mut h, 2 << 20, &CUmemAllocationProp::device(0), 0) }, "cuMemCreate");
            // SAFETY: only values, no host memory: handles this program created, and device
            // addresses, which the driver checks.
            check(unsafe { (cu.mem_map)(va, 2 << 20, 0, h, 0) }, "cuMemMap");
            app.add(s, va, 1024, 1);
        }
        "copy" => app.htod(reserve(2 << 20), &[1, 2, 3, 4]),
        "stale" => {
            let p = app.alloc(1 << 20);
            app.free(p);
            app.dtoh(p, 4);
        }
        other => fail(format!("fault-unmapped: unknown --mode {other:?}")),
    }
    app.sync(s);
    println!("fault-unmapped: no fault detected (mode {mode})");
    false
}
