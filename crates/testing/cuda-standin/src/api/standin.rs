//! The stand-in's own exports: kernel registration, the kernels' device memory access,
//! and counters for tests.

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::Ordering;

use cuda_abi::StandinKernel;

use crate::kernel;
use crate::memory::{fault, mem, COUNTERS, PEAK_LIVE, PEAK_LIVE_ON};

/// Registers host function `f` as a kernel named `name` with `nparams` parameters of the
/// given byte sizes. Returns a `CUkernel` if `as_cukernel != 0`, else a `CUfunction`;
/// null on bad arguments.
#[no_mangle]
pub unsafe extern "C" fn gmuxStandinRegisterKernel(
    name: *const c_char,
    f: Option<StandinKernel>,
    nparams: u32,
    sizes: *const usize,
    as_cukernel: i32,
) -> *mut c_void {
    let Some(f) = f else { return std::ptr::null_mut() };
    if name.is_null() || (nparams > 0 && sizes.is_null()) {
        return std::ptr::null_mut();
    }
    let sizes = if nparams == 0 { Vec::new() } else { std::slice::from_raw_parts(sizes, nparams as usize).to_vec() };
    kernel::register(CStr::from_ptr(name).to_owned(), f, sizes, as_cukernel != 0)
}

fn who() -> String {
    kernel::running_name().unwrap_or_else(|| "gmuxStandinRead/Write".to_owned())
}

/// Reads device memory for a kernel; aborts on any byte not mapped with access.
#[no_mangle]
pub unsafe extern "C" fn gmuxStandinRead(src: u64, dst: *mut u8, len: usize) {
    if let Err(f) = mem().read(src, dst, len) {
        fault(&who(), f)
    }
}

/// Writes device memory for a kernel; aborts on any byte not mapped with write access.
#[no_mangle]
pub unsafe extern "C" fn gmuxStandinWrite(dst: u64, src: *const u8, len: usize) {
    if let Err(f) = mem().write(dst, src, len) {
        fault(&who(), f)
    }
}

/// Fills `out[..n]` with [creates, maps, unmaps, set_access_calls, h2d_bytes, d2h_bytes,
/// releases, live_physical_bytes].
#[no_mangle]
pub unsafe extern "C" fn gmuxStandinCounters(out: *mut u64, n: usize) {
    if out.is_null() {
        return;
    }
    let mut all: Vec<u64> = COUNTERS.iter().map(|c| c.load(Ordering::SeqCst)).collect();
    all.push(mem().live());
    all.push(PEAK_LIVE.load(Ordering::SeqCst));
    for (i, v) in all.into_iter().take(n).enumerate() {
        *out.add(i) = v;
    }
}

/// Fills `out[0..2]` with the physical bytes `cuMemCreate` made on device `dev` that are
/// live now, and the most that were live at once; 0 for a device out of range.
#[no_mangle]
pub unsafe extern "C" fn gmuxStandinDeviceMemory(dev: u32, out: *mut u64) {
    if out.is_null() {
        return;
    }
    let d = dev as usize;
    *out = mem().live_on(d);
    *out.add(1) = PEAK_LIVE_ON.get(d).map_or(0, |p| p.load(Ordering::SeqCst));
}
