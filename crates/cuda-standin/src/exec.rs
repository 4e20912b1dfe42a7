//! Streams, events and the operation graph.
//!
//! Every enqueued operation gets a global sequence number and a list of operations it
//! must wait for. Each stream has a worker thread that runs its queue in order, starting
//! an operation once its dependencies are complete. Dependencies encode CUDA's rules:
//! an op on the legacy default stream waits for the last op of every blocking stream
//! (per-thread default streams included), an op on a blocking stream waits for the last
//! op of the legacy stream, and `cuStreamWaitEvent` waits for the op an event captured.
//! Since dependencies always point to earlier sequence numbers, the lowest incomplete op
//! can always run: the graph cannot deadlock.

use std::cell::Cell;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Condvar, LazyLock, Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

use cuda_abi::*;

/// Stream identifier; see [`LEGACY`].
pub type StreamId = u64;
/// The legacy default stream.
pub const LEGACY: StreamId = 0;

/// How a stream orders itself against the legacy default stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Legacy,
    Blocking,
    NonBlocking,
}

/// The work of one operation, run on the stream's thread.
pub type Work = Box<dyn FnOnce() + Send>;

struct Op {
    seq: u64,
    deps: Vec<u64>,
    work: Work,
}

struct Stream {
    kind: Kind,
    flags: u32,
    priority: i32,
    queue: VecDeque<Op>,
    last: Option<u64>,
    destroyed: bool,
}

struct Event {
    flags: u32,
    recorded: Option<u64>,
    done_at: Option<Instant>,
}

struct Graph {
    next_seq: u64,
    incomplete: BTreeSet<u64>,
    streams: HashMap<StreamId, Stream>,
    next_stream: StreamId,
    events: HashMap<u64, Event>,
    next_event: u64,
    /// Event-record ops: seq -> event id.
    markers: HashMap<u64, u64>,
}

impl Graph {
    fn done(&self, seq: u64) -> bool {
        seq < self.next_seq && !self.incomplete.contains(&seq)
    }

    fn add_stream(&mut self, kind: Kind, flags: u32, priority: i32) -> StreamId {
        let id = self.next_stream;
        self.next_stream += 1;
        let s = Stream { kind, flags, priority, queue: VecDeque::new(), last: None, destroyed: false };
        self.streams.insert(id, s);
        id
    }

    fn live_stream(&self, id: StreamId) -> Option<&Stream> {
        self.streams.get(&id).filter(|s| !s.destroyed)
    }
}

struct Exec {
    graph: Mutex<Graph>,
    cv: Condvar,
    max_delay_us: u64,
}

static EXEC: LazyLock<Exec> = LazyLock::new(|| {
    let mut graph = Graph {
        next_seq: 1,
        incomplete: BTreeSet::new(),
        streams: HashMap::new(),
        next_stream: LEGACY,
        events: HashMap::new(),
        next_event: 1,
        markers: HashMap::new(),
    };
    graph.add_stream(Kind::Legacy, 0, 0);
    let max_delay_us = std::env::var("GMUX_STANDIN_DELAY_US").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(0);
    Exec { graph: Mutex::new(graph), cv: Condvar::new(), max_delay_us }
});

static LEGACY_WORKER: Once = Once::new();

fn lock() -> MutexGuard<'static, Graph> {
    LEGACY_WORKER.call_once(|| spawn_worker(LEGACY));
    EXEC.graph.lock().unwrap_or_else(|e| e.into_inner())
}

fn wait_on(g: MutexGuard<'static, Graph>) -> MutexGuard<'static, Graph> {
    EXEC.cv.wait(g).unwrap_or_else(|e| e.into_inner())
}

fn spawn_worker(id: StreamId) {
    std::thread::Builder::new().name(format!("cuda-standin-stream-{id}")).spawn(move || worker(id)).unwrap_or_else(|e| {
        eprintln!("cuda-standin: cannot start a stream thread: {e}");
        std::process::abort()
    });
}

/// A deterministic pseudo-random delay for op `seq`, uniform in `0..=max` µs.
fn delay_for(seq: u64, max: u64) -> Duration {
    let mut x = seq.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    Duration::from_micros(x % (max + 1))
}

fn worker(id: StreamId) {
    let mut g = EXEC.graph.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let stream = &g.streams[&id];
        let ready = match stream.queue.front() {
            None if stream.destroyed => {
                g.streams.remove(&id);
                return;
            }
            None => false,
            Some(op) => op.deps.iter().all(|&d| g.done(d)),
        };
        if !ready {
            g = wait_on(g);
            continue;
        }
        let op = g.streams.get_mut(&id).unwrap().queue.pop_front().unwrap();
        drop(g);
        if EXEC.max_delay_us > 0 {
            std::thread::sleep(delay_for(op.seq, EXEC.max_delay_us));
        }
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(op.work)).is_err() {
            eprintln!("cuda-standin: an operation on stream {id} panicked");
            std::process::abort();
        }
        g = EXEC.graph.lock().unwrap_or_else(|e| e.into_inner());
        g.incomplete.remove(&op.seq);
        if let Some(ev) = g.markers.remove(&op.seq) {
            if let Some(e) = g.events.get_mut(&ev) {
                if e.recorded == Some(op.seq) {
                    e.done_at = Some(Instant::now());
                }
            }
        }
        EXEC.cv.notify_all();
    }
}

/// Creates a stream with its worker thread.
pub fn create_stream(flags: u32, priority: i32) -> StreamId {
    let kind = if flags & CU_STREAM_NON_BLOCKING != 0 { Kind::NonBlocking } else { Kind::Blocking };
    let id = lock().add_stream(kind, flags, priority);
    spawn_worker(id);
    id
}

/// Destroys a stream; work already queued still runs.
pub fn destroy_stream(id: StreamId) -> Result<(), CUresult> {
    let mut g = lock();
    match g.streams.get_mut(&id) {
        Some(s) if !s.destroyed && s.kind != Kind::Legacy => s.destroyed = true,
        _ => return Err(CUDA_ERROR_INVALID_HANDLE),
    }
    EXEC.cv.notify_all();
    Ok(())
}

/// Kind, creation flags and priority of a live stream.
pub fn stream_info(id: StreamId) -> Option<(Kind, u32, i32)> {
    lock().live_stream(id).map(|s| (s.kind, s.flags, s.priority))
}

/// Enqueues `work` on stream `id` after `deps` and CUDA's implicit ordering; returns its seq.
pub fn submit(id: StreamId, deps: Vec<u64>, work: Work) -> Result<u64, CUresult> {
    enqueue(&mut lock(), id, deps, work)
}

fn enqueue(g: &mut Graph, id: StreamId, mut deps: Vec<u64>, work: Work) -> Result<u64, CUresult> {
    let kind = g.live_stream(id).ok_or(CUDA_ERROR_INVALID_HANDLE)?.kind;
    match kind {
        Kind::Legacy => deps.extend(g.streams.values().filter(|s| s.kind == Kind::Blocking).filter_map(|s| s.last)),
        Kind::Blocking => deps.extend(g.streams[&LEGACY].last),
        Kind::NonBlocking => {}
    }
    deps.retain(|&d| !g.done(d));
    let seq = g.next_seq;
    g.next_seq += 1;
    g.incomplete.insert(seq);
    let s = g.streams.get_mut(&id).unwrap();
    s.queue.push_back(Op { seq, deps, work });
    s.last = Some(seq);
    EXEC.cv.notify_all();
    Ok(seq)
}

/// Blocks until op `seq` has completed.
pub fn wait(seq: u64) {
    let mut g = lock();
    while !g.done(seq) {
        g = wait_on(g);
    }
}

/// `cuStreamSynchronize`: waits for everything enqueued on `id` so far.
pub fn sync_stream(id: StreamId) -> Result<(), CUresult> {
    let last = lock().live_stream(id).ok_or(CUDA_ERROR_INVALID_HANDLE)?.last;
    if let Some(seq) = last {
        wait(seq);
    }
    Ok(())
}

/// `cuStreamQuery`: whether everything enqueued on `id` has completed.
pub fn query_stream(id: StreamId) -> Result<bool, CUresult> {
    let g = lock();
    let s = g.live_stream(id).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    Ok(s.last.is_none_or(|seq| g.done(seq)))
}

/// `cuCtxSynchronize`: waits for every op enqueued so far on any stream.
pub fn sync_all() {
    let mut g = lock();
    let upto = g.next_seq;
    while g.incomplete.first().is_some_and(|&s| s < upto) {
        g = wait_on(g);
    }
}

/// Creates an event.
pub fn create_event(flags: u32) -> u64 {
    let mut g = lock();
    let id = g.next_event;
    g.next_event += 1;
    g.events.insert(id, Event { flags, recorded: None, done_at: None });
    id
}

/// Destroys an event; a pending record still completes.
pub fn destroy_event(id: u64) -> Result<(), CUresult> {
    lock().events.remove(&id).map(|_| ()).ok_or(CUDA_ERROR_INVALID_HANDLE)
}

/// `cuEventRecord`: the event now stands for all work enqueued on `stream` so far.
pub fn record(event: u64, stream: StreamId) -> Result<(), CUresult> {
    let mut g = lock();
    if !g.events.contains_key(&event) {
        return Err(CUDA_ERROR_INVALID_HANDLE);
    }
    let seq = enqueue(&mut g, stream, Vec::new(), Box::new(|| {}))?;
    g.markers.insert(seq, event);
    let e = g.events.get_mut(&event).unwrap();
    e.recorded = Some(seq);
    e.done_at = None;
    Ok(())
}

/// The op an event's latest record captured, if any.
fn captured(event: u64) -> Result<Option<u64>, CUresult> {
    Ok(lock().events.get(&event).ok_or(CUDA_ERROR_INVALID_HANDLE)?.recorded)
}

/// `cuEventQuery`: an event never recorded counts as complete.
pub fn query_event(event: u64) -> Result<bool, CUresult> {
    let seq = captured(event)?;
    Ok(seq.is_none_or(|s| lock().done(s)))
}

/// `cuEventSynchronize`.
pub fn sync_event(event: u64) -> Result<(), CUresult> {
    if let Some(seq) = captured(event)? {
        wait(seq);
    }
    Ok(())
}

/// `cuStreamWaitEvent`: later ops on `stream` wait for the event's current capture.
pub fn wait_event(stream: StreamId, event: u64) -> Result<(), CUresult> {
    let mut g = lock();
    match g.events.get(&event).ok_or(CUDA_ERROR_INVALID_HANDLE)?.recorded {
        Some(seq) => enqueue(&mut g, stream, vec![seq], Box::new(|| {})).map(|_| ()),
        None => g.live_stream(stream).map(|_| ()).ok_or(CUDA_ERROR_INVALID_HANDLE),
    }
}

/// `cuEventElapsedTime`: host milliseconds between the completions of two records.
pub fn elapsed_ms(start: u64, end: u64) -> Result<f32, CUresult> {
    let g = lock();
    let (a, b) = match (g.events.get(&start), g.events.get(&end)) {
        (Some(a), Some(b)) => (a, b),
        _ => return Err(CUDA_ERROR_INVALID_HANDLE),
    };
    if a.flags & CU_EVENT_DISABLE_TIMING != 0 || b.flags & CU_EVENT_DISABLE_TIMING != 0 {
        return Err(CUDA_ERROR_INVALID_HANDLE);
    }
    if a.recorded.is_none() || b.recorded.is_none() {
        return Err(CUDA_ERROR_INVALID_HANDLE);
    }
    match (a.done_at, b.done_at) {
        (Some(ta), Some(tb)) => {
            let ms = |from: Instant, to: Instant| to.saturating_duration_since(from).as_secs_f64() * 1e3;
            Ok((ms(ta, tb) - ms(tb, ta)) as f32)
        }
        _ => Err(CUDA_ERROR_NOT_READY),
    }
}

struct PerThread(Cell<Option<StreamId>>);

impl Drop for PerThread {
    fn drop(&mut self) {
        if let Some(id) = self.0.get() {
            let _ = destroy_stream(id);
        }
    }
}

thread_local! {
    static PER_THREAD: PerThread = const { PerThread(Cell::new(None)) };
}

/// The calling thread's per-thread default stream (blocking), created on first use.
pub fn per_thread_stream() -> StreamId {
    PER_THREAD.with(|p| match p.0.get() {
        Some(id) => id,
        None => {
            let id = create_stream(0, 0);
            p.0.set(Some(id));
            id
        }
    })
}

#[cfg(test)]
mod tests {
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
}
