//! 3D copies: `CUDA_MEMCPY3D`, taken by `cuMemcpy3D` and by graph memcpy nodes.

use std::ffi::c_void;

use crate::{CUarray, CUdeviceptr};

/// `CUDA_MEMCPY3D` (`_v2`, 200 bytes): a box of `width_in_bytes` x `height` x `depth`
/// bytes; each side gives its memory type, base, offsets and row pitch / slice height.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUDA_MEMCPY3D {
    pub src_x_in_bytes: usize,
    pub src_y: usize,
    pub src_z: usize,
    pub src_lod: usize,
    pub src_memory_type: u32,
    pub src_host: *const c_void,
    pub src_device: CUdeviceptr,
    pub src_array: CUarray,
    pub reserved0: *mut c_void,
    pub src_pitch: usize,
    pub src_height: usize,
    pub dst_x_in_bytes: usize,
    pub dst_y: usize,
    pub dst_z: usize,
    pub dst_lod: usize,
    pub dst_memory_type: u32,
    pub dst_host: *mut c_void,
    pub dst_device: CUdeviceptr,
    pub dst_array: CUarray,
    pub reserved1: *mut c_void,
    pub dst_pitch: usize,
    pub dst_height: usize,
    pub width_in_bytes: usize,
    pub height: usize,
    pub depth: usize,
}

impl Default for CUDA_MEMCPY3D {
    fn default() -> Self {
        // SAFETY: every field is an integer or a raw pointer, for which zero is valid.
        unsafe { std::mem::zeroed() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn memcpy3d_layout_matches_cuda_h() {
        assert_eq!(size_of::<CUDA_MEMCPY3D>(), 200);
        assert_eq!(offset_of!(CUDA_MEMCPY3D, src_host), 40);
        assert_eq!(offset_of!(CUDA_MEMCPY3D, dst_x_in_bytes), 88);
        assert_eq!(offset_of!(CUDA_MEMCPY3D, width_in_bytes), 176);
    }
}
