//! The application's own virtual memory management (`cuMemCreate`, `cuMemMap`, …), as
//! PyTorch's expandable segments, vLLM's sleep mode and similar allocators use it.
//!
//! A physical allocation the application creates on this device becomes a handle of
//! gmux's: it holds no memory. Mapping it makes its address range gmux memory like any
//! allocation (counted against the limit, backed on first use, evicted under pressure);
//! setting access is gmux's business. Mapping a handle again while it is mapped makes
//! the new range an alias of the same memory (gmux-cuda's device maps it at both);
//! unmapping the last mapping frees the memory. A handle is not mapped again after that
//! (gmux does not keep its contents once unmapped), and none is exported to another
//! process (PyTorch asks for exportable handles but exports one only to share it): both
//! are refused by name. Host memory goes to the driver untouched; another device's
//! memory is refused by name, as its `cuMemAlloc` is.

use crate::cuda::*;
use crate::state::{Shim, ShimError};
use crate::vmem::Region;
use gmux_core::device::Device;
use gmux_core::CHUNK_BYTES;
use gmux_cuda::device::Span;
use std::collections::HashMap;

/// Tag of gmux's handles (their top 24 bits), so they never collide with the driver's;
/// the next 8 bits name the device, the low 32 count.
const TAG: u64 = 0x67_6d75 << 40;

/// One physical allocation of the application's, virtualized.
#[derive(Debug)]
struct Handle {
    bytes: u64,
    prop: CUmemAllocationProp,
    /// `cuMemCreate` and each `cuMemRetainAllocationHandle`, less each `cuMemRelease`.
    refs: u32,
    /// Where it is mapped now, first mapping first.
    mapped_at: Vec<CUdeviceptr>,
    /// It has been mapped before (its contents are gone after the unmap).
    was_mapped: bool,
}

/// The application's virtualized physical allocations.
#[derive(Debug, Default)]
pub struct AppHandles {
    next: u64,
    handles: HashMap<u64, Handle>,
    /// Mapped ranges: base address → handle.
    mappings: HashMap<CUdeviceptr, u64>,
}

/// What a `cuMemMap` of a handle makes.
#[derive(Debug, PartialEq, Eq)]
pub enum Mapping {
    /// The handle's first mapping: new gmux memory of this many bytes.
    New(u64),
    /// Another address of the memory mapped at this one.
    Alias(CUdeviceptr),
}

/// Why an application's VMM call is refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A bad argument, answered with this code as the driver would.
    Invalid(CUresult),
    /// Something gmux cannot virtualize: the call's name and the reason.
    Unsupported(&'static str, String),
}

impl AppHandles {
    /// Whether `h` is one of gmux's handles.
    pub fn is_ours(h: CUmemGenericAllocationHandle) -> bool {
        h >> 40 == TAG >> 40
    }

    /// The device of one of gmux's handles.
    pub fn device_of(h: CUmemGenericAllocationHandle) -> usize {
        (h >> 32 & 0xff) as usize
    }

    /// `cuMemCreate` of `bytes` on device `ordinal`: a new handle, or `None` when the
    /// allocation is not one gmux virtualizes (the driver makes it: host memory). Another
    /// device's memory is refused, as `cuMemAlloc`'s is: no limit would count it.
    pub fn create(&mut self, bytes: u64, prop: &CUmemAllocationProp, ordinal: CUdevice) -> Result<Option<u64>, Refusal> {
        let device = prop.type_ == CU_MEM_ALLOCATION_TYPE_PINNED && prop.location.type_ == CU_MEM_LOCATION_TYPE_DEVICE;
        if device && prop.location.id != ordinal {
            return Err(Refusal::Unsupported(
                "cuMemCreate for another device",
                format!(
                    "device {}'s memory is asked for while device {ordinal}'s context is current, before gmux serves device {}; make that device current first (cudaSetDevice)",
                    prop.location.id, prop.location.id
                ),
            ));
        }
        if !device {
            return Ok(None);
        }
        if bytes == 0 || !bytes.is_multiple_of(CHUNK_BYTES) {
            return Err(Refusal::Invalid(CUDA_ERROR_INVALID_VALUE));
        }
        if self.next >= u32::MAX as u64 {
            return Err(Refusal::Unsupported("cuMemCreate", "this process has created 2^32 physical allocations on this device, all gmux can name".into()));
        }
        self.next += 1;
        let h = TAG | (ordinal as u64 & 0xff) << 32 | self.next;
        self.handles.insert(h, Handle { bytes, prop: *prop, refs: 1, mapped_at: Vec::new(), was_mapped: false });
        Ok(Some(h))
    }

    /// The properties `h` was created with.
    pub fn prop(&self, h: u64) -> Option<CUmemAllocationProp> {
        self.handles.get(&h).map(|x| x.prop)
    }

    /// The handle mapped at `base`, with a new reference to it.
    pub fn retain(&mut self, base: CUdeviceptr) -> Option<u64> {
        let h = *self.mappings.get(&base)?;
        self.handles.get_mut(&h)?.refs += 1;
        Some(h)
    }

    /// `cuMemRelease`: drops a reference; the handle goes when none is left and it is
    /// not mapped (an unmap then finishes the release, as in the driver).
    pub fn release(&mut self, h: u64) -> Result<(), Refusal> {
        let x = self.handles.get_mut(&h).ok_or(Refusal::Invalid(CUDA_ERROR_INVALID_VALUE))?;
        x.refs = x.refs.saturating_sub(1);
        if x.refs == 0 && x.mapped_at.is_empty() {
            self.handles.remove(&h);
        }
        Ok(())
    }

    /// Checks a `cuMemMap` of `h` at `ptr`, whole; the caller backs the range or maps the
    /// alias, then calls [`AppHandles::mapped`].
    pub fn check_map(&self, ptr: CUdeviceptr, size: u64, offset: u64, h: u64) -> Result<Mapping, Refusal> {
        let x = self.handles.get(&h).filter(|x| x.refs > 0).ok_or(Refusal::Invalid(CUDA_ERROR_INVALID_HANDLE))?;
        if x.mapped_at.is_empty() && x.was_mapped {
            return Err(Refusal::Unsupported("cuMemMap", "mapping a physical allocation again after its last cuMemUnmap: gmux does not keep an allocation's contents once it is unmapped everywhere; create a new one".into()));
        }
        if offset != 0 || size != x.bytes {
            return Err(Refusal::Unsupported(
                "cuMemMap",
                format!("mapping part of a physical allocation (offset {offset}, {size} of {} bytes): gmux maps whole allocations", x.bytes),
            ));
        }
        if !ptr.is_multiple_of(CHUNK_BYTES) {
            return Err(Refusal::Invalid(CUDA_ERROR_INVALID_VALUE));
        }
        Ok(x.mapped_at.first().map_or(Mapping::New(x.bytes), |at| Mapping::Alias(*at)))
    }

    /// Records that `h` is now mapped at `ptr`.
    pub fn mapped(&mut self, ptr: CUdeviceptr, h: u64) {
        if let Some(x) = self.handles.get_mut(&h) {
            x.mapped_at.push(ptr);
            x.was_mapped = true;
            self.mappings.insert(ptr, h);
        }
    }

    /// Another mapping of the handle mapped at `base`, if it has one.
    pub fn other_mapping(&self, base: CUdeviceptr) -> Option<CUdeviceptr> {
        let x = self.handles.get(self.mappings.get(&base)?)?;
        x.mapped_at.iter().copied().find(|at| *at != base)
    }

    /// The mappings of gmux's handles that start in `[ptr, ptr + size)`.
    pub fn mapped_in(&self, ptr: CUdeviceptr, size: u64) -> Vec<CUdeviceptr> {
        let mut v: Vec<CUdeviceptr> = self.mappings.keys().copied().filter(|b| *b >= ptr && *b < ptr.saturating_add(size)).collect();
        v.sort_unstable();
        v
    }

    /// Records the unmap of the mapping at `base`; the handle goes if it was released.
    pub fn unmapped(&mut self, base: CUdeviceptr) {
        let Some(h) = self.mappings.remove(&base) else { return };
        if let Some(x) = self.handles.get_mut(&h) {
            x.mapped_at.retain(|at| *at != base);
            if x.refs == 0 && x.mapped_at.is_empty() {
                self.handles.remove(&h);
            }
        }
    }

    /// Handles alive (for tests and the summary).
    pub fn len(&self) -> usize {
        self.handles.len()
    }

    /// Whether no handle is alive.
    pub fn is_empty(&self) -> bool {
        self.handles.is_empty()
    }
}

impl Shim {
    /// Backs the application's mapping of `h` at `ptr`, or maps it as an alias of the
    /// handle's memory where it is mapped already. Returns whether the memory is new.
    pub fn map_app(&mut self, ptr: CUdeviceptr, size: u64, offset: u64, h: u64) -> Result<bool, Refusal> {
        let mapping = self.app_vmm.check_map(ptr, size, offset, h)?;
        if ptr.checked_add(size).is_none() || self.vmem.overlapping(ptr, size).next().is_some() {
            return Err(Refusal::Invalid(CUDA_ERROR_INVALID_VALUE));
        }
        match mapping {
            Mapping::New(bytes) => {
                self.back(ptr, bytes, true).map_err(|_| Refusal::Invalid(CUDA_ERROR_OUT_OF_MEMORY))?;
            }
            Mapping::Alias(of) => self.alias(ptr, of).map_err(|e| match e {
                ShimError::Cuda(c) => Refusal::Invalid(c.code),
                ShimError::Invalid(code) => Refusal::Invalid(code),
                _ => Refusal::Invalid(CUDA_ERROR_OUT_OF_MEMORY),
            })?,
        }
        self.app_vmm.mapped(ptr, h);
        Ok(matches!(mapping, Mapping::New(_)))
    }

    /// Unmaps the application's mappings in `[ptr, ptr + size)`: the memory of one that is
    /// not mapped elsewhere is freed once no released command uses it. Returns the base
    /// addresses unmapped, each with where its memory lives on (`None`: freed).
    pub fn unmap_app(&mut self, ptr: CUdeviceptr, size: u64) -> Result<Vec<(CUdeviceptr, Option<CUdeviceptr>)>, ShimError> {
        let bases = self.app_vmm.mapped_in(ptr, size);
        let mut out = Vec::new();
        for b in bases {
            let other = self.app_vmm.other_mapping(b);
            match other {
                Some(o) => self.unalias(b, o)?,
                None => {
                    self.free_range(b)?;
                }
            }
            self.app_vmm.unmapped(b);
            out.push((b, other));
        }
        Ok(out)
    }

    /// Maps the allocation whose mapping starts at `of` at `ptr` too.
    fn alias(&mut self, ptr: CUdeviceptr, of: CUdeviceptr) -> Result<(), ShimError> {
        let r = *self.vmem.find(of).filter(|r| r.base == of).ok_or(ShimError::Invalid(CUDA_ERROR_INVALID_VALUE))?;
        let a = self.memory.alloc(r.alloc).ok_or(ShimError::Invalid(CUDA_ERROR_INVALID_VALUE))?;
        let span = Span { first: a.first, count: a.count };
        self.memory.dev.flush()?;
        self.memory.dev.alias(span, ptr)?;
        self.vmem.insert(Region { base: ptr, alias: true, ..r });
        Ok(())
    }

    /// Removes the mapping at `base` of an allocation mapped at `other` too, once nothing
    /// uses it; if `base` was the allocation's own address, `other` becomes it.
    fn unalias(&mut self, base: CUdeviceptr, other: CUdeviceptr) -> Result<(), ShimError> {
        let r = *self.vmem.find(base).filter(|r| r.base == base).ok_or(ShimError::Invalid(CUDA_ERROR_INVALID_VALUE))?;
        if let Some(ev) = self.inflight.busy(r.alloc)? {
            gmux_cuda::driver::wait_event(ev)?;
        }
        self.memory.dev.flush()?;
        self.memory.dev.synchronize()?;
        let a = self.memory.alloc(r.alloc).expect("region has an allocation");
        let span = Span { first: a.first, count: a.count };
        if !r.alias {
            self.memory.dev.rehome(span, other);
            self.vmem.promote(other);
        }
        self.memory.dev.unalias(span, base)?;
        self.vmem.remove(base);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(ordinal: i32) -> CUmemAllocationProp {
        CUmemAllocationProp::device(ordinal)
    }

    #[test]
    fn only_this_devices_pinned_memory_is_virtualized() {
        let mut a = AppHandles::default();
        let h = a.create(4 << 20, &device(0), 0).unwrap().unwrap();
        assert!(AppHandles::is_ours(h));
        assert_eq!(AppHandles::device_of(h), 0);
        let mut b = AppHandles::default();
        let h3 = b.create(4 << 20, &device(3), 3).unwrap().unwrap();
        assert!(AppHandles::is_ours(h3) && AppHandles::device_of(h3) == 3 && h3 != h, "each device's handles name it");
        assert!(!AppHandles::is_ours(h & 0xffff_ffff), "a driver's small handle is not gmux's");
        assert!(
            matches!(a.create(4 << 20, &device(1), 0), Err(Refusal::Unsupported("cuMemCreate for another device", _))),
            "another device's memory is its own state's to make"
        );
        let mut host = device(0);
        host.location.type_ = CU_MEM_LOCATION_TYPE_HOST;
        assert_eq!(a.create(4 << 20, &host, 0), Ok(None), "host memory is the driver's");
        let mut exportable = device(0);
        exportable.requested_handle_types = 1;
        assert!(a.create(4 << 20, &exportable, 0).unwrap().is_some(), "exportable handles are virtualized; exporting one is refused");
        assert_eq!(a.create(3 << 20, &device(0), 0), Err(Refusal::Invalid(CUDA_ERROR_INVALID_VALUE)), "not whole chunks");
    }

    #[test]
    fn a_handle_maps_whole_and_once_and_goes_after_release_and_unmap() {
        let mut a = AppHandles::default();
        let h = a.create(4 << 20, &device(0), 0).unwrap().unwrap();
        assert!(matches!(a.check_map(0x2000_0000, 2 << 20, 0, h), Err(Refusal::Unsupported("cuMemMap", _))));
        assert_eq!(a.check_map(0x2000_0000, 4 << 20, 0, h), Ok(Mapping::New(4 << 20)));
        a.mapped(0x2000_0000, h);
        assert_eq!(a.retain(0x2000_0000), Some(h));
        assert_eq!(a.check_map(0x4000_0000, 4 << 20, 0, h), Ok(Mapping::Alias(0x2000_0000)), "a second mapping aliases the first");
        a.mapped(0x4000_0000, h);
        assert_eq!(a.other_mapping(0x2000_0000), Some(0x4000_0000));
        a.release(h).unwrap();
        a.release(h).unwrap();
        assert_eq!(a.len(), 1, "released while mapped: alive until unmapped");
        assert_eq!(a.mapped_in(0x1000_0000, 0x2000_0000), vec![0x2000_0000]);
        a.unmapped(0x2000_0000);
        assert_eq!(a.len(), 1, "still mapped at the alias");
        assert_eq!(a.other_mapping(0x4000_0000), None);
        a.unmapped(0x4000_0000);
        assert!(a.is_empty());
        assert_eq!(a.release(h), Err(Refusal::Invalid(CUDA_ERROR_INVALID_VALUE)));
    }

    #[test]
    fn a_handle_is_not_mapped_again_once_unmapped_everywhere() {
        let mut a = AppHandles::default();
        let h = a.create(2 << 20, &device(0), 0).unwrap().unwrap();
        a.mapped(0x2000_0000, h);
        a.unmapped(0x2000_0000);
        assert!(matches!(a.check_map(0x2000_0000, 2 << 20, 0, h), Err(Refusal::Unsupported("cuMemMap", _))), "its contents are gone");
    }
}
