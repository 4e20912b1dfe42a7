//! Calls gmux refuses, each by name with its reason, and calls it only forwards.

use crate::cuda::*;
use std::collections::HashSet;
use std::sync::Mutex;

/// Logs `msg` once per `key`.
pub fn once(key: &str, msg: &str, level: crate::log::Level) {
    static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let mut g = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    if g.get_or_insert_with(HashSet::new).insert(key.to_string()) {
        crate::log::emit(level, msg);
    }
}

/// A call gmux does not support: `CUDA_ERROR_NOT_SUPPORTED`, logged once with the reason.
pub fn call(name: &str, why: &str) -> CUresult {
    once(
        name,
        &format!("{name} is not supported under gmux: {why}; it returns CUDA_ERROR_NOT_SUPPORTED (see docs/compatibility.md)"),
        crate::log::Level::Error,
    );
    CUDA_ERROR_NOT_SUPPORTED
}

/// The real driver lacks an entry point gmux wraps.
pub fn missing(name: &str) -> CUresult {
    once(name, &format!("the CUDA driver has no {name}; update the NVIDIA driver (gmux needs CUDA 12.4 or later)"), crate::log::Level::Error);
    CUDA_ERROR_NOT_SUPPORTED
}

/// Forwards, noting once that this memory is outside gmux's limit.
pub fn note_passthrough(name: &str) {
    once(name, &format!("{name} passes through: its memory is not virtualized and not counted against the limit"), crate::log::Level::Warn);
}

/// Refuses `name` on gmux memory; forwards it otherwise.
pub fn if_virtual(real: impl FnOnce() -> CUresult, name: &str, ptr: CUdeviceptr, why: &str) -> CUresult {
    let virtual_ = crate::devices::owner(ptr).is_some();
    if virtual_ {
        call(name, why)
    } else {
        real()
    }
}
