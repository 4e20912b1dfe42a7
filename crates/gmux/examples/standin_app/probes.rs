//! Single-purpose probes of the driver interface:
//!
//! `info [--total BYTES]`: `cuMemGetInfo`, `cuMemGetAddressRange` and pointer attributes
//! for one allocation, printed and checked (the total against `--total`, if given).
//!
//! `dlsym-direct`: three buffers filled and added to through functions resolved with
//! `dlsym(RTLD_DEFAULT, ...)`, as a program linked against libcuda binds them.
//!
//! `procaddr-ptsz`: two threads upload, launch and synchronize on the per-thread default
//! stream, through entry points resolved with `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
//!
//! `extra-params [--ballast BYTES]`: kernel parameters passed in `extra` buffers laid out
//! at the offsets the driver reports, through `cuLaunchKernel` and `cuLaunchKernelEx`,
//! including a `CUkernel` with a struct parameter; the ballast buffer is filled before each
//! launch, to push the others out under a memory limit.
//!
//! `too-big --bytes N`: one `add` over N bytes; exits 0 if the launch returns
//! `CUDA_ERROR_OUT_OF_MEMORY`.
//!
//! `fault-unmapped [--mode launch|noaccess|copy|stale]`: touches memory that is reserved but
//! not mapped, mapped without access, or freed; expected to be aborted by the stand-in.

use std::ffi::c_uint;
use std::sync::atomic::{AtomicU64, Ordering};

use super::*;

pub fn info(app: &App, o: &Opts) -> bool {
    let cu = &app.cu;
    let bytes = (5 << 20) + 100;
    let p = app.alloc(bytes);
    let (mut free, mut total) = (0, 0);
    // SAFETY: the driver writes to `free` and `total`, live locals.
    check(unsafe { (cu.mem_get_info)(&mut free, &mut total) }, "cuMemGetInfo");
    let (mut base, mut size) = (0, 0);
    // SAFETY: the driver writes to `base` and `size`, live locals.
    check(unsafe { (cu.mem_get_address_range)(&mut base, &mut size, p + 12345) }, "cuMemGetAddressRange");
    let (mut mem_type, mut start) = (0u32, 0u64);
    // SAFETY: the memory type is a `u32` (`CUmemorytype`), written to `mem_type`, a live `u32`.
    let r = unsafe { (cu.pointer_get_attribute)(ptr(&mut mem_type), CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p + 12345) };
    check(r, "cuPointerGetAttribute(MEMORY_TYPE)");
    // SAFETY: the range start is a `CUdeviceptr`, written to `start`, a live `u64`.
    let r = unsafe { (cu.pointer_get_attribute)(ptr(&mut start), CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p + 12345) };
    check(r, "cuPointerGetAttribute(RANGE_START_ADDR)");
    println!("info: free {free} total {total} base {base:#x} size {size} memory_type {mem_type} range_start {start:#x}");
    let mut problems = Vec::new();
    if base != p || size != bytes {
        problems.push(format!("cuMemGetAddressRange gave ({base:#x}, {size}), expected ({p:#x}, {bytes})"));
    }
    if mem_type != CU_MEMORYTYPE_DEVICE || start != p {
        problems.push(format!("pointer attributes: memory type {mem_type}, range start {start:#x}"));
    }
    if free > total {
        problems.push(format!("free {free} > total {total}"));
    }
    if let Some(want) = o.get("total").map(|_| o.bytes("total", 0)) {
        if total as u64 != want {
            problems.push(format!("total {total} != --total {want}"));
        }
    }
    app.free(p);
    problems.iter().for_each(|m| eprintln!("standin_app: info: {m}"));
    problems.is_empty()
}

pub fn dlsym_direct(app: &App) -> bool {
    let s = app.stream(0);
    let sizes = [1 << 20, (3 << 20) + 12, 64 << 10];
    let bufs: Vec<(u64, usize)> = sizes.iter().map(|&b| (app.alloc(b), b / 4)).collect();
    for (k, &(p, words)) in bufs.iter().enumerate() {
        app.fill(s, p, words as u64, k as u32);
        app.add(s, p, words as u64, 7 + k as u32);
    }
    app.sync(s);
    let mut mismatches = 0;
    for (k, &(p, words)) in bufs.iter().enumerate() {
        let want: Vec<u32> = (0..words as u64).map(|i| hash(k as u32, i).wrapping_add(7 + k as u32)).collect();
        if mismatch(&format!("buffer {k}"), &app.dtoh(p, words), &want) {
            mismatches += 1;
        }
        app.free(p);
    }
    println!("dlsym-direct: {} buffers, mismatches: {mismatches}", bufs.len());
    mismatches == 0
}

type LaunchFn =
    unsafe extern "C" fn(CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CUstream, *mut *mut c_void, *mut *mut c_void) -> CUresult;
type HtoDAsyncFn = unsafe extern "C" fn(CUdeviceptr, *const c_void, usize, CUstream) -> CUresult;
type SyncFn = unsafe extern "C" fn(CUstream) -> CUresult;

pub fn procaddr_ptsz(app: &App) -> bool {
    let resolve = |name: &str| {
        let (mut p, mut status) = (null_mut(), 0);
        let flags = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
        // SAFETY: the name is NUL-terminated and lives through the call; the driver writes to
        // `p` and `status`, live locals.
        check(unsafe { (app.get_proc)(cstr(name).as_ptr(), &mut p, 13000, flags, &mut status) }, "cuGetProcAddress");
        p as usize
    };
    let (launch, htod, sync) = (resolve("cuLaunchKernel"), resolve("cuMemcpyHtoDAsync"), resolve("cuStreamSynchronize"));
    const ROUNDS: u32 = 10;
    const WORDS: usize = 384 << 10;
    let mismatches = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for t in 0..2u32 {
            let mismatches = &mismatches;
            scope.spawn(move || {
                // SAFETY: each address is the driver's entry point of that name, which has
                // the C signature of the type it becomes in cuda.h (the `_ptsz` variants
                // share their ABI with the plain ones).
                let (launch, htod, sync) = unsafe {
                    (
                        std::mem::transmute::<usize, LaunchFn>(launch),
                        std::mem::transmute::<usize, HtoDAsyncFn>(htod),
                        std::mem::transmute::<usize, SyncFn>(sync),
                    )
                };
                // SAFETY: only the context this program retained, by value.
                check(unsafe { (app.cu.ctx_set_current)(app.ctx) }, "cuCtxSetCurrent");
                let p = app.alloc(WORDS * 4);
                for round in 0..ROUNDS {
                    let data: Vec<u32> = (0..WORDS as u64).map(|i| hash(t * 1000 + round, i)).collect();
                    // SAFETY: the driver reads `WORDS * 4` bytes from `data`, which holds
                    // that many; a pageable source is taken before the call returns.
                    check(unsafe { htod(p, data.as_ptr() as *const c_void, WORDS * 4, null_mut()) }, "cuMemcpyHtoDAsync_ptsz");
                    let (mut q, mut n, mut v) = (p, WORDS as u64, round + t);
                    let mut params = [ptr(&mut q), ptr(&mut n), ptr(&mut v)];
                    // SAFETY: `params` holds a pointer to a live value for each of `add`'s
                    // parameters (8, 8 and 4 bytes), which the launch copies. No `extra`.
                    check(unsafe { launch(app.k.add, 1, 1, 1, 1, 1, 1, 0, null_mut(), params.as_mut_ptr(), null_mut()) }, "cuLaunchKernel_ptsz");
                    // SAFETY: only a value: null, the (per-thread) default stream.
                    check(unsafe { sync(null_mut()) }, "cuStreamSynchronize_ptsz");
                    let want: Vec<u32> = data.iter().map(|w| w.wrapping_add(round + t)).collect();
                    if mismatch(&format!("thread {t} round {round}"), &app.dtoh(p, WORDS), &want) {
                        mismatches.fetch_add(1, Ordering::SeqCst);
                    }
                }
                app.free(p);
            });
        }
    });
    let m = mismatches.load(Ordering::SeqCst);
    println!("procaddr-ptsz: 2 threads, {ROUNDS} rounds each, mismatches: {m}");
    m == 0
}

pub fn extra_params(app: &App, o: &Opts) -> bool {
    let cu = &app.cu;
    let words = 1000usize;
    let p = app.alloc(words * 4);
    let s = app.stream(0);
    // Filled on `s` right before each checked launch, so that under a memory limit the
    // launch must bring its buffers back (found through `extra` or the struct parameter).
    let ballast_words = o.bytes("ballast", 0) / 4;
    let ballast = (ballast_words > 0).then(|| app.alloc(ballast_words as usize * 4));
    let churn = |seed: u32| {
        if let Some(b) = ballast {
            app.fill(s, b, ballast_words, seed);
        }
    };
    let base: Vec<u32> = (0..words as u64).map(|i| hash(99, i)).collect();
    let mut expected = base.clone();
    app.htod(p, &base);
    let mut problems = Vec::new();
    let verify = |expected: &mut Vec<u32>, problems: &mut Vec<String>, what: &str, add: u32| {
        app.sync(s);
        expected.iter_mut().for_each(|w| *w = w.wrapping_add(add));
        if mismatch(what, &app.dtoh(p, words), expected) {
            problems.push(what.to_owned());
        }
    };

    // The parameter buffer is laid out at the offsets the driver reports.
    let info = |i: usize| {
        let (mut off, mut size) = (0, 0);
        // SAFETY: the driver writes to `off` and `size`, live locals.
        check(unsafe { (cu.func_get_param_info)(app.k.add, i, &mut off, &mut size) }, "cuFuncGetParamInfo");
        (off, size)
    };
    let layout = [info(0), info(1), info(2)];
    let mut buf_size = layout[2].0 + layout[2].1;
    let mut buf = vec![0u8; buf_size];
    let put = |buf: &mut [u8], i: usize, bytes: &[u8]| buf[layout[i].0..layout[i].0 + bytes.len()].copy_from_slice(bytes);
    put(&mut buf, 0, &p.to_le_bytes());
    put(&mut buf, 1, &(words as u64).to_le_bytes());
    put(&mut buf, 2, &3u32.to_le_bytes());
    let mut extra = [
        CU_LAUNCH_PARAM_BUFFER_POINTER as *mut c_void,
        buf.as_mut_ptr() as *mut c_void,
        CU_LAUNCH_PARAM_BUFFER_SIZE as *mut c_void,
        ptr(&mut buf_size),
        CU_LAUNCH_PARAM_END as *mut c_void,
    ];
    app.slow(s, p + words as u64 * 4 - 4, 50);
    expected[words - 1] = 1;
    churn(1);
    // SAFETY: `extra` is a well-formed array ending with `CU_LAUNCH_PARAM_END`: `buf`, laid out
    // at the offsets the driver reported, and its size in `buf_size`, both live through the
    // call, which copies them.
    let r = unsafe { (cu.launch_kernel)(app.k.add, 1, 1, 1, 1, 1, 1, 0, s, null_mut(), extra.as_mut_ptr()) };
    check(r, "cuLaunchKernel(extra)");
    // The driver copied the buffer at launch: changing it now must not matter.
    put(&mut buf, 2, &1000u32.to_le_bytes());
    verify(&mut expected, &mut problems, "cuLaunchKernel with extra", 3);

    let config = CUlaunchConfig {
        grid_dim_x: 2,
        grid_dim_y: 1,
        grid_dim_z: 1,
        block_dim_x: 64,
        block_dim_y: 1,
        block_dim_z: 1,
        shared_mem_bytes: 0,
        h_stream: s,
        attrs: null_mut(),
        num_attrs: 0,
    };
    let (mut q, mut n, mut v) = (p, words as u64, 11u32);
    let mut params = [ptr(&mut q), ptr(&mut n), ptr(&mut v)];
    churn(2);
    // SAFETY: `config` lives through the call; `params` holds a pointer to a live value for
    // each of `add`'s parameters (8, 8 and 4 bytes), which the launch copies.
    check(unsafe { (cu.launch_kernel_ex)(&config, app.k.add, params.as_mut_ptr(), null_mut()) }, "cuLaunchKernelEx");
    verify(&mut expected, &mut problems, "cuLaunchKernelEx with kernelParams", 11);

    put(&mut buf, 2, &5u32.to_le_bytes());
    churn(3);
    // SAFETY: `config` lives through the call; `extra` is as for the `cuLaunchKernel` above,
    // with `buf` and `buf_size` still live.
    check(unsafe { (cu.launch_kernel_ex)(&config, app.k.add, null_mut(), extra.as_mut_ptr()) }, "cuLaunchKernelEx(extra)");
    verify(&mut expected, &mut problems, "cuLaunchKernelEx with extra", 5);

    // mix, a CUkernel with a struct parameter, through extra at cuKernelGetParamInfo's offsets.
    let kinfo = |i: usize| {
        let (mut off, mut size) = (0, 0);
        // SAFETY: the driver writes to `off` and `size`, live locals.
        check(unsafe { (cu.kernel_get_param_info)(app.k.mix, i, &mut off, &mut size) }, "cuKernelGetParamInfo");
        (off, size)
    };
    let (m0, m1) = (kinfo(0), kinfo(1));
    if m0 != (0, 24) || m1 != (24, 4) {
        problems.push(format!("mix parameter layout {m0:?} {m1:?}"));
    }
    let other = app.alloc(words * 4);
    let ones = vec![1u32; words];
    app.htod(other, &ones);
    let mut mbuf = vec![0u8; m1.0 + m1.1];
    let mut msize = mbuf.len();
    mbuf[..8].copy_from_slice(&p.to_le_bytes());
    mbuf[8..16].copy_from_slice(&other.to_le_bytes());
    mbuf[16..24].copy_from_slice(&(words as u64).to_le_bytes());
    mbuf[m1.0..m1.0 + 4].copy_from_slice(&6u32.to_le_bytes());
    let mut mextra = [
        CU_LAUNCH_PARAM_BUFFER_POINTER as *mut c_void,
        mbuf.as_mut_ptr() as *mut c_void,
        CU_LAUNCH_PARAM_BUFFER_SIZE as *mut c_void,
        ptr(&mut msize),
        CU_LAUNCH_PARAM_END as *mut c_void,
    ];
    churn(4);
    // SAFETY: `mextra` is a well-formed array ending with `CU_LAUNCH_PARAM_END`: `mbuf`, laid
    // out at the offsets the driver reported, and its size in `msize`, both live through the
    // call, which copies them.
    let r = unsafe { (cu.launch_kernel)(app.k.mix as CUfunction, 1, 1, 1, 1, 1, 1, 0, s, null_mut(), mextra.as_mut_ptr()) };
    check(r, "cuLaunchKernel(mix, extra)");
    app.sync(s);
    let want: Vec<u32> = expected.iter().map(|w| w ^ 7).collect();
    if mismatch("mix through extra", &app.dtoh(p, words), &want) {
        problems.push("mix through extra".to_owned());
    }
    app.free(other);
    app.free(p);
    if let Some(b) = ballast {
        app.sync(s);
        app.free(b);
    }
    problems.iter().for_each(|m| eprintln!("standin_app: extra-params: {m}"));
    if problems.is_empty() {
        println!("extra-params: all 4 checks passed");
    }
    problems.is_empty()
}

/// One `add` over `--bytes` bytes: under a limit below them the launch cannot run and must
/// fail with CUDA_ERROR_OUT_OF_MEMORY (printed; anything else is a failure).
pub fn too_big(app: &App, o: &Opts) -> bool {
    let bytes = o.bytes("bytes", 64 << 20) / 4 * 4;
    let p = app.alloc(bytes as usize);
    let check = o.get("check").is_some();
    let model: Vec<u32> = (0..(bytes / 4) as u32).map(|j| j.wrapping_mul(7)).collect();
    if check {
        app.htod(p, &model);
    }
    let (mut q, mut n, mut v) = (p, bytes / 4, 1u32);
    let mut params = [ptr(&mut q), ptr(&mut n), ptr(&mut v)];
    // SAFETY: `params` holds a pointer to a live value for each of `add`'s parameters (8, 8 and
    // 4 bytes), which the launch copies. No `extra`.
    let r = unsafe { (app.cu.launch_kernel)(app.k.add, 1, 1, 1, 128, 1, 1, 0, null_mut(), params.as_mut_ptr(), null_mut()) };
    app.ctx_sync();
    println!("too-big: {bytes} bytes, launch result: {r}");
    let ok = match r {
        CUDA_ERROR_OUT_OF_MEMORY => true,
        CUDA_SUCCESS if !check => true,
        CUDA_SUCCESS => {
            let got = app.dtoh(p, model.len());
            let bad = (0..model.len()).find(|&j| got[j] != model[j].wrapping_add(1));
            if let Some(j) = bad {
                eprintln!("standin_app: too-big: word {j} is {} where {} was expected", got[j], model[j].wrapping_add(1));
            } else {
                println!("too-big: {} words checked", model.len());
            }
            bad.is_none()
        }
        _ => false,
    };
    app.free(p);
    ok
}

pub fn fault_unmapped(app: &App, o: &Opts) -> bool {
    let cu = &app.cu;
    let mode = o.get("mode").unwrap_or("launch");
    let s = app.stream(0);
    let reserve = |size: usize| {
        let mut va = 0;
        // SAFETY: the driver writes the reserved address to `va`, a live local.
        check(unsafe { (cu.mem_address_reserve)(&mut va, size, 0, 0, 0) }, "cuMemAddressReserve");
        va
    };
    match mode {
        "launch" => app.add(s, reserve(4 << 20), 1024, 1),
        "noaccess" => {
            let va = reserve(2 << 20);
            let mut h = 0;
            // SAFETY: `prop` is a temporary that lives through the call; the driver writes the
            // new handle to `h`, a live local.
            check(unsafe { (cu.mem_create)(&mut h, 2 << 20, &CUmemAllocationProp::device(0), 0) }, "cuMemCreate");
            // SAFETY: only values, no host memory: handles this program created, and device
            // addresses, which the driver checks.
            check(unsafe { (cu.mem_map)(va, 2 << 20, 0, h, 0) }, "cuMemMap");
            app.add(s, va, 1024, 1);
        }
        "copy" => app.htod(reserve(2 << 20), &[1, 2, 3, 4]),
        "stale" => {
            let p = app.alloc(1 << 20);
            app.free(p);
            app.dtoh(p, 4);
        }
        other => fail(format!("fault-unmapped: unknown --mode {other:?}")),
    }
    app.sync(s);
    println!("fault-unmapped: no fault detected (mode {mode})");
    false
}

/// `second-device`: memory on device 0 (the current context's), then a `cuMemAlloc`
/// with device 1's primary context current, and a `cuMemCreate` of device 1's memory.
/// Prints what each returned, and exits 0 either way (both succeed, natively and under
/// gmux). Needs the stand-in with two devices.
pub fn second_device(app: &App) -> bool {
    let cu = &app.cu;
    let first = app.alloc(2 << 20);
    let (mut dev, mut ctx) = (0, null_mut());
    // SAFETY: the driver writes the device to `dev`, a live local.
    check(unsafe { (cu.device_get)(&mut dev, 1) }, "cuDeviceGet(1)");
    // SAFETY: the driver writes the context to `ctx`, a live local.
    check(unsafe { (cu.primary_ctx_retain)(&mut ctx, dev) }, "cuDevicePrimaryCtxRetain(1)");
    // SAFETY: only the context this program retained, by value.
    check(unsafe { (cu.ctx_set_current)(ctx) }, "cuCtxSetCurrent(device 1)");
    let mut p = 0;
    // SAFETY: the driver writes the new address to `p`, a live local.
    let r = unsafe { (cu.mem_alloc)(&mut p, 2 << 20) };
    println!("second-device: cuMemAlloc on device 1 returned {r}");
    let mut h = 0;
    // SAFETY: the driver writes the handle to `h`, a live local; the properties live
    // through the call.
    let r = unsafe { (cu.mem_create)(&mut h, 2 << 20, &CUmemAllocationProp::device(1), 0) };
    println!("second-device: cuMemCreate on device 1 returned {r}");
    // SAFETY: only the context this program retained first, by value.
    check(unsafe { (cu.ctx_set_current)(app.ctx) }, "cuCtxSetCurrent(device 0)");
    app.free(first);
    true
}
