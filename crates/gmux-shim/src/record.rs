//! `GMUX_RECORD=PATH` (set by `gmux record`): the run written as a gmux-sim trace,
//! format version 1 of docs/trace-format.md, appended to PATH (the header first when PATH
//! is empty). One line per allocation, per released command and per free, in the order
//! the shim saw them; the tenant is `GMUX_TENANT` (default `app`).
//!
//! A command's `dur_us` is its time on the device: two timing events recorded on its
//! stream before and after the real call ([`start`], [`end`]), read with `cuEventElapsedTime` once the second has
//! completed. Lines wait in a queue, in release order, until the durations before them
//! are known; the queue is polled when it holds [`POLL`] timed commands, drained at
//! [`MAX_PENDING`] and at exit ([`finish`], registered with `atexit` when recording
//! starts, so that it runs before the driver's own exit handlers). Its working set is the predicted one, whole
//! allocations. A command's kind and, for copies and memsets, its name are those of the
//! entry point the application called ([`crate::exports::entry`]); a kernel's name is the
//! driver's, asked once per handle.
//!
//! Without `GMUX_RECORD` every hook is one check of an empty `Option`.

use crate::cuda::*;
use crate::inflight::StreamKey;
use crate::state::{Shim, WorkingSet};
use gmux_core::AllocId;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

mod line;
pub use line::VERSION;
use line::{kind_of, Line, Range};

/// Timed commands in the queue before its front is polled.
const POLL: usize = 64;
/// Timed commands in the queue before the oldest are waited for.
const MAX_PENDING: usize = 1 << 14;
/// Bytes of whole lines buffered before a write.
const BUFFER: usize = 1 << 16;

/// A command's two timing events, recorded before and after the real call.
pub struct Timing {
    events: Option<(CUevent, CUevent)>,
    stream: StreamKey,
    entry: &'static str,
}

/// A line waiting for the durations of the commands before it.
enum Queued {
    Alloc { id: u32, bytes: u64 },
    Free { id: u32 },
    Mark { what: &'static str },
    Cmd { events: Option<(CUevent, CUevent)>, stream: u32, kind: &'static str, name: Arc<str>, ws: Vec<Range>, task_end: bool },
}

/// The recorder's state.
pub struct Recorder {
    file: std::fs::File,
    path: String,
    owner: u32,
    tenant: String,
    buf: Vec<u8>,
    broken: bool,
    next_id: u32,
    live: BTreeMap<AllocId, (u32, u64)>,
    by_base: HashMap<CUdeviceptr, AllocId>,
    streams: HashMap<StreamKey, u32>,
    kernels: HashMap<usize, Arc<str>>,
    entries: HashMap<&'static str, Arc<str>>,
    queue: VecDeque<Queued>,
    timed: usize,
    pool: Vec<CUevent>,
    commands: u64,
    untimed: u64,
}

// SAFETY: CUDA events may be used from any thread; access goes through the lock.
unsafe impl Send for Recorder {}

static RECORDER: OnceLock<Option<Mutex<Recorder>>> = OnceLock::new();

/// Whether `GMUX_RECORD` asks for a trace (read once; the recorder itself starts at the
/// first command, after the driver's own start).
pub fn asked() -> bool {
    static ASKED: OnceLock<bool> = OnceLock::new();
    *ASKED.get_or_init(|| std::env::var_os("GMUX_RECORD").is_some_and(|p| !p.is_empty()))
}

fn recorder() -> Option<&'static Mutex<Recorder>> {
    RECORDER.get_or_init(Recorder::from_env).as_ref()
}

fn lock(m: &Mutex<Recorder>) -> MutexGuard<'_, Recorder> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A command about to be issued whose start event was recorded (or could not be).
pub struct Started {
    events: Option<(CUevent, CUevent)>,
    started: bool,
}

/// Before a command's driver call on `stream`: records its start event when recording
/// (`None` otherwise).
pub fn start(stream: CUstream, ptsz: bool) -> Option<Started> {
    let rec = recorder()?;
    let events = lock(rec).events();
    let started = events.is_some_and(|(start, _)| record_on(start, stream, ptsz) == CUDA_SUCCESS);
    Some(Started { events, started })
}

/// After the driver call that [`start`] preceded, which returned `r`: records its end
/// event. Returns, on success, the timing for [`command`].
pub fn end(started: Option<Started>, r: CUresult, stream: CUstream, ptsz: bool) -> Option<Timing> {
    let Started { events, started } = started?;
    let rec = recorder()?;
    let ended = started && r == CUDA_SUCCESS && events.is_some_and(|(_, end)| record_on(end, stream, ptsz) == CUDA_SUCCESS);
    if let Some((start, end)) = events.filter(|_| !ended) {
        lock(rec).pool.extend([start, end]);
    }
    (r == CUDA_SUCCESS).then(|| Timing { events: events.filter(|_| ended), stream: StreamKey::of(stream, ptsz), entry: crate::exports::entry() })
}

fn record_on(ev: CUevent, stream: CUstream, ptsz: bool) -> CUresult {
    if ptsz {
        crate::real!(cuEventRecord_ptsz(ev, stream))
    } else {
        crate::real!(cuEventRecord(ev, stream))
    }
}

/// The device whose memory the trace records: the first to allocate. A trace is one
/// tenant's memory on one device; a process's other devices are left out, as the log
/// says once.
static DEVICE: OnceLock<usize> = OnceLock::new();

fn records(dev: usize) -> bool {
    let first = *DEVICE.get_or_init(|| dev);
    if first != dev {
        crate::api::refuse::once(
            &format!("record device {dev}"),
            &format!("the trace records device {first}'s memory and commands alone: device {dev}'s are left out (a trace holds one device)"),
            crate::log::Level::Warn,
        );
    }
    first == dev
}

/// Records a released command of device `dev`: `kind` is a kernel's handle for kernels,
/// `ws` its working set.
pub fn command(t: Option<Timing>, kind: u64, ws: &WorkingSet, dev: usize) {
    let Some(t) = t else { return };
    if !records(dev) {
        return;
    }
    if let Some(rec) = recorder() {
        lock(rec).command(t, kind, ws);
    }
}

/// The application waited for its work on the host (a stream or context synchronize):
/// the newest command ends a task, which is what the simulator counts as throughput.
pub fn synced() {
    let Some(rec) = recorder() else { return };
    let mut r = lock(rec);
    if let Some(Queued::Cmd { task_end, .. }) = r.queue.iter_mut().rev().find(|q| matches!(q, Queued::Cmd { .. })) {
        *task_end = true;
    }
}

/// `cuProfilerStart`: the program opens the region it measures (as profilers read it),
/// so a steady replay of the trace starts here.
pub fn profiler_start(real: impl FnOnce() -> CUresult) -> CUresult {
    if let Some(rec) = recorder() {
        lock(rec).push(Queued::Mark { what: "window" });
    }
    real()
}

/// Records the allocation at `base`, just made: the gmux allocation it lies in (a small
/// one's pack is recorded once, when the first slot is taken).
pub fn alloc(st: Option<&Shim>, base: CUdeviceptr) {
    let Some(rec) = recorder() else { return };
    if let Some(r) = st.filter(|s| records(s.device())).and_then(|s| s.vmem.find(base)) {
        lock(rec).alloc(r.alloc, r.bytes, r.base);
    }
}

/// Records that the allocation at `base` was freed.
pub fn free(base: CUdeviceptr) {
    if let Some(rec) = recorder() {
        lock(rec).free(base);
    }
}

/// Records that the allocation at `from` is now known by its alias at `to` (the
/// application unmapped `from` and keeps the memory mapped at `to`).
pub fn moved(from: CUdeviceptr, to: CUdeviceptr) {
    if let Some(rec) = recorder() {
        let mut r = lock(rec);
        if let Some(a) = r.by_base.remove(&from) {
            r.by_base.insert(to, a);
        }
    }
}

/// At exit: waits for every duration and writes everything (not in a forked child).
pub fn finish() {
    let Some(rec) = RECORDER.get().and_then(Option::as_ref) else { return };
    let mut r = lock(rec);
    if r.owner != std::process::id() {
        return;
    }
    r.drain(0);
    r.write_out();
    let untimed = std::mem::take(&mut r.untimed);
    if untimed > 0 {
        crate::log!(Warn, "{untimed} of {} commands recorded in {} have no measured duration (dur_us 0): their timing events failed", r.commands, r.path);
    }
}

impl Recorder {
    fn from_env() -> Option<Mutex<Recorder>> {
        let path = std::env::var("GMUX_RECORD").ok().filter(|p| !p.is_empty())?;
        let tenant = std::env::var("GMUX_TENANT").ok().filter(|t| !t.is_empty()).unwrap_or_else(|| "app".into());
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap_or_else(|e| crate::log::fatal(&format!("cannot open the trace GMUX_RECORD={path}: {e}; give a writable path")));
        let empty = file.metadata().map(|m| m.len() == 0).unwrap_or(false);
        let mut r = Recorder {
            file,
            path,
            owner: std::process::id(),
            tenant,
            buf: Vec::with_capacity(BUFFER),
            broken: false,
            next_id: 0,
            live: BTreeMap::new(),
            by_base: HashMap::new(),
            streams: HashMap::new(),
            kernels: HashMap::new(),
            entries: HashMap::new(),
            queue: VecDeque::new(),
            timed: 0,
            pool: Vec::new(),
            commands: 0,
            untimed: 0,
        };
        if empty {
            r.emit(&Line::Header { version: VERSION, chunk_bytes: gmux_core::CHUNK_BYTES });
        }
        crate::log!(Info, "recording the trace to {} as tenant {}", r.path, r.tenant);
        // Registered now, after the driver's own exit handlers, so that it runs before them.
        extern "C" fn at_exit() {
            // Called by libc: a panic must not unwind into it.
            let _ = std::panic::catch_unwind(finish);
        }
        // SAFETY: registering a plain extern "C" function.
        unsafe { libc::atexit(at_exit) };
        Some(Mutex::new(r))
    }

    /// Two timing events (default flags), or `None` if they cannot be created.
    fn events(&mut self) -> Option<(CUevent, CUevent)> {
        let mut one = || {
            self.pool.pop().or_else(|| {
                let mut e = std::ptr::null_mut();
                (crate::real!(cuEventCreate(&mut e, 0)) == CUDA_SUCCESS).then_some(e)
            })
        };
        match (one(), one()) {
            (Some(a), Some(b)) => Some((a, b)),
            (a, b) => {
                self.pool.extend(a.into_iter().chain(b));
                None
            }
        }
    }

    fn alloc(&mut self, a: AllocId, bytes: u64, base: CUdeviceptr) {
        if self.live.contains_key(&a) {
            return;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.live.insert(a, (id, bytes));
        self.by_base.insert(base, a);
        self.push(Queued::Alloc { id, bytes });
    }

    fn free(&mut self, base: CUdeviceptr) {
        if let Some((id, _)) = self.by_base.remove(&base).and_then(|a| self.live.remove(&a)) {
            self.push(Queued::Free { id });
        }
    }

    fn command(&mut self, t: Timing, kind: u64, ws: &WorkingSet) {
        let next = self.streams.len() as u32;
        let stream = *self.streams.entry(t.stream).or_insert(next);
        let k = kind_of(t.entry);
        let name = if k == "kernel" {
            self.kernels.entry(kind as usize).or_insert_with(|| crate::predict::kernel_name(kind as CUfunction).into()).clone()
        } else {
            self.entries.entry(t.entry).or_insert_with(|| t.entry.into()).clone()
        };
        let range = |&(id, bytes): &(u32, u64)| Range { alloc: id, off: 0, len: bytes };
        let ws = match ws {
            WorkingSet::Allocs(allocs) => allocs.iter().filter_map(|a| self.live.get(a)).map(range).collect(),
            WorkingSet::Spans(spans) => {
                spans.iter().filter(|s| self.live.contains_key(&s.alloc)).map(|s| Range { alloc: self.live[&s.alloc].0, off: s.offset, len: s.len }).collect()
            }
            WorkingSet::Tenant => self.live.values().map(range).collect(),
        };
        self.commands += 1;
        self.timed += 1;
        self.queue.push_back(Queued::Cmd { events: t.events, stream, kind: k, name, ws, task_end: false });
        if self.timed >= MAX_PENDING {
            self.drain(MAX_PENDING / 2);
        } else if self.timed >= POLL {
            self.drain(usize::MAX);
        }
    }

    fn push(&mut self, q: Queued) {
        if self.queue.is_empty() {
            self.write(q);
        } else {
            self.queue.push_back(q);
        }
    }

    /// Writes the lines at the front of the queue whose durations are known, waiting for
    /// the oldest commands while more than `keep` are timed.
    fn drain(&mut self, keep: usize) {
        while let Some(front) = self.queue.front() {
            if keep > 0 && self.timed == 1 && matches!(front, Queued::Cmd { .. }) {
                break;
            }
            if let Queued::Cmd { events: Some((_, end)), .. } = front {
                if self.timed <= keep && crate::real!(cuEventQuery(*end)) == CUDA_ERROR_NOT_READY {
                    break;
                }
            }
            let q = self.queue.pop_front().expect("front exists");
            self.write(q);
        }
    }

    /// Writes one line; a command's events are read (waited for if need be) and pooled.
    fn write(&mut self, q: Queued) {
        let tenant = std::mem::take(&mut self.tenant);
        match q {
            Queued::Alloc { id, bytes } => self.emit(&Line::Alloc { tenant: &tenant, id, bytes }),
            Queued::Free { id } => self.emit(&Line::Free { tenant: &tenant, id }),
            Queued::Mark { what } => self.emit(&Line::Mark { tenant: &tenant, what }),
            Queued::Cmd { events, stream, kind, name, ws, task_end } => {
                self.timed -= 1;
                let dur_us = events.and_then(|(start, end)| {
                    let ms = elapsed_ms(start, end);
                    self.pool.extend([start, end]);
                    ms
                });
                if dur_us.is_none() {
                    self.untimed += 1;
                }
                let dur_us = dur_us.map_or(0.0, |ms| (ms as f64 * 1e3).max(0.0));
                self.emit(&Line::Cmd { tenant: &tenant, stream, kind, name: &name, dur_us, ws: &ws, task_end });
            }
        }
        self.tenant = tenant;
    }

    fn emit(&mut self, line: &Line) {
        if self.broken {
            return;
        }
        serde_json::to_writer(&mut self.buf, line).expect("a trace line serializes");
        self.buf.push(b'\n');
        if self.buf.len() >= BUFFER {
            self.write_out();
        }
    }

    /// Writes the buffered lines, whole, with one `write` where the system allows.
    fn write_out(&mut self) {
        if self.broken || self.buf.is_empty() {
            return;
        }
        if let Err(e) = self.file.write_all(&self.buf) {
            crate::log!(Error, "cannot write the trace {}: {e}; recording stops here", self.path);
            self.broken = true;
        }
        self.buf.clear();
    }
}

/// Milliseconds between two completed (or soon completed) events; `None` on failure.
fn elapsed_ms(start: CUevent, end: CUevent) -> Option<f32> {
    if crate::real!(cuEventSynchronize(end)) != CUDA_SUCCESS {
        return None;
    }
    let mut ms = 0f32;
    let r = match crate::driver::driver().cuEventElapsedTime_v2 {
        Some(_) => crate::real!(cuEventElapsedTime_v2(&mut ms, start, end)),
        None => crate::real!(cuEventElapsedTime(&mut ms, start, end)),
    };
    (r == CUDA_SUCCESS && ms.is_finite()).then_some(ms)
}
