//! The device and context calls on the unit tests' three devices (all visible; see
//! [`crate::ctx`]), called as a C program would.

use std::ffi::{c_char, CStr};
use std::ptr::null_mut;

use cuda_abi::*;

use super::context::*;
use super::device::*;
use super::memory::*;
use super::tests::setup;
use super::vmm::*;

/// The primary context of `dev`, retained.
unsafe fn retain(dev: CUdevice) -> CUcontext {
    let mut c = null_mut();
    assert_eq!(cuDevicePrimaryCtxRetain(&mut c, dev), CUDA_SUCCESS);
    c
}

unsafe fn current_device() -> CUdevice {
    let mut d = -1;
    assert_eq!(cuCtxGetDevice(&mut d), CUDA_SUCCESS);
    d
}

#[test]
fn three_devices_with_distinct_uuids_and_contexts() {
    // SAFETY: every out-pointer is `&mut` to a live local of the type the call writes, and
    // `name` holds the 64 bytes `cuDeviceGetName` is told of.
    std::thread::spawn(|| unsafe {
        setup();
        let mut n = 0;
        assert_eq!(cuDeviceGetCount(&mut n), CUDA_SUCCESS);
        assert_eq!(n, 3);
        let mut uuids = Vec::new();
        for dev in 0..3 {
            let mut got = -1;
            assert_eq!(cuDeviceGet(&mut got, dev), CUDA_SUCCESS);
            assert_eq!(got, dev);
            let mut u = CUuuid::default();
            assert_eq!(cuDeviceGetUuid_v2(&mut u, dev), CUDA_SUCCESS);
            assert_eq!(u.bytes[..4], *b"gmux");
            assert_eq!(u.bytes[15], dev as u8, "unset CUDA_VISIBLE_DEVICES: ordinal = physical index");
            uuids.push(u);
        }
        assert_eq!(uuids.iter().collect::<std::collections::HashSet<_>>().len(), 3, "distinct UUIDs");
        let mut dev = -1;
        assert_eq!(cuDeviceGet(&mut dev, 3), CUDA_ERROR_INVALID_DEVICE);
        let mut u = CUuuid::default();
        assert_eq!(cuDeviceGetUuid(&mut u, -1), CUDA_ERROR_INVALID_DEVICE);
        let mut name = [0 as c_char; 64];
        assert_eq!(cuDeviceGetName(name.as_mut_ptr(), 64, 2), CUDA_SUCCESS);
        assert_eq!(CStr::from_ptr(name.as_ptr()).to_str().unwrap(), "gmux CUDA stand-in (CPU) 2");
        assert_eq!(cuDeviceGetPCIBusId(name.as_mut_ptr(), 64, 1), CUDA_SUCCESS);
        assert_eq!(CStr::from_ptr(name.as_ptr()).to_str().unwrap(), "0000:11:00.0");

        let ctxs = [retain(0), retain(1), retain(2)];
        assert!(ctxs[0] != ctxs[1] && ctxs[1] != ctxs[2] && ctxs[0] != ctxs[2]);
        assert_eq!(retain(1), ctxs[1], "one primary context per device");
        for dev in [2, 0, 1] {
            assert_eq!(cuCtxSetCurrent(ctxs[dev]), CUDA_SUCCESS);
            assert_eq!(current_device(), dev as CUdevice);
        }
        assert_eq!(cuCtxPushCurrent_v2(ctxs[2]), CUDA_SUCCESS);
        assert_eq!(current_device(), 2);
        let mut popped = null_mut();
        assert_eq!(cuCtxPopCurrent_v2(&mut popped), CUDA_SUCCESS);
        assert_eq!((popped, current_device()), (ctxs[2], 1));
        let mut created = null_mut();
        assert_eq!(cuCtxCreate_v2(&mut created, 0, 2), CUDA_SUCCESS);
        assert_eq!((created, current_device()), (ctxs[2], 2), "cuCtxCreate pushes the device's primary context");
        assert_eq!(cuCtxSetCurrent(0x4358_0000_0001 as CUcontext), CUDA_ERROR_INVALID_CONTEXT);
    })
    .join()
    .unwrap();
}

#[test]
fn every_device_answers_and_shares_the_pool() {
    // SAFETY: out-pointers are `&mut` to live locals of the written types; `prop` and
    // `access` are live for the calls that read them, and `h` and `va` are released by the
    // calls that match how they were made.
    std::thread::spawn(|| unsafe {
        setup();
        let (mut total, mut attr, mut state, mut active) = (0usize, 0, 9, 0);
        assert_eq!(cuDeviceTotalMem_v2(&mut total, 2), CUDA_SUCCESS);
        assert_eq!(cuDeviceGetAttribute(&mut attr, 75, 2), CUDA_SUCCESS);
        assert_eq!(attr, 9, "compute capability major");
        assert_eq!(cuDevicePrimaryCtxGetState(2, &mut state, &mut active), CUDA_SUCCESS);
        assert_eq!(cuCtxSetCurrent(retain(2)), CUDA_SUCCESS);
        let (mut free, mut pool) = (0usize, 0usize);
        assert_eq!(cuMemGetInfo_v2(&mut free, &mut pool), CUDA_SUCCESS);
        assert_eq!(pool, total);
        let prop = CUmemAllocationProp::device(2);
        let mut h = 0;
        assert_eq!(cuMemCreate(&mut h, 2 << 20, &prop, 0), CUDA_SUCCESS);
        assert_eq!(cuMemCreate(&mut 0, 2 << 20, &CUmemAllocationProp::device(3), 0), CUDA_ERROR_INVALID_DEVICE);
        let mut va = 0;
        assert_eq!(cuMemAddressReserve(&mut va, 2 << 20, 0, 0, 0), CUDA_SUCCESS);
        assert_eq!(cuMemMap(va, 2 << 20, 0, h, 0), CUDA_SUCCESS);
        let on = |id| CUmemAccessDesc { location: CUmemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id }, flags: CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        assert_eq!(cuMemSetAccess(va, 2 << 20, [on(3)].as_ptr(), 1), CUDA_ERROR_INVALID_DEVICE);
        assert_eq!(cuMemSetAccess(va, 2 << 20, [on(1), on(2)].as_ptr(), 2), CUDA_SUCCESS);
        assert_eq!(cuMemUnmap(va, 2 << 20), CUDA_SUCCESS);
        assert_eq!(cuMemRelease(h), CUDA_SUCCESS);
        assert_eq!(cuMemAddressFree(va, 2 << 20), CUDA_SUCCESS);
    })
    .join()
    .unwrap();
}

#[test]
fn peer_access_between_two_devices() {
    // SAFETY: out-pointers are `&mut` to live locals of the written type; the contexts are
    // the primary ones `retain` returned.
    std::thread::spawn(|| unsafe {
        setup();
        let mut can = -1;
        assert_eq!(cuDeviceCanAccessPeer(&mut can, 1, 2), CUDA_SUCCESS);
        assert_eq!(can, 1);
        assert_eq!(cuDeviceCanAccessPeer(&mut can, 1, 1), CUDA_SUCCESS);
        assert_eq!(can, 0, "a device is not its own peer");
        assert_eq!(cuDeviceCanAccessPeer(&mut can, 1, 3), CUDA_ERROR_INVALID_DEVICE);
        let (c1, c2) = (retain(1), retain(2));
        assert_eq!(cuCtxSetCurrent(c1), CUDA_SUCCESS);
        assert_eq!(cuCtxDisablePeerAccess(c2), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
        assert_eq!(cuCtxEnablePeerAccess(c2, 0), CUDA_SUCCESS);
        assert_eq!(cuCtxEnablePeerAccess(c2, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
        assert_eq!(cuCtxEnablePeerAccess(c1, 0), CUDA_ERROR_INVALID_DEVICE, "not with itself");
        assert_eq!(cuCtxEnablePeerAccess(null_mut(), 0), CUDA_ERROR_INVALID_CONTEXT);
        assert_eq!(cuCtxSetCurrent(c2), CUDA_SUCCESS);
        assert_eq!(cuCtxDisablePeerAccess(c1), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "access is one way");
        assert_eq!(cuCtxSetCurrent(c1), CUDA_SUCCESS);
        assert_eq!(cuCtxDisablePeerAccess(c2), CUDA_SUCCESS);
        assert_eq!(cuCtxDisablePeerAccess(c2), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
    })
    .join()
    .unwrap();
}
