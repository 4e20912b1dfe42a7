//! How calls reach gmux: exported symbols (through `LD_PRELOAD`), an overridden `dlsym`,
//! and `cuGetProcAddress`, which the CUDA runtime uses for every entry point. Each
//! returns gmux's wrapper for a symbol in [`handled`], else the driver's own.
//!
//! `cuGetProcAddress` answers with the driver's choice of version and stream variant
//! (`cudaVersion`, `_ptsz`/`_ptds`): gmux maps the address the driver returns back to
//! the exported symbol it belongs to and swaps in the wrapper with that exact ABI.

use crate::cuda::*;
use crate::driver::{real_dlsym, real_symbol};
use crate::exports::handled;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

/// The wrapper for the real entry point at `addr`, if gmux handles it.
fn by_address(addr: usize) -> Option<usize> {
    static REVERSE: OnceLock<HashMap<usize, usize>> = OnceLock::new();
    REVERSE
        .get_or_init(|| {
            handled()
                .iter()
                .filter_map(|(name, wrapper)| {
                    let c = CString::new(*name).ok()?;
                    let real = real_symbol(&c) as usize;
                    (real != 0).then_some((real, *wrapper))
                })
                .collect()
        })
        .get(&addr)
        .copied()
}

/// The wrapper for `name` as the driver would resolve it: stream variant first, then
/// the newest version.
fn by_name(name: &[u8], flags: u64) -> Option<usize> {
    let mut candidates: Vec<Vec<u8>> = Vec::new();
    if flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM != 0 {
        for v in ["_v2_ptsz", "_v2_ptds", "_ptsz", "_ptds"] {
            candidates.push([name, v.as_bytes()].concat());
        }
    }
    for v in ["_v3", "_v2", ""] {
        candidates.push([name, v.as_bytes()].concat());
    }
    candidates.iter().find_map(|c| handled().get(c.as_slice()).copied())
}

/// `cuGetProcAddress` / `_v2`: the driver resolves; gmux swaps in its wrapper.
///
/// # Safety
/// Arguments as `cuGetProcAddress` defines them.
pub unsafe fn get_proc(real: impl FnOnce() -> CUresult, symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64) -> CUresult {
    let r = real();
    if r != CUDA_SUCCESS || pfn.is_null() || (*pfn).is_null() || symbol.is_null() {
        return r;
    }
    let found = *pfn as usize;
    if let Some(w) = by_address(found) {
        *pfn = w as *mut c_void;
    } else if let Some(w) = by_name(CStr::from_ptr(symbol).to_bytes(), flags) {
        crate::log!(Debug, "cuGetProcAddress({:?}, {version}, {flags}): matched by name", CStr::from_ptr(symbol));
        *pfn = w as *mut c_void;
    }
    r
}

/// `dlsym`, overridden so that programs resolving driver entry points by hand (PyTorch,
/// cuBLAS, Triton, the runtime's first lookup of `cuGetProcAddress`) get gmux's.
///
/// # Safety
/// As glibc's `dlsym`.
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    let found = real_dlsym()(handle, name);
    if found.is_null() || name.is_null() {
        return found;
    }
    let n = CStr::from_ptr(name).to_bytes();
    if !n.starts_with(b"cu") {
        return found;
    }
    match handled().get(n) {
        Some(&w) => w as *mut c_void,
        None => found,
    }
}
