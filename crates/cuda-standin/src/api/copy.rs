//! Copies and memsets. Each is an operation on a stream; device bytes are checked when
//! it executes. Synchronous forms run on the legacy (or, `_ptds`, per-thread) default
//! stream and wait. Asynchronous forms read and write pinned host memory when they
//! execute; a pageable source is copied at call time and a pageable destination makes
//! the call wait, as in CUDA.

use std::ffi::c_void;

use cuda_abi::*;

use super::{resolve_stream, NullStream, SendPtr};
use crate::exec;
use crate::memory::{count, counter, dev_read, dev_write, mem};

#[derive(Clone, Copy)]
enum Loc {
    Device(u64),
    Host(*mut c_void),
}

#[derive(Clone, Copy)]
enum Mode {
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

/// Enqueues `work` as `mode` says; waits for it if the mode is synchronous or `wait`.
fn enqueue(mode: Mode, wait: bool, work: exec::Work) -> CUresult {
    tri!(crate::ctx::require_current());
    let stream = match mode {
        Sync(null) => resolve_stream(std::ptr::null_mut(), null),
        Async(h, null) => resolve_stream(h, null),
    };
    let seq = tri!(exec::submit(tri!(stream), Vec::new(), work));
    if wait || matches!(mode, Sync(_)) {
        exec::wait(seq);
    }
    CUDA_SUCCESS
}

unsafe fn copy(what: &'static str, dst: Loc, src: Loc, n: usize, mode: Mode) -> CUresult {
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
    enqueue(mode, wait, work)
}

unsafe fn memset(what: &'static str, dst: u64, elem: Vec<u8>, n: usize, mode: Mode) -> CUresult {
    if !dst.is_multiple_of(elem.len() as u64) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    enqueue(
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
