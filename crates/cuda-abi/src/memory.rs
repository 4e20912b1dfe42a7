//! Memory: memory types, pointer attributes, the virtual memory management (VMM) flags
//! and structs, and pinned host memory flags.

use std::ffi::c_void;

/// `CUmemorytype`.
pub const CU_MEMORYTYPE_HOST: u32 = 1;
pub const CU_MEMORYTYPE_DEVICE: u32 = 2;
/// `CUmemorytype`: a CUDA array.
pub const CU_MEMORYTYPE_ARRAY: u32 = 3;
pub const CU_MEMORYTYPE_UNIFIED: u32 = 4;

/// `CUpointer_attribute`.
pub const CU_POINTER_ATTRIBUTE_CONTEXT: u32 = 1;
pub const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: u32 = 2;
pub const CU_POINTER_ATTRIBUTE_DEVICE_POINTER: u32 = 3;
pub const CU_POINTER_ATTRIBUTE_HOST_POINTER: u32 = 4;
pub const CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: u32 = 6;
pub const CU_POINTER_ATTRIBUTE_BUFFER_ID: u32 = 7;
pub const CU_POINTER_ATTRIBUTE_IS_MANAGED: u32 = 8;
pub const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: u32 = 9;
pub const CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: u32 = 11;
pub const CU_POINTER_ATTRIBUTE_RANGE_SIZE: u32 = 12;
pub const CU_POINTER_ATTRIBUTE_MAPPED: u32 = 13;

/// `CUmemAllocationType`: pinned device memory.
pub const CU_MEM_ALLOCATION_TYPE_PINNED: u32 = 1;
/// `CUmemLocationType`: a device.
pub const CU_MEM_LOCATION_TYPE_DEVICE: u32 = 1;
/// `CUmemLocationType`: host memory, on no particular NUMA node.
pub const CU_MEM_LOCATION_TYPE_HOST: u32 = 2;
/// `CUmemAccess_flags`: no access.
pub const CU_MEM_ACCESS_FLAGS_PROT_NONE: u32 = 0;
/// `CUmemAccess_flags`: read only.
pub const CU_MEM_ACCESS_FLAGS_PROT_READ: u32 = 1;
/// `CUmemAccess_flags`: read and write.
pub const CU_MEM_ACCESS_FLAGS_PROT_READWRITE: u32 = 3;
/// `CUmemAllocationGranularity_flags`.
pub const CU_MEM_ALLOC_GRANULARITY_MINIMUM: u32 = 0;
pub const CU_MEM_ALLOC_GRANULARITY_RECOMMENDED: u32 = 1;
/// `cuMemHostAlloc` flag: portable across contexts.
pub const CU_MEMHOSTALLOC_PORTABLE: u32 = 0x1;
/// `cuMemHostRegister` flag: portable across contexts.
pub const CU_MEMHOSTREGISTER_PORTABLE: u32 = 0x1;

/// `CUmemLocation`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CUmemLocation {
    pub type_: u32,
    pub id: i32,
}

/// `allocFlags` of [`CUmemAllocationProp`].
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CUmemAllocationPropFlags {
    pub compression_type: u8,
    pub gpu_direct_rdma_capable: u8,
    pub usage: u16,
    pub reserved: [u8; 4],
}

/// `CUmemAllocationProp` (32 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUmemAllocationProp {
    pub type_: u32,
    pub requested_handle_types: u32,
    pub location: CUmemLocation,
    pub win32_handle_meta_data: *mut c_void,
    pub alloc_flags: CUmemAllocationPropFlags,
}

impl CUmemAllocationProp {
    /// Pinned device memory on device `ordinal`, no exportable handle.
    pub fn device(ordinal: i32) -> Self {
        CUmemAllocationProp {
            type_: CU_MEM_ALLOCATION_TYPE_PINNED,
            requested_handle_types: 0,
            location: CUmemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: ordinal },
            win32_handle_meta_data: std::ptr::null_mut(),
            alloc_flags: CUmemAllocationPropFlags::default(),
        }
    }

    /// Pinned host memory that can be mapped at device addresses, no exportable handle.
    pub fn host() -> Self {
        CUmemAllocationProp { location: CUmemLocation { type_: CU_MEM_LOCATION_TYPE_HOST, id: 0 }, ..Self::device(0) }
    }
}

/// `CUmemAccessDesc` (12 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CUmemAccessDesc {
    pub location: CUmemLocation,
    pub flags: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::size_of;

    #[test]
    fn vmm_struct_sizes_match_cuda_h() {
        assert_eq!(size_of::<CUmemAllocationProp>(), 32);
        assert_eq!(size_of::<CUmemAccessDesc>(), 12);
    }
}
