//! A CPU stand-in for the CUDA driver, loaded as `libcuda.so.1` in tests without a GPU.
//!
//! It exports the `cu*` functions gmux and its test programs call, with host memory
//! behind device addresses. Device memory is reached only through checked paths: copies,
//! memsets and the kernels' `gmuxStandinRead` / `gmuxStandinWrite`. A byte outside a
//! mapped chunk with access set aborts the process with one line on stderr, which is how
//! tests prove the interposer never lets a command touch a non-resident chunk.
//!
//! Streams are worker threads executing their operations in order, with CUDA's implicit
//! ordering between the legacy default stream and blocking streams (see [`exec`]). While
//! a stream captures, its operations become nodes of a CUDA graph instead (see [`capture`]
//! and [`graph`]).
#![allow(non_snake_case)]
// Every export is a C entry point with the contract `cuda.h` documents for it.
#![allow(clippy::missing_safety_doc)]
// Every entry point is an `unsafe extern "C"` function over raw pointers from C, and its
// contract is the driver's, which the caller keeps: the body is one unsafe context.
#![allow(unsafe_op_in_unsafe_fn)]

/// Unwraps a `Result<T, CUresult>` or returns the error code from the enclosing function.
macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(code) => return code,
        }
    };
}

mod api;
mod capture;
mod copy3d;
mod ctx;
mod exec;
mod graph;
mod kernel;
mod memory;
