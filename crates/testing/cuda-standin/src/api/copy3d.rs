//! `cuMemcpy3D`: box copies through the same checked paths as the other copies.

use cuda_abi::*;

use super::copy::{enqueue, target, Mode};
use super::{code, NullStream};
use crate::capture::{self, Route};
use crate::copy3d::Copy3d;
use crate::graph::Op;

/// Host memory is read and written when the copy executes; an asynchronous copy touching
/// pageable host memory makes the call wait for it, as in CUDA.
unsafe fn copy3d(p: *const CUDA_MEMCPY3D, mode: Mode) -> CUresult {
    let Some(p) = p.as_ref() else { return CUDA_ERROR_INVALID_VALUE };
    let c = tri!(Copy3d::from_abi(p));
    if c.base_unmapped() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let stream = match tri!(target(mode)) {
        (s, Route::Capture) => return code(capture::add(s, Op::Memcpy(c)).map(drop)),
        (s, Route::Run) => s,
    };
    // SAFETY: the caller of the copy vouches for the host memory it names.
    enqueue(stream, mode, !c.host_sides_pinned(), Box::new(move || unsafe { c.run("cuMemcpy3D") }))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpy3D_v2(p: *const CUDA_MEMCPY3D) -> CUresult {
    copy3d(p, Mode::Sync(NullStream::Legacy))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpy3D_v2_ptds(p: *const CUDA_MEMCPY3D) -> CUresult {
    copy3d(p, Mode::Sync(NullStream::PerThread))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpy3DAsync_v2(p: *const CUDA_MEMCPY3D, stream: CUstream) -> CUresult {
    copy3d(p, Mode::Async(stream, NullStream::Legacy))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpy3DAsync_v2_ptsz(p: *const CUDA_MEMCPY3D, stream: CUstream) -> CUresult {
    copy3d(p, Mode::Async(stream, NullStream::PerThread))
}
