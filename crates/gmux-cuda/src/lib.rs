//! gmux-cuda: the real CUDA driver behind gmux.
//!
//! - [`driver`]: the driver's entry points, resolved once, and [`real!`] to call them;
//!   [`driver::CudaError`] names a failed call, [`driver::OwnedEvent`] destroys itself;
//! - [`device`]: [`device::CudaDevice`], gmux-core's `Device` over the driver's virtual
//!   memory calls and two copy streams;
//! - [`hostpool`]: the pinned host memory evicted chunks live in;
//! - [`inflight`]: the application's released, unfinished commands per stream;
//! - [`context`]: the calling thread's context; [`vm`]: reserved address ranges;
//! - [`gpus`]: the GPUs the driver shows, by UUID;
//! - [`stream`]: a stream as the application named it;
//! - [`log`]: gmux's one-line messages on stderr.
//!
//! The shim uses this crate for all of its own driver work; raw driver calls elsewhere
//! are the shim's interception of the application's calls.

// CUDA handles (streams, events) are opaque pointers passed to the driver and never
// dereferenced.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub mod context;
pub mod cuda;
pub mod device;
pub mod driver;
pub mod gpus;
pub mod held;
pub mod hostpool;
pub mod inflight;
pub mod log;
pub mod stream;
pub mod vm;
