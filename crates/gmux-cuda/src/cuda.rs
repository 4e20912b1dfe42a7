//! The CUDA driver ABI (re-exported from `cuda-abi`).
pub use cuda_abi::*;
