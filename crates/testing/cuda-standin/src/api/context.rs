//! Initialization, contexts (primary contexts, the context stack, peer access), error
//! strings.

use std::ffi::{c_char, c_int, c_uint};

use cuda_abi::*;

use super::{code, put};
use crate::ctx;
use crate::exec;

#[no_mangle]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CUresult {
    if flags != 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    code(ctx::init())
}

#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CUresult {
    code(put(version, 13000))
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    let i = tri!(ctx::require_device(dev));
    if pctx.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *pctx = ctx::retain(i);
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    ctx::release(tri!(ctx::require_device(dev)));
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxGetState(dev: CUdevice, flags: *mut c_uint, active: *mut c_int) -> CUresult {
    let i = tri!(ctx::require_device(dev));
    tri!(put(flags, 0));
    code(put(active, ctx::is_active(i) as c_int))
}

/// Hands out (and pushes) the device's primary context: the stand-in has no other kind.
#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v2(pctx: *mut CUcontext, _flags: c_uint, dev: CUdevice) -> CUresult {
    let c = ctx::primary(tri!(ctx::require_device(dev)));
    tri!(put(pctx, c));
    ctx::push(c);
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxDestroy_v2(c: CUcontext) -> CUresult {
    tri!(ctx::require_init());
    tri!(ctx::require_valid(c));
    if ctx::current() == Some(c) {
        ctx::pop();
    }
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSetCurrent(c: CUcontext) -> CUresult {
    tri!(ctx::require_init());
    if !c.is_null() {
        tri!(ctx::require_valid(c));
    }
    ctx::set_current(c);
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(pctx: *mut CUcontext) -> CUresult {
    tri!(ctx::require_init());
    code(put(pctx, ctx::current().unwrap_or(std::ptr::null_mut())))
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice(device: *mut CUdevice) -> CUresult {
    let i = tri!(ctx::current_device());
    code(put(device, i as CUdevice))
}

/// Lets the current context access `peer`'s memory (a no-op: all memory is one pool).
#[no_mangle]
pub unsafe extern "C" fn cuCtxEnablePeerAccess(peer: CUcontext, flags: c_uint) -> CUresult {
    let from = tri!(ctx::current_device());
    let to = tri!(ctx::require_valid(peer));
    if flags != 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    code(ctx::enable_peer(from, to))
}

/// Ends what `cuCtxEnablePeerAccess` allowed the current context.
#[no_mangle]
pub unsafe extern "C" fn cuCtxDisablePeerAccess(peer: CUcontext) -> CUresult {
    let from = tri!(ctx::current_device());
    let to = tri!(ctx::require_valid(peer));
    code(ctx::disable_peer(from, to))
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxPushCurrent_v2(c: CUcontext) -> CUresult {
    tri!(ctx::require_init());
    tri!(ctx::require_valid(c));
    ctx::push(c);
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(pctx: *mut CUcontext) -> CUresult {
    tri!(ctx::require_init());
    match ctx::pop() {
        Some(c) => {
            if !pctx.is_null() {
                *pctx = c;
            }
            CUDA_SUCCESS
        }
        None => CUDA_ERROR_INVALID_CONTEXT,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSynchronize() -> CUresult {
    tri!(ctx::require_current());
    tri!(crate::capture::before_ctx_sync());
    exec::sync_all();
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetStreamPriorityRange(least: *mut c_int, greatest: *mut c_int) -> CUresult {
    tri!(ctx::require_current());
    if !least.is_null() {
        *least = 0;
    }
    if !greatest.is_null() {
        *greatest = super::stream::GREATEST_PRIORITY;
    }
    CUDA_SUCCESS
}

/// Same as `cuCtxGetStreamPriorityRange` (the runtime's name for it).
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetStreamPriorityRange(least: *mut c_int, greatest: *mut c_int) -> CUresult {
    cuCtxGetStreamPriorityRange(least, greatest)
}

fn error_text(e: CUresult) -> Option<(&'static [u8], &'static [u8])> {
    Some(match e {
        CUDA_SUCCESS => (b"CUDA_SUCCESS\0", b"no error\0"),
        CUDA_ERROR_INVALID_VALUE => (b"CUDA_ERROR_INVALID_VALUE\0", b"invalid argument\0"),
        CUDA_ERROR_OUT_OF_MEMORY => (b"CUDA_ERROR_OUT_OF_MEMORY\0", b"out of memory\0"),
        CUDA_ERROR_NOT_INITIALIZED => (b"CUDA_ERROR_NOT_INITIALIZED\0", b"initialization error\0"),
        CUDA_ERROR_NO_DEVICE => (b"CUDA_ERROR_NO_DEVICE\0", b"no CUDA-capable device is detected\0"),
        CUDA_ERROR_INVALID_DEVICE => (b"CUDA_ERROR_INVALID_DEVICE\0", b"invalid device ordinal\0"),
        CUDA_ERROR_INVALID_CONTEXT => (b"CUDA_ERROR_INVALID_CONTEXT\0", b"invalid device context\0"),
        CUDA_ERROR_INVALID_HANDLE => (b"CUDA_ERROR_INVALID_HANDLE\0", b"invalid resource handle\0"),
        CUDA_ERROR_NOT_FOUND => (b"CUDA_ERROR_NOT_FOUND\0", b"named symbol not found\0"),
        CUDA_ERROR_NOT_READY => (b"CUDA_ERROR_NOT_READY\0", b"device not ready\0"),
        CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => (b"CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED\0", b"peer access is already enabled\0"),
        CUDA_ERROR_PEER_ACCESS_NOT_ENABLED => (b"CUDA_ERROR_PEER_ACCESS_NOT_ENABLED\0", b"peer access has not been enabled\0"),
        CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED => {
            (b"CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED\0", b"part or all of the requested memory range is already mapped\0")
        }
        CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED => (b"CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED\0", b"pointer does not correspond to a registered memory region\0"),
        CUDA_ERROR_NOT_SUPPORTED => (b"CUDA_ERROR_NOT_SUPPORTED\0", b"operation not supported\0"),
        _ => return None,
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(error: CUresult, pstr: *mut *const c_char) -> CUresult {
    match error_text(error) {
        Some((name, _)) => code(put(pstr, name.as_ptr() as *const c_char)),
        None => CUDA_ERROR_INVALID_VALUE,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(error: CUresult, pstr: *mut *const c_char) -> CUresult {
    match error_text(error) {
        Some((_, text)) => code(put(pstr, text.as_ptr() as *const c_char)),
        None => CUDA_ERROR_INVALID_VALUE,
    }
}
