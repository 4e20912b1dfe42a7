//! Kernel lookup, parameter queries and launches.

use std::ffi::{c_char, c_uint, c_void, CStr};

use cuda_abi::*;

use super::{code, put, resolve_stream, NullStream};
use crate::capture::{self, Route};
use crate::graph::{KernelCall, Op};
use crate::kernel::{self, HandleKind};
use crate::{ctx, exec};

unsafe fn find(out: *mut *mut c_void, name: *const c_char, kind: HandleKind) -> CUresult {
    if out.is_null() || name.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    match kernel::find(CStr::from_ptr(name), kind) {
        Some(h) => code(put(out, h)),
        None => CUDA_ERROR_NOT_FOUND,
    }
}

/// Bytes of each module global (`cuModuleGetGlobal`).
const GLOBAL_BYTES: u64 = 64 << 10;

/// A module's `__device__` variable: device memory of the stand-in's own, one buffer of
/// [`GLOBAL_BYTES`] per name, made on first request; the module handle is not consulted.
/// Programs write it with copies and kernels read it, as with `cudaMemcpyToSymbol`.
#[no_mangle]
pub unsafe extern "C" fn cuModuleGetGlobal_v2(dptr: *mut CUdeviceptr, bytes: *mut usize, _module: CUmodule, name: *const c_char) -> CUresult {
    static GLOBALS: std::sync::Mutex<Vec<(std::ffi::CString, u64)>> = std::sync::Mutex::new(Vec::new());
    tri!(ctx::require_current());
    if name.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let name = CStr::from_ptr(name).to_owned();
    let mut globals = GLOBALS.lock().unwrap_or_else(|p| p.into_inner());
    let addr = match globals.iter().find(|(n, _)| *n == name) {
        Some(&(_, a)) => a,
        None => {
            let a = tri!(crate::memory::mem_mut().alloc(GLOBAL_BYTES));
            globals.push((name, a));
            a
        }
    };
    if !dptr.is_null() {
        *dptr = addr;
    }
    if !bytes.is_null() {
        *bytes = GLOBAL_BYTES as usize;
    }
    CUDA_SUCCESS
}

/// Finds a registered kernel by name; the module handle is not consulted.
#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunction(hfunc: *mut CUfunction, _module: CUmodule, name: *const c_char) -> CUresult {
    tri!(ctx::require_current());
    find(hfunc, name, HandleKind::Function)
}

/// Finds a registered kernel by name; the library handle is not consulted.
#[no_mangle]
pub unsafe extern "C" fn cuLibraryGetKernel(pkernel: *mut CUkernel, _library: CUlibrary, name: *const c_char) -> CUresult {
    tri!(ctx::require_init());
    find(pkernel, name, HandleKind::Kernel)
}

#[no_mangle]
pub unsafe extern "C" fn cuKernelGetFunction(pfunc: *mut CUfunction, k: CUkernel) -> CUresult {
    tri!(ctx::require_current());
    match kernel::lookup(k) {
        Some((HandleKind::Kernel, info)) => find(pfunc, info.name.as_ptr(), HandleKind::Function),
        _ => CUDA_ERROR_INVALID_HANDLE,
    }
}

unsafe fn param_info(h: *mut c_void, kind: HandleKind, index: usize, offset: *mut usize, size: *mut usize) -> CUresult {
    tri!(ctx::require_init());
    let (off, sz) = tri!(kernel::param_info(h, kind, index));
    if offset.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *offset = off;
    if !size.is_null() {
        *size = sz;
    }
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncGetParamInfo(f: CUfunction, index: usize, offset: *mut usize, size: *mut usize) -> CUresult {
    param_info(f, HandleKind::Function, index, offset, size)
}

#[no_mangle]
pub unsafe extern "C" fn cuKernelGetParamInfo(k: CUkernel, index: usize, offset: *mut usize, size: *mut usize) -> CUresult {
    param_info(k, HandleKind::Kernel, index, offset, size)
}

unsafe fn get_name(out: *mut *const c_char, h: *mut c_void, kind: HandleKind) -> CUresult {
    tri!(ctx::require_init());
    match kernel::lookup(h) {
        // The registry keeps every kernel alive, so the name outlives the call.
        Some((k, info)) if k == kind => code(put(out, info.name.as_ptr())),
        _ => CUDA_ERROR_INVALID_HANDLE,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncGetName(name: *mut *const c_char, f: CUfunction) -> CUresult {
    get_name(name, f, HandleKind::Function)
}

#[no_mangle]
pub unsafe extern "C" fn cuKernelGetName(name: *mut *const c_char, k: CUkernel) -> CUresult {
    get_name(name, k, HandleKind::Kernel)
}

/// Copies the parameters now and enqueues the kernel call on the stream (or, while the
/// stream captures, adds it to the capture graph).
#[allow(clippy::too_many_arguments)]
unsafe fn launch(
    f: CUfunction,
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    null: NullStream,
) -> CUresult {
    tri!(ctx::require_current());
    let Some((kind, info)) = kernel::lookup(f) else { return CUDA_ERROR_INVALID_HANDLE };
    if grid.contains(&0) || block.contains(&0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let args = tri!(kernel::pack(&info, params, extra));
    let s = tri!(resolve_stream(stream, null));
    if tri!(capture::route(s)) == Route::Capture {
        let call = KernelCall { info, handle: f as usize, kind, grid, block, shared, args };
        return code(capture::add(s, Op::Kernel(call)).map(drop));
    }
    code(exec::submit(s, Vec::new(), Box::new(move || kernel::run(&info, args))).map(|_| ()))
}

#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn cuLaunchKernel(
    f: CUfunction,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shared_mem: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    launch(f, [gx, gy, gz], [bx, by, bz], shared_mem, stream, params, extra, NullStream::Legacy)
}

#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn cuLaunchKernel_ptsz(
    f: CUfunction,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shared_mem: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    launch(f, [gx, gy, gz], [bx, by, bz], shared_mem, stream, params, extra, NullStream::PerThread)
}

unsafe fn launch_ex(config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void, null: NullStream) -> CUresult {
    let Some(c) = config.as_ref() else { return CUDA_ERROR_INVALID_VALUE };
    let grid = [c.grid_dim_x, c.grid_dim_y, c.grid_dim_z];
    let block = [c.block_dim_x, c.block_dim_y, c.block_dim_z];
    launch(f, grid, block, c.shared_mem_bytes, c.h_stream, params, extra, null)
}

#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernelEx(config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void) -> CUresult {
    launch_ex(config, f, params, extra, NullStream::Legacy)
}

#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernelEx_ptsz(config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void) -> CUresult {
    launch_ex(config, f, params, extra, NullStream::PerThread)
}
