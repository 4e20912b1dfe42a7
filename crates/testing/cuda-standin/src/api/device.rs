//! Device queries, by visible ordinal (see [`crate::ctx`] for how `GMUX_STANDIN_DEVICES`
//! and `CUDA_VISIBLE_DEVICES` make the devices).

use std::ffi::{c_char, c_int};

use cuda_abi::*;

use super::{code, put};
use crate::ctx::{self, devices};
use crate::memory;

/// `cuDeviceGetAttribute` values of an H100-like device on PCI bus `pci_bus`; unknown
/// attributes read 0.
fn device_attribute(attr: c_int, pci_bus: u8) -> c_int {
    match attr {
        1 => 1024,              // MAX_THREADS_PER_BLOCK
        2 | 3 => 1024,          // MAX_BLOCK_DIM_X, _Y
        4 => 64,                // MAX_BLOCK_DIM_Z
        5 => i32::MAX,          // MAX_GRID_DIM_X
        6 | 7 => 65535,         // MAX_GRID_DIM_Y, _Z
        8 => 48 << 10,          // MAX_SHARED_MEMORY_PER_BLOCK
        9 => 64 << 10,          // TOTAL_CONSTANT_MEMORY
        10 => 32,               // WARP_SIZE
        11 => i32::MAX,         // MAX_PITCH
        12 => 65536,            // MAX_REGISTERS_PER_BLOCK
        13 => 1_980_000,        // CLOCK_RATE (kHz)
        14 => 512,              // TEXTURE_ALIGNMENT
        15 => 1,                // GPU_OVERLAP
        16 => 132,              // MULTIPROCESSOR_COUNT
        19 => 1,                // CAN_MAP_HOST_MEMORY
        31 => 1,                // CONCURRENT_KERNELS
        33 => pci_bus as c_int, // PCI_BUS_ID
        36 => 2_619_000,        // MEMORY_CLOCK_RATE (kHz)
        37 => 5120,             // GLOBAL_MEMORY_BUS_WIDTH
        38 => 50 << 20,         // L2_CACHE_SIZE
        39 => 2048,             // MAX_THREADS_PER_MULTIPROCESSOR
        40 => 3,                // ASYNC_ENGINE_COUNT
        41 => 1,                // UNIFIED_ADDRESSING
        75 => 9,                // COMPUTE_CAPABILITY_MAJOR
        76 => 0,                // COMPUTE_CAPABILITY_MINOR
        78 => 1,                // STREAM_PRIORITIES_SUPPORTED
        81 => 228 << 10,        // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
        82 => 65536,            // MAX_REGISTERS_PER_MULTIPROCESSOR
        97 => 227 << 10,        // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        102 => 1,               // VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
        _ => 0,
    }
}

/// Copies `text` (NUL-terminated) into the caller's buffer of `len` bytes, cut to fit.
unsafe fn put_text(out: *mut c_char, len: c_int, text: &str) -> CUresult {
    if out.is_null() || len <= 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let n = text.len().min(len as usize);
    std::ptr::copy_nonoverlapping(text.as_ptr() as *const c_char, out, n);
    *out.add(n - 1) = 0;
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CUresult {
    tri!(ctx::require_device(ordinal));
    code(put(device, ordinal))
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    tri!(ctx::require_init());
    code(put(count, devices().count() as c_int))
}

/// The name ends with the device's physical index when several are installed.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    let i = tri!(ctx::require_device(dev));
    put_text(name, len, &devices().name(i))
}

/// `GPU-676d7578-0000-0000-0000-0000000000pp` for physical device `pp`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid(uuid: *mut CUuuid, dev: CUdevice) -> CUresult {
    let i = tri!(ctx::require_device(dev));
    code(put(uuid, CUuuid { bytes: devices().uuid(i) }))
}

/// Same as `cuDeviceGetUuid` (the real driver's `_v2` differs only for MIG instances).
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(uuid: *mut CUuuid, dev: CUdevice) -> CUresult {
    cuDeviceGetUuid(uuid, dev)
}

/// `0000:BB:00.0`, bus `BB` being 0x10 plus the physical index (as attribute `PCI_BUS_ID`).
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetPCIBusId(bus_id: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    let i = tri!(ctx::require_device(dev));
    put_text(bus_id, len, &format!("0000:{:02x}:00.0\0", devices().pci_bus(i)))
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(value: *mut c_int, attrib: c_int, dev: CUdevice) -> CUresult {
    let i = tri!(ctx::require_device(dev));
    code(put(value, device_attribute(attrib, devices().pci_bus(i))))
}

/// The limit of the one memory pool all devices share (`GMUX_STANDIN_MEM`): each device
/// reports all of it, and an allocation on any of them counts against it.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
    tri!(ctx::require_device(dev));
    code(put(bytes, memory::mem().limit() as usize))
}

/// Any two different devices can access each other's memory.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceCanAccessPeer(can: *mut c_int, dev: CUdevice, peer: CUdevice) -> CUresult {
    let i = tri!(ctx::require_device(dev));
    let j = tri!(ctx::require_device(peer));
    code(put(can, (i != j) as c_int))
}
