//! Device memory: the virtual address space, physical allocations, mappings with their
//! access flags, pinned host ranges, and the check every device byte goes through.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

use cuda_abi::*;

/// Mapping granularity (minimum and recommended), as on current NVIDIA GPUs.
pub const GRANULARITY: u64 = 2 << 20;
/// First device virtual address; far above usual host mappings.
pub const VA_BASE: u64 = 0x7e00_0000_0000;
/// Size of the host VA window kept free (`PROT_NONE`) for device addresses.
const VA_WINDOW: u64 = 1 << 40;
const HOST_PAGE: u64 = 4096;
const DEFAULT_LIMIT: u64 = 1 << 30;

/// Indexes into [`COUNTERS`], in the order `gmuxStandinCounters` reports them.
pub mod counter {
    pub const CREATES: usize = 0;
    pub const MAPS: usize = 1;
    pub const UNMAPS: usize = 2;
    pub const SET_ACCESS: usize = 3;
    pub const H2D_BYTES: usize = 4;
    pub const D2H_BYTES: usize = 5;
    pub const RELEASES: usize = 6;
}

/// Call and byte counters; live physical bytes come from [`Memory::live`].
pub static COUNTERS: [AtomicU64; 7] = [const { AtomicU64::new(0) }; 7];

/// The most physical memory alive at once (created, not yet freed), in bytes.
pub static PEAK_LIVE: AtomicU64 = AtomicU64::new(0);

/// Adds `n` to counter `which`.
pub fn count(which: usize, n: u64) {
    COUNTERS[which].fetch_add(n, Ordering::Relaxed);
}

/// Why a device byte was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    NotReserved,
    NotMapped,
    NoAccess,
    ReadOnly,
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Why::NotReserved => "not reserved",
            Why::NotMapped => "reserved but not mapped",
            Why::NoAccess => "mapped without access",
            Why::ReadOnly => "mapped read-only",
        })
    }
}

/// The first refused byte of an access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    pub addr: u64,
    pub why: Why,
}

struct Range {
    size: u64,
    /// Set for ranges made by `cuMemAlloc`: (requested size, physical handle).
    alloc: Option<(u64, u64)>,
}

struct Page {
    handle: u64,
    offset: u64,
    map: u64,
    access: u32,
}

struct MapRec {
    base: u64,
    size: u64,
    handle: u64,
}

struct Phys {
    base: usize,
    size: u64,
    mappings: u32,
    released: bool,
}

struct Pinned {
    size: usize,
    owned: bool,
}

/// The whole device memory state. One instance lives in [`MEM`]; tests build their own.
pub struct Memory {
    limit: u64,
    live: u64,
    next_va: u64,
    next_handle: u64,
    next_map: u64,
    ranges: BTreeMap<u64, Range>,
    pages: HashMap<u64, Page>,
    maps: HashMap<u64, MapRec>,
    phys: HashMap<u64, Phys>,
    pinned: BTreeMap<usize, Pinned>,
}

type Res<T> = Result<T, CUresult>;

fn aligned(v: u64, to: u64) -> bool {
    v.is_multiple_of(to)
}

fn round_up(v: u64, to: u64) -> u64 {
    v.div_ceil(to) * to
}

fn page_of(addr: u64) -> u64 {
    addr & !(GRANULARITY - 1)
}

unsafe fn map_anon(size: usize) -> Option<*mut u8> {
    let p = libc::mmap(std::ptr::null_mut(), size, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE, -1, 0);
    (p != libc::MAP_FAILED).then_some(p as *mut u8)
}

impl Memory {
    /// An empty device with `limit` bytes of physical memory.
    pub fn new(limit: u64) -> Memory {
        Memory {
            limit,
            live: 0,
            next_va: VA_BASE,
            next_handle: 0x1000,
            next_map: 1,
            ranges: BTreeMap::new(),
            pages: HashMap::new(),
            maps: HashMap::new(),
            phys: HashMap::new(),
            pinned: BTreeMap::new(),
        }
    }

    /// Physical memory size.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Physical bytes allocated and not yet freed.
    pub fn live(&self) -> u64 {
        self.live
    }

    /// Whether `addr` lies in the device address space handed out so far.
    pub fn is_device(&self, addr: u64) -> bool {
        (VA_BASE..self.next_va).contains(&addr)
    }

    fn range_at(&self, addr: u64) -> Option<(u64, &Range)> {
        let (&base, r) = self.ranges.range(..=addr).next_back()?;
        (addr < base + r.size).then_some((base, r))
    }

    /// Checks that `[addr, addr + len)` is mapped with read (and, if `write`, write) access.
    pub fn check(&self, addr: u64, len: usize, write: bool) -> Result<(), Fault> {
        if len == 0 {
            return Ok(());
        }
        let Some(end) = addr.checked_add(len as u64) else {
            return Err(Fault { addr, why: Why::NotReserved });
        };
        let mut page = page_of(addr);
        while page < end {
            let at = page.max(addr);
            let why = match self.pages.get(&page) {
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

    fn new_phys(&mut self, size: u64) -> Res<u64> {
        if self.live + size > self.limit {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        // SAFETY: an anonymous mapping at an address of the kernel's choosing touches no
        // existing memory; failure comes back as `None`.
        let base = unsafe { map_anon(size as usize) }.ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
        let handle = self.next_handle;
        self.next_handle += 1;
        self.live += size;
        PEAK_LIVE.fetch_max(self.live, Ordering::Relaxed);
        self.phys.insert(handle, Phys { base: base as usize, size, mappings: 0, released: false });
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
            self.live -= p.size;
        }
    }

    /// `cuMemCreate`.
    pub fn create(&mut self, size: u64, prop: &CUmemAllocationProp) -> Res<u64> {
        if size == 0 || !aligned(size, GRANULARITY) || prop.type_ != CU_MEM_ALLOCATION_TYPE_PINNED {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if prop.location.type_ != CU_MEM_LOCATION_TYPE_DEVICE || prop.location.id != 0 {
            return Err(CUDA_ERROR_INVALID_DEVICE);
        }
        self.new_phys(size)
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
        self.insert_map(ptr, size, offset, handle, CU_MEM_ACCESS_FLAGS_PROT_NONE);
        Ok(())
    }

    fn insert_map(&mut self, ptr: u64, size: u64, offset: u64, handle: u64, access: u32) {
        let map = self.next_map;
        self.next_map += 1;
        for i in 0..size / GRANULARITY {
            let page = Page { handle, offset: offset + i * GRANULARITY, map, access };
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

    /// `cuMemSetAccess`: whole mappings only, possibly many consecutive ones.
    pub fn set_access(&mut self, ptr: u64, size: u64, descs: &[CUmemAccessDesc]) -> Res<()> {
        let mut flags = None;
        for d in descs {
            if d.location.type_ != CU_MEM_LOCATION_TYPE_DEVICE || d.location.id != 0 {
                return Err(CUDA_ERROR_INVALID_DEVICE);
            }
            if ![CU_MEM_ACCESS_FLAGS_PROT_NONE, CU_MEM_ACCESS_FLAGS_PROT_READ, CU_MEM_ACCESS_FLAGS_PROT_READWRITE].contains(&d.flags) {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            flags = Some(d.flags);
        }
        let flags = flags.ok_or(CUDA_ERROR_INVALID_VALUE)?;
        self.whole_maps(ptr, size)?;
        for i in 0..size / GRANULARITY {
            self.pages.get_mut(&(ptr + i * GRANULARITY)).unwrap().access = flags;
        }
        Ok(())
    }

    /// `cuMemAlloc`: reserve + create + map + read/write access, in one step.
    pub fn alloc(&mut self, size: u64) -> Res<u64> {
        if size == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let rounded = round_up(size, GRANULARITY);
        let handle = self.new_phys(rounded)?;
        let base = self.reserve(rounded, 0)?;
        self.insert_map(base, rounded, 0, handle, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
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

/// Parses `GMUX_STANDIN_MEM`: bytes, or a number with suffix K, M, G or T (powers of 1024).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let s = s.strip_suffix(['b', 'B']).unwrap_or(s);
    let s = s.strip_suffix(['i', 'I']).unwrap_or(s);
    let (num, shift) = match s.chars().last()? {
        'k' | 'K' => (&s[..s.len() - 1], 10),
        'm' | 'M' => (&s[..s.len() - 1], 20),
        'g' | 'G' => (&s[..s.len() - 1], 30),
        't' | 'T' => (&s[..s.len() - 1], 40),
        _ => (s, 0),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// The process's device memory.
pub static MEM: LazyLock<RwLock<Memory>> = LazyLock::new(|| {
    let limit = match std::env::var("GMUX_STANDIN_MEM") {
        Ok(v) => parse_size(&v).unwrap_or_else(|| {
            eprintln!("cuda-standin: cannot parse GMUX_STANDIN_MEM={v:?}");
            std::process::abort()
        }),
        Err(_) => DEFAULT_LIMIT,
    };
    // Keep host mappings out of the device window, so no host pointer looks like a device one.
    // SAFETY: `MAP_FIXED_NOREPLACE` never replaces an existing mapping (the call fails instead,
    // and the result is ignored), so this only claims unused address space, inaccessible.
    unsafe {
        libc::mmap(
            VA_BASE as *mut libc::c_void,
            VA_WINDOW as usize,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        );
    }
    RwLock::new(Memory::new(limit))
});

/// Shared access to [`MEM`].
pub fn mem() -> RwLockReadGuard<'static, Memory> {
    MEM.read().unwrap_or_else(|e| e.into_inner())
}

/// Exclusive access to [`MEM`].
pub fn mem_mut() -> RwLockWriteGuard<'static, Memory> {
    MEM.write().unwrap_or_else(|e| e.into_inner())
}

/// Reports a refused device access by `what` (a kernel or copy name) and aborts.
pub fn fault(what: &str, f: Fault) -> ! {
    eprintln!("cuda-standin: {what} touched unmapped device address {:#x} ({})", f.addr, f.why);
    std::process::abort()
}

/// Reads device memory or aborts naming `what`.
pub unsafe fn dev_read(what: &str, src: u64, dst: *mut u8, len: usize) {
    if let Err(f) = mem().read(src, dst, len) {
        fault(what, f)
    }
}

/// Writes device memory or aborts naming `what`.
pub unsafe fn dev_write(what: &str, dst: u64, src: *const u8, len: usize) {
    if let Err(f) = mem().write(dst, src, len) {
        fault(what, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = GRANULARITY;

    fn rw() -> [CUmemAccessDesc; 1] {
        [CUmemAccessDesc { location: CUmemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: 0 }, flags: CU_MEM_ACCESS_FLAGS_PROT_READWRITE }]
    }

    fn prop() -> CUmemAllocationProp {
        CUmemAllocationProp::device(0)
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("1048576"), Some(1 << 20));
        assert_eq!(parse_size("64M"), Some(64 << 20));
        assert_eq!(parse_size("2g"), Some(2 << 30));
        assert_eq!(parse_size("512KiB"), Some(512 << 10));
        assert_eq!(parse_size("x"), None);
    }

    #[test]
    fn access_needs_reserve_map_and_set_access() {
        let mut m = Memory::new(64 << 20);
        let va = m.reserve(4 * G, 0).unwrap();
        assert_eq!(m.check(va - 1, 1, false), Err(Fault { addr: va - 1, why: Why::NotReserved }));
        assert_eq!(m.check(va + 5, 1, false).unwrap_err().why, Why::NotMapped);
        let h = m.create(2 * G, &prop()).unwrap();
        m.map(va + G, 2 * G, 0, h).unwrap();
        assert_eq!(m.check(va + G, 8, false).unwrap_err().why, Why::NoAccess);
        m.set_access(va + G, 2 * G, &rw()).unwrap();
        assert!(m.check(va + G, (2 * G) as usize, true).is_ok());
        // A range that runs off the mapping reports its first bad byte.
        let f = m.check(va + G + 100, (2 * G) as usize, false).unwrap_err();
        assert_eq!(f, Fault { addr: va + 3 * G, why: Why::NotMapped });
        let f = m.check(va + 4 * G, 1, false).unwrap_err();
        assert_eq!(f.why, Why::NotReserved, "the guard gap after a range is not reserved");
    }

    #[test]
    fn vmm_rules() {
        let mut m = Memory::new(8 * G);
        let va = m.reserve(4 * G, 0).unwrap();
        let h = m.create(2 * G, &prop()).unwrap();
        assert_eq!(m.create(G + 1, &prop()), Err(CUDA_ERROR_INVALID_VALUE));
        assert_eq!(m.map(va + 1, G, 0, h), Err(CUDA_ERROR_INVALID_VALUE), "unaligned va");
        assert_eq!(m.map(va, G, G, h), Ok(()), "aligned offset");
        assert_eq!(m.map(va, G, 0, h), Err(CUDA_ERROR_INVALID_VALUE), "double map");
        assert_eq!(m.map(va + 3 * G, 2 * G, 0, h), Err(CUDA_ERROR_INVALID_VALUE), "past the range");
        assert_eq!(m.map(va + 2 * G, G, 2 * G, h), Err(CUDA_ERROR_INVALID_VALUE), "past the handle");
        assert_eq!(m.map(0x1000_0000, G, 0, h), Err(CUDA_ERROR_INVALID_VALUE), "not reserved");
        m.map(va + G, 2 * G, 0, h).unwrap();
        // Unmap and set-access take whole mappings only.
        assert_eq!(m.unmap(va + G, G), Err(CUDA_ERROR_INVALID_VALUE));
        assert_eq!(m.set_access(va + G, G, &rw()), Err(CUDA_ERROR_INVALID_VALUE));
        assert_eq!(m.unmap(va, 4 * G), Err(CUDA_ERROR_INVALID_VALUE), "hole at the end");
        m.set_access(va, 3 * G, &rw()).unwrap();
        assert_eq!(m.address_free(va, 4 * G), Err(CUDA_ERROR_INVALID_VALUE), "still mapped");
        m.unmap(va, 3 * G).unwrap();
        assert_eq!(m.check(va, 1, false).unwrap_err().why, Why::NotMapped);
        m.address_free(va, 4 * G).unwrap();
        assert_eq!(m.check(va, 1, false).unwrap_err().why, Why::NotReserved);
        assert!(m.reserve(G, 0).unwrap() > va, "addresses are never reused");
    }

    #[test]
    fn one_handle_at_two_addresses_aliases() {
        let mut m = Memory::new(8 * G);
        let a = m.reserve(2 * G, 0).unwrap();
        let b = m.reserve(2 * G, 0).unwrap();
        let h = m.create(2 * G, &prop()).unwrap();
        m.map(a, 2 * G, 0, h).unwrap();
        m.map(b, 2 * G, 0, h).unwrap();
        m.set_access(a, 2 * G, &rw()).unwrap();
        m.set_access(b, 2 * G, &rw()).unwrap();
        let data = [7u8, 8, 9];
        // SAFETY: `data` is 3 readable bytes, the length written.
        unsafe { m.write(a + G - 1, data.as_ptr(), 3).unwrap() };
        let mut out = [0u8; 3];
        // SAFETY: `out` is 3 writable bytes, the length read.
        unsafe { m.read(b + G - 1, out.as_mut_ptr(), 3).unwrap() };
        assert_eq!(out, data);
    }

    #[test]
    fn release_waits_for_the_last_unmap() {
        let mut m = Memory::new(4 * G);
        let va = m.reserve(2 * G, 0).unwrap();
        let h = m.create(2 * G, &prop()).unwrap();
        m.map(va, 2 * G, 0, h).unwrap();
        m.release(h).unwrap();
        assert_eq!(m.live(), 2 * G);
        assert_eq!(m.map(va, 2 * G, 0, h), Err(CUDA_ERROR_INVALID_VALUE), "released handle");
        assert_eq!(m.release(h), Err(CUDA_ERROR_INVALID_VALUE));
        m.unmap(va, 2 * G).unwrap();
        assert_eq!(m.live(), 0);
    }

    #[test]
    fn out_of_memory() {
        let mut m = Memory::new(4 * G);
        let h = m.create(2 * G, &prop()).unwrap();
        assert_eq!(m.alloc(2 * G + 1), Err(CUDA_ERROR_OUT_OF_MEMORY));
        let p = m.alloc(100).unwrap();
        assert_eq!(m.create(2 * G, &prop()), Err(CUDA_ERROR_OUT_OF_MEMORY));
        assert_eq!(m.address_range(p + 50), Some((p, 100)));
        m.free(p).unwrap();
        assert_eq!(m.free(p), Err(CUDA_ERROR_INVALID_VALUE));
        m.release(h).unwrap();
        assert_eq!(m.live(), 0);
    }

    #[test]
    fn copies_fill_and_read_only() {
        let mut m = Memory::new(8 * G);
        let p = m.alloc(3 * G).unwrap();
        m.fill(p + G - 4, &0xabcd_u16.to_le_bytes(), 4).unwrap();
        m.copy(p + 2 * G + 10, p + G - 4, 8).unwrap();
        let mut out = [0u8; 8];
        // SAFETY: `out` is 8 writable bytes, the length read.
        unsafe { m.read(p + 2 * G + 10, out.as_mut_ptr(), 8).unwrap() };
        assert_eq!(out, [0xcd, 0xab, 0xcd, 0xab, 0xcd, 0xab, 0xcd, 0xab]);
        let va = m.reserve(2 * G, 0).unwrap();
        let h = m.create(2 * G, &prop()).unwrap();
        m.map(va, 2 * G, 0, h).unwrap();
        let mut ro = rw();
        ro[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
        m.set_access(va, 2 * G, &ro).unwrap();
        assert!(m.check(va, 4, false).is_ok());
        assert_eq!(m.check(va, 4, true).unwrap_err().why, Why::ReadOnly);
    }

    #[test]
    fn pinned_ranges() {
        let mut m = Memory::new(G);
        let p = m.alloc_host(10_000).unwrap() as usize;
        assert!(m.is_pinned(p + 5, 9_000));
        assert!(!m.is_pinned(p + 5, 10_000));
        let buf = vec![0u8; 4096];
        let b = buf.as_ptr() as usize;
        m.register_host(b, 4096).unwrap();
        assert_eq!(m.register_host(b + 8, 8), Err(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED));
        assert_eq!(m.pinned_at(b + 100), Some((b, 4096)));
        assert_eq!(m.free_host(b), Err(CUDA_ERROR_INVALID_VALUE));
        m.unregister_host(b).unwrap();
        assert_eq!(m.unregister_host(b), Err(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED));
        m.free_host(p).unwrap();
        assert!(!m.is_pinned(p, 1));
    }
}
