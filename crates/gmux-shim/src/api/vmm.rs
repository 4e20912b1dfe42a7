//! The application's VMM entry points ([`crate::appvmm`]).

use crate::appvmm::{AppHandles, Refusal};
use crate::cuda::*;
use crate::devices::{of, on};
use crate::state::shim;

fn refused(r: Refusal) -> CUresult {
    match r {
        Refusal::Invalid(code) => code,
        Refusal::Unsupported(name, why) => super::refuse::call(name, &why),
    }
}

/// `cuMemCreate`: a handle of gmux's for this device's memory, else the driver's.
///
/// # Safety
/// `h` is writable and `prop` readable, or null.
pub unsafe fn create(real: impl FnOnce() -> CUresult, h: *mut CUmemGenericAllocationHandle, bytes: usize, prop: *const CUmemAllocationProp) -> CUresult {
    if h.is_null() || prop.is_null() {
        return real();
    }
    // SAFETY: `prop` is readable per the caller's contract.
    let location = unsafe { (*prop).location };
    // Device memory for a device other than the current context's: that device's state.
    let other = match crate::devices::current() {
        Ok(cur) if location.type_ == CU_MEM_LOCATION_TYPE_DEVICE && location.id as usize != cur => Some(location.id as usize),
        _ => None,
    };
    let mut g = match other {
        Some(dev) if dev < crate::devices::MAX_DEVICES && on(dev).is_some() => on(dev),
        _ => match shim() {
            Ok(g) => g,
            // A device whose daemon would not serve it (`devices::unserved`).
            Err(CUDA_ERROR_NOT_SUPPORTED) => return CUDA_ERROR_NOT_SUPPORTED,
            Err(_) => return real(),
        },
    };
    let st = g.as_mut().expect("created");
    let ordinal = st.ordinal();
    // SAFETY: `prop` is readable per the caller's contract.
    match st.app_vmm.create(bytes as u64, unsafe { &*prop }, ordinal) {
        Ok(Some(handle)) => {
            // SAFETY: `h` is writable per the caller's contract.
            unsafe { *h = handle };
            CUDA_SUCCESS
        }
        Ok(None) => {
            drop(g);
            super::refuse::note_passthrough("cuMemCreate of host memory");
            real()
        }
        Err(r) => refused(r),
    }
}

/// `cuMemRelease`.
pub fn release(real: impl FnOnce() -> CUresult, h: CUmemGenericAllocationHandle) -> CUresult {
    if !AppHandles::is_ours(h) {
        return real();
    }
    match on(AppHandles::device_of(h)).as_mut().map(|st| st.app_vmm.release(h)) {
        Some(Ok(())) => CUDA_SUCCESS,
        Some(Err(r)) => refused(r),
        None => CUDA_ERROR_INVALID_VALUE,
    }
}

/// `cuMemMap`: a gmux handle's range becomes gmux memory.
pub fn map(real: impl FnOnce() -> CUresult, ptr: CUdeviceptr, size: usize, offset: usize, h: CUmemGenericAllocationHandle) -> CUresult {
    if !AppHandles::is_ours(h) {
        return real();
    }
    let mut g = on(AppHandles::device_of(h));
    let Some(st) = g.as_mut() else { return CUDA_ERROR_INVALID_HANDLE };
    match st.map_app(ptr, size as u64, offset as u64, h) {
        Ok(new) => {
            if new {
                crate::record::alloc(g.as_deref(), ptr);
            }
            CUDA_SUCCESS
        }
        Err(r) => refused(r),
    }
}

/// `cuMemUnmap`: frees gmux memory mapped in the range (after the commands that use it);
/// other ranges go to the driver.
pub fn unmap(real: impl FnOnce() -> CUresult, ptr: CUdeviceptr, size: usize) -> CUresult {
    let mut g = of(ptr);
    let _ctx = g.as_ref().and_then(|st| crate::devices::enter(st));
    let Some(st) = g.as_mut() else {
        drop(g);
        return real();
    };
    match crate::capture::relaxed(|| st.unmap_app(ptr, size as u64)) {
        Ok(bases) if bases.is_empty() => {
            drop(g);
            real()
        }
        Ok(bases) => {
            for (base, lives_at) in bases {
                match lives_at {
                    Some(to) => crate::record::moved(base, to),
                    None => crate::record::free(base),
                }
            }
            CUDA_SUCCESS
        }
        Err(e) => super::report(e, "cuMemUnmap"),
    }
}

/// `cuMemSetAccess`: gmux grants access to its own memory when it backs it.
pub fn set_access(real: impl FnOnce() -> CUresult, ptr: CUdeviceptr, size: usize) -> CUresult {
    let Some(last) = ptr.checked_add((size as u64).max(1) - 1) else { return CUDA_ERROR_INVALID_VALUE };
    let ours = of(ptr).as_ref().is_some_and(|st| st.vmem.find(ptr).is_some_and(|r| r.app) && st.vmem.find(last).is_some_and(|r| r.app));
    if ours {
        CUDA_SUCCESS
    } else {
        real()
    }
}

/// `cuMemGetAllocationPropertiesFromHandle`.
///
/// # Safety
/// `prop` is writable or null.
pub unsafe fn properties(real: impl FnOnce() -> CUresult, prop: *mut CUmemAllocationProp, h: CUmemGenericAllocationHandle) -> CUresult {
    if !AppHandles::is_ours(h) {
        return real();
    }
    match on(AppHandles::device_of(h)).as_ref().and_then(|st| st.app_vmm.prop(h)) {
        Some(p) if !prop.is_null() => {
            // SAFETY: `prop` is writable per the caller's contract.
            unsafe { *prop = p };
            CUDA_SUCCESS
        }
        _ => CUDA_ERROR_INVALID_VALUE,
    }
}

/// `cuMemRetainAllocationHandle`.
///
/// # Safety
/// `h` is writable or null.
pub unsafe fn retain(real: impl FnOnce() -> CUresult, h: *mut CUmemGenericAllocationHandle, addr: CUdeviceptr) -> CUresult {
    let mut g = of(addr);
    let found = g.as_mut().and_then(|st| {
        let base = st.vmem.find(addr).filter(|r| r.app)?.base;
        st.app_vmm.retain(base)
    });
    match found {
        Some(handle) if !h.is_null() => {
            // SAFETY: `h` is writable per the caller's contract.
            unsafe { *h = handle };
            CUDA_SUCCESS
        }
        Some(_) => CUDA_ERROR_INVALID_VALUE,
        None => {
            drop(g);
            real()
        }
    }
}

/// `cuMemExportToShareableHandle`: refused for gmux's handles.
pub fn export(real: impl FnOnce() -> CUresult, h: CUmemGenericAllocationHandle) -> CUresult {
    if AppHandles::is_ours(h) {
        return super::refuse::call("cuMemExportToShareableHandle", "another process cannot map memory gmux moves");
    }
    real()
}
