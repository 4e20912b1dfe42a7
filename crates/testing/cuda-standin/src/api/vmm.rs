//! The virtual memory management API. Like CUDA's, it needs `cuInit` but no current
//! context.

use std::ffi::c_ulonglong;
use std::sync::LazyLock;
use std::time::Duration;

use cuda_abi::*;

use super::{code, put};
use crate::ctx;
use crate::memory::{count, counter, mem_mut, GRANULARITY};

#[no_mangle]
pub unsafe extern "C" fn cuMemAddressReserve(ptr: *mut CUdeviceptr, size: usize, alignment: usize, _addr: CUdeviceptr, flags: c_ulonglong) -> CUresult {
    tri!(ctx::require_init());
    if ptr.is_null() || flags != 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *ptr = tri!(mem_mut().reserve(size as u64, alignment as u64));
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAddressFree(ptr: CUdeviceptr, size: usize) -> CUresult {
    tri!(ctx::require_init());
    code(mem_mut().address_free(ptr, size as u64))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemCreate(handle: *mut CUmemGenericAllocationHandle, size: usize, prop: *const CUmemAllocationProp, flags: c_ulonglong) -> CUresult {
    tri!(ctx::require_init());
    count(counter::CREATES, 1);
    if handle.is_null() || prop.is_null() || flags != 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let prop = &*prop;
    if prop.location.type_ == CU_MEM_LOCATION_TYPE_DEVICE {
        tri!(ctx::require_device(prop.location.id));
    }
    *handle = tri!(mem_mut().create(size as u64, prop));
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuMemRelease(handle: CUmemGenericAllocationHandle) -> CUresult {
    tri!(ctx::require_init());
    count(counter::RELEASES, 1);
    code(mem_mut().release(handle))
}

/// How long each `cuMemMap` takes (`GMUX_STANDIN_MAP_US`, default 0), spent before the
/// stand-in's memory lock: mapping and granting access to a new handle take about 1 ms
/// on a GPU whose link is busy with copies.
static MAP_DELAY: LazyLock<Duration> =
    LazyLock::new(|| Duration::from_micros(std::env::var("GMUX_STANDIN_MAP_US").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(0)));

#[no_mangle]
pub unsafe extern "C" fn cuMemMap(ptr: CUdeviceptr, size: usize, offset: usize, handle: CUmemGenericAllocationHandle, flags: c_ulonglong) -> CUresult {
    tri!(ctx::require_init());
    count(counter::MAPS, 1);
    std::thread::sleep(*MAP_DELAY);
    if flags != 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    code(mem_mut().map(ptr, size as u64, offset as u64, handle))
}

/// Does not wait for queued work: an op that later touches the range faults.
#[no_mangle]
pub unsafe extern "C" fn cuMemUnmap(ptr: CUdeviceptr, size: usize) -> CUresult {
    tri!(ctx::require_init());
    count(counter::UNMAPS, 1);
    code(mem_mut().unmap(ptr, size as u64))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemSetAccess(ptr: CUdeviceptr, size: usize, desc: *const CUmemAccessDesc, n: usize) -> CUresult {
    tri!(ctx::require_init());
    count(counter::SET_ACCESS, 1);
    if desc.is_null() || n == 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let descs = std::slice::from_raw_parts(desc, n);
    for d in descs.iter().filter(|d| d.location.type_ == CU_MEM_LOCATION_TYPE_DEVICE) {
        tri!(ctx::require_device(d.location.id));
    }
    code(mem_mut().set_access(ptr, size as u64, descs))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetAllocationGranularity(granularity: *mut usize, prop: *const CUmemAllocationProp, option: u32) -> CUresult {
    tri!(ctx::require_init());
    if prop.is_null() || ![CU_MEM_ALLOC_GRANULARITY_MINIMUM, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED].contains(&option) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    code(put(granularity, GRANULARITY as usize))
}
