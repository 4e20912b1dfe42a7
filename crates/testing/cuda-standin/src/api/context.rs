//! Initialization, device and context management, error strings.

use std::ffi::{c_char, c_int, c_uint};
use std::sync::atomic::Ordering;

use cuda_abi::*;

use super::{code, put};
use crate::ctx::{self, PRIMARY_REFS};
use crate::{exec, memory};

const DEVICE_NAME: &[u8] = b"gmux CUDA stand-in (CPU)\0";

/// `cuDeviceGetAttribute` values of an H100-like device; unknown attributes read 0.
fn device_attribute(attr: c_int) -> c_int {
    match attr {
        1 => 1024,       // MAX_THREADS_PER_BLOCK
        2 | 3 => 1024,   // MAX_BLOCK_DIM_X, _Y
        4 => 64,         // MAX_BLOCK_DIM_Z
        5 => i32::MAX,   // MAX_GRID_DIM_X
        6 | 7 => 65535,  // MAX_GRID_DIM_Y, _Z
        8 => 48 << 10,   // MAX_SHARED_MEMORY_PER_BLOCK
        9 => 64 << 10,   // TOTAL_CONSTANT_MEMORY
        10 => 32,        // WARP_SIZE
        11 => i32::MAX,  // MAX_PITCH
        12 => 65536,     // MAX_REGISTERS_PER_BLOCK
        13 => 1_980_000, // CLOCK_RATE (kHz)
        14 => 512,       // TEXTURE_ALIGNMENT
        15 => 1,         // GPU_OVERLAP
        16 => 132,       // MULTIPROCESSOR_COUNT
        19 => 1,         // CAN_MAP_HOST_MEMORY
        31 => 1,         // CONCURRENT_KERNELS
        36 => 2_619_000, // MEMORY_CLOCK_RATE (kHz)
        37 => 5120,      // GLOBAL_MEMORY_BUS_WIDTH
        38 => 50 << 20,  // L2_CACHE_SIZE
        39 => 2048,      // MAX_THREADS_PER_MULTIPROCESSOR
        40 => 3,         // ASYNC_ENGINE_COUNT
        41 => 1,         // UNIFIED_ADDRESSING
        75 => 9,         // COMPUTE_CAPABILITY_MAJOR
        76 => 0,         // COMPUTE_CAPABILITY_MINOR
        78 => 1,         // STREAM_PRIORITIES_SUPPORTED
        81 => 228 << 10, // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
        82 => 65536,     // MAX_REGISTERS_PER_MULTIPROCESSOR
        97 => 227 << 10, // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        102 => 1,        // VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
        _ => 0,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CUresult {
    if flags != 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    ctx::init();
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CUresult {
    code(put(version, 13000))
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CUresult {
    tri!(ctx::require_device(ordinal));
    code(put(device, 0))
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    tri!(ctx::require_init());
    code(put(count, 1))
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    tri!(ctx::require_device(dev));
    if name.is_null() || len <= 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let n = DEVICE_NAME.len().min(len as usize);
    std::ptr::copy_nonoverlapping(DEVICE_NAME.as_ptr() as *const c_char, name, n);
    *name.add(n - 1) = 0;
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(value: *mut c_int, attrib: c_int, dev: CUdevice) -> CUresult {
    tri!(ctx::require_device(dev));
    code(put(value, device_attribute(attrib)))
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
    tri!(ctx::require_device(dev));
    code(put(bytes, memory::mem().limit() as usize))
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    tri!(ctx::require_device(dev));
    tri!(put(pctx, ctx::primary()));
    PRIMARY_REFS.fetch_add(1, Ordering::SeqCst);
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    tri!(ctx::require_device(dev));
    PRIMARY_REFS.fetch_sub(1, Ordering::SeqCst);
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxGetState(dev: CUdevice, flags: *mut c_uint, active: *mut c_int) -> CUresult {
    tri!(ctx::require_device(dev));
    tri!(put(flags, 0));
    code(put(active, (PRIMARY_REFS.load(Ordering::SeqCst) > 0) as c_int))
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v2(pctx: *mut CUcontext, _flags: c_uint, dev: CUdevice) -> CUresult {
    tri!(ctx::require_device(dev));
    tri!(put(pctx, ctx::primary()));
    ctx::push(ctx::primary());
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
    tri!(ctx::require_current());
    code(put(device, 0))
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
        CUDA_ERROR_INVALID_DEVICE => (b"CUDA_ERROR_INVALID_DEVICE\0", b"invalid device ordinal\0"),
        CUDA_ERROR_INVALID_CONTEXT => (b"CUDA_ERROR_INVALID_CONTEXT\0", b"invalid device context\0"),
        CUDA_ERROR_INVALID_HANDLE => (b"CUDA_ERROR_INVALID_HANDLE\0", b"invalid resource handle\0"),
        CUDA_ERROR_NOT_FOUND => (b"CUDA_ERROR_NOT_FOUND\0", b"named symbol not found\0"),
        CUDA_ERROR_NOT_READY => (b"CUDA_ERROR_NOT_READY\0", b"device not ready\0"),
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
