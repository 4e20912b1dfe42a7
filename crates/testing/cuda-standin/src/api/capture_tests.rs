//! Stream capture through the exports. Tests here capture only non-blocking streams in
//! thread-local mode, so they cannot disturb tests running beside them; the rules about
//! global captures and the legacy stream run in a process of their own ([`solo`]).

use std::ffi::c_void;
use std::ptr::null_mut;

use cuda_abi::*;

use super::capture::*;
use super::context::cuCtxSynchronize;
use super::copy::*;
use super::graph::*;
use super::graph_exec::*;
use super::graph_tests::{instantiate, launch_and_wait, nodes, read_u32s, scale_fn, stream, types, ScaleArgs};
use super::launch::*;
use super::memory::*;
use super::stream::*;
use super::tests::{alloc, setup};

const LOCAL: u32 = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;

unsafe fn status(s: CUstream) -> u32 {
    let mut st = 99;
    assert_eq!(cuStreamIsCapturing(s, &mut st), CUDA_SUCCESS);
    st
}

/// A new event.
pub(super) unsafe fn event() -> CUevent {
    let mut e = null_mut();
    assert_eq!(cuEventCreate(&mut e, 0), CUDA_SUCCESS);
    e
}

/// Launches `scale` with `args` on `s`.
pub(super) unsafe fn launch(args: &mut ScaleArgs, s: CUstream) -> CUresult {
    cuLaunchKernel(scale_fn(), 1, 1, 1, 32, 1, 1, 0, s, args.params(), null_mut())
}

/// Ends the capture of `s`, expecting `want`; returns the graph (null unless success).
unsafe fn end(s: CUstream, want: CUresult) -> CUgraph {
    let mut g = 1 as CUgraph;
    assert_eq!(cuStreamEndCapture(s, &mut g), want);
    assert_eq!(g.is_null(), want != CUDA_SUCCESS);
    g
}

/// Sets the calling thread's capture mode; returns the previous one.
pub(super) unsafe fn set_mode(mode: u32) -> u32 {
    let mut m = mode;
    assert_eq!(cuThreadExchangeStreamCaptureMode(&mut m), CUDA_SUCCESS);
    m
}

#[test]
fn captured_work_runs_only_when_launched() {
    setup();
    // SAFETY: out-pointers are `&mut` to live locals of the types written. `src` (1024
    // bytes) and `out` (2048 bytes) are exactly the host sides of the captured copies and
    // outlive both graph launches, each waited for. `a` and `b` are boxed `ScaleArgs`
    // whose parameter pointers address their own u64/u32/u32 fields, copied at capture.
    // `*deps` is read right after the call reported one dependency, before the capture
    // changes it.
    unsafe {
        let (d, s) = (alloc(4096), stream());
        let src: Vec<u32> = (0..256).collect();
        let mut out = vec![0u32; 512];
        let (mut a, mut b) = (ScaleArgs::new(d, 5, 256), ScaleArgs::new(d + 1024, 2, 256));
        assert_eq!(cuStreamBeginCapture_v2(s, LOCAL), CUDA_SUCCESS);
        assert_eq!(status(s), CU_STREAM_CAPTURE_STATUS_ACTIVE);
        assert_eq!(cuMemsetD32Async(d, 3, 256, s), CUDA_SUCCESS);
        assert_eq!(launch(&mut a, s), CUDA_SUCCESS);
        a.factor = 1000;
        assert_eq!(cuMemcpyHtoDAsync_v2(d + 1024, src.as_ptr() as *const c_void, 1024, s), CUDA_SUCCESS);
        assert_eq!(launch(&mut b, s), CUDA_SUCCESS);
        assert_eq!(cuMemcpyDtoHAsync_v2(out.as_mut_ptr() as *mut c_void, d, 2048, s), CUDA_SUCCESS);
        let (mut st, mut id, mut g, mut deps, mut ndeps) = (0, 0, null_mut(), std::ptr::null(), 0);
        assert_eq!(cuStreamGetCaptureInfo_v2(s, &mut st, &mut id, &mut g, &mut deps, &mut ndeps), CUDA_SUCCESS);
        assert_eq!((st, ndeps), (CU_STREAM_CAPTURE_STATUS_ACTIVE, 1));
        assert_eq!(*deps, nodes(g)[4], "the next node depends on the last one captured");
        assert_eq!(end(s, CUDA_SUCCESS), g);
        assert_eq!(status(s), CU_STREAM_CAPTURE_STATUS_NONE);
        assert_eq!(cuStreamSynchronize(s), CUDA_SUCCESS);
        assert!(out.iter().all(|&v| v == 0) && read_u32s(d, 1024).iter().all(|&v| v == 0), "nothing ran");
        let kinds = [CU_GRAPH_NODE_TYPE_MEMSET, CU_GRAPH_NODE_TYPE_KERNEL, CU_GRAPH_NODE_TYPE_MEMCPY];
        assert_eq!(types(g), [kinds[0], kinds[1], kinds[2], kinds[1], kinds[2]]);

        let e = instantiate(g);
        launch_and_wait(e, s);
        let want: Vec<u32> = [15; 256].into_iter().chain(src.iter().map(|v| v * 2)).collect();
        assert_eq!(out, want, "the kernel used the factor at capture time ({} came later)", a.factor);
        out.fill(0);
        launch_and_wait(e, s);
        assert_eq!(out, want, "a second launch repeats the work");
    }
}

#[test]
fn fork_join_and_unjoined_forks() {
    setup();
    // SAFETY: out-pointers are `&mut` to live locals of the types written, or null where
    // the call allows it; `deps` is written, never read. `x2` and `x3` are boxed
    // `ScaleArgs` whose parameter pointers address their own u64/u32/u32 fields. The only
    // host copy is `read_u32s`, into its own vector; every handle passed was made here.
    unsafe {
        let (d, s, side) = (alloc(64), stream(), stream());
        let (fork, join) = (event(), event());
        let (mut x2, mut x3) = (ScaleArgs::new(d, 2, 4), ScaleArgs::new(d + 16, 3, 4));
        assert_eq!(cuStreamBeginCapture_v2(s, LOCAL), CUDA_SUCCESS);
        assert_eq!(cuMemsetD32Async(d, 1, 8, s), CUDA_SUCCESS);
        assert_eq!(cuEventRecord(fork, s), CUDA_SUCCESS);
        assert_eq!(cuEventQuery(fork), CUDA_ERROR_CAPTURED_EVENT);
        assert_eq!(status(s), CU_STREAM_CAPTURE_STATUS_INVALIDATED, "querying a captured event is invalid");
        end(s, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

        assert_eq!(cuStreamBeginCapture_v2(s, LOCAL), CUDA_SUCCESS);
        assert_eq!(cuMemsetD32Async(d, 1, 8, s), CUDA_SUCCESS);
        assert_eq!(cuEventRecord(fork, s), CUDA_SUCCESS);
        assert_eq!(cuStreamWaitEvent(side, fork, 0), CUDA_SUCCESS);
        assert_eq!(status(side), CU_STREAM_CAPTURE_STATUS_ACTIVE, "waiting on a captured event forks");
        assert_eq!(launch(&mut x3, side), CUDA_SUCCESS);
        assert_eq!(launch(&mut x2, s), CUDA_SUCCESS);
        let mut g = null_mut();
        assert_eq!(cuStreamEndCapture(side, &mut g), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
        end(s, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        assert_eq!(status(side), CU_STREAM_CAPTURE_STATUS_NONE, "ending a capture releases its forks");

        assert_eq!(cuStreamBeginCapture_v2(s, LOCAL), CUDA_SUCCESS);
        assert_eq!(cuMemsetD32Async(d, 1, 8, s), CUDA_SUCCESS);
        assert_eq!(cuEventRecord(fork, s), CUDA_SUCCESS);
        assert_eq!(cuStreamWaitEvent(side, fork, 0), CUDA_SUCCESS);
        assert_eq!(launch(&mut x3, side), CUDA_SUCCESS);
        assert_eq!(launch(&mut x2, s), CUDA_SUCCESS);
        end(s, CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
        assert_eq!(status(side), CU_STREAM_CAPTURE_STATUS_NONE);

        assert_eq!(cuStreamBeginCapture_v2(s, LOCAL), CUDA_SUCCESS);
        assert_eq!(cuMemsetD32Async(d, 1, 8, s), CUDA_SUCCESS);
        assert_eq!(cuEventRecord(fork, s), CUDA_SUCCESS);
        assert_eq!(cuStreamWaitEvent(side, fork, 0), CUDA_SUCCESS);
        assert_eq!(launch(&mut x3, side), CUDA_SUCCESS);
        assert_eq!(cuEventRecord(join, side), CUDA_SUCCESS);
        assert_eq!(launch(&mut x2, s), CUDA_SUCCESS);
        assert_eq!(cuStreamWaitEvent(s, join, 0), CUDA_SUCCESS);
        let (mut st, mut ndeps) = (0, 0);
        let mut deps = std::ptr::null();
        assert_eq!(cuStreamGetCaptureInfo_v2(s, &mut st, null_mut(), null_mut(), &mut deps, &mut ndeps), CUDA_SUCCESS);
        assert_eq!(ndeps, 2, "after the join the origin depends on both branches");
        let g = end(s, CUDA_SUCCESS);
        assert_eq!(types(g), [CU_GRAPH_NODE_TYPE_MEMSET, CU_GRAPH_NODE_TYPE_KERNEL, CU_GRAPH_NODE_TYPE_KERNEL]);
        launch_and_wait(instantiate(g), s);
        assert_eq!(read_u32s(d, 8), [2, 2, 2, 2, 3, 3, 3, 3]);
    }
}

#[test]
fn waits_across_the_capture_boundary() {
    setup();
    // SAFETY: every handle passed was made here, and `args` is a boxed `ScaleArgs` whose
    // parameter pointers address its own u64/u32/u32 fields; no other pointer is passed.
    unsafe {
        let (s, other) = (stream(), stream());
        let (outside, inside) = (event(), event());
        let mut args = ScaleArgs::new(alloc(16), 1, 4);
        assert_eq!(cuEventRecord(outside, other), CUDA_SUCCESS);
        assert_eq!(cuStreamBeginCapture_v2(s, LOCAL), CUDA_SUCCESS);
        assert_eq!(cuStreamWaitEvent(s, outside, 0), CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
        assert_eq!(status(s), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
        assert_eq!(launch(&mut args, s), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        end(s, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

        assert_eq!(cuStreamBeginCapture_v2(s, LOCAL), CUDA_SUCCESS);
        assert_eq!(cuStreamWaitEvent(s, outside, CU_EVENT_WAIT_EXTERNAL), CUDA_SUCCESS);
        assert_eq!(cuEventRecordWithFlags(outside, s, CU_EVENT_RECORD_EXTERNAL), CUDA_SUCCESS);
        let g = end(s, CUDA_SUCCESS);
        assert_eq!(types(g), [CU_GRAPH_NODE_TYPE_WAIT_EVENT, CU_GRAPH_NODE_TYPE_EVENT_RECORD]);

        // Two captures cannot merge.
        assert_eq!(cuStreamBeginCapture_v2(s, LOCAL), CUDA_SUCCESS);
        assert_eq!(cuStreamBeginCapture_v2(other, LOCAL), CUDA_SUCCESS);
        assert_eq!(cuEventRecord(inside, other), CUDA_SUCCESS);
        assert_eq!(cuStreamWaitEvent(s, inside, 0), CUDA_ERROR_STREAM_CAPTURE_MERGE);
        end(s, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        end(other, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        assert_eq!(cuStreamWaitEvent(s, inside, 0), CUDA_ERROR_CAPTURED_EVENT, "its capture is over");
        assert_eq!(cuEventRecord(inside, other), CUDA_SUCCESS);
        assert_eq!(cuStreamWaitEvent(s, inside, 0), CUDA_SUCCESS, "recorded again, outside capture");
        assert_eq!(cuEventSynchronize(inside), CUDA_SUCCESS);
    }
}

#[test]
fn capture_state_errors() {
    setup();
    // SAFETY: out-pointers are `&mut` to live locals of the types written (`g`, `inner`);
    // the host function and callback ignore their null data. The other thread gets the
    // stream handle by value, and every handle passed was made here.
    unsafe {
        let s = stream();
        assert_eq!(cuStreamBeginCapture_v2(null_mut(), LOCAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "legacy stream");
        assert_eq!(cuStreamBeginCapture_v2(s, 7), CUDA_ERROR_INVALID_VALUE);
        end(s, CUDA_ERROR_ILLEGAL_STATE);
        assert_eq!(cuStreamBeginCapture_v2(s, LOCAL), CUDA_SUCCESS);
        assert_eq!(cuStreamBeginCapture_v2(s, LOCAL), CUDA_ERROR_ILLEGAL_STATE);
        let s_addr = s as usize;
        let other_thread = std::thread::spawn(move || {
            setup();
            let mut g = null_mut();
            cuStreamEndCapture(s_addr as CUstream, &mut g)
        });
        assert_eq!(other_thread.join().unwrap(), CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
        end(s, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

        // Callbacks cannot be captured; host functions can.
        unsafe extern "C" fn cb(_: CUstream, _: CUresult, _: *mut c_void) {}
        unsafe extern "C" fn host(_: *mut c_void) {}
        assert_eq!(cuStreamBeginCapture_v2(s, LOCAL), CUDA_SUCCESS);
        assert_eq!(cuLaunchHostFunc(s, Some(host), null_mut()), CUDA_SUCCESS);
        let g = end(s, CUDA_SUCCESS);
        assert_eq!(types(g), [CU_GRAPH_NODE_TYPE_HOST]);
        assert_eq!(cuStreamBeginCapture_v2(s, LOCAL), CUDA_SUCCESS);
        assert_eq!(cuStreamAddCallback(s, Some(cb), null_mut(), 0), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        end(s, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

        // A graph launched into a capture becomes a child graph node.
        let e = instantiate(g);
        assert_eq!(cuStreamBeginCapture_v2(s, LOCAL), CUDA_SUCCESS);
        assert_eq!(cuGraphLaunch(e, s), CUDA_SUCCESS);
        let outer = end(s, CUDA_SUCCESS);
        assert_eq!(types(outer), [CU_GRAPH_NODE_TYPE_GRAPH]);
        let mut inner = null_mut();
        assert_eq!(cuGraphChildGraphNodeGetGraph(nodes(outer)[0], &mut inner), CUDA_SUCCESS);
        assert_eq!(types(inner), [CU_GRAPH_NODE_TYPE_HOST]);
    }
}

#[test]
fn unsafe_calls_in_a_thread_local_capture() {
    setup();
    // SAFETY: out-pointers are `&mut` to live locals or temporaries that outlive their call
    // (`p`, `&mut 0`, `&mut null_mut()`). `d` is freed once at the end: the captured
    // `cuMemFree` is refused, as asserted. Every handle passed was made here.
    unsafe {
        let (s, d) = (stream(), alloc(64));
        assert_eq!(cuStreamBeginCapture_v2(s, LOCAL), CUDA_SUCCESS);
        let elsewhere = std::thread::spawn(|| {
            setup();
            let mut p = 0;
            [cuMemAlloc_v2(&mut p, 64), cuMemFree_v2(p)]
        });
        assert_eq!(elsewhere.join().unwrap(), [CUDA_SUCCESS; 2], "another thread ignores a thread-local capture");
        let old = set_mode(CU_STREAM_CAPTURE_MODE_RELAXED);
        assert_eq!(old, CU_STREAM_CAPTURE_MODE_GLOBAL);
        let mut p = 0;
        assert_eq!(cuMemAlloc_v2(&mut p, 64), CUDA_SUCCESS, "relaxed mode allows it");
        assert_eq!(cuMemFree_v2(p), CUDA_SUCCESS);
        assert_eq!(status(s), CU_STREAM_CAPTURE_STATUS_ACTIVE);
        assert_eq!(cuStreamQuery(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "even relaxed, not the capturing stream");
        end(s, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        set_mode(old);

        let checks: [(&str, &dyn Fn() -> CUresult); 6] = [
            ("cuMemAlloc", &|| cuMemAlloc_v2(&mut 0, 64)),
            ("cuMemFree", &|| cuMemFree_v2(d)),
            ("cuMemHostAlloc", &|| cuMemHostAlloc(&mut null_mut(), 64, 0)),
            ("cuMemsetD32", &|| cuMemsetD32_v2(d, 9, 4)),
            ("cuStreamSynchronize", &|| cuStreamSynchronize(s)),
            ("cuEventQuery", &|| cuEventQuery(event())),
        ];
        for (name, call) in checks {
            assert_eq!(cuStreamBeginCapture_v2(s, LOCAL), CUDA_SUCCESS);
            assert_eq!(call(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "{name}");
            end(s, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        }
        assert_eq!(read_u32s(d, 1), [0], "the refused memset did not run");
        assert_eq!(cuMemFree_v2(d), CUDA_SUCCESS, "allowed again after the capture");
    }
}

/// Rules that reach beyond the capturing thread, run alone in a child process.
#[test]
fn global_capture_rules_in_a_child_process() {
    let exe = std::env::current_exe().unwrap();
    let args = ["api::capture_tests::solo::global_capture_rules", "--exact", "--ignored", "--test-threads=1"];
    let out = std::process::Command::new(exe).args(args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && text.contains("1 passed"), "{text}");
}

mod solo {
    use super::*;

    #[test]
    #[ignore = "run in a process of its own by global_capture_rules_in_a_child_process"]
    fn global_capture_rules() {
        setup();
        // SAFETY: out-pointers are `&mut` to live locals of the types written (`p`,
        // `blocking`, `st`); the memsets write only device memory, and `read_u32s` copies
        // into its own vector. Threads get handles by value, all of them made here.
        unsafe {
            let (s, d) = (stream(), alloc(64));
            let on_thread = |relaxed: bool| {
                std::thread::spawn(move || {
                    setup();
                    if relaxed {
                        set_mode(CU_STREAM_CAPTURE_MODE_RELAXED);
                    }
                    let mut p = 0;
                    let alloc = cuMemAlloc_v2(&mut p, 64);
                    [alloc, cuMemFree_v2(p), cuMemsetD32_v2(d, 7, 1), cuEventQuery(event())]
                })
                .join()
                .unwrap()
            };
            assert_eq!(cuStreamBeginCapture(s), CUDA_SUCCESS, "global mode");
            let relaxed = on_thread(true);
            assert_eq!(relaxed, [CUDA_SUCCESS; 4], "a relaxed thread may make unsafe calls");
            assert_eq!(status(s), CU_STREAM_CAPTURE_STATUS_ACTIVE);
            let strict = on_thread(false);
            assert_eq!(strict[0], CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "another global-mode thread may not");
            end(s, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
            assert_eq!(read_u32s(d, 1), [7]);

            // The context encompasses every capture.
            let old = set_mode(CU_STREAM_CAPTURE_MODE_RELAXED);
            assert_eq!(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
            assert_eq!(cuMemsetD32Async(d, 1, 1, null_mut()), CUDA_SUCCESS, "a non-blocking capture leaves the legacy stream alone");
            assert_eq!(cuCtxSynchronize(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
            end(s, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

            // The legacy stream synchronizes with blocking streams, so it cannot be used
            // while one captures.
            let mut blocking = null_mut();
            assert_eq!(cuStreamCreate(&mut blocking, 0), CUDA_SUCCESS);
            assert_eq!(cuStreamBeginCapture_v2(blocking, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
            let mut st = 0;
            assert_eq!(cuStreamIsCapturing(null_mut(), &mut st), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
            assert_eq!(status(blocking), CU_STREAM_CAPTURE_STATUS_ACTIVE, "asking is no error for the capture");
            assert_eq!(cuMemsetD32Async(d, 2, 1, null_mut()), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
            assert_eq!(status(blocking), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
            end(blocking, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
            assert_eq!(cuStreamBeginCapture_v2(blocking, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
            assert_eq!(cuMemsetD32_v2(d, 3, 1), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "synchronous copies use the legacy stream");
            end(blocking, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
            set_mode(old);
            assert_eq!(read_u32s(d, 1), [1]);
        }
    }
}
