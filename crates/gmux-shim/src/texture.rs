//! Texture objects over gmux memory: a kernel receives the object's handle, not the
//! address it reads. gmux records the address behind every texture object over linear
//! or pitched memory, so that a handle found in a kernel's parameters adds that memory to
//! the working set (an integer parameter equal to a handle adds it too: more resident,
//! never less).

use crate::cuda::*;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

static OBJECTS: Mutex<Option<HashMap<u64, u64>>> = Mutex::new(None);
static ANY: AtomicBool = AtomicBool::new(false);

/// The table of texture objects (handle → address), for lookups.
pub fn table() -> MutexGuard<'static, Option<HashMap<u64, u64>>> {
    OBJECTS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether any texture object over memory was recorded (prediction skips the lookup
/// otherwise).
pub fn any() -> bool {
    ANY.load(Ordering::Acquire)
}

/// `cuTexObjectCreate`: a texture over linear or pitched memory is recorded.
///
/// # Safety
/// `obj` is writable and `res` a valid `CUDA_RESOURCE_DESC`, or null.
pub unsafe fn created(real: impl FnOnce() -> CUresult, obj: *mut u64, res: *const c_void) -> CUresult {
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
        let handle = unsafe { *obj };
        table().get_or_insert_with(HashMap::new).insert(handle, ptr);
        ANY.store(true, Ordering::Release);
    }
    r
}

/// `cuTexObjectDestroy`.
pub fn destroyed(real: impl FnOnce() -> CUresult, obj: u64) -> CUresult {
    if let Some(m) = table().as_mut() {
        m.remove(&obj);
    }
    real()
}
