//! The calling thread's CUDA context.

use crate::cuda::*;

/// A context and what the driver says of its device.
#[derive(Debug, Clone, Copy)]
pub struct Current {
    /// The context.
    pub ctx: CUcontext,
    /// Its device's ordinal.
    pub ordinal: CUdevice,
    /// The device's free memory, bytes.
    pub free: u64,
    /// The device's memory, bytes.
    pub total: u64,
}

/// The calling thread's current context, or the driver's answer when there is none
/// (`CUDA_ERROR_INVALID_CONTEXT` when the call succeeds without one).
pub fn current() -> Result<Current, CUresult> {
    let mut ctx = std::ptr::null_mut();
    let r = crate::real!(cuCtxGetCurrent(&mut ctx));
    if r != CUDA_SUCCESS || ctx.is_null() {
        return Err(if r == CUDA_SUCCESS { CUDA_ERROR_INVALID_CONTEXT } else { r });
    }
    let mut ordinal = 0;
    let r = crate::real!(cuCtxGetDevice(&mut ordinal));
    if r != CUDA_SUCCESS {
        return Err(r);
    }
    let (mut free, mut total) = (0usize, 0usize);
    let r = crate::real!(cuMemGetInfo_v2(&mut free, &mut total));
    if r != CUDA_SUCCESS {
        return Err(r);
    }
    Ok(Current { ctx, ordinal, free: free as u64, total: total as u64 })
}

/// Makes `ctx` current on the calling thread.
pub fn set_current(ctx: CUcontext) -> CUresult {
    crate::real!(cuCtxSetCurrent(ctx))
}

/// A context made current on the calling thread for a while: the one before is current
/// again when this is dropped.
#[must_use]
pub struct Scope {
    pushed: bool,
}

impl Scope {
    /// Makes `ctx` current (no driver call where it already is).
    pub fn enter(ctx: CUcontext) -> Scope {
        let mut cur = std::ptr::null_mut();
        let already = crate::real!(cuCtxGetCurrent(&mut cur)) == CUDA_SUCCESS && cur == ctx;
        Scope { pushed: !already && crate::real!(cuCtxPushCurrent_v2(ctx)) == CUDA_SUCCESS }
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        if self.pushed {
            let mut popped = std::ptr::null_mut();
            crate::real!(cuCtxPopCurrent_v2(&mut popped));
        }
    }
}
