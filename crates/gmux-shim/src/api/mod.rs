//! Handlers of the entry points listed in [`crate::exports`].

mod across;
pub mod attr;
pub mod boxcopy;
pub mod command;
pub mod graph;
pub mod guard;
pub mod linear;
pub mod memory;
pub mod refuse;
pub mod vmm;

use crate::cuda::*;
use crate::state::ShimError;
use gmux_core::size::format_size;

/// Turns a failure into the code the application sees, logging the cause and the fix.
pub fn report(e: ShimError, what: &str) -> CUresult {
    match e {
        ShimError::Invalid(code) => code,
        ShimError::Wait { need } => {
            crate::log!(Error, "{what} needs {} resident at once and the daemon granted less; this is a gmux bug, please report it", format_size(need));
            CUDA_ERROR_OUT_OF_MEMORY
        }
        ShimError::TooBig { need, limit } => oversize(what, need, limit),
        ShimError::Cuda(e) => {
            crate::log!(Error, "{what}: {e}");
            e.code
        }
    }
}

/// Exit status of a process that gmux ends because one command's working set exceeds the
/// limit (`GMUX_OVERSIZE=exit`, the default).
pub const OVERSIZE_EXIT: i32 = 86;

/// A command whose working set exceeds the limit under `GMUX_OVERSIZE=exit` or `error`
/// (or that host memory could not take). The process ends, loudly: a
/// program that ignores the error code would otherwise go on with a result that differs
/// from native. `GMUX_OVERSIZE=error` returns `CUDA_ERROR_OUT_OF_MEMORY` instead.
fn oversize(what: &str, need: u64, limit: u64) -> CUresult {
    let (need_s, limit_s) = (format_size(need), format_size(limit));
    let cause = format!("{what} needs {need_s} resident at once but the memory limit is {limit_s}; raise --mem-limit (GMUX_MEM_LIMIT) to at least {need_s}");
    if crate::config::config().oversize == crate::config::Oversize::Error {
        crate::log!(Error, "{cause}");
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    crate::log::emit(
        crate::log::Level::Error,
        &format!("{cause}; ending the process with status {OVERSIZE_EXIT} (GMUX_OVERSIZE=error returns CUDA_ERROR_OUT_OF_MEMORY to the program instead)"),
    );
    // SAFETY: fflush(NULL) flushes every C stdio stream; `_exit` ends the process at once,
    // without exit handlers that could call back into gmux while this thread holds its
    // state.
    unsafe {
        libc::fflush(std::ptr::null_mut());
        libc::_exit(OVERSIZE_EXIT)
    }
}
