//! Copies and memsets. Each is an operation on a stream; device bytes are checked when
//! it executes. Synchronous forms run on the legacy (or, `_ptds`, per-thread) default
//! stream and wait. Asynchronous forms read and write pinned host memory when they
//! execute; a pageable source is copied at call time and a pageable destination makes
//! the call wait, as in CUDA. On a capturing stream an asynchronous one becomes a graph
//! node instead, which reads and writes host memory when the graph runs.

use std::ffi::c_void;

use cuda_abi::*;

use super::{code, resolve_stream, NullStream, SendPtr};
use crate::capture::{self, Route};
use crate::copy3d::{Copy3d, Mem};
use crate::exec::{self, StreamId};
use crate::graph::Op;
use crate::memory::{count, counter, dev_read, dev_write, mem};

#[derive(Clone, Copy)]
enum Loc {
    Device(u64),
    Host(*mut c_void),
}

impl Loc {
    fn mem(self) -> Mem {
        match self {
            Loc::Device(d) => Mem::Device(d),
            Loc::Host(p) => Mem::Host(p as usize),
        }
    }
}

/// Synchronous (on the legacy or per-thread default stream) or asynchronous on a stream.
#[derive(Clone, Copy)]
pub(super) enum Mode {
    Sync(NullStream),
    Async(CUstream, NullStream),
}

use Mode::{Async, Sync};
use NullStream::{Legacy, PerThread};

fn unified(addr: u64) -> Loc {
    if mem().is_device(addr) {
        Loc::Device(addr)
    } else {
        Loc::Host(addr as *mut c_void)
    }
}

enum HostSrc {
    Raw(SendPtr),
    Owned(Vec<u8>),
}

impl HostSrc {
    fn ptr(&self) -> *const u8 {
        match self {
            HostSrc::Raw(p) => p.get() as *const u8,
            HostSrc::Owned(v) => v.as_ptr(),
        }
    }
}

/// The stream a copy or memset goes to, and whether the stream's capture takes it.
/// A synchronous one waits for its stream, which capture forbids.
pub(super) fn target(mode: Mode) -> Result<(StreamId, Route), CUresult> {
    crate::ctx::require_current()?;
    match mode {
        Sync(null) => {
            let s = resolve_stream(std::ptr::null_mut(), null)?;
            capture::before_sync(s).map(|_| (s, Route::Run))
        }
        Async(h, null) => {
            let s = resolve_stream(h, null)?;
            capture::route(s).map(|r| (s, r))
        }
    }
}

/// Enqueues `work` on `stream`; waits for it if the mode is synchronous or `wait`.
pub(super) fn enqueue(stream: StreamId, mode: Mode, wait: bool, work: exec::Work) -> CUresult {
    let seq = tri!(exec::submit(stream, Vec::new(), work));
    if wait || matches!(mode, Sync(_)) {
        exec::wait(seq);
    }
    CUDA_SUCCESS
}

unsafe fn copy(what: &'static str, dst: Loc, src: Loc, n: usize, mode: Mode) -> CUresult {
    let stream = match tri!(target(mode)) {
        (s, Route::Capture) => {
            // The driver checks at capture that the device sides are mapped.
            for (side, write) in [(dst, true), (src, false)] {
                if let Loc::Device(p) = side {
                    if mem().check(p, n, write).is_err() {
                        return CUDA_ERROR_INVALID_VALUE;
                    }
                }
            }
            let c = Copy3d::linear(dst.mem(), src.mem(), n);
            return code(capture::add(s, Op::Memcpy(c)).map(drop));
        }
        (s, Route::Run) => s,
    };
    let is_async = matches!(mode, Async(..));
    let pinned = |p: *mut c_void| mem().is_pinned(p as usize, n);
    let host_src = |p: *mut c_void| {
        if is_async && !pinned(p) {
            HostSrc::Owned(std::slice::from_raw_parts(p as *const u8, n).to_vec())
        } else {
            HostSrc::Raw(SendPtr(p))
        }
    };
    let mut wait = false;
    let work: exec::Work = match (dst, src) {
        (Loc::Device(d), Loc::Host(s)) => {
            let s = host_src(s);
            Box::new(move || {
                dev_write(what, d, s.ptr(), n);
                count(counter::H2D_BYTES, n as u64);
            })
        }
        (Loc::Host(d), Loc::Device(s)) => {
            wait = is_async && !pinned(d);
            let d = SendPtr(d);
            Box::new(move || {
                dev_read(what, s, d.get() as *mut u8, n);
                count(counter::D2H_BYTES, n as u64);
            })
        }
        (Loc::Device(d), Loc::Device(s)) => Box::new(move || {
            if let Err(f) = mem().copy(d, s, n) {
                crate::memory::fault(what, f)
            }
        }),
        (Loc::Host(d), Loc::Host(s)) => {
            wait = is_async && !pinned(d);
            let (d, s) = (SendPtr(d), host_src(s));
            Box::new(move || std::ptr::copy(s.ptr(), d.get() as *mut u8, n))
        }
    };
    enqueue(stream, mode, wait, work)
}

unsafe fn memset(what: &'static str, dst: u64, elem: Vec<u8>, n: usize, mode: Mode) -> CUresult {
    if !dst.is_multiple_of(elem.len() as u64) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let stream = match tri!(target(mode)) {
        (s, Route::Capture) => {
            if mem().check(dst, n * elem.len(), true).is_err() {
                return CUDA_ERROR_INVALID_VALUE;
            }
            let mut value = [0u8; 4];
            value[..elem.len()].copy_from_slice(&elem);
            let (value, element_size) = (u32::from_le_bytes(value), elem.len() as u32);
            let p = CUDA_MEMSET_NODE_PARAMS { dst, pitch: n * elem.len(), value, element_size, width: n, height: 1 };
            return code(capture::add(s, Op::Memset(p)).map(drop));
        }
        (s, Route::Run) => s,
    };
    enqueue(
        stream,
        mode,
        false,
        Box::new(move || {
            if let Err(f) = mem().fill(dst, &elem, n) {
                crate::memory::fault(what, f)
            }
        }),
    )
}

macro_rules! loc {
    (dev $e:expr) => {
        Loc::Device($e)
    };
    (host $e:expr) => {
        Loc::Host($e as *mut c_void)
    };
    (any $e:expr) => {
        unified($e)
    };
}

/// Defines copy entry points: `name(dst, src, n[, stream])`.
macro_rules! copies {
    ($($name:ident($dk:ident $dt:ty, $sk:ident $st:ty) $mode:tt;)*) => {$(
        copies!(@one $name($dk $dt, $sk $st) $mode);
    )*};
    (@one $name:ident($dk:ident $dt:ty, $sk:ident $st:ty) (sync $null:expr)) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(dst: $dt, src: $st, n: usize) -> CUresult {
            copy(stringify!($name), loc!($dk dst), loc!($sk src), n, Sync($null))
        }
    };
    (@one $name:ident($dk:ident $dt:ty, $sk:ident $st:ty) (async $null:expr)) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(dst: $dt, src: $st, n: usize, stream: CUstream) -> CUresult {
            copy(stringify!($name), loc!($dk dst), loc!($sk src), n, Async(stream, $null))
        }
    };
}

copies! {
    cuMemcpyHtoD_v2(dev CUdeviceptr, host *const c_void) (sync Legacy);
    cuMemcpyDtoH_v2(host *mut c_void, dev CUdeviceptr) (sync Legacy);
    cuMemcpyDtoD_v2(dev CUdeviceptr, dev CUdeviceptr) (sync Legacy);
    cuMemcpy(any CUdeviceptr, any CUdeviceptr) (sync Legacy);
    cuMemcpyHtoD_v2_ptds(dev CUdeviceptr, host *const c_void) (sync PerThread);
    cuMemcpyDtoH_v2_ptds(host *mut c_void, dev CUdeviceptr) (sync PerThread);
    cuMemcpyDtoD_v2_ptds(dev CUdeviceptr, dev CUdeviceptr) (sync PerThread);
    cuMemcpy_ptds(any CUdeviceptr, any CUdeviceptr) (sync PerThread);
    cuMemcpyHtoDAsync_v2(dev CUdeviceptr, host *const c_void) (async Legacy);
    cuMemcpyDtoHAsync_v2(host *mut c_void, dev CUdeviceptr) (async Legacy);
    cuMemcpyDtoDAsync_v2(dev CUdeviceptr, dev CUdeviceptr) (async Legacy);
    cuMemcpyAsync(any CUdeviceptr, any CUdeviceptr) (async Legacy);
    cuMemcpyHtoDAsync_v2_ptsz(dev CUdeviceptr, host *const c_void) (async PerThread);
    cuMemcpyDtoHAsync_v2_ptsz(host *mut c_void, dev CUdeviceptr) (async PerThread);
    cuMemcpyDtoDAsync_v2_ptsz(dev CUdeviceptr, dev CUdeviceptr) (async PerThread);
    cuMemcpyAsync_ptsz(any CUdeviceptr, any CUdeviceptr) (async PerThread);
}

/// Defines memset entry points: `name(dst, value, n[, stream])`.
macro_rules! memsets {
    ($($name:ident($t:ty) $mode:tt;)*) => {$(
        memsets!(@one $name($t) $mode);
    )*};
    (@one $name:ident($t:ty) (sync $null:expr)) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(dst: CUdeviceptr, value: $t, n: usize) -> CUresult {
            memset(stringify!($name), dst, value.to_le_bytes().to_vec(), n, Sync($null))
        }
    };
    (@one $name:ident($t:ty) (async $null:expr)) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(dst: CUdeviceptr, value: $t, n: usize, stream: CUstream) -> CUresult {
            memset(stringify!($name), dst, value.to_le_bytes().to_vec(), n, Async(stream, $null))
        }
    };
}

memsets! {
    cuMemsetD8_v2(u8) (sync Legacy);
    cuMemsetD16_v2(u16) (sync Legacy);
    cuMemsetD32_v2(u32) (sync Legacy);
    cuMemsetD8_v2_ptds(u8) (sync PerThread);
    cuMemsetD16_v2_ptds(u16) (sync PerThread);
    cuMemsetD32_v2_ptds(u32) (sync PerThread);
    cuMemsetD8Async(u8) (async Legacy);
    cuMemsetD16Async(u16) (async Legacy);
    cuMemsetD32Async(u32) (async Legacy);
    cuMemsetD8Async_ptsz(u8) (async PerThread);
    cuMemsetD16Async_ptsz(u16) (async PerThread);
    cuMemsetD32Async_ptsz(u32) (async PerThread);
}

/// A copy between devices (`cuMemcpyPeer*`): it needs no access for any one device, as
/// the driver's does not; captured, it is refused (the stand-in's graphs have no peer
/// copy node).
unsafe fn peer(dst: CUdeviceptr, dst_ctx: CUcontext, src: CUdeviceptr, src_ctx: CUcontext, n: usize, mode: Mode) -> CUresult {
    tri!(crate::ctx::require_valid(dst_ctx));
    tri!(crate::ctx::require_valid(src_ctx));
    let stream = match tri!(target(mode)) {
        (s, Route::Capture) => return capture::unsupported(s),
        (s, Route::Run) => s,
    };
    let work: exec::Work = Box::new(move || {
        crate::memory::as_device(None, || {
            if let Err(f) = mem().copy(dst, src, n) {
                crate::memory::fault("cuMemcpyPeer", f)
            }
        })
    });
    enqueue(stream, mode, false, work)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyPeer(dst: CUdeviceptr, dst_ctx: CUcontext, src: CUdeviceptr, src_ctx: CUcontext, n: usize) -> CUresult {
    peer(dst, dst_ctx, src, src_ctx, n, Sync(Legacy))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyPeer_ptds(dst: CUdeviceptr, dst_ctx: CUcontext, src: CUdeviceptr, src_ctx: CUcontext, n: usize) -> CUresult {
    peer(dst, dst_ctx, src, src_ctx, n, Sync(PerThread))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyPeerAsync(dst: CUdeviceptr, dst_ctx: CUcontext, src: CUdeviceptr, src_ctx: CUcontext, n: usize, stream: CUstream) -> CUresult {
    peer(dst, dst_ctx, src, src_ctx, n, Async(stream, Legacy))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyPeerAsync_ptsz(
    dst: CUdeviceptr,
    dst_ctx: CUcontext,
    src: CUdeviceptr,
    src_ctx: CUcontext,
    n: usize,
    stream: CUstream,
) -> CUresult {
    peer(dst, dst_ctx, src, src_ctx, n, Async(stream, PerThread))
}
