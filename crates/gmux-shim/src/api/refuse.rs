//! Calls gmux refuses, each by name with its reason, calls it only forwards, and the
//! texture objects it records on the way.

use crate::cuda::*;
use std::collections::HashSet;
use std::ffi::c_void;
use std::sync::Mutex;

/// Logs `msg` once per `key`.
pub fn once(key: &str, msg: &str, level: crate::log::Level) {
    static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let mut g = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    if g.get_or_insert_with(HashSet::new).insert(key.to_string()) {
        crate::log::emit(level, msg);
    }
}

/// A call gmux does not support: `CUDA_ERROR_NOT_SUPPORTED`, logged once with the reason.
pub fn call(name: &str, why: &str) -> CUresult {
    once(name, &format!("{name} is not supported under gmux: {why}; it returns CUDA_ERROR_NOT_SUPPORTED (see docs/compatibility.md)"), crate::log::Level::Error);
    CUDA_ERROR_NOT_SUPPORTED
}

/// The real driver lacks an entry point gmux wraps.
pub fn missing(name: &str) -> CUresult {
    once(name, &format!("the CUDA driver has no {name}; update the NVIDIA driver (gmux needs CUDA 12.4 or later)"), crate::log::Level::Error);
    CUDA_ERROR_NOT_SUPPORTED
}

/// Forwards, noting once that this memory is outside gmux's limit.
pub fn note_passthrough(name: &str) {
    once(name, &format!("{name} passes through: its memory is not virtualized and not counted against the limit"), crate::log::Level::Warn);
}

/// Refuses `name` on gmux memory; forwards it otherwise.
pub fn if_virtual(real: impl FnOnce() -> CUresult, name: &str, ptr: CUdeviceptr, why: &str) -> CUresult {
    let virtual_ = crate::state::existing().as_ref().is_some_and(|st| st.vmem.find(ptr).is_some());
    if virtual_ {
        call(name, why)
    } else {
        real()
    }
}

/// `cuTexObjectCreate`: a texture over linear or pitched gmux memory is recorded, so that
/// kernels given its handle bring that memory in ([`crate::texture`]).
///
/// # Safety
/// `obj` is writable and `res` a valid `CUDA_RESOURCE_DESC`, or null.
pub unsafe fn texture(real: impl FnOnce() -> CUresult, obj: *mut u64, res: *const c_void) -> CUresult {
    const LINEAR: u32 = 2;
    const PITCH2D: u32 = 3;
    let r = real();
    if r != CUDA_SUCCESS || res.is_null() || obj.is_null() {
        return r;
    }
    // SAFETY: `res` is a valid resource descriptor: its type, then (for linear and
    // pitched memory) the device address at byte 8.
    let (kind, ptr) = unsafe { (std::ptr::read_unaligned(res as *const u32), std::ptr::read_unaligned((res as *const u8).add(8) as *const u64)) };
    if kind == LINEAR || kind == PITCH2D {
        // SAFETY: the driver wrote the object's handle.
        crate::texture::record(unsafe { *obj }, ptr);
    }
    r
}

/// `cuTexObjectDestroy`.
pub fn texture_destroyed(real: impl FnOnce() -> CUresult, obj: u64) -> CUresult {
    crate::texture::forget(obj);
    real()
}
