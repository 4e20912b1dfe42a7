//! Commands: kernels, copies, memsets, graph launches. Each is released only once its
//! working set is resident or on its way (the stream waits for the mover on the GPU).

use super::report;
use crate::config::config;
use crate::inflight::StreamKey;
use crate::cuda::*;
use crate::predict::{kernel_name, scan};
use super::pieces::{streamed, Linear};
use crate::state::{shim, Shim, ShimError, WorkingSet};
use std::ffi::c_void;

/// What a command runs, for its signature in the history (a kernel is its handle).
pub(super) const COPY_OR_MEMSET: u64 = 1;

/// Runs one command: working set, residency, the real call, bookkeeping. `kind` says
/// what it runs (a kernel's or graph's handle, or [`COPY_OR_MEMSET`]). A command captured
/// into a graph runs later, as part of the graph: it passes to the driver, after its
/// memory is mapped (see [`map_for_capture`]).
pub(super) fn run(real: impl FnOnce() -> CUresult, stream: CUstream, ptsz: bool, kind: u64, what: impl Fn() -> String, ws: impl FnOnce(&mut Shim) -> WorkingSet) -> CUresult {
    if crate::capture::captured(stream, ptsz) {
        crate::capture::relaxed(|| map_for_capture(ws));
        return real();
    }
    crate::capture::relaxed(|| run_now(real, stream, ptsz, kind, what, ws))
}

/// Makes a captured command's memory resident (mapped) without ordering the capture after
/// it: the driver checks when it captures a copy or memset that its addresses are mapped,
/// and memory the program allocated during the capture is not backed yet. The command's
/// data is not needed until the graph launches, which brings it in again. A working set
/// that does not fit is left to that launch to refuse.
fn map_for_capture(ws: impl FnOnce(&mut Shim) -> WorkingSet) {
    let Ok(mut g) = shim() else { return };
    let st = g.as_mut().expect("created");
    let ws = ws(st);
    if let Err(e) = st.prepare(&ws, None, 0) {
        crate::log!(Debug, "a captured command's memory was not mapped at capture: {e:?}");
    }
}

fn run_now(real: impl FnOnce() -> CUresult, stream: CUstream, ptsz: bool, kind: u64, what: impl Fn() -> String, ws: impl FnOnce(&mut Shim) -> WorkingSet) -> CUresult {
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
                match &mut ws {
                    WorkingSet::Allocs(a) => a.retain(|id| st.is_live(*id)),
                    WorkingSet::Spans(s) => s.retain(|x| st.is_live(x.alloc)),
                    WorkingSet::Tenant => {}
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

/// An asynchronous linear copy or memset on `stream` over byte ranges `(start, len)`.
fn op_over(real: impl FnOnce() -> CUresult, ranges: &[(CUdeviceptr, u64)], stream: CUstream, ptsz: bool) -> CUresult {
    run(real, stream, ptsz, COPY_OR_MEMSET, || "copy or memset".into(), |st| WorkingSet::Allocs(st.allocs_over(ranges)))
}

/// A linear copy or memset: streamed through the limit when it does not fit, else one
/// command over the byte ranges it touches.
fn linear(real: impl FnOnce() -> CUresult, op: &Linear, stream: CUstream, ptsz: bool, sync: bool) -> CUresult {
    match streamed(op, stream, ptsz, sync) {
        Some(r) => r,
        None => op_over(real, &op.ranges(), stream, ptsz),
    }
}

/// A synchronous copy or memset: on the legacy (or per-thread) default stream.
pub fn sync_op(real: impl FnOnce() -> CUresult, ptrs: &[CUdeviceptr], ptds: bool) -> CUresult {
    op(real, ptrs, std::ptr::null_mut(), ptds)
}

/// A graph launch: its working set is what the executable graph's nodes touch, or all
/// memory where a node cannot be analysed (logged once per reason). A graph whose memory
/// does not fit the limit runs in parts ([`crate::graph_split`]).
pub fn graph(real: impl FnOnce() -> CUresult, exec: CUgraphExec, stream: CUstream, ptsz: bool) -> CUresult {
    if !crate::capture::captured(stream, ptsz) {
        if let Some((parts, done)) = graph_parts(exec) {
            let on = crate::inflight::default_stream(stream, ptsz);
            // After the last launch of this graph, wherever it ran.
            let r = crate::capture::relaxed(|| crate::real!(cuStreamWaitEvent(on, done, 0)));
            if r != CUDA_SUCCESS {
                return r;
            }
            let n = parts.len();
            for (k, part) in parts.iter().enumerate() {
                let what = || format!("graph launch (cuGraphLaunch), part {} of {n}", k + 1);
                let r = run(|| crate::real!(cuGraphLaunch(part.exec, on)), on, false, part.exec as u64, what, |st| WorkingSet::Allocs(st.allocs_of(&part.touches)));
                if r != CUDA_SUCCESS {
                    return r;
                }
            }
            return crate::capture::relaxed(|| crate::real!(cuEventRecord(done, on)));
        }
    }
    run(real, stream, ptsz, exec as u64, || "graph launch (cuGraphLaunch)".into(), |st| {
        let touches = match st.graphs.get(exec) {
            Some(g) => g.touches().map_err(str::to_string),
            None => Err("a graph instantiated before gmux could see it".to_string()),
        };
        match touches {
            Ok(addresses) => WorkingSet::Allocs(st.allocs_of(&addresses)),
            Err(why) => {
                super::refuse::once(&format!("graph {why}"), &format!("cuGraphLaunch: {why}; its launches make all memory resident"), crate::log::Level::Warn);
                WorkingSet::Tenant
            }
        }
    })
}

/// After a stream synchronize: its commands are done.
pub fn synced(real: impl FnOnce() -> CUresult, stream: CUstream, ptsz: bool) -> CUresult {
    let r = real();
    if r == CUDA_SUCCESS {
        if let Some(st) = crate::state::existing().as_mut() {
            let _ = crate::capture::relaxed(|| st.inflight.synced(stream, ptsz));
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
            let _ = crate::capture::relaxed(|| st.inflight.synced_all());
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

/// Device addresses of a `CUDA_MEMCPY3D`.
///
/// # Safety
/// `c` is null or points to a valid `CUDA_MEMCPY3D`.
pub unsafe fn memcpy3d_ptrs(c: *const CUDA_MEMCPY3D) -> Vec<CUdeviceptr> {
    // SAFETY: per this function's contract.
    unsafe { c.as_ref() }.map(crate::graph::memcpy3d_devices).unwrap_or_default()
}

/// Every address of a batched copy (`cuMemcpyBatchAsync`): `count` destinations and
/// sources (host addresses among them fall outside gmux memory).
///
/// # Safety
/// `dsts` and `srcs` are null or hold `count` addresses each.
pub unsafe fn batch_ptrs(dsts: *const CUdeviceptr, srcs: *const CUdeviceptr, count: usize) -> Vec<CUdeviceptr> {
    // SAFETY: per this function's contract, a non-null side holds `count` addresses.
    let side = |p: *const CUdeviceptr| if p.is_null() { &[][..] } else { unsafe { std::slice::from_raw_parts(p, count) } };
    side(dsts).iter().chain(side(srcs)).copied().collect()
}

/// Host-to-device uploads of at most this many bytes are scanned for pointers.
pub const SCAN_UPLOAD_BYTES: usize = 64 << 10;

/// A host-to-device copy (`sync`: the synchronous call, on the default stream). A small
/// upload (descriptors, pointer arrays, TMA tensor maps) is scanned: gmux memory it points
/// to becomes part of the working set of every later command that reads the destination
/// allocation. One larger than the limit is streamed through it.
///
/// # Safety
/// `host` is readable for `n` bytes.
pub unsafe fn upload(real: impl FnOnce() -> CUresult, dst: CUdeviceptr, host: *const c_void, n: usize, stream: CUstream, ptsz: bool, sync: bool) -> CUresult {
    let h = host as usize;
    // SAFETY: the piece lies within the caller's buffers.
    let issue = |off: u64, len: u64, s: CUstream| crate::real!(cuMemcpyHtoDAsync_v2(dst + off, (h + off as usize) as *const c_void, len as usize, s));
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
    linear(real, &Linear { what: "cuMemcpyHtoD", device: &[dst], bytes: n as u64, issue: &issue }, stream, ptsz, sync)
}

/// A device-to-host copy; one larger than the limit is streamed through it.
pub fn download(real: impl FnOnce() -> CUresult, host: *mut c_void, src: CUdeviceptr, n: usize, stream: CUstream, ptsz: bool, sync: bool) -> CUresult {
    let h = host as usize;
    let issue = |off: u64, len: u64, s: CUstream| crate::real!(cuMemcpyDtoHAsync_v2((h + off as usize) as *mut c_void, src + off, len as usize, s));
    linear(real, &Linear { what: "cuMemcpyDtoH", device: &[src], bytes: n as u64, issue: &issue }, stream, ptsz, sync)
}

/// A copy between addresses of any kind (`cuMemcpy`, `cuMemcpyAsync`: the driver tells
/// host from device by the address); one larger than the limit is streamed through it.
pub fn unified_copy(real: impl FnOnce() -> CUresult, dst: CUdeviceptr, src: CUdeviceptr, n: usize, stream: CUstream, ptsz: bool, sync: bool) -> CUresult {
    let issue = |off: u64, len: u64, s: CUstream| crate::real!(cuMemcpyAsync(dst + off, src + off, len as usize, s));
    linear(real, &Linear { what: "cuMemcpy", device: &[dst, src], bytes: n as u64, issue: &issue }, stream, ptsz, sync)
}

/// A device-to-device copy; one larger than the limit is streamed through it.
pub fn device_copy(real: impl FnOnce() -> CUresult, dst: CUdeviceptr, src: CUdeviceptr, n: usize, stream: CUstream, ptsz: bool, sync: bool) -> CUresult {
    let issue = |off: u64, len: u64, s: CUstream| crate::real!(cuMemcpyDtoDAsync_v2(dst + off, src + off, len as usize, s));
    linear(real, &Linear { what: "cuMemcpyDtoD", device: &[dst, src], bytes: n as u64, issue: &issue }, stream, ptsz, sync)
}

/// A memset of `n` elements of `width` bytes (1, 2 or 4) to `value`; one larger than the
/// limit is streamed through it.
#[allow(clippy::too_many_arguments)]
pub fn memset(real: impl FnOnce() -> CUresult, dst: CUdeviceptr, width: u64, value: u32, n: usize, stream: CUstream, ptsz: bool, sync: bool) -> CUresult {
    // Pieces are whole chunks but the last, so each starts on an element.
    let issue = |off: u64, len: u64, s: CUstream| match width {
        1 => crate::real!(cuMemsetD8Async(dst + off, value as u8, len as usize, s)),
        2 => crate::real!(cuMemsetD16Async(dst + off, value as u16, (len / 2) as usize, s)),
        _ => crate::real!(cuMemsetD32Async(dst + off, value, (len / 4) as usize, s)),
    };
    let what = match width {
        1 => "cuMemsetD8",
        2 => "cuMemsetD16",
        _ => "cuMemsetD32",
    };
    let Some(bytes) = (n as u64).checked_mul(width) else { return CUDA_ERROR_INVALID_VALUE };
    linear(real, &Linear { what, device: &[dst], bytes, issue: &issue }, stream, ptsz, sync)
}

/// The parts to launch in place of `exec`, and the event that orders its launches, when
/// the graph's memory does not fit the room under the limit and it can be cut; `None`
/// launches it whole (and a graph that does not fit is refused by name).
fn graph_parts(exec: CUgraphExec) -> Option<(std::sync::Arc<[crate::graph::Part]>, CUevent)> {
    let mut g = shim().ok()?;
    let st = g.as_mut().expect("created");
    let touches = st.graphs.get(exec)?.touches().ok()?;
    let room = st.room();
    let bytes = |st: &Shim, ptrs: &[CUdeviceptr]| -> Vec<(u64, u64)> { st.allocs_of(ptrs).into_iter().filter_map(|a| st.vmem.of(a).map(|r| (a.0 as u64, r.reserved))).collect() };
    if bytes(st, &touches).iter().map(|(_, b)| b).sum::<u64>() <= room {
        return None;
    }
    // Taken out while it is cut, which reads the rest of the state.
    let mut split = st.graphs.get_mut(exec)?.split.take()?;
    let parts = split.parts(room, |ptrs| bytes(st, ptrs)).and_then(|p| split.done_event().map(|e| (p, e)).map_err(|e| e.to_string()));
    if let Some(e) = st.graphs.get_mut(exec) {
        e.split = Some(split);
    }
    match parts {
        Ok(p) => Some(p),
        Err(why) => {
            super::refuse::once(&format!("split {why}"), &format!("cuGraphLaunch: the graph does not fit the limit and cannot run in parts: {why}"), crate::log::Level::Warn);
            None
        }
    }
}
