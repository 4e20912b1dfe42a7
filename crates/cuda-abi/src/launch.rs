//! Kernel launches: the `extra` markers of `cuLaunchKernel`, the config and attributes of
//! `cuLaunchKernelEx`, and the stand-in's kernel calling convention.

use std::ffi::c_void;

use crate::CUstream;

/// `extra` array markers of `cuLaunchKernel` (passed as pointer values).
pub const CU_LAUNCH_PARAM_END: usize = 0x00;
pub const CU_LAUNCH_PARAM_BUFFER_POINTER: usize = 0x01;
pub const CU_LAUNCH_PARAM_BUFFER_SIZE: usize = 0x02;

/// `CUlaunchAttribute`: an id and a 64-byte value union.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUlaunchAttribute {
    pub id: u32,
    pub pad: [u8; 4],
    pub value: [u8; 64],
}

/// `CUlaunchConfig` of `cuLaunchKernelEx`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUlaunchConfig {
    pub grid_dim_x: u32,
    pub grid_dim_y: u32,
    pub grid_dim_z: u32,
    pub block_dim_x: u32,
    pub block_dim_y: u32,
    pub block_dim_z: u32,
    pub shared_mem_bytes: u32,
    pub h_stream: CUstream,
    pub attrs: *mut CUlaunchAttribute,
    pub num_attrs: u32,
}

/// The stand-in's kernel ABI: a "kernel" is a host function called with the launch's
/// parameter pointers (`args[i]` points to parameter `i`, as in `cuLaunchKernel`'s
/// `kernelParams`). It reaches device memory only through `gmuxStandinRead` /
/// `gmuxStandinWrite`, which abort the process on any unmapped byte.
pub type StandinKernel = unsafe extern "C" fn(args: *const *mut c_void);

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::size_of;

    #[test]
    fn launch_struct_sizes_match_cuda_h() {
        assert_eq!(size_of::<CUlaunchAttribute>(), 72);
        assert_eq!(size_of::<CUlaunchConfig>(), 56);
    }
}
