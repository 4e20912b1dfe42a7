//! `sync`: the driver's ordering and completion semantics, most checked around `slow`,
//! a kernel that sleeps: stream and event queries while it runs, `cuStreamWaitEvent` between
//! streams, the legacy default stream, `cuCtxSynchronize`, host functions and callbacks in
//! stream order, elapsed time between events, synchronizing an idle stream, and
//! `cuMemcpyDtoHAsync` to pageable memory. Prints `sync: all N checks passed`, or the first
//! check that failed.

use std::sync::atomic::Ordering;
use std::sync::Mutex;

use super::*;

static HOST_LOG: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());

unsafe extern "C" fn log_host_func(tag: *mut c_void) {
    HOST_LOG.lock().unwrap().push((tag as u64, KERNELS_DONE.load(Ordering::SeqCst)));
}

unsafe extern "C" fn log_callback(_s: CUstream, status: CUresult, tag: *mut c_void) {
    if status == CUDA_SUCCESS {
        // SAFETY: `log_host_func` uses its argument as a tag, never as a pointer.
        unsafe { log_host_func(tag) };
    }
}

fn expect(ok: bool, what: &str) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(what.to_owned())
    }
}

pub fn checks(app: &App) -> bool {
    let cu = &app.cu;
    let p = app.alloc(4096);
    let word = |p: u64| app.dtoh(p, 1)[0];
    // SAFETY: only values: a device address, which the driver checks, and the word to set.
    let zero = |p: u64| check(unsafe { (cu.memset_d32)(p, 0, 1) }, "cuMemsetD32");
    let (s, s1, s2) = (app.stream(0), app.stream(0), app.stream(CU_STREAM_NON_BLOCKING));
    let e = app.event();
    type Check<'a> = (&'a str, Box<dyn Fn() -> Result<(), String> + 'a>);
    let checks: Vec<Check> = vec![
        (
            "stream query",
            Box::new(|| {
                zero(p);
                app.slow(s, p, 200);
                // SAFETY: only a handle this program created, by value; no host memory.
                expect(unsafe { (cu.stream_query)(s) } == CUDA_ERROR_NOT_READY, "cuStreamQuery during a 200 ms kernel is not NOT_READY")?;
                app.sync(s);
                // SAFETY: only a handle this program created, by value; no host memory.
                expect(unsafe { (cu.stream_query)(s) } == CUDA_SUCCESS, "cuStreamQuery after cuStreamSynchronize is not SUCCESS")?;
                expect(word(p) == 1, "the kernel's write is missing after cuStreamSynchronize")
            }),
        ),
        (
            "event query",
            Box::new(|| {
                zero(p);
                app.slow(s, p, 200);
                app.record(e, s);
                // SAFETY: only a handle this program created, by value; no host memory.
                expect(unsafe { (cu.event_query)(e) } == CUDA_ERROR_NOT_READY, "cuEventQuery during a 200 ms kernel is not NOT_READY")?;
                // SAFETY: only a handle this program created, by value; no host memory.
                check(unsafe { (cu.event_synchronize)(e) }, "cuEventSynchronize");
                // SAFETY: only a handle this program created, by value; no host memory.
                expect(unsafe { (cu.event_query)(e) } == CUDA_SUCCESS, "cuEventQuery after cuEventSynchronize is not SUCCESS")?;
                expect(word(p) == 1, "the kernel's write is missing after cuEventSynchronize")
            }),
        ),
        (
            "stream wait event",
            Box::new(|| {
                zero(p);
                app.slow(s1, p, 150);
                app.record(e, s1);
                app.wait_event(s2, e);
                app.add(s2, p, 1, 5);
                app.sync(s2);
                expect(word(p) == 6, "add on s2 did not see slow's write on s1 (cuStreamWaitEvent)")
            }),
        ),
        (
            "legacy stream",
            Box::new(|| {
                zero(p);
                app.slow(s1, p, 150);
                expect(word(p) == 1, "a legacy-stream cuMemcpyDtoH did not wait for the blocking stream")
            }),
        ),
        (
            "context synchronize",
            Box::new(|| {
                let ps: Vec<u64> = (0..3).map(|k| p + 4 * (k + 1)).collect();
                ps.iter().for_each(|&q| zero(q));
                for (k, st) in [s, s1, s2].into_iter().enumerate() {
                    app.slow(st, ps[k], 100 + 20 * k as u32);
                }
                app.ctx_sync();
                for st in [s, s1, s2] {
                    // SAFETY: only a handle this program created, by value; no host memory.
                    expect(unsafe { (cu.stream_query)(st) } == CUDA_SUCCESS, "a stream is busy after cuCtxSynchronize")?;
                }
                expect(ps.iter().all(|&q| word(q) == 1), "a kernel's write is missing after cuCtxSynchronize")
            }),
        ),
        (
            "host functions in order",
            Box::new(|| {
                zero(p);
                HOST_LOG.lock().unwrap().clear();
                let base = KERNELS_DONE.load(Ordering::SeqCst);
                app.slow(s, p, 100);
                // SAFETY: `log_host_func` uses its argument as a tag, never as a pointer.
                check(unsafe { (cu.launch_host_func)(s, Some(log_host_func), std::ptr::without_provenance_mut(1)) }, "cuLaunchHostFunc");
                app.add(s, p, 1, 1);
                // SAFETY: `log_callback` uses its last argument as a tag, never as a pointer.
                check(unsafe { (cu.stream_add_callback)(s, Some(log_callback), std::ptr::without_provenance_mut(2), 0) }, "cuStreamAddCallback");
                app.sync(s);
                let log = HOST_LOG.lock().unwrap().clone();
                expect(log == [(1, base + 1), (2, base + 2)], &format!("host functions ran as {log:?}, kernels done before: {base}"))?;
                expect(word(p) == 2, "slow then add did not leave 2")
            }),
        ),
        (
            "elapsed time",
            Box::new(|| {
                let e2 = app.event();
                app.record(e, s);
                app.slow(s, p, 100);
                app.record(e2, s);
                // SAFETY: only a handle this program created, by value; no host memory.
                check(unsafe { (cu.event_synchronize)(e2) }, "cuEventSynchronize");
                let mut ms = 0f32;
                // SAFETY: the driver writes the time to `ms`, a live local.
                check(unsafe { (cu.event_elapsed_time)(&mut ms, e, e2) }, "cuEventElapsedTime");
                // SAFETY: only a handle this program created, by value; no host memory.
                check(unsafe { (cu.event_destroy)(e2) }, "cuEventDestroy");
                expect(ms >= 90.0, &format!("elapsed time around a 100 ms kernel is {ms} ms"))
            }),
        ),
        (
            "synchronize a stream with no work",
            Box::new(|| {
                let idle = app.stream(CU_STREAM_NON_BLOCKING);
                // SAFETY: only handles, by value, that this program created (or null, the default
                // stream); no host memory.
                expect(unsafe { (cu.stream_synchronize)(idle) } == CUDA_SUCCESS, "cuStreamSynchronize of a stream that never ran anything failed")
            }),
        ),
        (
            "pageable async read-back",
            Box::new(|| {
                zero(p);
                app.slow(s, p, 150);
                let mut v = 0u32;
                // SAFETY: `v` holds the 4 bytes the driver writes, and with a pageable destination
                // the call returns once the copy is done.
                let r = unsafe { (cu.memcpy_dtoh_async)(ptr(&mut v), p, 4, s) };
                check(r, "cuMemcpyDtoHAsync");
                expect(v == 1, "cuMemcpyDtoHAsync to pageable memory returned before the copy")
            }),
        ),
    ];
    let n = checks.len();
    for (name, f) in checks {
        if let Err(msg) = f() {
            eprintln!("standin_app: sync check '{name}' failed: {msg}");
            return false;
        }
    }
    println!("sync: all {n} checks passed");
    true
}
