//! Reserved ranges of device addresses: allocations' addresses, backed by the device's
//! mappings only while their chunks are resident.

use crate::cuda::*;
use crate::driver::{check, CudaError};
use gmux_core::CHUNK_BYTES;

/// Reserves `bytes` (whole chunks) of addresses, aligned to a chunk.
pub fn reserve(bytes: u64) -> Result<CUdeviceptr, CudaError> {
    let mut base = 0;
    check(crate::real!(cuMemAddressReserve(&mut base, bytes as usize, CHUNK_BYTES as usize, 0, 0)), "cuMemAddressReserve")?;
    Ok(base)
}

/// Returns the `bytes` of addresses reserved at `base`; nothing may be mapped there.
pub fn release(base: CUdeviceptr, bytes: u64) -> Result<(), CudaError> {
    check(crate::real!(cuMemAddressFree(base, bytes as usize)), "cuMemAddressFree")
}
