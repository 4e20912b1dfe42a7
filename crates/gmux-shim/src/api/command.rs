//! Commands: kernels, copies, memsets, graph launches. Each is released only once its
//! working set is resident or on its way (the stream waits for the mover on the GPU).

use super::report;
use crate::config::config;
use crate::inflight::StreamKey;
use crate::cuda::*;
use crate::predict::{kernel_name, scan};
use crate::state::{shim, Shim, ShimError, WorkingSet};
use std::ffi::c_void;

/// What a command runs, for its signature in the history (a kernel is its handle).
const COPY_OR_MEMSET: u64 = 1;
const UNANALYSED: u64 = 2;

/// Runs one command: working set, residency, the real call, bookkeeping. `kind` says
/// what it runs (a kernel's handle, or one of the constants above).
fn run(real: impl FnOnce() -> CUresult, stream: CUstream, ptsz: bool, kind: u64, what: impl Fn() -> String, ws: impl FnOnce(&mut Shim) -> WorkingSet) -> CUresult {
    crate::agent::gate();
    let mut g = match shim() {
        Ok(g) => g,
        Err(_) => return real(),
    };
    let mut ws = ws(g.as_mut().expect("created"));
    let (waits, sig) = loop {
        let st = g.as_mut().expect("created");
        let sig = st.signature(kind, &ws);
        match st.prepare(&ws, Some(StreamKey::of(stream, ptsz)), sig) {
            Ok(w) => break (w, sig),
            Err(ShimError::Wait { need }) => {
                // Over this process's grant: wait for the daemon outside the lock (the
                // agent may have to evict), then check the working set is still live.
                drop(g);
                crate::agent::wait_grant(need);
                crate::agent::gate();
                g = crate::state::existing();
                let st = g.as_mut().expect("created");
                if let WorkingSet::Allocs(a) = &mut ws {
                    a.retain(|id| st.is_live(*id));
                }
            }
            Err(e) => return report(e, &what()),
        }
    };
    let st = g.as_mut().expect("created");
    for ev in waits {
        let r = if ptsz { crate::real!(cuStreamWaitEvent_ptsz(stream, ev, 0)) } else { crate::real!(cuStreamWaitEvent(stream, ev, 0)) };
        if r != CUDA_SUCCESS {
            return report(crate::driver::CudaError { call: "cuStreamWaitEvent", code: r }.into(), &what());
        }
    }
    let (r, timing) = crate::record::timed(real, stream, ptsz);
    if r == CUDA_SUCCESS {
        let wait = match st.released(stream, ptsz, &ws, sig) {
            Ok(w) => w,
            Err(e) => return report(e, &what()),
        };
        crate::record::command(timing, kind, &ws);
        if let Some(ev) = wait {
            // Too many commands of this stream in flight: wait for the oldest over the
            // bound outside the lock.
            drop(g);
            crate::real!(cuEventSynchronize(ev));
        }
    }
    r
}

/// A kernel launch; its working set comes from its parameters.
///
/// # Safety
/// The arguments follow `cuLaunchKernel`'s contract.
pub unsafe fn kernel(real: impl FnOnce() -> CUresult, f: CUfunction, stream: CUstream, ptsz: bool, params: *mut *mut c_void, extra: *mut *mut c_void) -> CUresult {
    run(real, stream, ptsz, f as u64, || format!("kernel {}", kernel_name(f)), |st| {
        if config().whole_tenant {
            return WorkingSet::Tenant;
        }
        let mut ptrs = Vec::new();
        let layout = st.layouts.of(f);
        // SAFETY: the launch arguments are valid per the caller's contract.
        match unsafe { scan(layout, params, extra, |w| ptrs.push(w)) } {
            true => {
                let allocs = st.allocs_of(&ptrs);
                if allocs.is_empty() && crate::log::level() >= crate::log::Level::Debug {
                    let name = kernel_name(f);
                    super::refuse::once(&name, &format!("kernel {name}: no gmux memory found in its parameters"), crate::log::Level::Debug);
                }
                WorkingSet::Allocs(allocs)
            }
            false => {
                crate::log!(Warn, "kernel {}: no parameter layout (cuFuncGetParamInfo failed); treating it as touching all memory", kernel_name(f));
                WorkingSet::Tenant
            }
        }
    })
}

/// An asynchronous copy, memset or memory operation on `stream` touching `ptrs`.
pub fn op(real: impl FnOnce() -> CUresult, ptrs: &[CUdeviceptr], stream: CUstream, ptsz: bool) -> CUresult {
    run(real, stream, ptsz, COPY_OR_MEMSET, || "copy or memset".into(), |st| WorkingSet::Allocs(st.allocs_of(ptrs)))
}

/// A synchronous copy or memset: on the legacy (or per-thread) default stream.
pub fn sync_op(real: impl FnOnce() -> CUresult, ptrs: &[CUdeviceptr], ptds: bool) -> CUresult {
    op(real, ptrs, std::ptr::null_mut(), ptds)
}

/// A command gmux cannot analyse: everything must be resident.
pub fn whole_tenant(real: impl FnOnce() -> CUresult, name: &str, stream: CUstream, ptsz: bool) -> CUresult {
    run(real, stream, ptsz, UNANALYSED, || name.to_string(), |_| WorkingSet::Tenant)
}

/// After a stream synchronize: its commands are done.
pub fn synced(real: impl FnOnce() -> CUresult, stream: CUstream, ptsz: bool) -> CUresult {
    let r = real();
    if r == CUDA_SUCCESS {
        if let Some(st) = crate::state::existing().as_mut() {
            let _ = st.inflight.synced(stream, ptsz);
        }
        crate::agent::poke();
        crate::record::synced();
    }
    r
}

/// After a context synchronize: every command is done.
pub fn synced_all(real: impl FnOnce() -> CUresult) -> CUresult {
    let r = real();
    if r == CUDA_SUCCESS {
        if let Some(st) = crate::state::existing().as_mut() {
            let _ = st.inflight.synced_all();
        }
        crate::agent::poke();
        crate::record::synced();
    }
    r
}

/// Source and destination device addresses of a `CUDA_MEMCPY2D`.
///
/// # Safety
/// `c` points to a valid `CUDA_MEMCPY2D` (128 bytes).
pub unsafe fn memcpy2d_ptrs(c: *const c_void) -> [CUdeviceptr; 2] {
    let at = |off: usize| std::ptr::read_unaligned((c as *const u8).add(off) as *const u64);
    let kind = |off: usize| std::ptr::read_unaligned((c as *const u8).add(off) as *const u32);
    let dev = |kind_off: usize, ptr_off: usize| match kind(kind_off) {
        CU_MEMORYTYPE_DEVICE | CU_MEMORYTYPE_UNIFIED => at(ptr_off),
        _ => 0,
    };
    if c.is_null() {
        return [0, 0];
    }
    [dev(16, 32), dev(72, 88)]
}

/// Host-to-device uploads of at most this many bytes are scanned for pointers.
pub const SCAN_UPLOAD_BYTES: usize = 64 << 10;

/// A host-to-device copy. A small upload (descriptors, pointer arrays, TMA tensor maps)
/// is scanned: gmux memory it points to becomes part of the working set of every later
/// command that reads the destination allocation.
///
/// # Safety
/// `host` is readable for `n` bytes.
pub unsafe fn upload(real: impl FnOnce() -> CUresult, dst: CUdeviceptr, host: *const c_void, n: usize, stream: CUstream, ptsz: bool) -> CUresult {
    if !host.is_null() && (8..=SCAN_UPLOAD_BYTES).contains(&n) {
        let bytes = std::slice::from_raw_parts(host as *const u8, n);
        let mut found: Vec<CUdeviceptr> = bytes.chunks_exact(8).map(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes"))).collect();
        if crate::tensormap::any() {
            let mut k = 0;
            while k + crate::tensormap::MAP_BYTES <= n {
                found.extend(crate::tensormap::lookup(&bytes[k..k + crate::tensormap::MAP_BYTES]));
                k += crate::tensormap::MAP_ALIGN;
            }
        }
        if let Ok(mut g) = shim() {
            g.as_mut().expect("created").add_refs(dst, &found);
        }
    }
    op(real, &[dst], stream, ptsz)
}
