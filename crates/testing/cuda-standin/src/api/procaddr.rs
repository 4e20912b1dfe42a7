//! `cuGetProcAddress`: finds the stand-in's own exported symbols by base name.
//!
//! Lookups go through glibc's `dlsym` (not an interposer's override of it) on this
//! library's own handle (never `RTLD_DEFAULT`, which would find an interposer), so the
//! pointers returned are the exported symbols'.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

use cuda_abi::*;

fn own_handle() -> *mut c_void {
    static HANDLE: OnceLock<usize> = OnceLock::new();
    // SAFETY: `Dl_info` is pointers and integers, for which all-zero is valid. `dladdr` gets
    // the address of a live static and a writable `Dl_info`; on success its non-null
    // `dli_fname` is the loader's NUL-terminated path of this (loaded) library, and
    // `dlopen` with `RTLD_NOLOAD` only returns a handle to it, loading nothing.
    *HANDLE.get_or_init(|| unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        // A private item: the address of an exported symbol would bind to an interposer's
        // definition (libgmux.so exports cuGetProcAddress_v2 too) and name its library.
        static MARKER: u8 = 0;
        let me = &MARKER as *const u8 as *const c_void;
        if libc::dladdr(me, &mut info) == 0 || info.dli_fname.is_null() {
            return 0;
        }
        libc::dlopen(info.dli_fname, libc::RTLD_NOLOAD | libc::RTLD_LAZY) as usize
    }) as *mut c_void
}

/// Symbols whose newest `_vN` export is not what every caller wants: the driver answers by
/// the caller's CUDA version. (symbol, first CUDA version, exported name), newest first.
const VERSIONED: &[(&str, c_int, &str)] = &[
    ("cuGraphInstantiate", 12000, "cuGraphInstantiateWithFlags"),
    ("cuGraphGetEdges", 12030, "cuGraphGetEdges_v2"),
    ("cuGraphGetEdges", 0, "cuGraphGetEdges"),
    ("cuStreamGetCaptureInfo", 12030, "cuStreamGetCaptureInfo_v3"),
    ("cuStreamGetCaptureInfo", 11030, "cuStreamGetCaptureInfo_v2"),
    ("cuStreamGetCaptureInfo", 0, "cuStreamGetCaptureInfo"),
];

/// The candidate exported names for `symbol` asked for by a caller built for CUDA
/// `version`, best first.
fn candidates(symbol: &str, version: c_int, flags: u64) -> Vec<String> {
    let pinned = VERSIONED.iter().find(|&&(s, from, _)| s == symbol && version >= from).map(|&(_, _, name)| name);
    let (base, versions) = match pinned {
        Some(name) => (name, &[""][..]),
        None => (symbol, &["_v3", "_v2", ""][..]),
    };
    let mut names = Vec::new();
    if flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM != 0 {
        for v in versions {
            names.push(format!("{base}{v}_ptsz"));
            names.push(format!("{base}{v}_ptds"));
        }
    }
    names.extend(versions.iter().map(|v| format!("{base}{v}")));
    names
}

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// glibc's `dlsym`: an interposer (libgmux.so) may override `dlsym` itself and would
/// answer with its wrappers instead of this library's symbols.
fn glibc_dlsym() -> Option<DlsymFn> {
    static REAL: OnceLock<usize> = OnceLock::new();
    let f = *REAL.get_or_init(|| {
        for v in [c"GLIBC_2.34", c"GLIBC_2.2.5"] {
            // SAFETY: constant, NUL-terminated names.
            let p = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), v.as_ptr()) };
            if !p.is_null() {
                return p as usize;
            }
        }
        0
    });
    // SAFETY: a non-zero address is glibc's dlsym, whose signature this is.
    (f != 0).then(|| unsafe { std::mem::transmute::<usize, DlsymFn>(f) })
}

fn lookup(symbol: &str, version: c_int, flags: u64) -> *mut c_void {
    let handle = own_handle();
    let Some(dlsym) = glibc_dlsym() else { return std::ptr::null_mut() };
    if handle.is_null() {
        return std::ptr::null_mut();
    }
    for name in candidates(symbol, version, flags) {
        let Ok(c) = CString::new(name) else { continue };
        // SAFETY: `dlsym` is glibc's, with this signature; `handle` is the non-null handle
        // `dlopen` gave for this library, and `c` is a NUL-terminated string alive for the call.
        let p = unsafe { dlsym(handle, c.as_ptr()) };
        if !p.is_null() {
            return p;
        }
    }
    std::ptr::null_mut()
}

#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress_v2(symbol: *const c_char, pfn: *mut *mut c_void, cuda_version: c_int, flags: u64, status: *mut c_int) -> CUresult {
    if symbol.is_null() || pfn.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let p = lookup(&CStr::from_ptr(symbol).to_string_lossy(), cuda_version, flags);
    *pfn = p;
    let found = !p.is_null();
    if !status.is_null() {
        *status = if found { CU_GET_PROC_ADDRESS_SUCCESS } else { CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND };
    }
    if found {
        CUDA_SUCCESS
    } else {
        CUDA_ERROR_NOT_FOUND
    }
}

/// The CUDA 12 form, without the status output.
#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, cuda_version: c_int, flags: u64) -> CUresult {
    cuGetProcAddress_v2(symbol, pfn, cuda_version, flags, std::ptr::null_mut())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_thread_names_come_first() {
        let c = candidates("cuMemcpyHtoDAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
        let ptsz = c.iter().position(|n| n == "cuMemcpyHtoDAsync_v2_ptsz").unwrap();
        let plain = c.iter().position(|n| n == "cuMemcpyHtoDAsync_v2").unwrap();
        assert!(ptsz < plain);
        assert_eq!(candidates("cuInit", 12000, 0), ["cuInit_v3", "cuInit_v2", "cuInit"]);
    }

    #[test]
    fn versioned_signatures_follow_the_callers_version() {
        assert_eq!(candidates("cuGraphInstantiate", 12080, 0), ["cuGraphInstantiateWithFlags"]);
        assert_eq!(candidates("cuGraphInstantiate", 11080, 0)[1], "cuGraphInstantiate_v2");
        let per_thread = candidates("cuStreamGetCaptureInfo", 12030, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
        assert_eq!(per_thread[0], "cuStreamGetCaptureInfo_v3_ptsz");
        assert_eq!(candidates("cuStreamGetCaptureInfo", 12000, 0), ["cuStreamGetCaptureInfo_v2"]);
        assert_eq!(candidates("cuStreamGetCaptureInfo", 10000, 0), ["cuStreamGetCaptureInfo"]);
        assert_eq!(candidates("cuGraphGetEdges", 12030, 0), ["cuGraphGetEdges_v2"]);
        assert_eq!(candidates("cuGraphGetEdges", 13000, 0), ["cuGraphGetEdges_v2"]);
        assert_eq!(candidates("cuGraphGetEdges", 12020, 0), ["cuGraphGetEdges"], "the form without edge data");
    }
}
