//! Allocation entry points: virtual ranges, sizes, address ranges.

use super::report;
use crate::cuda::*;
use crate::devices::of;
use crate::state::{existing, shim};

/// `cuMemAlloc`: a reserved range, backed on first use.
///
/// # Safety
/// `d` is writable or null.
pub unsafe fn alloc(d: *mut CUdeviceptr, bytes: u64) -> CUresult {
    // SAFETY: as this function's contract.
    unsafe { alloc_on(d, bytes, None) }
}

/// [`alloc`] for use in stream order after the work on `on` so far, if given.
///
/// # Safety
/// `d` is writable or null.
unsafe fn alloc_on(d: *mut CUdeviceptr, bytes: u64, on: Option<crate::inflight::StreamKey>) -> CUresult {
    if d.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let mut g = match shim() {
        Ok(g) => g,
        Err(code) => return code,
    };
    match crate::capture::relaxed(|| g.as_mut().expect("created").alloc(bytes, on)) {
        Ok(p) => {
            // SAFETY: `d` is non-null and, per this function's contract, writable.
            unsafe { *d = p };
            crate::record::alloc(g.as_deref(), p);
            CUDA_SUCCESS
        }
        Err(e) => report(e, "cuMemAlloc"),
    }
}

/// Row pitch of `cuMemAllocPitch`: rows padded to 512 bytes, as the driver does.
pub const PITCH_ALIGN: usize = 512;

/// `cuMemAllocPitch`.
///
/// # Safety
/// `d` and `pitch` are writable or null.
pub unsafe fn alloc_pitch(d: *mut CUdeviceptr, pitch: *mut usize, width: usize, height: usize, elem: u32) -> CUresult {
    if pitch.is_null() || !matches!(elem, 4 | 8 | 16) || width == 0 || height == 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let p = width.div_ceil(PITCH_ALIGN) * PITCH_ALIGN;
    // SAFETY: `d` is writable or null, per this function's contract and `alloc`'s.
    let r = unsafe { alloc(d, (p * height) as u64) };
    if r == CUDA_SUCCESS {
        // SAFETY: `pitch` is non-null and, per this function's contract, writable.
        unsafe { *pitch = p };
    }
    r
}

/// `cuMemFree`, or with `on` the stream of a `cuMemFreeAsync`, as
/// [`Shim::free`](crate::state::Shim::free) says.
pub fn free(real: impl FnOnce() -> CUresult, ptr: CUdeviceptr, on: Option<crate::inflight::StreamKey>) -> CUresult {
    let mut g = of(ptr);
    // Another device's memory is freed in its own context (its fences, its streams).
    let _ctx = g.as_ref().and_then(|st| crate::devices::enter(st));
    match g.as_mut() {
        // The program's own mappings go with cuMemUnmap, as with the driver.
        Some(st) if st.vmem.find(ptr).is_some_and(|r| r.app) => CUDA_ERROR_INVALID_VALUE,
        Some(st) if st.is_kept_for_graphs(ptr) => CUDA_SUCCESS,
        Some(st) if st.vmem.find(ptr).is_some() => match crate::capture::relaxed(|| st.free(ptr, on)) {
            Ok(()) => CUDA_SUCCESS,
            Err(e) => report(e, if on.is_some() { "cuMemFreeAsync" } else { "cuMemFree" }),
        },
        Some(st) if st.is_managed(ptr) => {
            let r = real();
            if r == CUDA_SUCCESS {
                st.set_managed(ptr, None);
            }
            r
        }
        _ => real(),
    }
}

/// `cuMemAllocManaged`: the driver allocates and moves managed memory; gmux counts it
/// against the limit as if always resident, and refuses what does not fit.
///
/// # Safety
/// `d` is writable or null.
pub unsafe fn managed(real: impl FnOnce() -> CUresult, d: *mut CUdeviceptr, bytes: usize) -> CUresult {
    let Ok(mut g) = shim() else { return real() };
    let st = g.as_mut().expect("created");
    let need = (bytes as u64).div_ceil(gmux_core::CHUNK_BYTES).saturating_mul(gmux_core::CHUNK_BYTES);
    if need > st.room() {
        let (need, room) = (gmux_core::size::format_size(need), gmux_core::size::format_size(st.room()));
        crate::log!(Error, "cuMemAllocManaged of {need}: managed memory counts against the limit and only {room} of it is left for it; raise --mem-limit (GMUX_MEM_LIMIT) by at least {need}");
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    let r = real();
    if r == CUDA_SUCCESS && !d.is_null() {
        // SAFETY: the driver wrote the address.
        st.set_managed(unsafe { *d }, Some(need));
    }
    r
}

/// `cuMemGetInfo`. gmux lets a process allocate past its limit (what does not fit is
/// evicted), so by default the process sees the device's own size as total, and as free
/// that less what it has allocated (gmux memory and managed memory). With
/// `GMUX_MEMINFO=limit` it sees a device of the limit's size instead, for programs that
/// size a cache from it and should stay resident. A device the process has not used yet,
/// while it uses another, gets the driver's own answer.
///
/// # Safety
/// `free` and `total` are writable or null.
pub unsafe fn info(real: impl FnOnce() -> CUresult, free: *mut usize, total: *mut usize) -> CUresult {
    // A device the process has not used yet, while it uses another: the driver answers
    // (a query alone does not make gmux serve a device).
    let unused = |dev| crate::devices::in_use().next().is_some() && !crate::devices::in_use().any(|d| d == dev);
    if crate::devices::current().is_ok_and(unused) {
        return real();
    }
    let g = match shim() {
        Ok(g) => g,
        Err(_) => return real(),
    };
    let st = g.as_ref().expect("created");
    if free.is_null() || total.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let size = if crate::config::config().meminfo_limit { st.limit() } else { st.device_total() };
    // SAFETY: both are non-null and, per this function's contract, writable.
    unsafe {
        *total = size as usize;
        *free = size.saturating_sub(st.managed_bytes()).saturating_sub(st.allocated()) as usize;
    }
    CUDA_SUCCESS
}

/// `cuMemGetAddressRange`: the allocation as the application asked for it.
///
/// # Safety
/// `base` and `size` are writable or null.
pub unsafe fn range(real: impl FnOnce() -> CUresult, base: *mut CUdeviceptr, size: *mut usize, ptr: CUdeviceptr) -> CUresult {
    let g = of(ptr);
    let Some(r) = g.as_ref().and_then(|st| st.region_of(ptr)) else {
        drop(g);
        return real();
    };
    if ptr >= r.base + r.bytes {
        return CUDA_ERROR_NOT_FOUND;
    }
    if !base.is_null() {
        // SAFETY: `base` is non-null and, per this function's contract, writable.
        unsafe { *base = r.base };
    }
    if !size.is_null() {
        // SAFETY: `size` is non-null and, per this function's contract, writable.
        unsafe { *size = r.bytes as usize };
    }
    CUDA_SUCCESS
}

/// Forwards an allocation gmux does not virtualize, saying so once.
pub fn passthrough(real: impl FnOnce() -> CUresult, name: &str) -> CUresult {
    super::refuse::note_passthrough(name);
    real()
}

/// `cuTensorMapEncode*` / `cuTensorMapReplaceAddress`: remembers the map's address.
///
/// # Safety
/// `map` is the caller's `CUtensorMap` (128 bytes), written by the driver on success.
pub unsafe fn tensor_map(real: impl FnOnce() -> CUresult, map: *mut std::ffi::c_void, addr: *mut std::ffi::c_void) -> CUresult {
    let r = real();
    if r == CUDA_SUCCESS && !map.is_null() {
        // SAFETY: `map` is non-null and, per this function's contract, the caller's 128-byte
        // `CUtensorMap`, which the driver has just written.
        unsafe { crate::tensormap::record(map as *const u8, addr as u64) };
    }
    r
}

/// `cuMemAllocAsync`: as `cuMemAlloc`, in stream order on `stream`. Inside stream capture
/// the driver would add a graph memory node, which allocates outside gmux at every
/// launch; gmux allocates at capture time instead, and the graph's kernels find the
/// memory at the address they were captured with. That memory stays allocated for the
/// rest of the process (frees of it are ignored), as a graph relaunched with
/// auto-free-on-launch needs it at every launch.
///
/// # Safety
/// `d` is writable or null.
pub unsafe fn alloc_async(d: *mut CUdeviceptr, bytes: u64, stream: CUstream, ptsz: bool) -> CUresult {
    if !crate::capture::captured(stream, ptsz) {
        // SAFETY: `d` is writable or null, per this function's contract and `alloc_on`'s.
        return unsafe { alloc_on(d, bytes, Some(crate::inflight::StreamKey::of(stream, ptsz))) };
    }
    // SAFETY: as above.
    let r = unsafe { alloc_on(d, bytes, None) };
    if r == CUDA_SUCCESS {
        if let Some(st) = existing().as_mut() {
            // SAFETY: `alloc_on` succeeded, so `d` is non-null and holds the address.
            st.keep_for_graphs(unsafe { *d });
        }
    }
    r
}

/// `cuMemFreeAsync`: as `cuMemFree`, in stream order on `stream`. Memory allocated inside
/// stream capture stays ([`alloc_async`], and [`free`] ignores it); memory freed inside a
/// capture stays too, as the graph may use it at every launch.
pub fn free_async(real: impl FnOnce() -> CUresult, ptr: CUdeviceptr, stream: CUstream, ptsz: bool) -> CUresult {
    if crate::capture::captured(stream, ptsz) {
        if let Some(st) = of(ptr).as_mut().filter(|st| st.vmem.find(ptr).is_some()) {
            st.keep_for_graphs(ptr);
            return CUDA_SUCCESS;
        }
    }
    free(real, ptr, Some(crate::inflight::StreamKey::of(stream, ptsz)))
}
