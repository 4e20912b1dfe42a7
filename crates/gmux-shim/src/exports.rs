//! The one registry of CUDA entry points gmux handles. Each line below defines the
//! exported symbol (found first through `LD_PRELOAD`), puts it in [`handled`] for the
//! `dlsym` and `cuGetProcAddress` overrides, and names its handler; `real` in a handler
//! calls the driver's own entry point of the same name with the same arguments.
//! Everything not listed reaches the real driver untouched.

use crate::api::{attr, command as cmd, memory as mem, refuse};
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
                    // SAFETY: the caller's arguments, forwarded unchanged.
                    let r = unsafe { f($($arg),*) };
                    forwarded.set(Some(r));
                    r
                };
                // No panic may unwind into the caller's C frames: it is caught here.
                let handled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    #[allow(unused_unsafe)]
                    // SAFETY: the handler's contract is the entry point's, which the
                    // caller of this export follows.
                    let r = unsafe { ($handler)(real) };
                    crate::api::guard::debug_panic(stringify!($name));
                    r
                }));
                handled.unwrap_or_else(|p| crate::api::guard::caught(stringify!($name), p.as_ref(), forwarded.get()))
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

type P = *mut c_void;
type Dp = CUdeviceptr;

exports! {
    // Entry-point lookup.
    cuGetProcAddress(s: *const c_char, pfn: *mut P, v: c_int, f: u64) => |real| crate::intercept::get_proc(real, s, pfn, v, f);
    cuGetProcAddress_v2(s: *const c_char, pfn: *mut P, v: c_int, f: u64, st: *mut c_int) => |real| crate::intercept::get_proc(real, s, pfn, v, f);

    // Virtual device memory.
    cuMemAlloc_v2(d: *mut Dp, n: usize) => |_| mem::alloc(d, n as u64);
    cuMemAllocPitch_v2(d: *mut Dp, pitch: *mut usize, w: usize, h: usize, e: c_uint) => |_| mem::alloc_pitch(d, pitch, w, h, e);
    cuMemAllocAsync(d: *mut Dp, n: usize, s: CUstream) => |_| mem::alloc(d, n as u64);
    cuMemAllocAsync_ptsz(d: *mut Dp, n: usize, s: CUstream) => |_| mem::alloc(d, n as u64);
    cuMemFree_v2(d: Dp) => |real| mem::free(real, d);
    cuMemFreeAsync(d: Dp, s: CUstream) => |real| mem::free(real, d);
    cuMemFreeAsync_ptsz(d: Dp, s: CUstream) => |real| mem::free(real, d);
    cuMemGetInfo_v2(free: *mut usize, total: *mut usize) => |real| mem::info(real, free, total);
    cuMemGetAddressRange_v2(b: *mut Dp, n: *mut usize, d: Dp) => |real| mem::range(real, b, n, d);
    cuPointerGetAttribute(data: P, a: c_uint, d: Dp) => |real| attr::one(real, data, a, d);
    cuPointerGetAttributes(n: c_uint, a: *mut c_uint, data: *mut P, d: Dp) => |real| attr::many(real, n, a, data, d);
    cuMemAllocManaged(d: *mut Dp, n: usize, fl: c_uint) => |real| mem::passthrough(real, "cuMemAllocManaged");
    cuMemAllocFromPoolAsync(d: *mut Dp, n: usize, pool: P, s: CUstream) => |real| mem::passthrough(real, "cuMemAllocFromPoolAsync");
    cuMemAllocFromPoolAsync_ptsz(d: *mut Dp, n: usize, pool: P, s: CUstream) => |real| mem::passthrough(real, "cuMemAllocFromPoolAsync");
    cuIpcGetMemHandle(h: P, d: Dp) => |real| refuse::if_virtual(real, "cuIpcGetMemHandle", d, "CUDA IPC cannot share memory gmux migrates");
    cuTexObjectCreate(o: P, res: *const c_void, tex: P, view: P) => |real| refuse::texture(real, res);

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
    cuGraphLaunch(g: CUgraphExec, s: CUstream) => |real| cmd::whole_tenant(real, "cuGraphLaunch", s, false);
    cuGraphLaunch_ptsz(g: CUgraphExec, s: CUstream) => |real| cmd::whole_tenant(real, "cuGraphLaunch", s, true);

    // Copies: synchronous ones run on the legacy (or, `_ptds`, per-thread) default stream.
    cuMemcpyHtoD_v2(d: Dp, h: *const c_void, n: usize) => |real| cmd::upload(real, d, h, n, std::ptr::null_mut(), false);
    cuMemcpyHtoD_v2_ptds(d: Dp, h: *const c_void, n: usize) => |real| cmd::upload(real, d, h, n, std::ptr::null_mut(), true);
    cuMemcpyDtoH_v2(h: P, d: Dp, n: usize) => |real| cmd::sync_op(real, &[d], false);
    cuMemcpyDtoH_v2_ptds(h: P, d: Dp, n: usize) => |real| cmd::sync_op(real, &[d], true);
    cuMemcpyDtoD_v2(d: Dp, s: Dp, n: usize) => |real| cmd::sync_op(real, &[d, s], false);
    cuMemcpyDtoD_v2_ptds(d: Dp, s: Dp, n: usize) => |real| cmd::sync_op(real, &[d, s], true);
    cuMemcpy(d: Dp, s: Dp, n: usize) => |real| cmd::sync_op(real, &[d, s], false);
    cuMemcpy_ptds(d: Dp, s: Dp, n: usize) => |real| cmd::sync_op(real, &[d, s], true);
    cuMemcpyHtoDAsync_v2(d: Dp, h: *const c_void, n: usize, s: CUstream) => |real| cmd::upload(real, d, h, n, s, false);
    cuMemcpyHtoDAsync_v2_ptsz(d: Dp, h: *const c_void, n: usize, s: CUstream) => |real| cmd::upload(real, d, h, n, s, true);
    cuMemcpyDtoHAsync_v2(h: P, d: Dp, n: usize, s: CUstream) => |real| cmd::op(real, &[d], s, false);
    cuMemcpyDtoHAsync_v2_ptsz(h: P, d: Dp, n: usize, s: CUstream) => |real| cmd::op(real, &[d], s, true);
    cuMemcpyDtoDAsync_v2(d: Dp, x: Dp, n: usize, s: CUstream) => |real| cmd::op(real, &[d, x], s, false);
    cuMemcpyDtoDAsync_v2_ptsz(d: Dp, x: Dp, n: usize, s: CUstream) => |real| cmd::op(real, &[d, x], s, true);
    cuMemcpyAsync(d: Dp, x: Dp, n: usize, s: CUstream) => |real| cmd::op(real, &[d, x], s, false);
    cuMemcpyAsync_ptsz(d: Dp, x: Dp, n: usize, s: CUstream) => |real| cmd::op(real, &[d, x], s, true);
    cuMemcpy2D_v2(c: *const c_void) => |real| cmd::sync_op(real, &cmd::memcpy2d_ptrs(c), false);
    cuMemcpy2D_v2_ptds(c: *const c_void) => |real| cmd::sync_op(real, &cmd::memcpy2d_ptrs(c), true);
    cuMemcpy2DUnaligned_v2(c: *const c_void) => |real| cmd::sync_op(real, &cmd::memcpy2d_ptrs(c), false);
    cuMemcpy2DUnaligned_v2_ptds(c: *const c_void) => |real| cmd::sync_op(real, &cmd::memcpy2d_ptrs(c), true);
    cuMemcpy2DAsync_v2(c: *const c_void, s: CUstream) => |real| cmd::op(real, &cmd::memcpy2d_ptrs(c), s, false);
    cuMemcpy2DAsync_v2_ptsz(c: *const c_void, s: CUstream) => |real| cmd::op(real, &cmd::memcpy2d_ptrs(c), s, true);

    // Memsets.
    cuMemsetD8_v2(d: Dp, v: u8, n: usize) => |real| cmd::sync_op(real, &[d], false);
    cuMemsetD8_v2_ptds(d: Dp, v: u8, n: usize) => |real| cmd::sync_op(real, &[d], true);
    cuMemsetD16_v2(d: Dp, v: u16, n: usize) => |real| cmd::sync_op(real, &[d], false);
    cuMemsetD16_v2_ptds(d: Dp, v: u16, n: usize) => |real| cmd::sync_op(real, &[d], true);
    cuMemsetD32_v2(d: Dp, v: c_uint, n: usize) => |real| cmd::sync_op(real, &[d], false);
    cuMemsetD32_v2_ptds(d: Dp, v: c_uint, n: usize) => |real| cmd::sync_op(real, &[d], true);
    cuMemsetD8Async(d: Dp, v: u8, n: usize, s: CUstream) => |real| cmd::op(real, &[d], s, false);
    cuMemsetD8Async_ptsz(d: Dp, v: u8, n: usize, s: CUstream) => |real| cmd::op(real, &[d], s, true);
    cuMemsetD16Async(d: Dp, v: u16, n: usize, s: CUstream) => |real| cmd::op(real, &[d], s, false);
    cuMemsetD16Async_ptsz(d: Dp, v: u16, n: usize, s: CUstream) => |real| cmd::op(real, &[d], s, true);
    cuMemsetD32Async(d: Dp, v: c_uint, n: usize, s: CUstream) => |real| cmd::op(real, &[d], s, false);
    cuMemsetD32Async_ptsz(d: Dp, v: c_uint, n: usize, s: CUstream) => |real| cmd::op(real, &[d], s, true);
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
    cuCtxSynchronize() => cmd::synced_all;
    cuCtxSynchronize_v2(c: CUcontext) => cmd::synced_all;

    // Refused by name, with the reason (see docs/compatibility.md).
    cuMemcpy3D_v2(c: *const c_void) => |_| refuse::call("cuMemcpy3D", "3D copies are not virtualized yet");
    cuMemcpy3D_v2_ptds(c: *const c_void) => |_| refuse::call("cuMemcpy3D", "3D copies are not virtualized yet");
    cuMemcpy3DAsync_v2(c: *const c_void, s: CUstream) => |_| refuse::call("cuMemcpy3DAsync", "3D copies are not virtualized yet");
    cuMemcpy3DAsync_v2_ptsz(c: *const c_void, s: CUstream) => |_| refuse::call("cuMemcpy3DAsync", "3D copies are not virtualized yet");
    cuMemcpyPeer(d: Dp, dc: CUcontext, s: Dp, sc: CUcontext, n: usize) => |_| refuse::call("cuMemcpyPeer", "gmux serves one device per process");
    cuMemcpyPeer_ptds(d: Dp, dc: CUcontext, s: Dp, sc: CUcontext, n: usize) => |_| refuse::call("cuMemcpyPeer", "gmux serves one device per process");
    cuMemcpyPeerAsync(d: Dp, dc: CUcontext, s: Dp, sc: CUcontext, n: usize, st: CUstream) => |_| refuse::call("cuMemcpyPeerAsync", "gmux serves one device per process");
    cuMemcpyPeerAsync_ptsz(d: Dp, dc: CUcontext, s: Dp, sc: CUcontext, n: usize, st: CUstream) => |_| refuse::call("cuMemcpyPeerAsync", "gmux serves one device per process");
    cuStreamBeginCapture(s: CUstream) => |_| refuse::call("cuStreamBeginCapture", "stream capture records launches that gmux must see at run time; launch graphs built without capture instead");
    cuStreamBeginCapture_ptsz(s: CUstream) => |_| refuse::call("cuStreamBeginCapture", "stream capture records launches that gmux must see at run time; launch graphs built without capture instead");
    cuStreamBeginCapture_v2(s: CUstream, m: c_uint) => |_| refuse::call("cuStreamBeginCapture", "stream capture records launches that gmux must see at run time; launch graphs built without capture instead");
    cuStreamBeginCapture_v2_ptsz(s: CUstream, m: c_uint) => |_| refuse::call("cuStreamBeginCapture", "stream capture records launches that gmux must see at run time; launch graphs built without capture instead");
}
