//! How calls reach gmux: exported symbols (through `LD_PRELOAD`), an overridden `dlsym`,
//! and `cuGetProcAddress`, which the CUDA runtime uses for every entry point. Each
//! returns gmux's wrapper for a symbol in [`handled`], else the driver's own.
//!
//! `cuGetProcAddress` answers with the driver's choice of version and stream variant
//! (`cudaVersion`, `_ptsz`/`_ptds`): gmux maps the address the driver returns back to
//! the exported symbol it belongs to and swaps in the wrapper with that exact ABI. A
//! variant gmux does not wrap is never replaced by a look-alike (its ABI may differ); it
//! is reported once instead.

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

/// The wrapper of `name` when it is the only variant of its family gmux knows, so its
/// ABI cannot be mistaken (the driver may hand out an internal address for it).
fn only_variant(name: &[u8]) -> Option<usize> {
    let w = *handled().get(name)?;
    let others = ["_v2", "_v3", "_ptsz", "_ptds", "_v2_ptsz", "_v2_ptds"].iter().any(|v| handled().contains_key([name, v.as_bytes()].concat().as_slice()));
    (!others).then_some(w)
}

/// Whether some variant of `name` (`_v2`, `_ptsz`, …) is handled.
fn family_handled(name: &[u8]) -> bool {
    ["", "_v2", "_v3", "_ptsz", "_ptds", "_v2_ptsz", "_v2_ptds"].iter().any(|v| handled().contains_key([name, v.as_bytes()].concat().as_slice()))
}

/// `cuGetProcAddress` / `_v2`: the driver resolves; gmux swaps in its wrapper.
///
/// # Safety
/// Arguments as `cuGetProcAddress` defines them.
pub unsafe fn get_proc(real: impl FnOnce() -> CUresult, symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64) -> CUresult {
    let r = real();
    if r != CUDA_SUCCESS || pfn.is_null() || symbol.is_null() {
        return r;
    }
    // SAFETY: `pfn` is non-null and, by `cuGetProcAddress`'s contract, points to a function
    // pointer the driver has just written.
    let found = unsafe { *pfn } as usize;
    if found == 0 {
        return r;
    }
    // SAFETY: `symbol` is non-null and, by `cuGetProcAddress`'s contract, a NUL-terminated
    // name that outlives this call.
    let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    if let Some(w) = by_address(found).or_else(|| only_variant(name)) {
        // SAFETY: `pfn` is non-null and, by `cuGetProcAddress`'s contract, writable.
        unsafe { *pfn = w as *mut c_void };
        return r;
    }
    note_unwrapped(name, version, flags);
    if family_handled(name) {
        let name = String::from_utf8_lossy(name);
        crate::api::refuse::once(
            &format!("procaddr {name} {version} {flags}"),
            &format!("cuGetProcAddress({name}, cudaVersion {version}, flags {flags}) resolved to a variant gmux does not wrap; calls through it bypass gmux"),
            crate::log::Level::Warn,
        );
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
    // SAFETY: glibc's own `dlsym`, with the caller's arguments under the same contract.
    let found = unsafe { real_dlsym()(handle, name) };
    if found.is_null() || name.is_null() {
        return found;
    }
    // SAFETY: `name` is non-null and, by `dlsym`'s contract, a NUL-terminated symbol name.
    let n = unsafe { CStr::from_ptr(name) }.to_bytes();
    if !n.starts_with(b"cu") {
        return found;
    }
    // A panic here must not unwind into the caller: it gets the driver's own symbol.
    std::panic::catch_unwind(|| match handled().get(n) {
        Some(&w) => w as *mut c_void,
        None => {
            note_unwrapped(n, 0, 0);
            found
        }
    })
    .unwrap_or(found)
}

/// `GMUX_DEBUG=resolve`: names, once each, a resolved entry point that reaches the
/// driver without gmux.
fn note_unwrapped(name: &[u8], version: c_int, flags: u64) {
    if crate::config::config().debug.resolve {
        let name = String::from_utf8_lossy(name);
        crate::api::refuse::once(
            &format!("resolve {name}"),
            &format!("resolved unwrapped {name} (cudaVersion {version}, flags {flags})"),
            crate::log::Level::Error,
        );
    }
}
