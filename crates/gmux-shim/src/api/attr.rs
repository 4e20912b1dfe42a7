//! Pointer attributes of gmux memory. The driver would describe only the 2 MiB mapping
//! (or fail on an evicted chunk), so gmux answers for the allocation.

use super::report;
use crate::cuda::*;
use crate::state::{Shim, WorkingSet};
use crate::vmem::Region;
use std::ffi::c_void;

/// Writes `attr` of `ptr` in `r` to `data`; `false` for attributes gmux leaves to the driver.
///
/// # Safety
/// `data` is writable for `attr`'s type.
unsafe fn answer(st: &Shim, r: &Region, attr: u32, data: *mut c_void, ptr: CUdeviceptr) -> bool {
    // SAFETY: one write of the attribute's value; per this function's contract, `data` is
    // writable for `attr`'s type, which is the type each arm writes (as `cuda.h` gives it).
    unsafe {
        match attr {
            CU_POINTER_ATTRIBUTE_CONTEXT => *(data as *mut CUcontext) = st.ctx(),
            CU_POINTER_ATTRIBUTE_MEMORY_TYPE => *(data as *mut u32) = CU_MEMORYTYPE_DEVICE,
            CU_POINTER_ATTRIBUTE_DEVICE_POINTER => *(data as *mut CUdeviceptr) = ptr,
            CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL => *(data as *mut i32) = st.ordinal(),
            CU_POINTER_ATTRIBUTE_RANGE_START_ADDR => *(data as *mut CUdeviceptr) = r.base,
            CU_POINTER_ATTRIBUTE_RANGE_SIZE => *(data as *mut usize) = r.bytes as usize,
            CU_POINTER_ATTRIBUTE_BUFFER_ID => *(data as *mut u64) = st.buffer_id(r),
            _ => return false,
        }
    }
    true
}

/// Makes the allocation resident and waits, so the driver can answer about it.
fn resident(st: &mut Shim, r: &Region) -> CUresult {
    match st.prepare(&WorkingSet::Allocs(smallvec::smallvec![r.alloc]), None, 0) {
        Ok(waits) => waits.into_iter().map(|ev| crate::real!(cuEventSynchronize(ev))).find(|r| *r != CUDA_SUCCESS).unwrap_or(CUDA_SUCCESS),
        Err(e) => report(e, "cuPointerGetAttribute"),
    }
}

/// Runs `f` on the region holding `ptr` (in its device's context), or the driver's own
/// call if `ptr` is not gmux memory.
fn on_region<R: FnOnce() -> CUresult>(real: R, ptr: CUdeviceptr, f: impl FnOnce(&mut Shim, &Region, R) -> CUresult) -> CUresult {
    let mut g = crate::devices::of(ptr);
    let Some((st, r)) = g.as_mut().and_then(|st| st.region_of(ptr).map(|r| (st, r))) else {
        drop(g);
        return real();
    };
    let _scope = crate::devices::enter(st);
    f(st, &r, real)
}

/// `cuPointerGetAttribute`.
///
/// # Safety
/// `data` is writable for the attribute's type.
pub unsafe fn one(real: impl FnOnce() -> CUresult, data: *mut c_void, attr: u32, ptr: CUdeviceptr) -> CUresult {
    on_region(real, ptr, |st, r, real| {
        if data.is_null() || attr == CU_POINTER_ATTRIBUTE_HOST_POINTER {
            return CUDA_ERROR_INVALID_VALUE;
        }
        // SAFETY: `data` is non-null and, per this function's contract, writable for `attr`'s type.
        if unsafe { answer(st, r, attr, data, ptr) } {
            return CUDA_SUCCESS;
        }
        match resident(st, r) {
            CUDA_SUCCESS => real(),
            code => code,
        }
    })
}

/// `cuPointerGetAttributes`.
///
/// # Safety
/// `attrs` and `data` hold `n` entries, each writable for its attribute's type.
pub unsafe fn many(real: impl FnOnce() -> CUresult, n: u32, attrs: *mut u32, data: *mut *mut c_void, ptr: CUdeviceptr) -> CUresult {
    // SAFETY: per this function's contract, `attrs` and `data` hold `n` entries, each
    // writable for its attribute's type, which is `many_on`'s contract.
    on_region(real, ptr, |st, r, real| unsafe { many_on(st, r, real, n, attrs, data, ptr) })
}

/// `cuPointerGetAttributes` on gmux memory, in region `r`.
///
/// # Safety
/// As [`many`]: `attrs` and `data`, when not null, hold `n` entries, each writable for its
/// attribute's type.
unsafe fn many_on(st: &mut Shim, r: &Region, real: impl FnOnce() -> CUresult, n: u32, attrs: *mut u32, data: *mut *mut c_void, ptr: CUdeviceptr) -> CUresult {
    if attrs.is_null() || data.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: both are non-null and, per this function's contract, hold `n` entries.
    let list: Vec<(u32, *mut c_void)> = (0..n as usize).map(|i| unsafe { (*attrs.add(i), *data.add(i)) }).collect();
    let mut all_ours = true;
    for &(a, d) in &list {
        if d.is_null() {
            continue;
        }
        if a == CU_POINTER_ATTRIBUTE_HOST_POINTER {
            // SAFETY: `d` is non-null and, per this function's contract, writable for the
            // host pointer attribute's type, a pointer.
            unsafe { *(d as *mut *mut c_void) = std::ptr::null_mut() };
            continue;
        }
        // SAFETY: `d` is non-null and, per this function's contract, writable for `a`'s type.
        if !unsafe { answer(st, r, a, d, ptr) } {
            all_ours = false;
        }
    }
    if all_ours {
        return CUDA_SUCCESS;
    }
    let code = resident(st, r);
    if code != CUDA_SUCCESS {
        return code;
    }
    let code = real();
    for &(a, d) in &list {
        if !d.is_null() {
            // SAFETY: `d` is non-null and, per this function's contract, writable for `a`'s
            // type; gmux's answer replaces the driver's, which described only the mapping.
            unsafe { answer(st, r, a, d, ptr) };
        }
    }
    code
}
