//! Unit tests of streams and events: ordering within and across streams, the legacy
//! stream's implicit synchronization, per-thread streams and event timing.

use super::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

fn push(log: &Arc<Mutex<Vec<u32>>>, v: u32, sleep_ms: u64) -> Work {
    let log = log.clone();
    Box::new(move || {
        std::thread::sleep(Duration::from_millis(sleep_ms));
        log.lock().unwrap().push(v);
    })
}

#[test]
fn one_stream_runs_in_order_and_async() {
    let s = create_stream(0, 0);
    let log = Arc::new(Mutex::new(Vec::new()));
    submit(s, vec![], push(&log, 1, 30)).unwrap();
    for i in 2..10 {
        submit(s, vec![], push(&log, i, 0)).unwrap();
    }
    assert!(!query_stream(s).unwrap(), "ops run asynchronously");
    sync_stream(s).unwrap();
    assert!(query_stream(s).unwrap());
    assert_eq!(*log.lock().unwrap(), (1..10).collect::<Vec<_>>());
    destroy_stream(s).unwrap();
    assert_eq!(sync_stream(s), Err(CUDA_ERROR_INVALID_HANDLE));
}

#[test]
fn wait_event_orders_across_streams() {
    let (a, b) = (create_stream(CU_STREAM_NON_BLOCKING, 0), create_stream(CU_STREAM_NON_BLOCKING, 0));
    let e = create_event(0);
    assert!(query_event(e).unwrap(), "never recorded counts as complete");
    let log = Arc::new(Mutex::new(Vec::new()));
    submit(a, vec![], push(&log, 1, 80)).unwrap();
    record(e, a).unwrap();
    assert!(!query_event(e).unwrap());
    // Work enqueued on `a` after the record is not part of what `b` waits for.
    submit(a, vec![], push(&log, 3, 300)).unwrap();
    wait_event(b, e).unwrap();
    submit(b, vec![], push(&log, 2, 0)).unwrap();
    sync_stream(b).unwrap();
    assert!(query_event(e).unwrap());
    assert_eq!(*log.lock().unwrap(), vec![1, 2]);
    sync_stream(a).unwrap();
    assert_eq!(*log.lock().unwrap(), vec![1, 2, 3]);
}

#[test]
fn legacy_stream_syncs_with_blocking_streams_only() {
    let blocking = create_stream(0, 0);
    let nonblocking = create_stream(CU_STREAM_NON_BLOCKING, 0);
    let slow_done = Arc::new(AtomicBool::new(false));
    let flag = slow_done.clone();
    submit(
        nonblocking,
        vec![],
        Box::new(move || {
            std::thread::sleep(Duration::from_millis(400));
            flag.store(true, Ordering::SeqCst);
        }),
    )
    .unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    submit(blocking, vec![], push(&log, 1, 60)).unwrap();
    submit(LEGACY, vec![], push(&log, 2, 0)).unwrap();
    // A blocking-stream op enqueued after the legacy op waits for it.
    submit(blocking, vec![], push(&log, 3, 0)).unwrap();
    sync_stream(blocking).unwrap();
    assert_eq!(*log.lock().unwrap(), vec![1, 2, 3]);
    assert!(!slow_done.load(Ordering::SeqCst), "the legacy op did not wait for the non-blocking stream");
    sync_all();
    assert!(slow_done.load(Ordering::SeqCst), "cuCtxSynchronize waits for every stream");
}

#[test]
fn per_thread_streams_are_blocking_and_distinct() {
    let mine = per_thread_stream();
    assert_eq!(per_thread_stream(), mine);
    let other = std::thread::spawn(per_thread_stream).join().unwrap();
    assert_ne!(other, mine);
    assert_eq!(stream_info(mine).unwrap().0, Kind::Blocking);
    let log = Arc::new(Mutex::new(Vec::new()));
    submit(mine, vec![], push(&log, 1, 50)).unwrap();
    submit(LEGACY, vec![], push(&log, 2, 0)).unwrap();
    sync_stream(LEGACY).unwrap();
    assert_eq!(*log.lock().unwrap(), vec![1, 2]);
}

#[test]
fn elapsed_time_between_records() {
    let s = create_stream(0, 0);
    let (a, b) = (create_event(0), create_event(0));
    assert_eq!(elapsed_ms(a, b), Err(CUDA_ERROR_INVALID_HANDLE));
    record(a, s).unwrap();
    submit(s, vec![], Box::new(|| std::thread::sleep(Duration::from_millis(50)))).unwrap();
    record(b, s).unwrap();
    sync_event(b).unwrap();
    let ms = elapsed_ms(a, b).unwrap();
    assert!((45.0..1000.0).contains(&ms), "{ms}");
    assert!(elapsed_ms(b, a).unwrap() < 0.0);
    let untimed = create_event(CU_EVENT_DISABLE_TIMING);
    record(untimed, s).unwrap();
    sync_stream(s).unwrap();
    assert_eq!(elapsed_ms(a, untimed), Err(CUDA_ERROR_INVALID_HANDLE));
}

#[test]
fn delays_are_deterministic_and_bounded() {
    for seq in 0..1000 {
        assert_eq!(delay_for(seq, 50), delay_for(seq, 50));
        assert!(delay_for(seq, 50) <= Duration::from_micros(50));
    }
}
