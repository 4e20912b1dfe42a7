//! The slice of the CUDA driver ABI (`cuda.h`, CUDA 12/13) that gmux touches: handle
//! types, result codes, flags and the structs passed by pointer. Types only; no symbols,
//! so linking it never shadows the driver.
//!
//! One private module per topic, each re-exported whole, so every item is `cuda_abi::X`.
#![allow(non_camel_case_types)]

mod copy3d;
mod device;
mod graph;
mod handles;
mod launch;
mod memory;
mod procaddr;
mod result;
mod stream;

pub use copy3d::*;
pub use device::*;
pub use graph::*;
pub use handles::*;
pub use launch::*;
pub use memory::*;
pub use procaddr::*;
pub use result::*;
pub use stream::*;
