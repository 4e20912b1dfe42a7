//! 2D and 3D copies (`cuMemcpy2D*`, `cuMemcpy3D*`): one command over the allocations
//! their device sides cross, or, when those do not fit the room under the limit, streamed
//! through it in sub-boxes (whole slices, else whole rows, else pieces of a row). Each
//! piece is a command whose working set is the bytes it touches, issued in order on the
//! caller's stream with `cuMemcpy3DAsync` (a 2D copy is a 3D copy one slice deep). A
//! synchronous call waits for its last piece before it returns, as the driver's would.

use super::command::{run, COPY_OR_MEMSET};
use crate::cuda::*;
use crate::graph::memcpy3d_ranges;
use crate::state::{shim, WorkingSet};
use gmux_core::CHUNK_BYTES;
use std::ffi::c_void;

/// Largest piece on one side: small enough for one piece's copy to overlap the next
/// one's migration.
const MAX_PIECE: u64 = 64 << 20;

/// `cuMemcpy3D*`.
///
/// # Safety
/// `p` is null or points to a valid `CUDA_MEMCPY3D`.
pub unsafe fn copy3d(real: impl FnOnce() -> CUresult, p: *const CUDA_MEMCPY3D, stream: CUstream, ptsz: bool, sync: bool) -> CUresult {
    // SAFETY: per this function's contract.
    match unsafe { p.as_ref() } {
        Some(c) => boxed(real, *c, stream, ptsz, sync),
        None => real(),
    }
}

/// `cuMemcpy2D*` (`CUDA_MEMCPY2D`, 128 bytes).
///
/// # Safety
/// `p` is null or points to a valid `CUDA_MEMCPY2D`.
pub unsafe fn copy2d(real: impl FnOnce() -> CUresult, p: *const c_void, stream: CUstream, ptsz: bool, sync: bool) -> CUresult {
    if p.is_null() {
        return real();
    }
    // SAFETY: per this function's contract, 128 readable bytes.
    let c = unsafe { from_2d(p) };
    boxed(real, c, stream, ptsz, sync)
}

/// The 3D copy one slice deep that a `CUDA_MEMCPY2D` describes.
///
/// # Safety
/// `p` points to a valid `CUDA_MEMCPY2D`.
unsafe fn from_2d(p: *const c_void) -> CUDA_MEMCPY3D {
    // SAFETY: per this function's contract, every offset lies within the struct.
    let word = |off: usize| unsafe { std::ptr::read_unaligned((p as *const u8).add(off) as *const u64) };
    // SAFETY: as above.
    let kind = |off: usize| unsafe { std::ptr::read_unaligned((p as *const u8).add(off) as *const u32) };
    CUDA_MEMCPY3D {
        src_x_in_bytes: word(0) as usize,
        src_y: word(8) as usize,
        src_memory_type: kind(16),
        src_host: word(24) as *const c_void,
        src_device: word(32),
        src_array: word(40) as CUarray,
        src_pitch: word(48) as usize,
        dst_x_in_bytes: word(56) as usize,
        dst_y: word(64) as usize,
        dst_memory_type: kind(72),
        dst_host: word(80) as *mut c_void,
        dst_device: word(88),
        dst_array: word(96) as CUarray,
        dst_pitch: word(104) as usize,
        width_in_bytes: word(112) as usize,
        height: word(120) as usize,
        depth: 1,
        ..Default::default()
    }
}

fn boxed(real: impl FnOnce() -> CUresult, c: CUDA_MEMCPY3D, stream: CUstream, ptsz: bool, sync: bool) -> CUresult {
    let ranges = memcpy3d_ranges(&c);
    let piece = {
        let Ok(g) = shim() else { return real() };
        let st = g.as_ref().expect("created");
        let whole: u64 = st.allocs_over(&ranges).iter().filter_map(|a| st.vmem.of(*a)).map(|r| r.reserved).sum();
        if whole <= st.room() {
            drop(g);
            let on = if sync { std::ptr::null_mut() } else { stream };
            return run(real, on, ptsz, COPY_OR_MEMSET, || "copy or memset".into(), |st| WorkingSet::Allocs(st.allocs_over(&ranges)));
        }
        // Each device side of a piece may straddle one more chunk than it covers.
        (st.room() / 4 / CHUNK_BYTES * CHUNK_BYTES).clamp(CHUNK_BYTES, MAX_PIECE)
    };
    let on = crate::inflight::default_stream(if sync { std::ptr::null_mut() } else { stream }, ptsz);
    let pieces = sub_boxes(&c, piece);
    crate::log!(Debug, "a box copy of {} bytes streamed in {} pieces", ranges.iter().map(|r| r.1).max().unwrap_or(0), pieces.len());
    for (i, b) in pieces.iter().map(rebased).enumerate() {
        let b = &b;
        let touched = memcpy3d_ranges(b);
        let spans = |st: &mut crate::state::Shim| WorkingSet::Spans(st.spans_over(&touched));
        let issue = || crate::real!(cuMemcpy3DAsync_v2(b as *const CUDA_MEMCPY3D, on));
        let r = run(issue, on, false, COPY_OR_MEMSET, || format!("cuMemcpy3D (piece {} of {})", i + 1, pieces.len()), spans);
        if r != CUDA_SUCCESS {
            return r;
        }
    }
    let captured = crate::capture::captured(on, false);
    if sync && !captured {
        crate::capture::relaxed(|| crate::real!(cuStreamSynchronize(on)))
    } else {
        CUDA_SUCCESS
    }
}

/// The same copy with each device side's offsets folded into its address: the driver
/// checks that a side's address is mapped, and a piece maps only the bytes it touches.
fn rebased(c: &CUDA_MEMCPY3D) -> CUDA_MEMCPY3D {
    let mut c = *c;
    let (w, rows) = (c.width_in_bytes, c.height.max(1));
    let first = |x: usize, y: usize, z: usize, pitch: usize, height: usize| ((z * height.max(rows) + y) * pitch.max(w) + x) as u64;
    if matches!(c.src_memory_type, CU_MEMORYTYPE_DEVICE | CU_MEMORYTYPE_UNIFIED) {
        c.src_device += first(c.src_x_in_bytes, c.src_y, c.src_z, c.src_pitch, c.src_height);
        (c.src_x_in_bytes, c.src_y, c.src_z) = (0, 0, 0);
    }
    if matches!(c.dst_memory_type, CU_MEMORYTYPE_DEVICE | CU_MEMORYTYPE_UNIFIED) {
        c.dst_device += first(c.dst_x_in_bytes, c.dst_y, c.dst_z, c.dst_pitch, c.dst_height);
        (c.dst_x_in_bytes, c.dst_y, c.dst_z) = (0, 0, 0);
    }
    c
}

/// Cuts a box copy into sub-boxes whose device sides each span at most `budget` bytes
/// where possible: runs of whole slices, else of whole rows, else pieces of a row.
pub fn sub_boxes(c: &CUDA_MEMCPY3D, budget: u64) -> Vec<CUDA_MEMCPY3D> {
    let device = |ty: u32| matches!(ty, CU_MEMORYTYPE_DEVICE | CU_MEMORYTYPE_UNIFIED);
    let sides = [(device(c.src_memory_type), c.src_pitch, c.src_height), (device(c.dst_memory_type), c.dst_pitch, c.dst_height)];
    let w = c.width_in_bytes as u64;
    let (rows, slices) = (c.height.max(1), c.depth.max(1));
    let row = sides.iter().filter(|s| s.0).map(|s| (s.1 as u64).max(w)).max().unwrap_or(w).max(1);
    let slice = sides.iter().filter(|s| s.0).map(|s| (s.1 as u64).max(w).saturating_mul((s.2 as u64).max(rows as u64))).max().unwrap_or(row).max(1);
    let at = |z: usize, y: usize, x: usize, depth: usize, height: usize, width: usize| CUDA_MEMCPY3D {
        src_x_in_bytes: c.src_x_in_bytes + x,
        src_y: c.src_y + y,
        src_z: c.src_z + z,
        dst_x_in_bytes: c.dst_x_in_bytes + x,
        dst_y: c.dst_y + y,
        dst_z: c.dst_z + z,
        depth,
        height,
        width_in_bytes: width,
        ..*c
    };
    let mut out = Vec::new();
    if slices > 1 && slice <= budget {
        let k = (budget / slice) as usize;
        for z in (0..slices).step_by(k) {
            out.push(at(z, 0, 0, k.min(slices - z), rows, c.width_in_bytes));
        }
    } else if rows > 1 && row <= budget {
        let k = (budget / row) as usize;
        for z in 0..slices {
            for y in (0..rows).step_by(k) {
                out.push(at(z, y, 0, 1, k.min(rows - y), c.width_in_bytes));
            }
        }
    } else {
        let k = budget as usize;
        for z in 0..slices {
            for y in 0..rows {
                for x in (0..c.width_in_bytes).step_by(k.max(1)) {
                    out.push(at(z, y, x, 1, 1, k.min(c.width_in_bytes - x)));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn volume(w: usize, h: usize, d: usize, pitch: usize) -> CUDA_MEMCPY3D {
        CUDA_MEMCPY3D {
            src_memory_type: CU_MEMORYTYPE_DEVICE,
            src_device: 0x1000_0000,
            src_pitch: pitch,
            src_height: h,
            dst_memory_type: CU_MEMORYTYPE_HOST,
            dst_host: 0x2000 as *mut c_void,
            dst_pitch: w,
            dst_height: h,
            width_in_bytes: w,
            height: h,
            depth: d,
            ..Default::default()
        }
    }

    /// Every byte of the box lands in exactly one piece, and no piece's device side spans
    /// more than the budget.
    fn covers(c: &CUDA_MEMCPY3D, budget: u64) -> usize {
        let pieces = sub_boxes(c, budget);
        let mut seen = std::collections::HashSet::new();
        for p in &pieces {
            assert!(memcpy3d_ranges(p).iter().all(|r| r.1 <= budget), "{p:?} spans more than {budget}");
            for z in 0..p.depth {
                for y in 0..p.height {
                    for x in 0..p.width_in_bytes {
                        assert!(seen.insert((p.src_z + z, p.src_y + y, p.src_x_in_bytes + x)), "byte copied twice");
                        assert_eq!((p.dst_z, p.dst_y, p.dst_x_in_bytes), (p.src_z, p.src_y, p.src_x_in_bytes), "sides move together");
                    }
                }
            }
        }
        assert_eq!(seen.len(), c.width_in_bytes * c.height * c.depth);
        pieces.len()
    }

    #[test]
    fn a_2d_copy_is_a_3d_copy_one_slice_deep() {
        // CUDA_MEMCPY2D: 16 words; the memory types sit in the low half of words 2 and 9.
        let mut raw = [0u64; 16];
        let fields = [
            (0, 3),
            (1, 4),
            (2, CU_MEMORYTYPE_DEVICE as u64),
            (4, 0x1000_0000),
            (6, 512),
            (7, 5),
            (8, 6),
            (9, CU_MEMORYTYPE_HOST as u64),
            (10, 0x7000),
            (13, 256),
            (14, 200),
            (15, 9),
        ];
        for (i, v) in fields {
            raw[i] = v;
        }
        // SAFETY: 128 readable bytes.
        let c = unsafe { from_2d(raw.as_ptr() as *const c_void) };
        assert_eq!((c.src_x_in_bytes, c.src_y, c.src_memory_type, c.src_device, c.src_pitch), (3, 4, CU_MEMORYTYPE_DEVICE, 0x1000_0000, 512));
        assert_eq!((c.dst_x_in_bytes, c.dst_y, c.dst_memory_type, c.dst_host as usize, c.dst_pitch), (5, 6, CU_MEMORYTYPE_HOST, 0x7000, 256));
        assert_eq!((c.width_in_bytes, c.height, c.depth), (200, 9, 1));
        assert_eq!(memcpy3d_ranges(&c), vec![(0x1000_0000 + 4 * 512 + 3, 8 * 512 + 200)]);
    }

    #[test]
    fn a_piece_names_its_first_device_byte() {
        let mut c = volume(100, 4, 2, 256);
        (c.src_x_in_bytes, c.src_y, c.src_z, c.dst_y) = (8, 1, 1, 3);
        let r = rebased(&c);
        assert_eq!((r.src_device, r.src_x_in_bytes, r.src_y, r.src_z), (0x1000_0000 + (4 + 1) * 256 + 8, 0, 0, 0));
        assert_eq!((r.dst_host, r.dst_y), (c.dst_host, 3), "a host side keeps its offsets");
        assert_eq!(memcpy3d_ranges(&r)[0], memcpy3d_ranges(&c)[0], "the same bytes");
    }

    #[test]
    fn boxes_are_cut_by_slices_then_rows_then_within_rows() {
        // 100 x 8 x 10 bytes, rows of 128: slices of 1 KiB.
        assert_eq!(covers(&volume(100, 8, 10, 128), 3 * 1024), 4, "three slices at a time");
        assert_eq!(covers(&volume(100, 8, 10, 128), 512), 10 * 2, "a slice is too big: four rows at a time");
        assert_eq!(covers(&volume(100, 8, 2, 128), 40), 2 * 8 * 3, "a row is too big: 40 bytes at a time");
        assert_eq!(covers(&volume(100, 1, 1, 0), 64), 2, "one row, no pitch");
    }
}
