//! `cuModuleLoadData` over PTX text: each `.entry` becomes a kernel that does nothing,
//! with the parameter sizes its declaration gives (scalars, and `.b8` arrays as structs
//! are declared). Enough for programs that load their own PTX to time launches (`gmux
//! bench launch`) on the stand-in; anything else (a cubin) is refused as an invalid image.

use std::ffi::{c_char, c_void, CStr, CString};

use cuda_abi::*;

use super::{code, put};
use crate::{ctx, kernel};

unsafe extern "C" fn nothing(_: *const *mut c_void) {}

/// Bytes of a PTX parameter type (`.u64`, `.f32`, `.b8`, …); `None` for one not known.
fn type_bytes(ty: &str) -> Option<usize> {
    let bits: usize = ty.trim_start_matches('.').get(1..)?.parse().ok()?;
    (bits.is_multiple_of(8) && bits > 0).then_some(bits / 8)
}

/// Bytes of one parameter declaration: `.param [.align N] .TYPE name[COUNT]`.
fn param_bytes(decl: &str) -> Option<usize> {
    let mut words = decl.split_whitespace().filter(|w| *w != ".param");
    let mut ty = words.next()?;
    if ty == ".align" {
        words.next()?;
        ty = words.next()?;
    }
    let count = match words.next()?.split_once('[') {
        Some((_, n)) => n.strip_suffix(']')?.parse().ok()?,
        None => 1,
    };
    Some(type_bytes(ty)? * count)
}

/// The entries of PTX text `ptx`: name and parameter sizes. `None` where a declaration
/// cannot be read, or where there is no entry (not PTX text).
pub fn entries(ptx: &str) -> Option<Vec<(String, Vec<usize>)>> {
    let mut out = Vec::new();
    for decl in ptx.split(".entry").skip(1) {
        let head = decl.split('{').next()?;
        let (name, params) = match head.split_once('(') {
            Some((name, rest)) => (name, rest.split(')').next()?),
            None => (head, ""),
        };
        let sizes = params.split(',').map(str::trim).filter(|p| !p.is_empty()).map(param_bytes).collect::<Option<Vec<_>>>()?;
        out.push((name.trim().to_owned(), sizes));
    }
    (!out.is_empty()).then_some(out)
}

/// Registers every entry of the PTX text at `image` (NUL-terminated) as a kernel that does
/// nothing; the module handle is a token (functions are found by name).
#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(module: *mut CUmodule, image: *const c_void) -> CUresult {
    tri!(ctx::require_current());
    if image.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let Some(found) = CStr::from_ptr(image as *const c_char).to_str().ok().and_then(entries) else { return CUDA_ERROR_INVALID_IMAGE };
    for (name, sizes) in found {
        let Ok(name) = CString::new(name) else { return CUDA_ERROR_INVALID_IMAGE };
        kernel::register(name, nothing, sizes, false);
    }
    code(put(module, std::ptr::dangling_mut::<c_void>()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_and_their_parameter_sizes() {
        let ptx = ".version 7.0\n.visible .entry a() { ret; }\n.visible .entry b(.param .u64 p, .param .f32 x, .param .b8 c) { ret; }";
        assert_eq!(entries(ptx), Some(vec![("a".into(), vec![]), ("b".into(), vec![8, 4, 1])]));
        assert_eq!(entries(".entry c(.param .weird p) {}"), None);
        assert_eq!(entries(".entry d(.param .align 8 .b8 s[24]) { ret; }"), Some(vec![("d".into(), vec![24])]));
        assert_eq!(entries(".entry e { call f(x); }"), Some(vec![("e".into(), vec![])]));
        assert_eq!(entries("\x7fELF no entries"), None, "not PTX text");
    }
}
