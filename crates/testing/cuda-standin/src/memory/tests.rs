//! Unit tests of the device memory model: reservations, mappings, access checks,
//! copies and pinned host ranges.

use super::global::parse_size;
use super::*;
use cuda_abi::*;

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

#[test]
fn a_mapping_is_reached_only_from_the_devices_granted_and_counted_on_its_own() {
    let mut m = Memory::new(64 << 20);
    let on = |dev| CUmemAccessDesc { location: CUmemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: dev }, flags: CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    let h = m.create(2 * G, &CUmemAllocationProp::device(1)).unwrap();
    assert_eq!((m.live_on(0), m.live_on(1)), (0, 2 * G), "memory counts on the device it was made on");
    let va = m.reserve(2 * G, 0).unwrap();
    m.map(va, 2 * G, 0, h).unwrap();
    m.set_access(va, 2 * G, &[on(1)]).unwrap();
    assert!(as_device(Some(1), || m.check(va, 8, true)).is_ok());
    assert_eq!(as_device(Some(0), || m.check(va, 8, false)).unwrap_err().why, Why::OtherDevice, "device 0 was not granted");
    assert!(as_device(None, || m.check(va, 8, true)).is_ok(), "a peer copy needs a device granted, any");
    m.set_access(va, 2 * G, &[on(0), on(1)]).unwrap();
    assert!(as_device(Some(0), || m.check(va + G, 8, true)).is_ok(), "granted to both");
    let none = CUmemAccessDesc { flags: CU_MEM_ACCESS_FLAGS_PROT_NONE, ..on(1) };
    m.set_access(va, 2 * G, &[none]).unwrap();
    assert_eq!(as_device(Some(1), || m.check(va, 8, false)).unwrap_err().why, Why::OtherDevice, "access taken back from 1");
    assert!(as_device(Some(0), || m.check(va, 8, true)).is_ok(), "and kept for 0");
    m.unmap(va, 2 * G).unwrap();
    m.release(h).unwrap();
    assert_eq!(m.live_on(1), 0);
}
