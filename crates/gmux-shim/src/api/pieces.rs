//! Copies and memsets larger than the limit, streamed through it: one needs only the
//! piece in flight resident. A linear copy or memset whose allocations do not fit the
//! room left under the limit runs as pieces, each a command of its own whose working set
//! is the byte ranges it touches, issued in order on the caller's stream. A synchronous
//! call waits for its last piece before it returns, as the driver's would.

use super::command::{run, COPY_OR_MEMSET};
use crate::cuda::*;
use crate::state::{shim, Span, WorkingSet};
use gmux_core::CHUNK_BYTES;

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
        // A piece may cross from one of the application's mappings into the next.
        let spans = |st: &mut crate::state::Shim| {
            let mut spans = Vec::new();
            for &p in op.device {
                let (start, end) = (p + offset, p + offset + len);
                for r in st.vmem.overlapping(start, len) {
                    let (from, to) = (start.max(r.base), end.min(r.base + r.reserved));
                    spans.push(Span { alloc: r.alloc, offset: from - r.base, len: to - from });
                }
            }
            WorkingSet::Spans(spans)
        };
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
