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
//!
//! Stream state, the workers and the stream calls are here; the event calls are in
//! [`event`].

use std::cell::Cell;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Condvar, LazyLock, Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

use cuda_abi::*;

mod event;

#[cfg(test)]
mod tests;

pub use event::{create_event, destroy_event, elapsed_ms, query_event, record, sync_event, wait_event};

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
/// It runs as an operation of the device current now: the device bytes it touches must
/// be mapped with access for that device.
pub fn submit(id: StreamId, deps: Vec<u64>, work: Work) -> Result<u64, CUresult> {
    let dev = crate::ctx::current_device().ok();
    let work: Work = Box::new(move || crate::memory::as_device(dev, work));
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
