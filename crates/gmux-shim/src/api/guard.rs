//! The C boundary: a panic inside gmux never unwinds into the program. Each exported entry
//! point catches it, reports it once per entry point, and answers the call; from then on
//! gmux runs in safe mode, because its bookkeeping of the interrupted call may be partial.

use crate::cuda::*;
use std::any::Any;

/// The answer to a call whose handler panicked: the driver's own result when the call
/// had already been forwarded (it took effect), else `CUDA_ERROR_UNKNOWN`.
pub fn caught(name: &str, payload: &(dyn Any + Send), forwarded: Option<CUresult>) -> CUresult {
    // Evictions wait for every command of the context from now on, not only for those
    // gmux knows to be in flight.
    gmux_cuda::device::sync_before_evictions();
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into());
    let answer = match forwarded {
        Some(r) => format!("the driver's result {r}, the call took effect"),
        None => "CUDA_ERROR_UNKNOWN, the call did not reach the driver".into(),
    };
    super::refuse::once(
        &format!("panic {name}"),
        &format!("internal error in {name}: {what}; the program gets {answer}, and gmux goes on in safe mode (evictions wait for the whole device); please report this with GMUX_LOG=debug output"),
        crate::log::Level::Error,
    );
    forwarded.unwrap_or(CUDA_ERROR_UNKNOWN)
}

/// `GMUX_DEBUG=panic:SYMBOL`: panics at the end of gmux's handling of SYMBOL, to check
/// that no panic reaches the program.
pub fn debug_panic(name: &str) {
    if crate::config::config().debug.panic_in.as_deref() == Some(name) {
        panic!("GMUX_DEBUG=panic:{name}");
    }
}
