//! `cuMemAlloc`-style device memory, pinned host memory and pointer attributes.

use std::ffi::{c_uint, c_void};

use cuda_abi::*;

use super::{code, put};
use crate::memory::{mem, mem_mut};
use crate::{capture, ctx, exec};

/// The one memory pool all devices share (`GMUX_STANDIN_MEM`), whichever is current.
#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    tri!(ctx::require_current());
    let m = mem();
    tri!(put(free, (m.limit() - m.live()) as usize));
    code(put(total, m.limit() as usize))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytesize: usize) -> CUresult {
    tri!(ctx::require_current());
    tri!(capture::before_unsafe());
    if dptr.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *dptr = tri!(mem_mut().alloc(bytesize as u64));
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocPitch_v2(dptr: *mut CUdeviceptr, pitch: *mut usize, width: usize, height: usize, element_size: c_uint) -> CUresult {
    tri!(ctx::require_current());
    if pitch.is_null() || width == 0 || height == 0 || ![4, 8, 16].contains(&element_size) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let p = width.next_multiple_of(512);
    tri!(code_of(cuMemAlloc_v2(dptr, p * height)));
    *pitch = p;
    CUDA_SUCCESS
}

fn code_of(r: CUresult) -> Result<(), CUresult> {
    if r == CUDA_SUCCESS {
        Ok(())
    } else {
        Err(r)
    }
}

/// Like `cudaFree`, it waits for outstanding work first.
/// `cuMemAllocAsync`: as `cuMemAlloc` (the memory exists at once, which stream order
/// allows).
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync(dptr: *mut CUdeviceptr, bytesize: usize, _stream: CUstream) -> CUresult {
    cuMemAlloc_v2(dptr, bytesize)
}

/// `cuMemFreeAsync`: frees once the stream's work so far is done (waiting for it here,
/// which stream order allows).
#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync(dptr: CUdeviceptr, stream: CUstream) -> CUresult {
    tri!(ctx::require_current());
    let s = tri!(super::resolve_stream(stream, super::NullStream::Legacy));
    tri!(capture::before_sync(s));
    tri!(exec::sync_stream(s));
    if dptr == 0 {
        return CUDA_SUCCESS;
    }
    code(mem_mut().free(dptr))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    tri!(ctx::require_current());
    tri!(capture::before_unsafe());
    if dptr == 0 {
        return CUDA_SUCCESS;
    }
    exec::sync_all();
    code(mem_mut().free(dptr))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetAddressRange_v2(pbase: *mut CUdeviceptr, psize: *mut usize, dptr: CUdeviceptr) -> CUresult {
    tri!(ctx::require_current());
    let (base, size) = tri!(mem().address_range(dptr).ok_or(CUDA_ERROR_NOT_FOUND));
    if !pbase.is_null() {
        *pbase = base;
    }
    if !psize.is_null() {
        *psize = size as usize;
    }
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocHost_v2(pp: *mut *mut c_void, bytesize: usize) -> CUresult {
    cuMemHostAlloc(pp, bytesize, 0)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemHostAlloc(pp: *mut *mut c_void, bytesize: usize, flags: c_uint) -> CUresult {
    tri!(ctx::require_current());
    tri!(capture::before_unsafe());
    if pp.is_null() || flags & !0x7 != 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *pp = tri!(mem_mut().alloc_host(bytesize)) as *mut c_void;
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeHost(p: *mut c_void) -> CUresult {
    tri!(ctx::require_current());
    exec::sync_all();
    code(mem_mut().free_host(p as usize))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemHostRegister_v2(p: *mut c_void, bytesize: usize, flags: c_uint) -> CUresult {
    tri!(ctx::require_current());
    if flags & !0xf != 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    code(mem_mut().register_host(p as usize, bytesize))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemHostUnregister(p: *mut c_void) -> CUresult {
    tri!(ctx::require_current());
    exec::sync_all();
    code(mem_mut().unregister_host(p as usize))
}

/// What a pointer is: device memory or pinned host memory, with its range.
#[derive(Clone, Copy)]
struct Known {
    device: bool,
    base: u64,
    size: u64,
}

fn classify(ptr: CUdeviceptr) -> Option<Known> {
    let m = mem();
    if let Some((base, size)) = m.address_range(ptr) {
        return Some(Known { device: true, base, size });
    }
    let (base, size) = m.pinned_at(ptr as usize)?;
    Some(Known { device: false, base: base as u64, size: size as u64 })
}

enum Value {
    U64(u64),
    U32(u32),
    Bool(bool),
}

/// The value of `attr` for `ptr`; `None` for an attribute the stand-in does not know.
/// Memory is not yet tied to a device: its context and ordinal are the current ones.
fn attribute(attr: c_uint, ptr: CUdeviceptr, k: Option<Known>) -> Option<Result<Value, CUresult>> {
    let k = match k {
        Some(k) => k,
        None => return known_attribute(attr).then_some(Err(CUDA_ERROR_INVALID_VALUE)),
    };
    Some(Ok(match attr {
        CU_POINTER_ATTRIBUTE_CONTEXT => Value::U64(ctx::ambient() as u64),
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE => Value::U32(if k.device { CU_MEMORYTYPE_DEVICE } else { CU_MEMORYTYPE_HOST }),
        CU_POINTER_ATTRIBUTE_DEVICE_POINTER => Value::U64(ptr),
        CU_POINTER_ATTRIBUTE_HOST_POINTER if k.device => return Some(Err(CUDA_ERROR_INVALID_VALUE)),
        CU_POINTER_ATTRIBUTE_HOST_POINTER => Value::U64(ptr),
        CU_POINTER_ATTRIBUTE_SYNC_MEMOPS | CU_POINTER_ATTRIBUTE_IS_MANAGED => Value::Bool(false),
        CU_POINTER_ATTRIBUTE_BUFFER_ID => Value::U64(k.base),
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL => Value::U32(ctx::current_device().unwrap_or(0) as u32),
        CU_POINTER_ATTRIBUTE_RANGE_START_ADDR => Value::U64(k.base),
        CU_POINTER_ATTRIBUTE_RANGE_SIZE => Value::U64(k.size),
        CU_POINTER_ATTRIBUTE_MAPPED => Value::Bool(true),
        _ => return None,
    }))
}

fn known_attribute(attr: c_uint) -> bool {
    attribute(attr, 0, Some(Known { device: false, base: 0, size: 0 })).is_some()
}

unsafe fn store(data: *mut c_void, v: Value) {
    match v {
        Value::U64(v) => (data as *mut u64).write_unaligned(v),
        Value::U32(v) => (data as *mut u32).write_unaligned(v),
        Value::Bool(v) => (data as *mut bool).write(v),
    }
}

fn zero(attr: c_uint) -> Value {
    match attribute(attr, 0, Some(Known { device: false, base: 0, size: 0 })) {
        Some(Ok(Value::U32(_))) => Value::U32(0),
        Some(Ok(Value::Bool(_))) => Value::Bool(false),
        _ => Value::U64(0),
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuPointerGetAttribute(data: *mut c_void, attr: c_uint, ptr: CUdeviceptr) -> CUresult {
    tri!(ctx::require_init());
    if data.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    match attribute(attr, ptr, classify(ptr)) {
        Some(Ok(v)) => {
            store(data, v);
            CUDA_SUCCESS
        }
        Some(Err(e)) => e,
        None => CUDA_ERROR_INVALID_VALUE,
    }
}

/// Unlike the singular form, an unknown pointer is not an error: its attributes read 0.
#[no_mangle]
pub unsafe extern "C" fn cuPointerGetAttributes(n: c_uint, attrs: *const c_uint, data: *mut *mut c_void, ptr: CUdeviceptr) -> CUresult {
    tri!(ctx::require_init());
    if attrs.is_null() || data.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let k = classify(ptr);
    for i in 0..n as usize {
        let (attr, out) = (*attrs.add(i), *data.add(i));
        if out.is_null() {
            return CUDA_ERROR_INVALID_VALUE;
        }
        match attribute(attr, ptr, k) {
            Some(Ok(v)) => store(out, v),
            Some(Err(_)) => store(out, zero(attr)),
            None => return CUDA_ERROR_INVALID_VALUE,
        }
    }
    CUDA_SUCCESS
}
