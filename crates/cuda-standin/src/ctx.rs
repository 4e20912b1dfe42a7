//! Driver initialization and the per-thread context stack. There is one device and one
//! context object (its primary context); `cuCtxCreate` hands out that same object.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use cuda_abi::*;

static INITIALIZED: AtomicBool = AtomicBool::new(false);
/// Primary context retain count (informational: the context is never torn down).
pub static PRIMARY_REFS: AtomicI64 = AtomicI64::new(0);
const PRIMARY: usize = 0x4358_0000_0000;

thread_local! {
    static STACK: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// `cuInit`.
pub fn init() {
    INITIALIZED.store(true, Ordering::SeqCst);
}

/// `CUDA_ERROR_NOT_INITIALIZED` before `cuInit`.
pub fn require_init() -> Result<(), CUresult> {
    if INITIALIZED.load(Ordering::SeqCst) {
        Ok(())
    } else {
        Err(CUDA_ERROR_NOT_INITIALIZED)
    }
}

/// `CUDA_ERROR_INVALID_DEVICE` unless `dev` is device 0.
pub fn require_device(dev: CUdevice) -> Result<(), CUresult> {
    require_init()?;
    if dev == 0 {
        Ok(())
    } else {
        Err(CUDA_ERROR_INVALID_DEVICE)
    }
}

/// The one context.
pub fn primary() -> CUcontext {
    PRIMARY as CUcontext
}

/// `CUDA_ERROR_INVALID_CONTEXT` unless `ctx` is the context.
pub fn require_valid(ctx: CUcontext) -> Result<(), CUresult> {
    if ctx as usize == PRIMARY {
        Ok(())
    } else {
        Err(CUDA_ERROR_INVALID_CONTEXT)
    }
}

/// The calling thread's current context (top of its stack).
pub fn current() -> Option<CUcontext> {
    STACK.with(|s| s.borrow().last().map(|&c| c as CUcontext))
}

/// `CUDA_ERROR_INVALID_CONTEXT` unless the calling thread has a current context.
pub fn require_current() -> Result<(), CUresult> {
    require_init()?;
    current().map(|_| ()).ok_or(CUDA_ERROR_INVALID_CONTEXT)
}

/// `cuCtxSetCurrent`: replaces the top of the stack; null pops it.
pub fn set_current(ctx: CUcontext) {
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        s.pop();
        if !ctx.is_null() {
            s.push(ctx as usize);
        }
    })
}

/// `cuCtxPushCurrent`.
pub fn push(ctx: CUcontext) {
    STACK.with(|s| s.borrow_mut().push(ctx as usize))
}

/// `cuCtxPopCurrent`.
pub fn pop() -> Option<CUcontext> {
    STACK.with(|s| s.borrow_mut().pop().map(|c| c as CUcontext))
}
