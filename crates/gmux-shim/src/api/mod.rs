//! Handlers of the entry points listed in [`crate::exports`].

pub mod attr;
pub mod command;
pub mod memory;
pub mod refuse;

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
        ShimError::TooBig { need, limit } => {
            crate::log!(
                Error,
                "{what} needs {} resident at once but the memory limit is {}; raise --mem-limit (GMUX_MEM_LIMIT) to at least {}",
                format_size(need),
                format_size(limit),
                format_size(need)
            );
            CUDA_ERROR_OUT_OF_MEMORY
        }
        ShimError::Cuda(e) => {
            crate::log!(Error, "{what}: {e}");
            e.code
        }
    }
}
