//! Driver initialization, the devices, their primary contexts, peer access and the
//! per-thread context stack.
//!
//! Each visible device has one context, its primary context; `cuCtxCreate` hands out that
//! same object. A context's handle encodes its device's visible ordinal. Memory, streams
//! and events are not yet tied to a device: every device shares the one memory pool of
//! the stand-in (sized by `GMUX_STANDIN_MEM`) and the one set of streams.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, Ordering};

use cuda_abi::*;

mod devices;
#[cfg(test)]
mod tests;

pub use devices::{devices, MAX_DEVICES};

static INITIALIZED: AtomicBool = AtomicBool::new(false);
/// Primary context retain counts by visible ordinal (informational: a context is never
/// torn down).
static PRIMARY_REFS: [AtomicI64; MAX_DEVICES] = [const { AtomicI64::new(0) }; MAX_DEVICES];
/// By visible ordinal, the ordinals whose memory its context may access (bit `i`:
/// ordinal `i`), as `cuCtxEnablePeerAccess` enabled them.
static PEERS: [AtomicU8; MAX_DEVICES] = [const { AtomicU8::new(0) }; MAX_DEVICES];
/// The handle of visible ordinal 0's primary context; ordinal `i`'s is `i` strides on.
const CONTEXT_BASE: usize = 0x4358_0000_0000;
const CONTEXT_STRIDE: usize = 0x1_0000;

thread_local! {
    /// The contexts under the current one.
    static STACK: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
    /// The current context (0: none). It has no destructor, so it stays readable in exit
    /// handlers after the thread's destructors have run, as the real driver's does.
    static TOP: Cell<usize> = const { Cell::new(0) };
}

/// `cuInit`: reads the device settings (aborting on a bad one) and initializes the driver.
/// Like the real driver's, it fails with `CUDA_ERROR_NO_DEVICE` when no device is visible;
/// the device calls still work then and count 0 devices.
pub fn init() -> Result<(), CUresult> {
    let n = devices().count();
    INITIALIZED.store(true, Ordering::SeqCst);
    if n == 0 {
        Err(CUDA_ERROR_NO_DEVICE)
    } else {
        Ok(())
    }
}

/// `CUDA_ERROR_NOT_INITIALIZED` before `cuInit`.
pub fn require_init() -> Result<(), CUresult> {
    if INITIALIZED.load(Ordering::SeqCst) {
        Ok(())
    } else {
        Err(CUDA_ERROR_NOT_INITIALIZED)
    }
}

/// The visible ordinal `dev` as an index; `CUDA_ERROR_INVALID_DEVICE` unless it is one.
pub fn require_device(dev: CUdevice) -> Result<usize, CUresult> {
    require_init()?;
    devices().ordinal(dev).ok_or(CUDA_ERROR_INVALID_DEVICE)
}

/// The primary context of visible ordinal `i`.
pub fn primary(i: usize) -> CUcontext {
    (CONTEXT_BASE + i * CONTEXT_STRIDE) as CUcontext
}

/// The visible ordinal of context `ctx`; `CUDA_ERROR_INVALID_CONTEXT` unless it is one.
pub fn require_valid(ctx: CUcontext) -> Result<usize, CUresult> {
    let off = (ctx as usize).wrapping_sub(CONTEXT_BASE);
    let i = off / CONTEXT_STRIDE;
    if off.is_multiple_of(CONTEXT_STRIDE) && i < devices().count() {
        Ok(i)
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
    current_device().map(|_| ())
}

/// The visible ordinal of the calling thread's current context;
/// `CUDA_ERROR_INVALID_CONTEXT` if it has none.
pub fn current_device() -> Result<usize, CUresult> {
    require_init()?;
    current().map_or(Err(CUDA_ERROR_INVALID_CONTEXT), require_valid)
}

/// The context that objects not yet tied to a device (streams, allocations, graph nodes)
/// answer as theirs: the calling thread's current one, else ordinal 0's primary context.
pub fn ambient() -> CUcontext {
    current().unwrap_or_else(|| primary(0))
}

/// `cuDevicePrimaryCtxRetain` of visible ordinal `i`: its primary context.
pub fn retain(i: usize) -> CUcontext {
    PRIMARY_REFS[i].fetch_add(1, Ordering::SeqCst);
    primary(i)
}

/// `cuDevicePrimaryCtxRelease` of visible ordinal `i`.
pub fn release(i: usize) {
    PRIMARY_REFS[i].fetch_sub(1, Ordering::SeqCst);
}

/// Whether visible ordinal `i`'s primary context is retained (`cuDevicePrimaryCtxGetState`).
pub fn is_active(i: usize) -> bool {
    PRIMARY_REFS[i].load(Ordering::SeqCst) > 0
}

/// `cuCtxEnablePeerAccess`: lets the context of ordinal `from` access ordinal `to`'s memory.
/// `CUDA_ERROR_INVALID_DEVICE` for a device and itself (which `cuDeviceCanAccessPeer`
/// refuses), `CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED` if it already may.
pub fn enable_peer(from: usize, to: usize) -> Result<(), CUresult> {
    if from == to {
        return Err(CUDA_ERROR_INVALID_DEVICE);
    }
    let bit = 1u8 << to;
    match PEERS[from].fetch_or(bit, Ordering::SeqCst) & bit {
        0 => Ok(()),
        _ => Err(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED),
    }
}

/// `cuCtxDisablePeerAccess`: `CUDA_ERROR_PEER_ACCESS_NOT_ENABLED` unless `enable_peer(from,
/// to)` came before.
pub fn disable_peer(from: usize, to: usize) -> Result<(), CUresult> {
    let bit = 1u8 << to;
    match PEERS[from].fetch_and(!bit, Ordering::SeqCst) & bit {
        0 => Err(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED),
        _ => Ok(()),
    }
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
