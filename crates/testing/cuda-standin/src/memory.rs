//! Device memory: the virtual address space, physical allocations, mappings with their
//! access flags, pinned host ranges, and the check every device byte goes through.
//!
//! This file holds the [`Memory`] state and its bookkeeping records; its operations live
//! by topic in [`access`] (checked reads, writes, copies), [`vmm`] (reserve, create, map,
//! set access, `cuMemAlloc`), [`host`] (pinned host ranges) and [`global`] (the process's
//! instance, counters and aborting accessors).

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use cuda_abi::CUresult;

mod access;
pub use access::as_device;
mod global;
mod host;
mod vmm;

#[cfg(test)]
mod tests;

pub use global::{count, counter, dev_read, dev_write, fault, mem, mem_mut, COUNTERS, PEAK_LIVE, PEAK_LIVE_ON};

/// Mapping granularity (minimum and recommended), as on current NVIDIA GPUs.
pub const GRANULARITY: u64 = 2 << 20;
/// First device virtual address; far above usual host mappings.
pub const VA_BASE: u64 = 0x7e00_0000_0000;
/// Size of the host VA window kept free (`PROT_NONE`) for device addresses.
const VA_WINDOW: u64 = 1 << 40;
const HOST_PAGE: u64 = 4096;
const DEFAULT_LIMIT: u64 = 1 << 30;

/// Why a device byte was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    NotReserved,
    NotMapped,
    NoAccess,
    /// Access granted to other devices, not to the one the access ran on.
    OtherDevice,
    ReadOnly,
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Why::NotReserved => "not reserved",
            Why::NotMapped => "reserved but not mapped",
            Why::NoAccess => "mapped without access",
            Why::OtherDevice => "mapped without access for the device that touched it",
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
    /// The devices granted `access`, one bit each.
    devices: u32,
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
    /// Host memory (`cuMemCreate` at location `HOST`): not the device's.
    host: bool,
    /// The device it was made on (`cuMemAlloc`: none named).
    device: Option<usize>,
}

struct Pinned {
    size: usize,
    owned: bool,
}

/// The whole device memory state. One instance lives in [`MEM`](global::MEM); tests build their own.
pub struct Memory {
    limit: u64,
    live: u64,
    /// Live physical bytes made on each device (by `cuMemCreate`'s location).
    live_on: [u64; crate::ctx::MAX_DEVICES],
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
            live_on: [0; crate::ctx::MAX_DEVICES],
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

    /// Physical bytes `cuMemCreate` made on device `dev` and not yet freed.
    pub fn live_on(&self, dev: usize) -> u64 {
        self.live_on.get(dev).copied().unwrap_or(0)
    }

    /// Whether `addr` lies in the device address space handed out so far.
    pub fn is_device(&self, addr: u64) -> bool {
        (VA_BASE..self.next_va).contains(&addr)
    }

    fn range_at(&self, addr: u64) -> Option<(u64, &Range)> {
        let (&base, r) = self.ranges.range(..=addr).next_back()?;
        (addr < base + r.size).then_some((base, r))
    }
}
