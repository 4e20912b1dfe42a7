//! Pinned host memory: ranges from `cuMemHostAlloc` and `cuMemHostRegister`.

use super::{map_anon, Memory, Pinned, Res};
use cuda_abi::*;

impl Memory {
    /// `cuMemAllocHost` / `cuMemHostAlloc`.
    pub fn alloc_host(&mut self, size: usize) -> Res<*mut u8> {
        if size == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: an anonymous mapping at an address of the kernel's choosing touches no
        // existing memory; failure comes back as `None`.
        let p = unsafe { map_anon(size) }.ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
        self.pinned.insert(p as usize, Pinned { size, owned: true });
        Ok(p)
    }

    /// `cuMemFreeHost`.
    pub fn free_host(&mut self, p: usize) -> Res<()> {
        match self.pinned.get(&p) {
            Some(Pinned { size, owned: true }) => {
                // SAFETY: `owned` ranges are only made by `alloc_host`, so `p` and `size` are
                // exactly one of our `map_anon` mappings, unmapped once since the entry goes
                // next; the caller of `cuMemFreeHost` promises not to use the memory after.
                unsafe { libc::munmap(p as *mut libc::c_void, *size) };
                self.pinned.remove(&p);
                Ok(())
            }
            _ => Err(CUDA_ERROR_INVALID_VALUE),
        }
    }

    /// `cuMemHostRegister`.
    pub fn register_host(&mut self, p: usize, size: usize) -> Res<()> {
        if p == 0 || size == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let overlaps = self.pinned.range(..p + size).next_back().is_some_and(|(&b, r)| b + r.size > p);
        if overlaps {
            return Err(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
        }
        self.pinned.insert(p, Pinned { size, owned: false });
        Ok(())
    }

    /// `cuMemHostUnregister`.
    pub fn unregister_host(&mut self, p: usize) -> Res<()> {
        match self.pinned.get(&p) {
            Some(Pinned { owned: false, .. }) => {
                self.pinned.remove(&p);
                Ok(())
            }
            _ => Err(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED),
        }
    }

    /// The pinned host range containing `p`: (base, size).
    pub fn pinned_at(&self, p: usize) -> Option<(usize, usize)> {
        let (&b, r) = self.pinned.range(..=p).next_back()?;
        (p < b + r.size).then_some((b, r.size))
    }

    /// Whether all of `[p, p + len)` is pinned host memory.
    pub fn is_pinned(&self, p: usize, len: usize) -> bool {
        self.pinned_at(p).is_some_and(|(b, s)| p + len <= b + s)
    }
}
