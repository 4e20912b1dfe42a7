//! `app-vmm`: the program's own VMM allocations, as PyTorch's expandable segments make
//! them: one reserved range, `--handles` physical allocations of `--bytes` mapped in it
//! one after another, access set per mapping; every handle filled, added to by a kernel
//! and read back, then unmapped and released, after which a second map of a released
//! handle's address must still be possible with a new handle. Prints `app-vmm: N handles
//! checked`.
//!
//! `app-alias`: `--handles` physical allocations of `--bytes` mapped back to back and
//! filled, then mapped again in reverse order further on (one physical allocation at two
//! addresses). Kernels add through the second mapping, with a kernel over a ballast
//! buffer of `--ballast` bytes between them to push the handles out of the limit, and the
//! first mapping must show every sum; then one mapping is unmapped (the first, or with
//! `--drop second` the second) and the handles released, and the memory lives on through
//! the other. A mapping at an unreserved address must fail and harm nothing. Prints
//! `app-alias: N handles checked`.
//!
//! `big-copy`: two buffers of `--bytes`, an upload, a memset of the second half, a
//! device-to-device copy and a download, each over the whole buffer, checked word by word.
//!
//! `big-box`: two buffers of `--bytes` seen as volumes of 4096-byte rows, 64 rows a
//! slice; `cuMemcpy3D` copies the box of 4000 bytes x 64 rows x all slices from the first
//! to the second, whose row tails must keep the zeros they were set to.
//!
//! `global-refs`: the addresses of `--buffers` buffers uploaded into a module global (as
//! `cudaMemcpyToSymbol` does), then `--rounds` rounds of a kernel over each of two ballast
//! buffers of `--ballast` bytes (together enough to push the buffers out of the limit)
//! followed by `gather`, which adds 1 to each buffer through the pointers it reads from
//! the global; every buffer checked at the end.

use super::*;

fn access(ordinal: i32) -> CUmemAccessDesc {
    CUmemAccessDesc { location: CUmemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: ordinal }, flags: CU_MEM_ACCESS_FLAGS_PROT_READWRITE }
}

pub fn app_vmm(app: &App, o: &Opts) -> bool {
    let cu = &app.cu;
    let handles = o.num("handles", 4) as usize;
    let bytes = o.bytes("bytes", 4 << 20) as usize;
    let words = bytes / 4;
    let s = app.stream(0);
    let mut va = 0;
    // SAFETY: the driver writes the reserved address to `va`, a live local.
    check(unsafe { (cu.mem_address_reserve)(&mut va, handles * bytes, 2 << 20, 0, 0) }, "cuMemAddressReserve");
    let mut hs = Vec::new();
    for i in 0..handles {
        let mut h = 0;
        // SAFETY: `prop` is a temporary that lives through the call; the driver writes the new
        // handle to `h`, a live local.
        check(unsafe { (cu.mem_create)(&mut h, bytes, &CUmemAllocationProp::device(0), 0) }, "cuMemCreate");
        let at = va + (i * bytes) as u64;
        // SAFETY: only values, no host memory: handles this program created, and device
        // addresses, which the driver checks.
        check(unsafe { (cu.mem_map)(at, bytes, 0, h, 0) }, "cuMemMap");
        // SAFETY: one access descriptor, a temporary that lives through the call; the range is
        // a value the driver checks.
        check(unsafe { (cu.mem_set_access)(at, bytes, &access(0), 1) }, "cuMemSetAccess");
        hs.push(h);
        let data: Vec<u32> = (0..words as u32).map(|j| (i as u32) << 24 | j).collect();
        app.htod(at, &data);
        app.add(s, at, words as u64, i as u32 + 1);
    }
    app.sync(s);
    for i in 0..handles {
        let got = app.dtoh(va + (i * bytes) as u64, words);
        if let Some(j) = (0..words).find(|&j| got[j] != ((i as u32) << 24 | j as u32) + i as u32 + 1) {
            eprintln!("standin_app: app-vmm: handle {i} word {j} is {:#x}", got[j]);
            return false;
        }
    }
    for (i, h) in hs.iter().enumerate() {
        // SAFETY: only values, no host memory: handles this program created, and device
        // addresses, which the driver checks.
        check(unsafe { (cu.mem_unmap)(va + (i * bytes) as u64, bytes) }, "cuMemUnmap");
        // SAFETY: only values, no host memory: handles this program created, and device
        // addresses, which the driver checks.
        check(unsafe { (cu.mem_release)(*h) }, "cuMemRelease");
    }
    // The addresses are free again: a new handle maps at the first one.
    let mut h = 0;
    // SAFETY: `prop` is a temporary that lives through the call; the driver writes the new
    // handle to `h`, a live local.
    check(unsafe { (cu.mem_create)(&mut h, bytes, &CUmemAllocationProp::device(0), 0) }, "cuMemCreate");
    // SAFETY: only values, no host memory: handles this program created, and device addresses,
    // which the driver checks.
    check(unsafe { (cu.mem_map)(va, bytes, 0, h, 0) }, "cuMemMap");
    // SAFETY: one access descriptor, a temporary that lives through the call; the range is a
    // value the driver checks.
    check(unsafe { (cu.mem_set_access)(va, bytes, &access(0), 1) }, "cuMemSetAccess");
    app.htod(va, &[7, 8, 9]);
    let again = app.dtoh(va, 3);
    // SAFETY: only values, no host memory: handles this program created, and device addresses,
    // which the driver checks.
    check(unsafe { (cu.mem_unmap)(va, bytes) }, "cuMemUnmap");
    // SAFETY: only values, no host memory: handles this program created, and device addresses,
    // which the driver checks.
    check(unsafe { (cu.mem_release)(h) }, "cuMemRelease");
    // SAFETY: only values, no host memory: handles this program created, and device addresses,
    // which the driver checks.
    check(unsafe { (cu.mem_address_free)(va, handles * bytes) }, "cuMemAddressFree");
    if again != [7, 8, 9] {
        eprintln!("standin_app: app-vmm: a remapped range read back {again:?}");
        return false;
    }
    println!("app-vmm: {handles} handles checked");
    true
}

pub fn app_alias(app: &App, o: &Opts) -> bool {
    let cu = &app.cu;
    let handles = o.num("handles", 3) as usize;
    let bytes = o.bytes("bytes", 2 << 20) as usize;
    let ballast_bytes = o.bytes("ballast", 6 << 20) as usize;
    let words = bytes / 4;
    let s = app.stream(0);
    let total = handles * bytes;
    // The second mapping leaves a gap after the first, so that the two are not one run.
    let mut va = 0;
    // SAFETY: the driver writes the reserved address to `va`, a live local.
    check(unsafe { (cu.mem_address_reserve)(&mut va, 2 * total + bytes, 2 << 20, 0, 0) }, "cuMemAddressReserve");
    let second = va + (total + bytes) as u64;
    let at = |base: u64, i: usize| base + (i * bytes) as u64;
    let mut hs = Vec::new();
    for i in 0..handles {
        let mut h = 0;
        // SAFETY: `prop` is a temporary that lives through the call; the driver writes the new
        // handle to `h`, a live local.
        check(unsafe { (cu.mem_create)(&mut h, bytes, &CUmemAllocationProp::device(0), 0) }, "cuMemCreate");
        // SAFETY: only values, no host memory: handles this program created, and device
        // addresses, which the driver checks.
        check(unsafe { (cu.mem_map)(at(va, i), bytes, 0, h, 0) }, "cuMemMap");
        // SAFETY: one access descriptor, a temporary that lives through the call; the range is
        // a value the driver checks.
        check(unsafe { (cu.mem_set_access)(at(va, i), bytes, &access(0), 1) }, "cuMemSetAccess");
        app.htod(at(va, i), &(0..words as u32).map(|j| (i as u32) << 24 | j).collect::<Vec<_>>());
        hs.push(h);
    }
    // A second mapping at an address nobody reserved fails and leaves the first intact.
    let nowhere = 0x7000_0000_0000u64;
    // SAFETY: only values, no host memory: handles this program created, and device addresses,
    // which the driver checks.
    if unsafe { (cu.mem_map)(nowhere, bytes, 0, hs[0], 0) } == CUDA_SUCCESS {
        eprintln!("standin_app: app-alias: a mapping at an unreserved address succeeded");
        return false;
    }
    // Piece i of the second mapping is handle `handles - 1 - i`.
    for i in 0..handles {
        // SAFETY: only values, no host memory: handles this program created, and device
        // addresses, which the driver checks.
        check(unsafe { (cu.mem_map)(at(second, i), bytes, 0, hs[handles - 1 - i], 0) }, "cuMemMap");
    }
    // SAFETY: one access descriptor, a temporary that lives through the call; the range is a
    // value the driver checks.
    check(unsafe { (cu.mem_set_access)(second, total, &access(0), 1) }, "cuMemSetAccess");
    let ballast = app.alloc(ballast_bytes);
    let push_out = || app.add(s, ballast, (ballast_bytes / 4) as u64, 1);
    let add_through_second = |v: u32| (0..handles).for_each(|i| app.add(s, at(second, i), words as u64, v + i as u32));
    add_through_second(1);
    push_out();
    add_through_second(10);
    app.sync(s);
    // Handle k got 1 + i and 10 + i through piece i = handles - 1 - k.
    let want = |k: usize, j: usize, extra: u32| ((k as u32) << 24 | j as u32) + 11 + 2 * (handles - 1 - k) as u32 + extra;
    let mismatch = |what: &str, base: u64, piece_is_handle: &dyn Fn(usize) -> usize, extra: u32| {
        (0..handles).find_map(|i| {
            let (k, got) = (piece_is_handle(i), app.dtoh(at(base, i), words));
            (0..words)
                .find(|&j| got[j] != want(k, j, extra))
                .map(|j| format!("{what}: piece {i} word {j} is {:#x} where {:#x} was expected", got[j], want(k, j, extra)))
        })
    };
    if let Some(m) = mismatch("first mapping", va, &|i| i, 0) {
        eprintln!("standin_app: app-alias: {m}");
        return false;
    }
    let drop_second = o.get("drop") == Some("second");
    let (gone, kept, piece_is_handle): (u64, u64, &dyn Fn(usize) -> usize) =
        if drop_second { (second, va, &|i| i) } else { (va, second, &|i| handles - 1 - i) };
    // SAFETY: only values, no host memory: handles this program created, and device addresses,
    // which the driver checks.
    check(unsafe { (cu.mem_unmap)(gone, total) }, "cuMemUnmap");
    for h in &hs {
        // SAFETY: only values, no host memory: handles this program created, and device
        // addresses, which the driver checks.
        check(unsafe { (cu.mem_release)(*h) }, "cuMemRelease");
    }
    push_out();
    (0..handles).for_each(|i| app.add(s, at(kept, i), words as u64, 100));
    app.sync(s);
    let found = mismatch("the mapping kept", kept, piece_is_handle, 100);
    // SAFETY: only values, no host memory: handles this program created, and device addresses,
    // which the driver checks.
    check(unsafe { (cu.mem_unmap)(kept, total) }, "cuMemUnmap");
    // SAFETY: only values, no host memory: handles this program created, and device addresses,
    // which the driver checks.
    check(unsafe { (cu.mem_address_free)(va, 2 * total + bytes) }, "cuMemAddressFree");
    app.free(ballast);
    if let Some(m) = found {
        eprintln!("standin_app: app-alias: {m}");
        return false;
    }
    println!("app-alias: {handles} handles checked");
    true
}

pub fn big_copy(app: &App, o: &Opts) -> bool {
    let cu = &app.cu;
    let bytes = o.bytes("bytes", 20 << 20) as usize;
    let words = bytes / 4;
    let (a, b) = (app.alloc(bytes), app.alloc(bytes));
    let mut model: Vec<u32> = (0..words as u32).map(|j| j.wrapping_mul(2_654_435_761)).collect();
    app.htod(a, &model);
    let half = words / 2;
    // SAFETY: only values: a device range, which the driver checks, and the word to set.
    check(unsafe { (cu.memset_d32)(a + (half * 4) as u64, 0x5a5a_5a5a, words - half) }, "cuMemsetD32");
    model[half..].iter_mut().for_each(|w| *w = 0x5a5a_5a5a);
    // SAFETY: only values: two device ranges, which the driver checks.
    check(unsafe { (cu.memcpy_dtod)(b, a, bytes) }, "cuMemcpyDtoD");
    let got = app.dtoh(b, words);
    app.free(a);
    app.free(b);
    match (0..words).find(|&j| got[j] != model[j]) {
        Some(j) => {
            eprintln!("standin_app: big-copy: word {j} is {:#x} where {:#x} was expected", got[j], model[j]);
            false
        }
        None => {
            println!("big-copy: {bytes} bytes checked");
            true
        }
    }
}

pub fn big_box(app: &App, o: &Opts) -> bool {
    const PITCH: usize = 4096;
    const WIDTH: usize = 4000;
    const ROWS: usize = 64;
    let bytes = o.bytes("bytes", 16 << 20) as usize;
    let words = bytes / 4;
    let (a, b) = (app.alloc(bytes), app.alloc(bytes));
    let model: Vec<u32> = (0..words as u32).map(|j| j.wrapping_mul(2_654_435_761) | 1).collect();
    app.htod(a, &model);
    // SAFETY: only values: a device range, which the driver checks, and the word to set.
    check(unsafe { (app.cu.memset_d32)(b, 0, words) }, "cuMemsetD32");
    let c = CUDA_MEMCPY3D {
        src_memory_type: CU_MEMORYTYPE_DEVICE,
        src_device: a,
        src_pitch: PITCH,
        src_height: ROWS,
        dst_memory_type: CU_MEMORYTYPE_DEVICE,
        dst_device: b,
        dst_pitch: PITCH,
        dst_height: ROWS,
        width_in_bytes: WIDTH,
        height: ROWS,
        depth: bytes / (PITCH * ROWS),
        ..Default::default()
    };
    // SAFETY: `c` is a complete `CUDA_MEMCPY3D` that lives through the call; both sides are
    // device memory, which the driver checks.
    check(unsafe { (app.cu.memcpy_3d)(&c) }, "cuMemcpy3D");
    let got = app.dtoh(b, words);
    app.free(a);
    app.free(b);
    let want = |j: usize| if (j * 4) % PITCH < WIDTH { model[j] } else { 0 };
    match (0..words).find(|&j| got[j] != want(j)) {
        Some(j) => {
            eprintln!("standin_app: big-box: word {j} is {:#x} where {:#x} was expected", got[j], want(j));
            false
        }
        None => {
            println!("big-box: {bytes} bytes checked");
            true
        }
    }
}

pub fn global_refs(app: &App, o: &Opts) -> bool {
    let cu = &app.cu;
    let buffers = o.num("buffers", 2) as usize;
    let bytes = o.bytes("bytes", 2 << 20) as usize;
    let rounds = o.num("rounds", 3) as u32;
    let ballast_bytes = o.bytes("ballast", 4 << 20) as usize;
    let s = app.stream(0);
    let b: Vec<u64> = (0..buffers).map(|_| app.alloc(bytes)).collect();
    for (i, p) in b.iter().enumerate() {
        app.htod(*p, &vec![i as u32 * 1000; bytes / 4]);
    }
    let ballast = [app.alloc(ballast_bytes), app.alloc(ballast_bytes)];
    let (mut table, mut size) = (0, 0);
    // SAFETY: the name is NUL-terminated; the driver writes the global's address and size to
    // `table` and `size`, live locals.
    check(unsafe { (cu.module_get_global)(&mut table, &mut size, null_mut(), c"gmux_table".as_ptr()) }, "cuModuleGetGlobal");
    let ptrs: Vec<u32> = b.iter().flat_map(|p| [*p as u32, (*p >> 32) as u32]).collect();
    app.htod(table, &ptrs);
    for _ in 0..rounds {
        for p in ballast {
            app.add(s, p, (ballast_bytes / 4) as u64, 1);
        }
        let (mut t, mut n, mut v) = (table, buffers as u64, 1u32);
        app.launch(app.k.gather, s, &mut [ptr(&mut t), ptr(&mut n), ptr(&mut v)]);
    }
    app.sync(s);
    for (i, p) in b.iter().enumerate() {
        let got = app.dtoh(*p, bytes / 4);
        let expect = |j: usize| i as u32 * 1000 + if j < 1024 { rounds } else { 0 };
        if let Some(j) = (0..got.len()).find(|&j| got[j] != expect(j)) {
            eprintln!("standin_app: global-refs: buffer {i} word {j} is {} where {} was expected", got[j], expect(j));
            return false;
        }
    }
    println!("global-refs: {buffers} buffers checked after {rounds} rounds");
    true
}

/// `opaque --buffers N --bytes B --rounds R`: N buffers, and a kernel named like NCCL's
/// (`ncclDevKernel_GatherHost`) that adds 1 to the first 1024 words of each, finding
/// them in a table in host memory: nothing in its parameters points at them. Between its
/// launches every buffer is added to in turn, so under a limit below N × B some are
/// evicted when it runs. Checks every word at the end.
pub fn opaque(app: &App, o: &Opts) -> bool {
    let buffers = o.num("buffers", 4) as usize;
    let bytes = o.bytes("bytes", 4 << 20) as usize;
    let rounds = o.num("rounds", 4) as u32;
    let s = app.stream(0);
    let b: Vec<u64> = (0..buffers).map(|_| app.alloc(bytes)).collect();
    for (i, p) in b.iter().enumerate() {
        app.htod(*p, &vec![i as u32 * 1000; bytes / 4]);
    }
    let table: Vec<u64> = b.clone();
    for _ in 0..rounds {
        for p in &b {
            app.add(s, *p, (bytes / 4) as u64, 1);
        }
        let (mut t, mut n, mut v) = (table.as_ptr() as u64, buffers as u64, 1u32);
        app.launch(app.k.gather_host, s, &mut [ptr(&mut t), ptr(&mut n), ptr(&mut v)]);
    }
    app.sync(s);
    for (i, p) in b.iter().enumerate() {
        let got = app.dtoh(*p, bytes / 4);
        let expect = |j: usize| i as u32 * 1000 + rounds + if j < 1024 { rounds } else { 0 };
        if let Some(j) = (0..got.len()).find(|&j| got[j] != expect(j)) {
            eprintln!("standin_app: opaque: buffer {i} word {j} is {} where {} was expected", got[j], expect(j));
            return false;
        }
    }
    println!("opaque: {buffers} buffers checked after {rounds} rounds");
    true
}
