//! Stream capture: which streams record into which graph instead of running, the
//! per-thread capture mode, and the driver's rules for what a capture refuses.
//!
//! A capture begins on one (origin) stream; a stream that waits on an event recorded in
//! the capture joins it (fork). Each member stream has a set of graph nodes the next
//! node it captures depends on. An event recorded in a capture stands for its stream's
//! set at that time. A call the capture cannot honour fails and invalidates the capture;
//! `cuStreamEndCapture` then returns `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`.
//!
//! The rules, from the CUDA programming guide and `cuda.h`:
//! - "Potentially unsafe" calls (allocation, freeing, synchronous copies, querying or
//!   synchronizing events and streams) fail with `..._UNSUPPORTED` when the calling
//!   thread's mode is not relaxed and either the thread began a non-relaxed capture or
//!   (thread mode global) any thread began a global one.
//! - Synchronizing or querying a capturing stream, or the context while any capture is
//!   open, always fails with `..._UNSUPPORTED`.
//! - Using the legacy stream while a blocking stream captures fails with `..._IMPLICIT`.
//! - Waiting, from a capturing stream, on an event not recorded in a capture fails with
//!   `..._ISOLATION` (unless the wait is external), on one recorded in another capture
//!   with `..._MERGE`. Querying, synchronizing or waiting (outside capture) on an event
//!   last recorded in a capture fails with `CUDA_ERROR_CAPTURED_EVENT`.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};
use std::thread::ThreadId;

use cuda_abi::*;

use crate::exec::{self, Kind, StreamId, LEGACY};
use crate::graph::{self, GraphId, NodeId, Op};

struct Capture {
    graph: GraphId,
    mode: u32,
    thread: ThreadId,
    origin: StreamId,
    invalidated: bool,
}

struct Member {
    capture: u64,
    blocking: bool,
    /// The nodes the stream's next captured node depends on.
    deps: Vec<NodeId>,
    /// All-zero edge data parallel to `deps`, for `cuStreamGetCaptureInfo_v3`.
    edges: Vec<CUgraphEdgeData>,
}

/// An event last recorded in a capture: the capture and the nodes it stands for.
struct CapturedEvent {
    capture: u64,
    nodes: Vec<NodeId>,
}

#[derive(Default)]
struct State {
    next: u64,
    captures: HashMap<u64, Capture>,
    members: HashMap<StreamId, Member>,
    events: HashMap<u64, CapturedEvent>,
}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(Default::default);
/// Captures begun and not ended: with none, every check is one atomic load.
static OPEN: AtomicUsize = AtomicUsize::new(0);
/// Entries of `State::events`.
static EVENTS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static MODE: Cell<u32> = const { Cell::new(CU_STREAM_CAPTURE_MODE_GLOBAL) };
}

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

fn me() -> ThreadId {
    std::thread::current().id()
}

type Res<T> = Result<T, CUresult>;

impl State {
    fn invalidate(&mut self, ids: impl IntoIterator<Item = u64>) {
        for id in ids {
            if let Some(c) = self.captures.get_mut(&id) {
                c.invalidated = true;
            }
        }
    }

    /// Refuses a potentially unsafe call of the calling thread, invalidating the captures
    /// that forbid it.
    fn check_unsafe(&mut self) -> Res<()> {
        let mode = MODE.get();
        if mode == CU_STREAM_CAPTURE_MODE_RELAXED {
            return Ok(());
        }
        let me = me();
        let forbid = |c: &Capture| {
            (c.thread == me && c.mode != CU_STREAM_CAPTURE_MODE_RELAXED) || (mode == CU_STREAM_CAPTURE_MODE_GLOBAL && c.mode == CU_STREAM_CAPTURE_MODE_GLOBAL)
        };
        let hit: Vec<u64> = self.captures.iter().filter(|(_, c)| forbid(c)).map(|(&id, _)| id).collect();
        if hit.is_empty() {
            return Ok(());
        }
        self.invalidate(hit);
        Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
    }

    /// Refuses use of the legacy stream while a blocking stream captures.
    fn check_implicit(&mut self, stream: StreamId) -> Res<()> {
        if stream != LEGACY {
            return Ok(());
        }
        let hit: Vec<u64> = self.members.values().filter(|m| m.blocking).map(|m| m.capture).collect();
        if hit.is_empty() {
            return Ok(());
        }
        self.invalidate(hit);
        Err(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)
    }

    /// The capture `stream` records into, if any; an invalidated one is an error.
    fn active(&self, stream: StreamId) -> Res<Option<u64>> {
        match self.members.get(&stream) {
            Some(m) if self.captures[&m.capture].invalidated => Err(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED),
            Some(m) => Ok(Some(m.capture)),
            None => Ok(None),
        }
    }

    fn set_deps(&mut self, stream: StreamId, deps: Vec<NodeId>) {
        let m = self.members.get_mut(&stream).unwrap();
        m.edges = vec![CUgraphEdgeData::default(); deps.len()];
        m.deps = deps;
    }

    fn set_event(&mut self, event: u64, captured: Option<CapturedEvent>) {
        match captured {
            Some(c) => self.events.insert(event, c),
            None => self.events.remove(&event),
        };
        EVENTS.store(self.events.len(), Ordering::SeqCst);
    }
}

/// `cuThreadExchangeStreamCaptureMode`: sets the calling thread's mode, returns the old one.
pub fn exchange_mode(mode: u32) -> Res<u32> {
    if mode > CU_STREAM_CAPTURE_MODE_RELAXED {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(MODE.replace(mode))
}

/// `cuStreamBeginCapture_v2`. The legacy stream cannot capture.
pub fn begin(stream: StreamId, mode: u32) -> Res<()> {
    if mode > CU_STREAM_CAPTURE_MODE_RELAXED {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let kind = exec::stream_info(stream).ok_or(CUDA_ERROR_INVALID_HANDLE)?.0;
    if kind == Kind::Legacy {
        return Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    }
    let mut st = state();
    if st.members.contains_key(&stream) {
        return Err(CUDA_ERROR_ILLEGAL_STATE);
    }
    st.next += 1;
    let id = st.next;
    let capture = Capture { graph: graph::create(), mode, thread: me(), origin: stream, invalidated: false };
    st.captures.insert(id, capture);
    st.members.insert(stream, Member { capture: id, blocking: kind == Kind::Blocking, deps: vec![], edges: vec![] });
    OPEN.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// `cuStreamEndCapture`: ends the capture begun on `stream` and returns its graph. An
/// invalidated capture, or one with a forked stream not joined back, ends without one.
pub fn end(stream: StreamId) -> Res<GraphId> {
    let mut st = state();
    let id = st.members.get(&stream).ok_or(CUDA_ERROR_ILLEGAL_STATE)?.capture;
    let c = &st.captures[&id];
    let refused = if c.origin != stream {
        Some(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED)
    } else if c.mode != CU_STREAM_CAPTURE_MODE_RELAXED && c.thread != me() {
        Some(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD)
    } else {
        None
    };
    if let Some(e) = refused {
        st.invalidate([id]);
        return Err(e);
    }
    let joined = graph::ancestors(&st.members[&stream].deps);
    let unjoined = st.members.values().any(|m| m.capture == id && !m.deps.iter().all(|n| joined.contains(n)));
    let c = st.captures.remove(&id).unwrap();
    st.members.retain(|_, m| m.capture != id);
    OPEN.fetch_sub(1, Ordering::SeqCst);
    let refused = if c.invalidated {
        CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    } else if unjoined {
        CUDA_ERROR_STREAM_CAPTURE_UNJOINED
    } else {
        return Ok(c.graph);
    };
    let _ = graph::destroy(c.graph);
    Err(refused)
}

/// What `cuStreamGetCaptureInfo` reports. The pointers stay valid until the stream
/// captures or waits again, or its capture ends.
pub struct Info {
    pub status: u32,
    pub id: u64,
    pub graph: GraphId,
    pub deps: *const NodeId,
    pub edges: *const CUgraphEdgeData,
    pub ndeps: usize,
}

/// `cuStreamIsCapturing` / `cuStreamGetCaptureInfo`. Asking about the legacy stream while
/// a blocking stream captures is an error, as its status would be ambiguous.
pub fn info(stream: StreamId) -> Res<Info> {
    let st = state();
    if stream == LEGACY && st.members.values().any(|m| m.blocking) {
        return Err(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    }
    let none = Info { status: CU_STREAM_CAPTURE_STATUS_NONE, id: 0, graph: 0, deps: std::ptr::null(), edges: std::ptr::null(), ndeps: 0 };
    let Some(m) = st.members.get(&stream) else { return Ok(none) };
    let c = &st.captures[&m.capture];
    let status = if c.invalidated { CU_STREAM_CAPTURE_STATUS_INVALIDATED } else { CU_STREAM_CAPTURE_STATUS_ACTIVE };
    let (deps, edges, ndeps) = (m.deps.as_ptr(), m.edges.as_ptr(), m.deps.len());
    Ok(Info { status, id: m.capture, graph: c.graph, deps, edges, ndeps })
}

/// Where an asynchronous operation for a stream goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// To the stream, to run.
    Run,
    /// Into the stream's capture: hand it to [`add`].
    Capture,
}

/// Routes an asynchronous operation enqueued on `stream`.
pub fn route(stream: StreamId) -> Res<Route> {
    if OPEN.load(Ordering::SeqCst) == 0 {
        return Ok(Route::Run);
    }
    let mut st = state();
    st.check_implicit(stream)?;
    Ok(if st.active(stream)?.is_some() { Route::Capture } else { Route::Run })
}

/// Adds `op` to the capture of `stream`, after the stream's current dependencies.
pub fn add(stream: StreamId, op: Op) -> Res<NodeId> {
    let mut st = state();
    let id = st.active(stream)?.ok_or(CUDA_ERROR_ILLEGAL_STATE)?;
    let node = graph::add(st.captures[&id].graph, &st.members[&stream].deps, op)?;
    st.set_deps(stream, vec![node]);
    Ok(node)
}

/// Refuses an operation that cannot be captured, invalidating the stream's capture.
pub fn unsupported(stream: StreamId) -> CUresult {
    let mut st = state();
    if let Some(id) = st.members.get(&stream).map(|m| m.capture) {
        st.invalidate([id]);
    }
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
}

/// Checks a call that waits for or queries `stream` (synchronous copies included).
pub fn before_sync(stream: StreamId) -> Res<()> {
    if OPEN.load(Ordering::SeqCst) == 0 {
        return Ok(());
    }
    let mut st = state();
    st.check_unsafe()?;
    if let Some(id) = st.members.get(&stream).map(|m| m.capture) {
        st.invalidate([id]);
        return Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    }
    st.check_implicit(stream)
}

/// Checks a potentially unsafe call (allocation, freeing).
pub fn before_unsafe() -> Res<()> {
    if OPEN.load(Ordering::SeqCst) == 0 {
        return Ok(());
    }
    state().check_unsafe()
}

/// Checks `cuCtxSynchronize`: the context encompasses every capturing stream.
pub fn before_ctx_sync() -> Res<()> {
    if OPEN.load(Ordering::SeqCst) == 0 {
        return Ok(());
    }
    let mut st = state();
    st.check_unsafe()?;
    let all: Vec<u64> = st.captures.keys().copied().collect();
    st.invalidate(all);
    Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
}

/// Checks `cuEventQuery` / `cuEventSynchronize`.
pub fn before_event_sync(event: u64) -> Res<()> {
    if OPEN.load(Ordering::SeqCst) == 0 && EVENTS.load(Ordering::SeqCst) == 0 {
        return Ok(());
    }
    let mut st = state();
    if let Some(id) = st.events.get(&event).map(|e| e.capture) {
        st.invalidate([id]);
        return Err(CUDA_ERROR_CAPTURED_EVENT);
    }
    st.check_unsafe()
}

/// `cuEventRecord` on a capturing stream: the event now stands for the stream's
/// current dependencies (no node is added).
pub fn record_event(event: u64, stream: StreamId) -> Res<()> {
    let mut st = state();
    let capture = st.active(stream)?.ok_or(CUDA_ERROR_ILLEGAL_STATE)?;
    let nodes = st.members[&stream].deps.clone();
    st.set_event(event, Some(CapturedEvent { capture, nodes }));
    Ok(())
}

/// The event was recorded outside capture, or destroyed.
pub fn forget_event(event: u64) {
    if EVENTS.load(Ordering::SeqCst) > 0 {
        state().set_event(event, None);
    }
}

/// `cuStreamWaitEvent` as capture sees it: returns whether the capture took the wait
/// (join, fork, or an external wait node); if not, it is an ordinary stream wait.
pub fn wait_event(stream: StreamId, event: u64, external: bool) -> Res<bool> {
    if OPEN.load(Ordering::SeqCst) == 0 && EVENTS.load(Ordering::SeqCst) == 0 {
        return Ok(false);
    }
    let mut st = state();
    st.check_implicit(stream)?;
    let recorded = st.events.get(&event).map(|e| (e.capture, e.nodes.clone()));
    if let Some(id) = st.active(stream)? {
        match recorded {
            _ if external => {
                let node = graph::add(st.captures[&id].graph, &st.members[&stream].deps, Op::WaitEvent(event))?;
                st.set_deps(stream, vec![node]);
            }
            Some((c, nodes)) if c == id => {
                let mut deps = st.members[&stream].deps.clone();
                for n in nodes {
                    if !deps.contains(&n) {
                        deps.push(n);
                    }
                }
                st.set_deps(stream, deps);
            }
            Some((c, _)) => {
                st.invalidate([id, c]);
                return Err(CUDA_ERROR_STREAM_CAPTURE_MERGE);
            }
            None => {
                st.invalidate([id]);
                return Err(CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
            }
        }
        return Ok(true);
    }
    let Some((c, nodes)) = recorded else { return Ok(false) };
    match st.captures.get(&c) {
        None => Err(CUDA_ERROR_CAPTURED_EVENT),
        Some(cap) if cap.invalidated => Err(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED),
        Some(_) if stream == LEGACY => {
            st.invalidate([c]);
            Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
        }
        Some(_) => {
            let blocking = exec::stream_info(stream).ok_or(CUDA_ERROR_INVALID_HANDLE)?.0 == Kind::Blocking;
            let edges = vec![CUgraphEdgeData::default(); nodes.len()];
            st.members.insert(stream, Member { capture: c, blocking, deps: nodes, edges });
            Ok(true)
        }
    }
}
