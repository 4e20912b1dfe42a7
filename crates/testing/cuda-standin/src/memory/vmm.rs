//! Virtual memory management: reservations, physical allocations, mappings with their
//! access flags, and `cuMemAlloc` built from the three.

use std::sync::atomic::Ordering;

use super::{aligned, map_anon, round_up, MapRec, Memory, Page, Phys, Range, Res, GRANULARITY, HOST_PAGE, PEAK_LIVE, PEAK_LIVE_ON, VA_BASE, VA_WINDOW};
use cuda_abi::*;

impl Memory {
    /// `cuMemAddressReserve`.
    pub fn reserve(&mut self, size: u64, align: u64) -> Res<u64> {
        if size == 0 || !aligned(size, HOST_PAGE) || (align != 0 && !align.is_power_of_two()) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let base = round_up(self.next_va, align.max(GRANULARITY));
        if base.checked_add(size).is_none_or(|end| end > VA_BASE + VA_WINDOW) {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        // One spare granule between ranges: an overrun lands on "not reserved".
        self.next_va = round_up(base + size, GRANULARITY) + GRANULARITY;
        self.ranges.insert(base, Range { size, alloc: None });
        Ok(base)
    }

    /// `cuMemAddressFree`: `ptr` and `size` must be exactly a reservation, with nothing mapped.
    pub fn address_free(&mut self, ptr: u64, size: u64) -> Res<()> {
        match self.ranges.get(&ptr) {
            Some(r) if r.size == size && r.alloc.is_none() => {}
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
        if self.pages.keys().any(|&p| p >= ptr && p < ptr + size) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        self.ranges.remove(&ptr);
        Ok(())
    }

    fn new_phys(&mut self, size: u64, host: bool, device: Option<usize>) -> Res<u64> {
        if !host && self.live + size > self.limit {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        // SAFETY: an anonymous mapping at an address of the kernel's choosing touches no
        // existing memory; failure comes back as `None`.
        let base = unsafe { map_anon(size as usize) }.ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
        let handle = self.next_handle;
        self.next_handle += 1;
        if !host {
            self.live += size;
            PEAK_LIVE.fetch_max(self.live, Ordering::Relaxed);
            if let Some(d) = device {
                self.live_on[d] += size;
                PEAK_LIVE_ON[d].fetch_max(self.live_on[d], Ordering::Relaxed);
            }
        }
        self.phys.insert(handle, Phys { base: base as usize, size, mappings: 0, released: false, host, device });
        Ok(handle)
    }

    fn drop_phys_if_unused(&mut self, handle: u64) {
        let p = &self.phys[&handle];
        if p.released && p.mappings == 0 {
            let p = self.phys.remove(&handle).unwrap();
            // SAFETY: `base` and `size` are exactly the mapping `new_phys` made for this handle,
            // now out of `phys`. With no mappings left no page reaches it, and `&mut self`
            // rules out a `read` or `write` (which borrow `self`) still copying through it.
            unsafe { libc::munmap(p.base as *mut libc::c_void, p.size as usize) };
            if !p.host {
                self.live -= p.size;
                if let Some(d) = p.device {
                    self.live_on[d] -= p.size;
                }
            }
        }
    }

    /// `cuMemCreate`: memory of a device, or host memory (location `HOST`, whose id is
    /// ignored) that device addresses may map. Every device's memory is the one pool; the
    /// caller checks the device ordinal.
    pub fn create(&mut self, size: u64, prop: &CUmemAllocationProp) -> Res<u64> {
        if size == 0 || !aligned(size, GRANULARITY) || prop.type_ != CU_MEM_ALLOCATION_TYPE_PINNED {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        match prop.location.type_ {
            CU_MEM_LOCATION_TYPE_HOST if prop.requested_handle_types == 0 => self.new_phys(size, true, None),
            CU_MEM_LOCATION_TYPE_DEVICE => self.new_phys(size, false, usize::try_from(prop.location.id).ok().filter(|d| *d < crate::ctx::MAX_DEVICES)),
            _ => Err(CUDA_ERROR_INVALID_DEVICE),
        }
    }

    /// `cuMemRelease`: the memory goes when its last mapping does.
    pub fn release(&mut self, handle: u64) -> Res<()> {
        match self.phys.get_mut(&handle) {
            Some(p) if !p.released => p.released = true,
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
        self.drop_phys_if_unused(handle);
        Ok(())
    }

    /// `cuMemMap`: a fresh mapping, without access until `set_access`.
    pub fn map(&mut self, ptr: u64, size: u64, offset: u64, handle: u64) -> Res<()> {
        if size == 0 || ![ptr, size, offset].iter().all(|&v| aligned(v, GRANULARITY)) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        match self.phys.get(&handle) {
            Some(p) if !p.released && offset + size <= p.size => {}
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
        match self.range_at(ptr) {
            Some((base, r)) if r.alloc.is_none() && ptr + size <= base + r.size => {}
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
        if (0..size / GRANULARITY).any(|i| self.pages.contains_key(&(ptr + i * GRANULARITY))) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        self.insert_map(ptr, size, offset, handle, CU_MEM_ACCESS_FLAGS_PROT_NONE, 0);
        Ok(())
    }

    fn insert_map(&mut self, ptr: u64, size: u64, offset: u64, handle: u64, access: u32, devices: u32) {
        let map = self.next_map;
        self.next_map += 1;
        for i in 0..size / GRANULARITY {
            let page = Page { handle, offset: offset + i * GRANULARITY, map, access, devices };
            self.pages.insert(ptr + i * GRANULARITY, page);
        }
        self.maps.insert(map, MapRec { base: ptr, size, handle });
        self.phys.get_mut(&handle).unwrap().mappings += 1;
    }

    /// Mapping ids covering `[ptr, ptr + size)` if the range is fully mapped by whole mappings.
    fn whole_maps(&self, ptr: u64, size: u64) -> Res<Vec<u64>> {
        if size == 0 || !aligned(ptr, GRANULARITY) || !aligned(size, GRANULARITY) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let mut ids = Vec::new();
        for i in 0..size / GRANULARITY {
            let page = self.pages.get(&(ptr + i * GRANULARITY)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
            if ids.last() != Some(&page.map) {
                ids.push(page.map);
            }
        }
        let inside = |m: &MapRec| m.base >= ptr && m.base + m.size <= ptr + size;
        if !ids.iter().all(|id| inside(&self.maps[id])) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        Ok(ids)
    }

    /// `cuMemUnmap`: whole mappings only.
    pub fn unmap(&mut self, ptr: u64, size: u64) -> Res<()> {
        for id in self.whole_maps(ptr, size)? {
            let m = self.maps.remove(&id).unwrap();
            for i in 0..m.size / GRANULARITY {
                self.pages.remove(&(m.base + i * GRANULARITY));
            }
            self.phys.get_mut(&m.handle).unwrap().mappings -= 1;
            self.drop_phys_if_unused(m.handle);
        }
        Ok(())
    }

    /// `cuMemSetAccess`: whole mappings only, possibly many consecutive ones. Each
    /// descriptor grants (or, `PROT_NONE`, takes away) its device's access; the flags are
    /// the same for every device granted. The caller checks the devices' ordinals.
    pub fn set_access(&mut self, ptr: u64, size: u64, descs: &[CUmemAccessDesc]) -> Res<()> {
        let (mut flags, mut grant, mut revoke) = (None, 0u32, 0u32);
        for d in descs {
            if d.location.type_ != CU_MEM_LOCATION_TYPE_DEVICE {
                return Err(CUDA_ERROR_INVALID_DEVICE);
            }
            if ![CU_MEM_ACCESS_FLAGS_PROT_NONE, CU_MEM_ACCESS_FLAGS_PROT_READ, CU_MEM_ACCESS_FLAGS_PROT_READWRITE].contains(&d.flags) {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            let bit = 1u32.checked_shl(d.location.id as u32).unwrap_or(0);
            if d.flags == CU_MEM_ACCESS_FLAGS_PROT_NONE {
                revoke |= bit;
            } else {
                grant |= bit;
                flags = Some(flags.map_or(d.flags, |f: u32| f.max(d.flags)));
            }
        }
        if descs.is_empty() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        self.whole_maps(ptr, size)?;
        for i in 0..size / GRANULARITY {
            let page = self.pages.get_mut(&(ptr + i * GRANULARITY)).unwrap();
            page.devices = (page.devices | grant) & !revoke;
            page.access = if page.devices == 0 { CU_MEM_ACCESS_FLAGS_PROT_NONE } else { flags.unwrap_or(page.access) };
        }
        Ok(())
    }

    /// `cuMemAlloc`: reserve + create + map + read/write access, in one step.
    pub fn alloc(&mut self, size: u64) -> Res<u64> {
        if size == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let rounded = round_up(size, GRANULARITY);
        let handle = self.new_phys(rounded, false, None)?;
        let base = self.reserve(rounded, 0)?;
        self.insert_map(base, rounded, 0, handle, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, u32::MAX);
        self.ranges.get_mut(&base).unwrap().alloc = Some((size, handle));
        self.phys.get_mut(&handle).unwrap().released = true;
        Ok(base)
    }

    /// `cuMemFree`: `ptr` must be what `alloc` returned.
    pub fn free(&mut self, ptr: u64) -> Res<()> {
        let size = match self.ranges.get(&ptr) {
            Some(Range { size, alloc: Some(_) }) => *size,
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        };
        self.unmap(ptr, size)?;
        self.ranges.remove(&ptr);
        Ok(())
    }

    /// Base and size of the `cuMemAlloc` allocation or reservation containing `addr`.
    pub fn address_range(&self, addr: u64) -> Option<(u64, u64)> {
        let (base, r) = self.range_at(addr)?;
        Some((base, r.alloc.map_or(r.size, |(requested, _)| requested)))
    }
}
