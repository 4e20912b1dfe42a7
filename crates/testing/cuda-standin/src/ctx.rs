//! Driver initialization and the per-thread context stack. There is one device and one
//! context object (its primary context); `cuCtxCreate` hands out that same object.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use cuda_abi::*;

static INITIALIZED: AtomicBool = AtomicBool::new(false);
/// Primary context retain count (informational: the context is never torn down).
pub static PRIMARY_REFS: AtomicI64 = AtomicI64::new(0);
const PRIMARY: usize = 0x4358_0000_0000;

thread_local! {
    /// The contexts under the current one.
    static STACK: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
    /// The current context (0: none). It has no destructor, so it stays readable in exit
    /// handlers after the thread's destructors have run, as the real driver's does.
    static TOP: Cell<usize> = const { Cell::new(0) };
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
    Some(TOP.get()).filter(|&c| c != 0).map(|c| c as CUcontext)
}

/// `CUDA_ERROR_INVALID_CONTEXT` unless the calling thread has a current context.
pub fn require_current() -> Result<(), CUresult> {
    require_init()?;
    current().map(|_| ()).ok_or(CUDA_ERROR_INVALID_CONTEXT)
}

/// `cuCtxSetCurrent`: replaces the top of the stack; null pops it.
pub fn set_current(ctx: CUcontext) {
    if ctx.is_null() {
        pop();
    } else {
        TOP.set(ctx as usize);
    }
}

/// `cuCtxPushCurrent`.
pub fn push(ctx: CUcontext) {
    let below = TOP.replace(ctx as usize);
    if below != 0 {
        STACK.with(|s| s.borrow_mut().push(below));
    }
}

/// `cuCtxPopCurrent`.
pub fn pop() -> Option<CUcontext> {
    let top = TOP.replace(STACK.with(|s| s.borrow_mut().pop()).unwrap_or(0));
    Some(top).filter(|&c| c != 0).map(|c| c as CUcontext)
}
