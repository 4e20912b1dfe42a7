//! Linear copies and memsets (host to device, device to host, device to device, unified,
//! `cuMemsetD8/16/32`): one command over the byte ranges they touch, or, larger than the
//! limit, streamed through it: one needs only the piece in flight resident. A linear copy or memset whose allocations do not fit the
//! room left under the limit runs as pieces, each a command of its own whose working set
//! is the byte ranges it touches, issued in order on the caller's stream. A synchronous
//! call waits for its last piece before it returns, as the driver's would.

use super::command::{run, COPY_OR_MEMSET};
use crate::cuda::*;
use crate::state::{shim, WorkingSet};
use gmux_core::CHUNK_BYTES;
use std::ffi::c_void;

/// Largest piece: small enough for one piece's copy to overlap the next one's migration.
const MAX_PIECE: u64 = 64 << 20;

/// One linear copy or memset over device memory.
pub struct Linear<'a> {
    /// The entry point, for messages.
    pub what: &'static str,
    /// Device ranges it touches, each from its start address, over `bytes` bytes.
    pub device: &'a [CUdeviceptr],
    /// Bytes copied or set.
    pub bytes: u64,
    /// Issues the piece at `offset` of `len` bytes on the given stream handle.
    pub issue: &'a dyn Fn(u64, u64, CUstream) -> CUresult,
}

impl Linear<'_> {
    /// The byte ranges it touches.
    pub fn ranges(&self) -> Vec<(CUdeviceptr, u64)> {
        self.device.iter().map(|&p| (p, self.bytes)).collect()
    }
}

/// Streams `op` through the limit when its allocations do not fit the room left, and
/// returns the call's result; `None` when it fits (the caller runs it whole).
pub fn streamed(op: &Linear, stream: CUstream, ptsz: bool, sync: bool) -> Option<CUresult> {
    if op.device.iter().any(|p| p.checked_add(op.bytes).is_none()) {
        return Some(CUDA_ERROR_INVALID_VALUE);
    }
    let piece = {
        let g = shim().ok()?;
        let st = g.as_ref().expect("created");
        let whole: u64 = st.allocs_over(&op.ranges()).iter().filter_map(|a| st.vmem.of(*a)).map(|r| r.reserved).sum();
        if whole <= st.room() {
            return None;
        }
        // Two device sides of a piece may each straddle one more chunk than it covers.
        (st.room() / 4 / CHUNK_BYTES * CHUNK_BYTES).clamp(CHUNK_BYTES, MAX_PIECE)
    };
    crate::log!(Debug, "{} of {} bytes streamed in pieces of {piece}", op.what, op.bytes);
    let on = crate::inflight::default_stream(stream, ptsz);
    let mut offset = 0;
    while offset < op.bytes {
        let len = piece.min(op.bytes - offset);
        let pieces: Vec<(CUdeviceptr, u64)> = op.device.iter().map(|&p| (p + offset, len)).collect();
        let spans = |st: &mut crate::state::Shim| WorkingSet::Spans(st.spans_over(&pieces));
        let r = run(|| (op.issue)(offset, len, on), on, false, COPY_OR_MEMSET, || format!("{} (a piece of {} bytes at offset {offset})", op.what, len), spans);
        if r != CUDA_SUCCESS {
            return Some(r);
        }
        offset += len;
    }
    // Captured pieces become graph nodes, each mapped at capture ([`super::command`]): no
    // synchronize, which would break the capture.
    let captured = crate::capture::captured(on, false);
    Some(if sync && !captured { crate::capture::relaxed(|| crate::real!(cuStreamSynchronize(on))) } else { CUDA_SUCCESS })
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

/// Host-to-device uploads of at most this many bytes are scanned for pointers.
pub const SCAN_UPLOAD_BYTES: usize = 64 << 10;

/// A host-to-device copy (`sync`: the synchronous call, on the default stream). A small
/// upload (descriptors, pointer arrays, TMA tensor maps) is scanned: gmux memory it points
/// to becomes part of the working set of every later command that reads the destination
/// allocation. A larger one is scanned whole where its first [`SCAN_UPLOAD_BYTES`] hold
/// such pointers: an array of structures that each hold one (cuRAND's MTGP32 generator
/// states point at its parameters), not weights or inputs. One larger than the limit is
/// streamed through it.
///
/// # Safety
/// `host` is readable for `n` bytes.
pub unsafe fn upload(real: impl FnOnce() -> CUresult, dst: CUdeviceptr, host: *const c_void, n: usize, stream: CUstream, ptsz: bool, sync: bool) -> CUresult {
    let h = host as usize;
    // SAFETY: the piece lies within the caller's buffers.
    let issue = |off: u64, len: u64, s: CUstream| crate::real!(cuMemcpyHtoDAsync_v2(dst + off, (h + off as usize) as *const c_void, len as usize, s));
    if !host.is_null() && n >= 8 {
        // SAFETY: `host` is non-null and, per this function's contract, readable for `n` bytes.
        scan_upload(dst, unsafe { std::slice::from_raw_parts(host as *const u8, n) });
    }
    linear(real, &Linear { what: "cuMemcpyHtoD", device: &[dst], bytes: n as u64, issue: &issue }, stream, ptsz, sync)
}

/// Records the gmux pointers (and TMA tensor maps) that an upload of `bytes` to `dst`
/// holds, as [`upload`] says.
fn scan_upload(dst: CUdeviceptr, bytes: &[u8]) {
    if bytes.len() > SCAN_UPLOAD_BYTES {
        let mut g = crate::devices::of(dst);
        let Some(st) = g.as_mut() else { return };
        if st.vmem.holds_any(words(&bytes[..SCAN_UPLOAD_BYTES])) {
            st.add_refs(dst, &words(bytes).collect::<Vec<_>>());
        }
        return;
    }
    let mut found: Vec<CUdeviceptr> = words(bytes).collect();
    if crate::tensormap::any() {
        let mut k = 0;
        while k + crate::tensormap::MAP_BYTES <= bytes.len() {
            found.extend(crate::tensormap::lookup(&bytes[k..k + crate::tensormap::MAP_BYTES]));
            k += crate::tensormap::MAP_ALIGN;
        }
    }
    // The state of the device whose memory is written.
    if let Some(st) = crate::devices::of(dst).as_mut() {
        st.add_refs(dst, &found);
    }
}

/// The 8-byte words of `bytes`, as addresses.
fn words(bytes: &[u8]) -> impl Iterator<Item = CUdeviceptr> + '_ {
    bytes.chunks_exact(8).map(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes")))
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

/// A copy between devices with their contexts named (`cuMemcpyPeer*`); one larger than the
/// limit is streamed through it.
#[allow(clippy::too_many_arguments)]
pub fn peer_copy(
    real: impl FnOnce() -> CUresult,
    dst: CUdeviceptr,
    dst_ctx: CUcontext,
    src: CUdeviceptr,
    src_ctx: CUcontext,
    n: usize,
    stream: CUstream,
    ptsz: bool,
    sync: bool,
) -> CUresult {
    // With no context current, the command is the destination's device's.
    let _ctx = crate::devices::current().is_err().then(|| gmux_cuda::context::Scope::enter(dst_ctx));
    let issue = |off: u64, len: u64, s: CUstream| crate::real!(cuMemcpyPeerAsync(dst + off, dst_ctx, src + off, src_ctx, len as usize, s));
    linear(real, &Linear { what: "cuMemcpyPeer", device: &[dst, src], bytes: n as u64, issue: &issue }, stream, ptsz, sync)
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
