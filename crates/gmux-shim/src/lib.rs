//! libgmux.so: loaded into an unmodified CUDA program with `LD_PRELOAD` (by `gmux run`),
//! it virtualizes device memory so the program can allocate more than its limit.
//!
//! - [`exports`]: the one registry of handled driver entry points; [`intercept`]: how
//!   calls reach them (`dlsym`, `cuGetProcAddress`).
//! - [`state`]: the process's memory (gmux-runtime's `TenantMemory` over gmux-cuda's
//!   device), with [`vmem`] (address ranges), [`predict`] (working sets from kernel
//!   parameters) and [`inflight`] (released commands per stream).
//! - [`agent`]: the link to gmuxd; [`record`]: the trace recorder.
//!
//! A process that never touches CUDA pays one string comparison per `dlsym`.

// CUDA handles (streams, events, functions) are opaque pointers that the shim passes to
// the driver and never dereferences.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub mod agent;
pub mod api;
pub mod appvmm;
pub mod capture;
pub mod config;
pub mod devices;
pub mod exports;
pub mod graph;
pub mod graph_split;
pub mod intercept;
pub mod jobs;
pub mod policy;
pub mod predict;
pub mod profile;
pub mod record;
pub mod state;
pub mod tenancy;
pub mod tensormap;
pub mod texture;
pub mod vmem;
pub(crate) use gmux_cuda::real;
// The driver, its types and gmux's log, under the names the shim's modules use.
pub use gmux_cuda::{cuda, driver, hostpool, inflight, log};

extern "C" fn summary_at_exit() {
    // Called by libc at exit: a panic here must not unwind into it.
    let _ = std::panic::catch_unwind(summary);
}

fn summary() {
    record::finish();
    agent::farewell();
    if let Some(t) = profile::table() {
        // The profile was asked for: printed whatever the log level.
        eprint!("{t}");
    }
    if log::level() < log::Level::Info {
        return;
    }
    for dev in devices::in_use() {
        if let Some(st) = devices::try_on(dev).as_ref().and_then(|g| g.as_ref()) {
            let device = if devices::several() { format!("device {dev}: ") } else { String::new() };
            log::emit(log::Level::Info, &format!("{device}{}", st.summary()));
        }
    }
}

#[used]
#[link_section = ".init_array"]
static REGISTER_SUMMARY: extern "C" fn() = {
    extern "C" fn register() {
        // SAFETY: registering a plain extern "C" function.
        unsafe { libc::atexit(summary_at_exit) };
    }
    register
};
