//! The check every device byte goes through, and the copies and fills built on it.

use super::{page_of, Fault, Memory, Why, GRANULARITY};
use cuda_abi::*;
use std::cell::Cell;

thread_local! {
    /// The device whose operation the thread runs (`None`: a peer copy, which the
    /// driver makes from any device granted access).
    static ACCESSOR: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Runs `f` as an operation of device `dev`: its device bytes must be mapped with access
/// for that device.
pub fn as_device<R>(dev: Option<usize>, f: impl FnOnce() -> R) -> R {
    let before = ACCESSOR.replace(dev);
    let r = f();
    ACCESSOR.set(before);
    r
}

impl Memory {
    /// Checks that `[addr, addr + len)` is mapped with read (and, if `write`, write) access.
    pub fn check(&self, addr: u64, len: usize, write: bool) -> Result<(), Fault> {
        if len == 0 {
            return Ok(());
        }
        let Some(end) = addr.checked_add(len as u64) else {
            return Err(Fault { addr, why: Why::NotReserved });
        };
        let mut page = page_of(addr);
        let device = ACCESSOR.get().map_or(u32::MAX, |d| 1 << d);
        while page < end {
            let at = page.max(addr);
            let why = match self.pages.get(&page) {
                Some(p) if p.access != CU_MEM_ACCESS_FLAGS_PROT_NONE && p.devices & device == 0 => Some(Why::OtherDevice),
                Some(p) if p.access == CU_MEM_ACCESS_FLAGS_PROT_READWRITE => None,
                Some(p) if p.access == CU_MEM_ACCESS_FLAGS_PROT_READ => write.then_some(Why::ReadOnly),
                Some(_) => Some(Why::NoAccess),
                None if self.range_at(at).is_some() => Some(Why::NotMapped),
                None => Some(Why::NotReserved),
            };
            if let Some(why) = why {
                return Err(Fault { addr: at, why });
            }
            page += GRANULARITY;
        }
        Ok(())
    }

    /// Host address of device byte `addr` (checked) and how many bytes follow it in its page.
    fn host_at(&self, addr: u64) -> (*mut u8, usize) {
        let page = page_of(addr);
        let p = &self.pages[&page];
        let phys = &self.phys[&p.handle];
        let off = p.offset + (addr - page);
        ((phys.base + off as usize) as *mut u8, (GRANULARITY - (addr - page)) as usize)
    }

    /// Copies `len` device bytes at `src` to host `dst`.
    pub unsafe fn read(&self, src: u64, dst: *mut u8, len: usize) -> Result<(), Fault> {
        self.check(src, len, false)?;
        let mut done = 0;
        while done < len {
            let (host, room) = self.host_at(src + done as u64);
            let n = room.min(len - done);
            std::ptr::copy(host, dst.add(done), n);
            done += n;
        }
        Ok(())
    }

    /// Copies `len` host bytes at `src` to device `dst`.
    pub unsafe fn write(&self, dst: u64, src: *const u8, len: usize) -> Result<(), Fault> {
        self.check(dst, len, true)?;
        let mut done = 0;
        while done < len {
            let (host, room) = self.host_at(dst + done as u64);
            let n = room.min(len - done);
            std::ptr::copy(src.add(done), host, n);
            done += n;
        }
        Ok(())
    }

    /// Device-to-device copy (the ranges may overlap or alias the same physical memory).
    pub fn copy(&self, dst: u64, src: u64, len: usize) -> Result<(), Fault> {
        self.check(src, len, false)?;
        self.check(dst, len, true)?;
        let mut buf = vec![0u8; len];
        // SAFETY: `buf` is a live `len`-byte vector, so it is valid for the `len`-byte write of
        // `read` and then the `len`-byte read of `write`; going through it keeps overlapping or
        // aliased device ranges from being copied in place.
        unsafe {
            self.read(src, buf.as_mut_ptr(), len)?;
            self.write(dst, buf.as_ptr(), len)
        }
    }

    /// Fills `count` elements of `elem.len()` bytes at `dst` with `elem`.
    pub fn fill(&self, dst: u64, elem: &[u8], count: usize) -> Result<(), Fault> {
        let len = count * elem.len();
        self.check(dst, len, true)?;
        let chunk: Vec<u8> = elem.iter().copied().cycle().take(len.min(1 << 16)).collect();
        let mut done = 0;
        while done < len {
            let n = chunk.len().min(len - done);
            // SAFETY: `n <= chunk.len()`, so the source is `n` initialised bytes of `chunk`.
            unsafe { self.write(dst + done as u64, chunk.as_ptr(), n)? };
            done += n;
        }
        Ok(())
    }
}
