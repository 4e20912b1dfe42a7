//! Box copies (`CUDA_MEMCPY3D`) between host and device memory, validated once into a
//! [`Copy3d`] that copy entry points and memcpy graph nodes execute row by row through
//! the checked device-memory paths.

use cuda_abi::*;

use crate::memory::{count, counter, dev_read, dev_write, fault, mem};

/// Where one side of a copy lives, resolved from its `CUmemorytype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mem {
    Host(usize),
    Device(u64),
}

/// One side of a box copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Side {
    /// The `CUmemorytype` the caller gave (unified stays unified for `GetParams`).
    pub ty: u32,
    pub mem: Mem,
    pub x: usize,
    pub y: usize,
    pub z: usize,
    /// Bytes between rows.
    pub pitch: usize,
    /// Rows between slices.
    pub height: usize,
}

impl Side {
    fn from_abi(ty: u32, host: usize, device: u64, xyz: [usize; 3], lod: usize, pitch: usize, height: usize) -> Result<Side, CUresult> {
        let mem = match ty {
            CU_MEMORYTYPE_HOST => Mem::Host(host),
            CU_MEMORYTYPE_DEVICE => Mem::Device(device),
            CU_MEMORYTYPE_UNIFIED if mem().is_device(device) => Mem::Device(device),
            CU_MEMORYTYPE_UNIFIED => Mem::Host(device as usize),
            CU_MEMORYTYPE_ARRAY => return Err(CUDA_ERROR_NOT_SUPPORTED),
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        };
        let base = match mem {
            Mem::Host(p) => p as u64,
            Mem::Device(d) => d,
        };
        if base == 0 || lod != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let [x, y, z] = xyz;
        Ok(Side { ty, mem, x, y, z, pitch, height })
    }

    /// The address of row `row` of slice `slice` of the box, or `None` on overflow.
    fn checked_addr(&self, row: usize, slice: usize) -> Option<u64> {
        let slice_bytes = self.pitch.checked_mul(self.height)?;
        let z = self.z.checked_add(slice)?.checked_mul(slice_bytes)?;
        let y = self.y.checked_add(row)?.checked_mul(self.pitch)?;
        self.base().checked_add(z.checked_add(y)?.checked_add(self.x)? as u64)
    }

    /// [`Side::checked_addr`] for a row of a validated copy: every term is at most the
    /// last row's, which [`Copy3d::from_abi`] checked.
    fn addr(&self, row: usize, slice: usize) -> u64 {
        self.base() + ((self.z + slice) * self.pitch * self.height + (self.y + row) * self.pitch + self.x) as u64
    }

    fn base(&self) -> u64 {
        match self.mem {
            Mem::Host(p) => p as u64,
            Mem::Device(d) => d,
        }
    }
}

/// A validated box copy: `width` bytes x `height` rows x `depth` slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Copy3d {
    pub src: Side,
    pub dst: Side,
    pub width: usize,
    pub height: usize,
    pub depth: usize,
}

impl Copy3d {
    /// Validates a `CUDA_MEMCPY3D`. Arrays are not supported; rows must fit their pitch,
    /// and slices their height, whenever a copy spans more than one of them.
    pub fn from_abi(p: &CUDA_MEMCPY3D) -> Result<Copy3d, CUresult> {
        let src =
            Side::from_abi(p.src_memory_type, p.src_host as usize, p.src_device, [p.src_x_in_bytes, p.src_y, p.src_z], p.src_lod, p.src_pitch, p.src_height)?;
        let dst =
            Side::from_abi(p.dst_memory_type, p.dst_host as usize, p.dst_device, [p.dst_x_in_bytes, p.dst_y, p.dst_z], p.dst_lod, p.dst_pitch, p.dst_height)?;
        let c = Copy3d { src, dst, width: p.width_in_bytes, height: p.height, depth: p.depth };
        for s in [&c.src, &c.dst] {
            let rows = c.height > 1 || c.depth > 1 || s.y > 0 || s.z > 0;
            if rows && s.pitch < s.x.saturating_add(c.width) {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            let slices = c.depth > 1 || s.z > 0;
            if slices && s.height < s.y.saturating_add(c.height) {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
        }
        if !c.is_empty() {
            let end = |s: &Side| s.checked_addr(c.height - 1, c.depth - 1)?.checked_add(c.width as u64);
            if end(&c.src).is_none() || end(&c.dst).is_none() {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
        }
        Ok(c)
    }

    /// A plain `n`-byte copy, as one row.
    pub fn linear(dst: Mem, src: Mem, n: usize) -> Copy3d {
        let side = |mem| {
            let ty = if matches!(mem, Mem::Device(_)) { CU_MEMORYTYPE_DEVICE } else { CU_MEMORYTYPE_HOST };
            Side { ty, mem, x: 0, y: 0, z: 0, pitch: n, height: 1 }
        };
        Copy3d { src: side(src), dst: side(dst), width: n, height: 1, depth: 1 }
    }

    /// The `CUDA_MEMCPY3D` this copy was made from.
    pub fn to_abi(self) -> CUDA_MEMCPY3D {
        let mut p = CUDA_MEMCPY3D {
            src_x_in_bytes: self.src.x,
            src_y: self.src.y,
            src_z: self.src.z,
            src_memory_type: self.src.ty,
            src_pitch: self.src.pitch,
            src_height: self.src.height,
            dst_x_in_bytes: self.dst.x,
            dst_y: self.dst.y,
            dst_z: self.dst.z,
            dst_memory_type: self.dst.ty,
            dst_pitch: self.dst.pitch,
            dst_height: self.dst.height,
            width_in_bytes: self.width,
            height: self.height,
            depth: self.depth,
            ..Default::default()
        };
        match self.src.ty {
            CU_MEMORYTYPE_HOST => p.src_host = self.src.base() as *const _,
            _ => p.src_device = self.src.base(),
        }
        match self.dst.ty {
            CU_MEMORYTYPE_HOST => p.dst_host = self.dst.base() as *mut _,
            _ => p.dst_device = self.dst.base(),
        }
        p
    }

    fn is_empty(&self) -> bool {
        self.width == 0 || self.height == 0 || self.depth == 0
    }

    /// The first byte and the length of the range the box spans on side `s`.
    fn extent(&self, s: &Side) -> (u64, usize) {
        if self.is_empty() {
            return (s.base(), 0);
        }
        let first = s.addr(0, 0);
        (first, (s.addr(self.height - 1, self.depth - 1) - first) as usize + self.width)
    }

    /// The device ranges the copy touches: first byte, length, and whether it writes there.
    pub fn device_extents(&self) -> Vec<(u64, usize, bool)> {
        [(&self.src, false), (&self.dst, true)]
            .into_iter()
            .filter(|(s, _)| matches!(s.mem, Mem::Device(_)))
            .map(|(s, write)| {
                let (p, n) = self.extent(s);
                (p, n, write)
            })
            .collect()
    }

    /// Whether a device side's address, before its offsets, is not mapped: the driver
    /// refuses such a copy, or memcpy node, when it is made.
    pub fn base_unmapped(&self) -> bool {
        [&self.src, &self.dst].into_iter().any(|s| matches!(s.mem, Mem::Device(d) if mem().check(d, 1, false).is_err()))
    }

    /// Whether every host byte the copy touches is pinned (an async copy of pageable
    /// memory makes the call wait, as in CUDA).
    pub fn host_sides_pinned(&self) -> bool {
        [&self.src, &self.dst].into_iter().all(|s| match s.mem {
            Mem::Device(_) => true,
            Mem::Host(_) => {
                let (p, n) = self.extent(s);
                mem().is_pinned(p as usize, n)
            }
        })
    }

    /// Performs the copy; a device byte outside a mapped chunk aborts, naming `what`.
    ///
    /// # Safety
    /// The host sides must be valid for the bytes the box covers.
    pub unsafe fn run(&self, what: &str) {
        let n = self.width;
        for slice in 0..self.depth {
            for row in 0..self.height {
                let (s, d) = (self.src.addr(row, slice), self.dst.addr(row, slice));
                match (self.dst.mem, self.src.mem) {
                    (Mem::Device(_), Mem::Host(_)) => {
                        // SAFETY: the caller guarantees the host source covers the box.
                        unsafe { dev_write(what, d, s as *const u8, n) };
                        count(counter::H2D_BYTES, n as u64);
                    }
                    (Mem::Host(_), Mem::Device(_)) => {
                        // SAFETY: the caller guarantees the host destination covers the box.
                        unsafe { dev_read(what, s, d as *mut u8, n) };
                        count(counter::D2H_BYTES, n as u64);
                    }
                    (Mem::Device(_), Mem::Device(_)) => {
                        if let Err(f) = mem().copy(d, s, n) {
                            fault(what, f)
                        }
                    }
                    // SAFETY: the caller guarantees both host sides cover the box.
                    (Mem::Host(_), Mem::Host(_)) => unsafe { std::ptr::copy(s as *const u8, d as *mut u8, n) },
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host_box(src: &[u8], dst: &mut [u8]) -> CUDA_MEMCPY3D {
        CUDA_MEMCPY3D {
            src_memory_type: CU_MEMORYTYPE_HOST,
            src_host: src.as_ptr() as *const _,
            dst_memory_type: CU_MEMORYTYPE_HOST,
            dst_host: dst.as_mut_ptr() as *mut _,
            ..Default::default()
        }
    }

    #[test]
    fn host_box_copy_honours_offsets_and_pitches() {
        // Source: 2 slices of 3 rows of pitch 4; copy a 2x2x2 box from (1, 1, 0).
        let src: Vec<u8> = (0..24).collect();
        let mut dst = vec![0u8; 2 * 2 * 3];
        let mut p = host_box(&src, &mut dst);
        (p.src_x_in_bytes, p.src_y, p.src_pitch, p.src_height) = (1, 1, 4, 3);
        (p.dst_pitch, p.dst_height) = (3, 2);
        (p.width_in_bytes, p.height, p.depth) = (2, 2, 2);
        let c = Copy3d::from_abi(&p).unwrap();
        // SAFETY: both sides are host vectors covering the box: its last source byte is
        // 1 * 12 + 2 * 4 + 2 = 22 < 24, its last destination byte 1 * 6 + 1 * 3 + 1 = 10 < 12.
        unsafe { c.run("test") };
        assert_eq!(dst, [5, 6, 0, 9, 10, 0, 17, 18, 0, 21, 22, 0]);
        assert_eq!(Copy3d::from_abi(&c.to_abi()), Ok(c));
    }

    #[test]
    fn validation() {
        let src = [0u8; 16];
        let mut dst = [0u8; 16];
        let mut p = host_box(&src, &mut dst);
        (p.width_in_bytes, p.height, p.depth) = (4, 2, 1);
        p.src_pitch = 4;
        assert_eq!(Copy3d::from_abi(&p).err(), Some(CUDA_ERROR_INVALID_VALUE), "dst pitch below the width");
        p.dst_pitch = 4;
        assert!(Copy3d::from_abi(&p).is_ok());
        p.depth = 2;
        assert_eq!(Copy3d::from_abi(&p).err(), Some(CUDA_ERROR_INVALID_VALUE), "slice height below the rows");
        p.depth = 1;
        p.src_memory_type = CU_MEMORYTYPE_ARRAY;
        assert_eq!(Copy3d::from_abi(&p).err(), Some(CUDA_ERROR_NOT_SUPPORTED));
        p.src_memory_type = 9;
        assert_eq!(Copy3d::from_abi(&p).err(), Some(CUDA_ERROR_INVALID_VALUE));
        p.src_memory_type = CU_MEMORYTYPE_HOST;
        p.src_y = usize::MAX / 2;
        assert_eq!(Copy3d::from_abi(&p).err(), Some(CUDA_ERROR_INVALID_VALUE), "offset overflow");
    }
}
