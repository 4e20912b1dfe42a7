//! The one registry of CUDA entry points gmux handles. Each line below defines the
//! exported symbol (found first through `LD_PRELOAD`), puts it in [`handled`] for the
//! `dlsym` and `cuGetProcAddress` overrides, and names its handler; `real` in a handler
//! calls the driver's own entry point of the same name with the same arguments.
//! Everything not listed reaches the real driver untouched.

use crate::api::{attr, boxcopy, command as cmd, graph, linear as lin, memory as mem, refuse, vmm};
use crate::capture;
use crate::cuda::*;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::sync::OnceLock;

macro_rules! exports {
    ($( $name:ident ( $($arg:ident : $ty:ty),* ) => $handler:expr; )*) => {
        $(
            #[no_mangle]
            #[allow(non_snake_case, unused_variables, clippy::missing_safety_doc)]
            #[doc = concat!("gmux's `", stringify!($name), "`.")]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> CUresult {
                static REAL: OnceLock<usize> = OnceLock::new();
                // The driver's answer, once the call has been forwarded: what the caller
                // gets if gmux panics after that.
                let forwarded = std::cell::Cell::new(None);
                static PROFILE: crate::profile::Entry = crate::profile::Entry::new(stringify!($name));
                // Settings are read here first in many processes: no panic may leave.
                let profiled = std::panic::catch_unwind(crate::profile::on).unwrap_or(false).then(std::time::Instant::now);
                let driver_ns = std::cell::Cell::new(0u64);
                let real = || -> CUresult {
                    let p = *REAL.get_or_init(|| {
                        let n = CString::new(stringify!($name)).expect("symbol name");
                        crate::driver::real_symbol(&n) as usize
                    });
                    if p == 0 {
                        return refuse::missing(stringify!($name));
                    }
                    // SAFETY: the driver's symbol of this name has this C signature.
                    let f: unsafe extern "C" fn($($ty),*) -> CUresult = unsafe { std::mem::transmute(p) };
                    let r = match profiled {
                        // SAFETY: the caller's arguments, forwarded unchanged.
                        Some(_) => crate::profile::driver(&driver_ns, || unsafe { f($($arg),*) }),
                        // SAFETY: the caller's arguments, forwarded unchanged.
                        None => unsafe { f($($arg),*) },
                    };
                    forwarded.set(Some(r));
                    r
                };
                if crate::record::asked() {
                    ENTRY.with(|e| e.set(stringify!($name)));
                }
                // No panic may unwind into the caller's C frames: it is caught here.
                let handled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    #[allow(unused_unsafe)]
                    // SAFETY: the handler's contract is the entry point's, which the
                    // caller of this export follows.
                    let r = unsafe { ($handler)(real) };
                    crate::api::guard::debug_panic(stringify!($name));
                    r
                }));
                let r = handled.unwrap_or_else(|p| crate::api::guard::caught(stringify!($name), p.as_ref(), forwarded.get()));
                if r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY {
                    crate::log!(Debug, "{} returned {r}", stringify!($name));
                }
                if let Some(since) = profiled {
                    PROFILE.add(since, driver_ns.get());
                }
                r
            }
        )*

        /// Every handled symbol and its wrapper's address.
        pub fn handled() -> &'static HashMap<&'static [u8], usize> {
            static TABLE: OnceLock<HashMap<&'static [u8], usize>> = OnceLock::new();
            TABLE.get_or_init(|| {
                let mut m = HashMap::new();
                $( m.insert(stringify!($name).as_bytes(), $name as *const () as usize); )*
                m
            })
        }
    };
}

thread_local! {
    /// The entry point the thread called last, kept only while a trace is recorded.
    static ENTRY: std::cell::Cell<&'static str> = const { std::cell::Cell::new("") };
}

/// The entry point the calling thread is in (the last one it called), by name, while a
/// trace is recorded (`""` otherwise).
pub fn entry() -> &'static str {
    ENTRY.with(std::cell::Cell::get)
}

type P = *mut c_void;
type Dp = CUdeviceptr;

exports! {
    // Entry-point lookup.
    cuGetProcAddress(s: *const c_char, pfn: *mut P, v: c_int, f: u64) => |real| crate::intercept::get_proc(real, s, pfn, v, f);
    cuGetProcAddress_v2(s: *const c_char, pfn: *mut P, v: c_int, f: u64, st: *mut c_int) => |real| crate::intercept::get_proc(real, s, pfn, v, f);

    // Virtual device memory.
    cuMemAlloc_v2(d: *mut Dp, n: usize) => |_| mem::alloc(d, n as u64);
    cuMemAllocPitch_v2(d: *mut Dp, pitch: *mut usize, w: usize, h: usize, e: c_uint) => |_| mem::alloc_pitch(d, pitch, w, h, e);
    cuMemAllocAsync(d: *mut Dp, n: usize, s: CUstream) => |_| mem::alloc_async(d, n as u64, s, false);
    cuMemAllocAsync_ptsz(d: *mut Dp, n: usize, s: CUstream) => |_| mem::alloc_async(d, n as u64, s, true);
    cuMemFree_v2(d: Dp) => |real| mem::free(real, d, None);
    cuMemFreeAsync(d: Dp, s: CUstream) => |real| mem::free_async(real, d, s, false);
    cuMemFreeAsync_ptsz(d: Dp, s: CUstream) => |real| mem::free_async(real, d, s, true);
    cuMemGetInfo_v2(free: *mut usize, total: *mut usize) => |real| mem::info(real, free, total);
    cuMemGetAddressRange_v2(b: *mut Dp, n: *mut usize, d: Dp) => |real| mem::range(real, b, n, d);
    cuPointerGetAttribute(data: P, a: c_uint, d: Dp) => |real| attr::one(real, data, a, d);
    cuPointerGetAttributes(n: c_uint, a: *mut c_uint, data: *mut P, d: Dp) => |real| attr::many(real, n, a, data, d);
    cuMemAllocManaged(d: *mut Dp, n: usize, fl: c_uint) => |real| mem::managed(real, d, n);
    cuMemPoolExportPointer(out: P, d: Dp) => |real| refuse::if_virtual(real, "cuMemPoolExportPointer", d, "another process cannot map memory gmux moves");
    cuMemAllocFromPoolAsync(d: *mut Dp, n: usize, pool: P, s: CUstream) => |_| mem::alloc_async(d, n as u64, s, false);
    cuMemAllocFromPoolAsync_ptsz(d: *mut Dp, n: usize, pool: P, s: CUstream) => |_| mem::alloc_async(d, n as u64, s, true);
    // The application's own VMM: this device's physical memory becomes gmux memory.
    cuMemCreate(h: *mut CUmemGenericAllocationHandle, n: usize, p: *const CUmemAllocationProp, fl: u64) => |real| vmm::create(real, h, n, p);
    cuMemRelease(h: CUmemGenericAllocationHandle) => |real| vmm::release(real, h);
    cuMemMap(d: Dp, n: usize, off: usize, h: CUmemGenericAllocationHandle, fl: u64) => |real| vmm::map(real, d, n, off, h);
    cuMemUnmap(d: Dp, n: usize) => |real| vmm::unmap(real, d, n);
    cuMemSetAccess(d: Dp, n: usize, desc: *const CUmemAccessDesc, k: usize) => |real| vmm::set_access(real, d, n);
    cuMemGetAllocationPropertiesFromHandle(p: *mut CUmemAllocationProp, h: CUmemGenericAllocationHandle) => |real| vmm::properties(real, p, h);
    cuMemRetainAllocationHandle(h: *mut CUmemGenericAllocationHandle, d: P) => |real| vmm::retain(real, h, d as Dp);
    cuMemExportToShareableHandle(s: P, h: CUmemGenericAllocationHandle, t: c_uint, fl: u64) => |real| vmm::export(real, h);
    cuIpcGetMemHandle(h: P, d: Dp) => |real| refuse::if_virtual(real, "cuIpcGetMemHandle", d, "CUDA IPC cannot share memory gmux migrates");
    cuTexObjectCreate(o: *mut u64, res: *const c_void, tex: P, view: P) => |real| crate::texture::created(real, o, res);
    cuTexObjectDestroy(o: u64) => |real| crate::texture::destroyed(real, o);

    // TMA tensor maps: their address is remembered for prediction.
    cuTensorMapEncodeTiled(m: P, dt: c_uint, rank: c_uint, a: P, dims: P, strides: P, bx: P, es: P, il: c_uint, sw: c_uint, l2: c_uint, oob: c_uint)
        => |real| mem::tensor_map(real, m, a);
    cuTensorMapEncodeIm2col(m: P, dt: c_uint, rank: c_uint, a: P, dims: P, strides: P, lo: P, hi: P, cpp: c_uint, ppc: c_uint, es: P, il: c_uint, sw: c_uint, l2: c_uint, oob: c_uint)
        => |real| mem::tensor_map(real, m, a);
    cuTensorMapEncodeIm2colWide(m: P, dt: c_uint, rank: c_uint, a: P, dims: P, strides: P, lo: c_int, hi: c_int, cpp: c_uint, ppc: c_uint, es: P, il: c_uint, mode: c_uint, sw: c_uint, l2: c_uint, oob: c_uint)
        => |real| mem::tensor_map(real, m, a);
    cuTensorMapReplaceAddress(m: P, a: P) => |real| mem::tensor_map(real, m, a);

    // Kernels.
    cuLaunchKernel(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, sh: c_uint, s: CUstream, p: *mut P, x: *mut P)
        => |real| cmd::kernel(real, f, s, false, p, x);
    cuLaunchKernel_ptsz(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, sh: c_uint, s: CUstream, p: *mut P, x: *mut P)
        => |real| cmd::kernel(real, f, s, true, p, x);
    cuLaunchKernelEx(c: *const CUlaunchConfig, f: CUfunction, p: *mut P, x: *mut P) => |real| cmd::kernel(real, f, (*c).h_stream, false, p, x);
    cuLaunchKernelEx_ptsz(c: *const CUlaunchConfig, f: CUfunction, p: *mut P, x: *mut P) => |real| cmd::kernel(real, f, (*c).h_stream, true, p, x);
    cuLaunchCooperativeKernel(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, sh: c_uint, s: CUstream, p: *mut P)
        => |real| cmd::kernel(real, f, s, false, p, std::ptr::null_mut());
    cuLaunchCooperativeKernel_ptsz(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, sh: c_uint, s: CUstream, p: *mut P)
        => |real| cmd::kernel(real, f, s, true, p, std::ptr::null_mut());

    // Graphs: captured commands pass through; what a launch touches is read from the
    // graph's nodes at instantiation and kept up to date through updates.
    cuStreamBeginCapture(s: CUstream) => |real| capture::begin(real, s, false);
    cuStreamBeginCapture_ptsz(s: CUstream) => |real| capture::begin(real, s, true);
    cuStreamBeginCapture_v2(s: CUstream, m: c_uint) => |real| capture::begin(real, s, false);
    cuStreamBeginCapture_v2_ptsz(s: CUstream, m: c_uint) => |real| capture::begin(real, s, true);
    cuStreamBeginCaptureToGraph(s: CUstream, g: CUgraph, d: P, e: P, n: usize, m: c_uint) => |real| capture::begin(real, s, false);
    cuStreamBeginCaptureToGraph_ptsz(s: CUstream, g: CUgraph, d: P, e: P, n: usize, m: c_uint) => |real| capture::begin(real, s, true);
    cuStreamDestroy(s: CUstream) => |real| cmd::stream_destroyed(real, s);
    cuStreamDestroy_v2(s: CUstream) => |real| cmd::stream_destroyed(real, s);
    cuStreamEndCapture(s: CUstream, g: *mut CUgraph) => |real| capture::end(real, s, false);
    cuStreamEndCapture_ptsz(s: CUstream, g: *mut CUgraph) => |real| capture::end(real, s, true);
    cuGraphInstantiate(e: *mut CUgraphExec, g: CUgraph, en: P, log: *mut c_char, n: usize) => |real| graph::instantiate(real, e, g);
    cuGraphInstantiate_v2(e: *mut CUgraphExec, g: CUgraph, en: P, log: *mut c_char, n: usize) => |real| graph::instantiate(real, e, g);
    cuGraphInstantiateWithFlags(e: *mut CUgraphExec, g: CUgraph, fl: u64) => |real| graph::instantiate(real, e, g);
    cuGraphInstantiateWithParams(e: *mut CUgraphExec, g: CUgraph, p: P) => |real| graph::instantiate(real, e, g);
    cuGraphInstantiateWithParams_ptsz(e: *mut CUgraphExec, g: CUgraph, p: P) => |real| graph::instantiate(real, e, g);
    cuGraphExecUpdate(e: CUgraphExec, g: CUgraph, en: P, res: P) => |real| graph::update(real, e, g);
    cuGraphExecUpdate_v2(e: CUgraphExec, g: CUgraph, info: P) => |real| graph::update(real, e, g);
    cuGraphExecKernelNodeSetParams(e: CUgraphExec, n: CUgraphNode, p: *const c_void) => |real| graph::set_kernel_v1(real, e, n, p);
    cuGraphExecKernelNodeSetParams_v2(e: CUgraphExec, n: CUgraphNode, p: *const CUDA_KERNEL_NODE_PARAMS_v2) => |real| graph::set_kernel(real, e, n, p);
    cuGraphExecMemsetNodeSetParams(e: CUgraphExec, n: CUgraphNode, p: *const CUDA_MEMSET_NODE_PARAMS, c: CUcontext) => |real| graph::set_memset(real, e, n, p);
    cuGraphExecMemcpyNodeSetParams(e: CUgraphExec, n: CUgraphNode, p: *const CUDA_MEMCPY3D, c: CUcontext) => |real| graph::set_memcpy(real, e, n, p);
    cuGraphExecChildGraphNodeSetParams(e: CUgraphExec, n: CUgraphNode, g: CUgraph) => |real| graph::set_child(real, e, n, g);
    cuGraphExecNodeSetParams(e: CUgraphExec, n: CUgraphNode, p: P) => |real| graph::node_over(|| graph::set_any(real, e, n), "cuGraphExecNodeSetParams", &graph::generic_ranges(p));
    cuGraphExecDestroy(e: CUgraphExec) => |real| graph::destroy(real, e);
    cuGraphNodeSetEnabled(e: CUgraphExec, n: CUgraphNode, on: c_uint) => |real| graph::changed(real, e);
    cuGraphExecHostNodeSetParams(e: CUgraphExec, n: CUgraphNode, p: P) => |real| graph::changed(real, e);
    cuGraphExecEventRecordNodeSetEvent(e: CUgraphExec, n: CUgraphNode, ev: CUevent) => |real| graph::changed(real, e);
    cuGraphExecEventWaitNodeSetEvent(e: CUgraphExec, n: CUgraphNode, ev: CUevent) => |real| graph::changed(real, e);
    cuGraphExecExternalSemaphoresSignalNodeSetParams(e: CUgraphExec, n: CUgraphNode, p: P) => |real| graph::changed(real, e);
    cuGraphExecExternalSemaphoresWaitNodeSetParams(e: CUgraphExec, n: CUgraphNode, p: P) => |real| graph::changed(real, e);
    cuGraphExecBatchMemOpNodeSetParams(e: CUgraphExec, n: CUgraphNode, p: P) => |real| graph::changed(real, e);
    cuGraphAddMemcpyNode(n: *mut CUgraphNode, g: CUgraph, d: P, k: usize, p: *const CUDA_MEMCPY3D, c: CUcontext) => |real| graph::node_over(real, "cuGraphAddMemcpyNode", &cmd::memcpy_node_ranges(p));
    cuGraphAddMemsetNode(n: *mut CUgraphNode, g: CUgraph, d: P, k: usize, p: *const CUDA_MEMSET_NODE_PARAMS, c: CUcontext) => |real| graph::node_over(real, "cuGraphAddMemsetNode", &p.as_ref().map(|p| vec![crate::graph::memset_range(p)]).unwrap_or_default());
    cuGraphMemcpyNodeSetParams(n: CUgraphNode, p: *const CUDA_MEMCPY3D) => |real| graph::node_over(real, "cuGraphMemcpyNodeSetParams", &cmd::memcpy_node_ranges(p));
    cuGraphMemsetNodeSetParams(n: CUgraphNode, p: *const CUDA_MEMSET_NODE_PARAMS) => |real| graph::node_over(real, "cuGraphMemsetNodeSetParams", &p.as_ref().map(|p| vec![crate::graph::memset_range(p)]).unwrap_or_default());
    cuGraphAddNode(n: *mut CUgraphNode, g: CUgraph, d: P, k: usize, p: P) => |real| graph::node_over(real, "cuGraphAddNode", &graph::generic_ranges(p));
    cuGraphAddNode_v2(n: *mut CUgraphNode, g: CUgraph, d: P, e: P, k: usize, p: P) => |real| graph::node_over(real, "cuGraphAddNode_v2", &graph::generic_ranges(p));
    cuGraphNodeSetParams(n: CUgraphNode, p: P) => |real| graph::node_over(real, "cuGraphNodeSetParams", &graph::generic_ranges(p));
    cuGraphLaunch(g: CUgraphExec, s: CUstream) => |real| cmd::graph(real, g, s, false);
    cuGraphLaunch_ptsz(g: CUgraphExec, s: CUstream) => |real| cmd::graph(real, g, s, true);

    // Copies: synchronous ones run on the legacy (or, `_ptds`, per-thread) default stream.
    cuMemcpyHtoD_v2(d: Dp, h: *const c_void, n: usize) => |real| lin::upload(real, d, h, n, std::ptr::null_mut(), false, true);
    cuMemcpyHtoD_v2_ptds(d: Dp, h: *const c_void, n: usize) => |real| lin::upload(real, d, h, n, std::ptr::null_mut(), true, true);
    cuMemcpyDtoH_v2(h: P, d: Dp, n: usize) => |real| lin::download(real, h, d, n, std::ptr::null_mut(), false, true);
    cuMemcpyDtoH_v2_ptds(h: P, d: Dp, n: usize) => |real| lin::download(real, h, d, n, std::ptr::null_mut(), true, true);
    cuMemcpyDtoD_v2(d: Dp, s: Dp, n: usize) => |real| lin::device_copy(real, d, s, n, std::ptr::null_mut(), false, true);
    cuMemcpyDtoD_v2_ptds(d: Dp, s: Dp, n: usize) => |real| lin::device_copy(real, d, s, n, std::ptr::null_mut(), true, true);
    cuMemcpy(d: Dp, s: Dp, n: usize) => |real| lin::unified_copy(real, d, s, n, std::ptr::null_mut(), false, true);
    cuMemcpy_ptds(d: Dp, s: Dp, n: usize) => |real| lin::unified_copy(real, d, s, n, std::ptr::null_mut(), true, true);
    cuMemcpyHtoDAsync_v2(d: Dp, h: *const c_void, n: usize, s: CUstream) => |real| lin::upload(real, d, h, n, s, false, false);
    cuMemcpyHtoDAsync_v2_ptsz(d: Dp, h: *const c_void, n: usize, s: CUstream) => |real| lin::upload(real, d, h, n, s, true, false);
    cuMemcpyDtoHAsync_v2(h: P, d: Dp, n: usize, s: CUstream) => |real| lin::download(real, h, d, n, s, false, false);
    cuMemcpyDtoHAsync_v2_ptsz(h: P, d: Dp, n: usize, s: CUstream) => |real| lin::download(real, h, d, n, s, true, false);
    cuMemcpyDtoDAsync_v2(d: Dp, x: Dp, n: usize, s: CUstream) => |real| lin::device_copy(real, d, x, n, s, false, false);
    cuMemcpyDtoDAsync_v2_ptsz(d: Dp, x: Dp, n: usize, s: CUstream) => |real| lin::device_copy(real, d, x, n, s, true, false);
    cuMemcpyAsync(d: Dp, x: Dp, n: usize, s: CUstream) => |real| lin::unified_copy(real, d, x, n, s, false, false);
    cuMemcpyAsync_ptsz(d: Dp, x: Dp, n: usize, s: CUstream) => |real| lin::unified_copy(real, d, x, n, s, true, false);
    cuMemcpy2D_v2(c: *const c_void) => |real| boxcopy::copy2d(real, c, std::ptr::null_mut(), false, true);
    cuMemcpy2D_v2_ptds(c: *const c_void) => |real| boxcopy::copy2d(real, c, std::ptr::null_mut(), true, true);
    cuMemcpy2DUnaligned_v2(c: *const c_void) => |real| boxcopy::copy2d(real, c, std::ptr::null_mut(), false, true);
    cuMemcpy2DUnaligned_v2_ptds(c: *const c_void) => |real| boxcopy::copy2d(real, c, std::ptr::null_mut(), true, true);
    cuMemcpy2DAsync_v2(c: *const c_void, s: CUstream) => |real| boxcopy::copy2d(real, c, s, false, false);
    cuMemcpy2DAsync_v2_ptsz(c: *const c_void, s: CUstream) => |real| boxcopy::copy2d(real, c, s, true, false);
    cuMemcpy3D_v2(c: *const CUDA_MEMCPY3D) => |real| boxcopy::copy3d(real, c, std::ptr::null_mut(), false, true);
    cuMemcpy3D_v2_ptds(c: *const CUDA_MEMCPY3D) => |real| boxcopy::copy3d(real, c, std::ptr::null_mut(), true, true);
    cuMemcpy3DAsync_v2(c: *const CUDA_MEMCPY3D, s: CUstream) => |real| boxcopy::copy3d(real, c, s, false, false);
    cuMemcpy3DAsync_v2_ptsz(c: *const CUDA_MEMCPY3D, s: CUstream) => |real| boxcopy::copy3d(real, c, s, true, false);

    // Memsets.
    cuMemsetD8_v2(d: Dp, v: u8, n: usize) => |real| lin::memset(real, d, 1, v as u32, n, std::ptr::null_mut(), false, true);
    cuMemsetD8_v2_ptds(d: Dp, v: u8, n: usize) => |real| lin::memset(real, d, 1, v as u32, n, std::ptr::null_mut(), true, true);
    cuMemsetD16_v2(d: Dp, v: u16, n: usize) => |real| lin::memset(real, d, 2, v as u32, n, std::ptr::null_mut(), false, true);
    cuMemsetD16_v2_ptds(d: Dp, v: u16, n: usize) => |real| lin::memset(real, d, 2, v as u32, n, std::ptr::null_mut(), true, true);
    cuMemsetD32_v2(d: Dp, v: c_uint, n: usize) => |real| lin::memset(real, d, 4, v as u32, n, std::ptr::null_mut(), false, true);
    cuMemsetD32_v2_ptds(d: Dp, v: c_uint, n: usize) => |real| lin::memset(real, d, 4, v as u32, n, std::ptr::null_mut(), true, true);
    cuMemsetD8Async(d: Dp, v: u8, n: usize, s: CUstream) => |real| lin::memset(real, d, 1, v as u32, n, s, false, false);
    cuMemsetD8Async_ptsz(d: Dp, v: u8, n: usize, s: CUstream) => |real| lin::memset(real, d, 1, v as u32, n, s, true, false);
    cuMemsetD16Async(d: Dp, v: u16, n: usize, s: CUstream) => |real| lin::memset(real, d, 2, v as u32, n, s, false, false);
    cuMemsetD16Async_ptsz(d: Dp, v: u16, n: usize, s: CUstream) => |real| lin::memset(real, d, 2, v as u32, n, s, true, false);
    cuMemsetD32Async(d: Dp, v: c_uint, n: usize, s: CUstream) => |real| lin::memset(real, d, 4, v as u32, n, s, false, false);
    cuMemsetD32Async_ptsz(d: Dp, v: c_uint, n: usize, s: CUstream) => |real| lin::memset(real, d, 4, v as u32, n, s, true, false);
    cuMemsetD2D8_v2(d: Dp, p: usize, v: u8, w: usize, h: usize) => |real| cmd::sync_op(real, &[d], false);
    cuMemsetD2D8_v2_ptds(d: Dp, p: usize, v: u8, w: usize, h: usize) => |real| cmd::sync_op(real, &[d], true);
    cuMemsetD2D16_v2(d: Dp, p: usize, v: u16, w: usize, h: usize) => |real| cmd::sync_op(real, &[d], false);
    cuMemsetD2D16_v2_ptds(d: Dp, p: usize, v: u16, w: usize, h: usize) => |real| cmd::sync_op(real, &[d], true);
    cuMemsetD2D32_v2_ptds(d: Dp, p: usize, v: c_uint, w: usize, h: usize) => |real| cmd::sync_op(real, &[d], true);
    cuMemsetD2D8Async_ptsz(d: Dp, p: usize, v: u8, w: usize, h: usize, s: CUstream) => |real| cmd::op(real, &[d], s, true);
    cuMemsetD2D16Async(d: Dp, p: usize, v: u16, w: usize, h: usize, s: CUstream) => |real| cmd::op(real, &[d], s, false);
    cuMemsetD2D16Async_ptsz(d: Dp, p: usize, v: u16, w: usize, h: usize, s: CUstream) => |real| cmd::op(real, &[d], s, true);
    cuMemsetD2D32Async_ptsz(d: Dp, p: usize, v: c_uint, w: usize, h: usize, s: CUstream) => |real| cmd::op(real, &[d], s, true);
    cuMemsetD2D32_v2(d: Dp, p: usize, v: c_uint, w: usize, h: usize) => |real| cmd::sync_op(real, &[d], false);
    cuMemsetD2D8Async(d: Dp, p: usize, v: u8, w: usize, h: usize, s: CUstream) => |real| cmd::op(real, &[d], s, false);
    cuMemsetD2D32Async(d: Dp, p: usize, v: c_uint, w: usize, h: usize, s: CUstream) => |real| cmd::op(real, &[d], s, false);

    // Batched copies: every address of the batch.
    cuMemcpyBatchAsync(d: *const Dp, x: *const Dp, n: *const usize, k: usize, a: P, ai: P, na: usize, fail: P, s: CUstream) => |real| cmd::op(real, &cmd::batch_ptrs(d, x, k), s, false);
    cuMemcpyBatchAsync_ptsz(d: *const Dp, x: *const Dp, n: *const usize, k: usize, a: P, ai: P, na: usize, fail: P, s: CUstream) => |real| cmd::op(real, &cmd::batch_ptrs(d, x, k), s, true);
    cuMemcpyBatchAsync_v2(d: *const Dp, x: *const Dp, n: *const usize, k: usize, a: P, ai: P, na: usize, s: CUstream) => |real| cmd::op(real, &cmd::batch_ptrs(d, x, k), s, false);
    cuMemcpyBatchAsync_v2_ptsz(d: *const Dp, x: *const Dp, n: *const usize, k: usize, a: P, ai: P, na: usize, s: CUstream) => |real| cmd::op(real, &cmd::batch_ptrs(d, x, k), s, true);

    // Stream memory operations take a device address.
    cuStreamWriteValue32(s: CUstream, d: Dp, v: c_uint, fl: c_uint) => |real| cmd::op(real, &[d], s, false);
    cuStreamWriteValue32_ptsz(s: CUstream, d: Dp, v: c_uint, fl: c_uint) => |real| cmd::op(real, &[d], s, true);
    cuStreamWriteValue32_v2(s: CUstream, d: Dp, v: c_uint, fl: c_uint) => |real| cmd::op(real, &[d], s, false);
    cuStreamWriteValue32_v2_ptsz(s: CUstream, d: Dp, v: c_uint, fl: c_uint) => |real| cmd::op(real, &[d], s, true);
    cuStreamWriteValue64(s: CUstream, d: Dp, v: u64, fl: c_uint) => |real| cmd::op(real, &[d], s, false);
    cuStreamWriteValue64_ptsz(s: CUstream, d: Dp, v: u64, fl: c_uint) => |real| cmd::op(real, &[d], s, true);
    cuStreamWriteValue64_v2(s: CUstream, d: Dp, v: u64, fl: c_uint) => |real| cmd::op(real, &[d], s, false);
    cuStreamWriteValue64_v2_ptsz(s: CUstream, d: Dp, v: u64, fl: c_uint) => |real| cmd::op(real, &[d], s, true);
    cuStreamWaitValue32(s: CUstream, d: Dp, v: c_uint, fl: c_uint) => |real| cmd::op(real, &[d], s, false);
    cuStreamWaitValue32_ptsz(s: CUstream, d: Dp, v: c_uint, fl: c_uint) => |real| cmd::op(real, &[d], s, true);
    cuStreamWaitValue32_v2(s: CUstream, d: Dp, v: c_uint, fl: c_uint) => |real| cmd::op(real, &[d], s, false);
    cuStreamWaitValue32_v2_ptsz(s: CUstream, d: Dp, v: c_uint, fl: c_uint) => |real| cmd::op(real, &[d], s, true);
    cuStreamWaitValue64(s: CUstream, d: Dp, v: u64, fl: c_uint) => |real| cmd::op(real, &[d], s, false);
    cuStreamWaitValue64_ptsz(s: CUstream, d: Dp, v: u64, fl: c_uint) => |real| cmd::op(real, &[d], s, true);
    cuStreamWaitValue64_v2(s: CUstream, d: Dp, v: u64, fl: c_uint) => |real| cmd::op(real, &[d], s, false);
    cuStreamWaitValue64_v2_ptsz(s: CUstream, d: Dp, v: u64, fl: c_uint) => |real| cmd::op(real, &[d], s, true);

    // Synchronization: forwarded, then in-flight bookkeeping catches up.
    cuStreamSynchronize(s: CUstream) => |real| cmd::synced(real, s, false);
    cuStreamSynchronize_ptsz(s: CUstream) => |real| cmd::synced(real, s, true);
    cuProfilerStart() => crate::record::profiler_start;
    cuCtxSynchronize() => cmd::synced_all;
    cuCtxSynchronize_v2(c: CUcontext) => |real| cmd::synced_context(real, c);

    // Copies between devices, contexts named.
    cuMemcpyPeer(d: Dp, dc: CUcontext, s: Dp, sc: CUcontext, n: usize) => |real| lin::peer_copy(real, d, dc, s, sc, n, std::ptr::null_mut(), false, true);
    cuMemcpyPeer_ptds(d: Dp, dc: CUcontext, s: Dp, sc: CUcontext, n: usize) => |real| lin::peer_copy(real, d, dc, s, sc, n, std::ptr::null_mut(), true, true);
    cuMemcpyPeerAsync(d: Dp, dc: CUcontext, s: Dp, sc: CUcontext, n: usize, st: CUstream) => |real| lin::peer_copy(real, d, dc, s, sc, n, st, false, false);
    cuMemcpyPeerAsync_ptsz(d: Dp, dc: CUcontext, s: Dp, sc: CUcontext, n: usize, st: CUstream) => |real| lin::peer_copy(real, d, dc, s, sc, n, st, true, false);
}
