//! The exported functions called directly, as a C program would.

use std::ffi::c_void;
use std::ptr::null_mut;

use cuda_abi::*;

use super::context::*;
use super::copy::*;
use super::launch::*;
use super::memory::*;
use super::standin::*;
use super::stream::*;

pub(super) fn setup() {
    // SAFETY: the only pointer passed is `&mut ctx`, a live out-pointer of the type
    // `cuDevicePrimaryCtxRetain` writes; the context handed on is the one it returned.
    unsafe {
        assert_eq!(cuInit(0), CUDA_SUCCESS);
        let mut ctx = null_mut();
        assert_eq!(cuDevicePrimaryCtxRetain(&mut ctx, 0), CUDA_SUCCESS);
        assert_eq!(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    }
}

pub(super) unsafe fn alloc(n: usize) -> CUdeviceptr {
    let mut p = 0;
    assert_eq!(cuMemAlloc_v2(&mut p, n), CUDA_SUCCESS);
    p
}

#[test]
fn calls_need_a_current_context() {
    // SAFETY: every pointer passed is `&mut` to a live local of the type the call writes
    // (`p`, `s`, `c`), and `p` and `c` are the allocation and context these calls returned.
    std::thread::spawn(|| unsafe {
        assert_eq!(cuInit(0), CUDA_SUCCESS);
        let mut p = 0;
        assert_eq!(cuMemAlloc_v2(&mut p, 16), CUDA_ERROR_INVALID_CONTEXT);
        let mut s = null_mut();
        assert_eq!(cuStreamCreate(&mut s, 0), CUDA_ERROR_INVALID_CONTEXT);
        setup();
        assert_eq!(cuMemAlloc_v2(&mut p, 16), CUDA_SUCCESS);
        let mut c = null_mut();
        assert_eq!(cuCtxPopCurrent_v2(&mut c), CUDA_SUCCESS);
        assert_eq!(cuMemFree_v2(p), CUDA_ERROR_INVALID_CONTEXT);
        assert_eq!(cuCtxPushCurrent_v2(c), CUDA_SUCCESS);
        assert_eq!(cuMemFree_v2(p), CUDA_SUCCESS);
    })
    .join()
    .unwrap();
}

unsafe extern "C" fn sleep_ms(p: *mut c_void) {
    std::thread::sleep(std::time::Duration::from_millis(p as u64));
}

#[test]
fn async_copy_from_pageable_memory_snapshots_the_source() {
    setup();
    // SAFETY: `host` and `back` are live 4096-byte buffers, the length copied. Both are
    // pageable, so the stand-in copies `host` at call time (refilling it later races with
    // nothing) and the copy into `back` returns only once done. The host function's data is
    // a millisecond count it never dereferences; `d` and `s` are handles made here.
    unsafe {
        let d = alloc(4096);
        let mut s = null_mut();
        assert_eq!(cuStreamCreate(&mut s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
        assert_eq!(cuLaunchHostFunc(s, Some(sleep_ms), 50 as *mut c_void), CUDA_SUCCESS);
        let mut host = vec![1u8; 4096];
        assert_eq!(cuMemcpyHtoDAsync_v2(d, host.as_ptr() as *const c_void, 4096, s), CUDA_SUCCESS);
        host.fill(2);
        assert_eq!(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
        // A pageable destination makes the call return only once the copy is done.
        let mut back = vec![0u8; 4096];
        assert_eq!(cuMemcpyDtoHAsync_v2(back.as_mut_ptr() as *mut c_void, d, 4096, s), CUDA_SUCCESS);
        assert!(back.iter().all(|&b| b == 1));
        assert_eq!(cuStreamDestroy_v2(s), CUDA_SUCCESS);
        assert_eq!(cuMemFree_v2(d), CUDA_SUCCESS);
    }
}

unsafe extern "C" fn add_one(args: *const *mut c_void) {
    let p = *(*args as *const u64);
    let mut v = [0u8; 4];
    gmuxStandinRead(p, v.as_mut_ptr(), 4);
    let n = u32::from_le_bytes(v) + *(*args.add(1) as *const u32);
    gmuxStandinWrite(p, n.to_le_bytes().as_ptr(), 4);
}

#[test]
fn launch_copies_parameters_at_call_time() {
    setup();
    // SAFETY: the name is a static C string and `sizes` holds the 2 sizes registered;
    // `add_one` reads a `u64` and a `u32`, which `params` points to (`ptr`, `inc`), and the
    // launch copies them at call time, so changing `inc` after is fine. Out-pointers are
    // `&mut` to live locals of the written type, `out` takes the 4 bytes copied back, and
    // the host function's data is a millisecond count it never dereferences.
    unsafe {
        let d = alloc(4);
        assert_eq!(cuMemsetD32_v2(d, 10, 1), CUDA_SUCCESS);
        let sizes = [8usize, 4];
        let f = gmuxStandinRegisterKernel(c"api_test_add".as_ptr(), Some(add_one), 2, sizes.as_ptr(), 0);
        let mut found = null_mut();
        assert_eq!(cuModuleGetFunction(&mut found, null_mut(), c"api_test_add".as_ptr()), CUDA_SUCCESS);
        assert_eq!(found, f);
        let (mut s, mut e) = (null_mut(), null_mut());
        assert_eq!(cuStreamCreate(&mut s, 0), CUDA_SUCCESS);
        assert_eq!(cuEventCreate(&mut e, 0), CUDA_SUCCESS);
        assert_eq!(cuLaunchHostFunc(s, Some(sleep_ms), 30 as *mut c_void), CUDA_SUCCESS);
        let (mut ptr, mut inc) = (d, 5u32);
        let mut params = [&mut ptr as *mut u64 as *mut c_void, &mut inc as *mut u32 as *mut c_void];
        assert_eq!(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params.as_mut_ptr(), null_mut()), CUDA_SUCCESS);
        inc = 1000;
        assert_eq!(cuEventRecord(e, s), CUDA_SUCCESS);
        assert_eq!(cuEventQuery(e), CUDA_ERROR_NOT_READY);
        assert_eq!(cuEventSynchronize(e), CUDA_SUCCESS);
        let mut out = 0u32;
        assert_eq!(cuMemcpyDtoH_v2(&mut out as *mut u32 as *mut c_void, d, 4), CUDA_SUCCESS);
        assert_eq!(out, 15, "the launch used the value at call time ({inc} came later)");
        assert_eq!(cuLaunchKernel(f, 0, 1, 1, 1, 1, 1, 0, s, params.as_mut_ptr(), null_mut()), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuStreamSynchronize(s), CUDA_SUCCESS);
    }
}

#[test]
fn pointer_attributes() {
    setup();
    // SAFETY: each attribute is written through a pointer to a live local of its type
    // (`mt`: u32 memory type, `start`: u64 address, `base`/`size`, `h`); `attrs` and `data`
    // both hold the 2 entries `cuPointerGetAttributes` is told of. `h` and `d` are freed
    // once, by the call that matches their allocation.
    unsafe {
        let d = alloc(3 << 20);
        let mut mt = 0u32;
        assert_eq!(cuPointerGetAttribute(&mut mt as *mut u32 as *mut c_void, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 100), CUDA_SUCCESS);
        assert_eq!(mt, CU_MEMORYTYPE_DEVICE);
        let mut start = 0u64;
        let a = CU_POINTER_ATTRIBUTE_RANGE_START_ADDR;
        assert_eq!(cuPointerGetAttribute(&mut start as *mut u64 as *mut c_void, a, d + 100), CUDA_SUCCESS);
        assert_eq!(start, d);
        let (mut base, mut size) = (0u64, 0usize);
        assert_eq!(cuMemGetAddressRange_v2(&mut base, &mut size, d + (2 << 20)), CUDA_SUCCESS);
        assert_eq!((base, size), (d, 3 << 20));
        let mut h = null_mut();
        assert_eq!(cuMemAllocHost_v2(&mut h, 100), CUDA_SUCCESS);
        assert_eq!(cuPointerGetAttribute(&mut mt as *mut u32 as *mut c_void, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, h as u64 + 5), CUDA_SUCCESS);
        assert_eq!(mt, CU_MEMORYTYPE_HOST);
        let local = 0u64;
        let p = &local as *const u64 as u64;
        assert_eq!(cuPointerGetAttribute(&mut mt as *mut u32 as *mut c_void, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p), CUDA_ERROR_INVALID_VALUE);
        let attrs = [CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR];
        mt = 7;
        let mut data = [&mut mt as *mut u32 as *mut c_void, &mut start as *mut u64 as *mut c_void];
        assert_eq!(cuPointerGetAttributes(2, attrs.as_ptr(), data.as_mut_ptr(), p), CUDA_SUCCESS);
        assert_eq!((mt, start), (0, 0));
        assert_eq!(cuMemFreeHost(h), CUDA_SUCCESS);
        assert_eq!(cuMemFree_v2(d), CUDA_SUCCESS);
    }
}
