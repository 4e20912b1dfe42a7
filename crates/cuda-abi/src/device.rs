//! Devices: the structs the device queries fill.

/// `CUuuid`: a device's 16-byte UUID, as `cuDeviceGetUuid` writes it (C's
/// `char bytes[16]`, read as unsigned bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CUuuid {
    /// The UUID's bytes, most significant first, as `GPU-…` prints them.
    pub bytes: [u8; 16],
}
