//! Commands: kernels, copies, memsets, graph launches. Each is released only once its
//! working set is resident or on its way (the stream waits for the mover on the GPU).
//! Linear copies and memsets, which may stream through the limit, are in [`super::linear`].

use super::report;
use crate::config::config;
use crate::cuda::*;
use crate::inflight::StreamKey;
use crate::predict::{kernel_name, scan};
use crate::state::{shim, Shim, ShimError, WorkingSet};
use gmux_core::AllocId;
use std::ffi::c_void;

/// What a command runs, for its signature in the history (a kernel is its handle).
pub(super) const COPY_OR_MEMSET: u64 = 1;

/// Runs one command: working set, residency, the real call, bookkeeping. `kind` says
/// what it runs (a kernel's or graph's handle, or [`COPY_OR_MEMSET`]). A command captured
/// into a graph runs later, as part of the graph: it passes to the driver, after its
/// memory is mapped (see [`map_for_capture`]).
pub(super) fn run(
    real: impl FnOnce() -> CUresult,
    stream: CUstream,
    ptsz: bool,
    kind: u64,
    what: impl Fn() -> String,
    ws: impl FnOnce(&mut Shim) -> WorkingSet,
) -> CUresult {
    if crate::capture::captured(stream, ptsz) {
        crate::capture::relaxed(|| map_for_capture(ws));
        return real();
    }
    crate::capture::relaxed(|| run_now(real, stream, ptsz, kind, what, ws))
}

/// Makes a captured command's memory resident (mapped) without ordering the capture after
/// it: the driver checks when it captures a copy or memset that its addresses are mapped,
/// and memory the program allocated during the capture is not backed yet. The command's
/// data is not needed until the graph launches, which brings it in again. A working set
/// that does not fit is left to that launch to refuse.
fn map_for_capture(ws: impl FnOnce(&mut Shim) -> WorkingSet) {
    map_now(ws, "a captured command's");
}

/// Makes the memory of `ws` resident now, for the driver's checks that it is mapped (a
/// captured command, a graph node being made), without any stream waiting for it.
pub(super) fn map_now(ws: impl FnOnce(&mut Shim) -> WorkingSet, whose: &str) {
    if let Err(e) = try_map(ws) {
        crate::log!(Debug, "{whose} memory was not mapped: {e:?}");
    }
}

/// [`map_now`], with the reason it could not.
pub(super) fn try_map(ws: impl FnOnce(&mut Shim) -> WorkingSet) -> Result<(), ShimError> {
    let Ok(mut g) = shim() else { return Ok(()) };
    let st = g.as_mut().expect("created");
    let ws = ws(st);
    st.prepare(&ws, None, 0).map(|_| ())
}

fn run_now(
    real: impl FnOnce() -> CUresult,
    stream: CUstream,
    ptsz: bool,
    kind: u64,
    what: impl Fn() -> String,
    ws: impl FnOnce(&mut Shim) -> WorkingSet,
) -> CUresult {
    use crate::profile::Entry;
    static DEVICE: Entry = Entry::new("(command:device)");
    static GATE: Entry = Entry::new("(command:gate)");
    static LOCK: Entry = Entry::new("(command:lock)");
    static WS: Entry = Entry::new("(command:working-set)");
    static RESIDENT: Entry = Entry::new("(command:residency)");
    static DRIVER: Entry = Entry::new("(command:driver)");
    static BOOKS: Entry = Entry::new("(command:bookkeeping)");
    let mut laps = crate::profile::Laps::start();
    let Ok(dev) = crate::devices::current() else { return real() };
    laps.lap(&DEVICE);
    crate::agent::gate(dev);
    crate::jobs::wait_turn(dev);
    laps.lap(&GATE);
    let mut g = match crate::devices::shim_of(dev) {
        Ok(g) => g,
        Err(_) => return real(),
    };
    laps.lap(&LOCK);
    crate::devices::take_reached();
    let mut ws = ws(g.as_mut().expect("created"));
    laps.lap(&WS);
    let reached = crate::devices::take_reached();
    if !reached.is_empty() {
        drop(g);
        return super::across::run(Box::new(real), stream, ptsz, dev, ws, &reached, &what());
    }
    let (waits, sig) = loop {
        let st = g.as_mut().expect("created");
        let sig = st.signature(kind, &ws);
        if st.memory.is_hit(&ws) {
            break (Vec::new(), sig);
        }
        match st.prepare_command(&ws, Some(StreamKey::of(stream, ptsz)), sig) {
            Ok(w) => break (w, sig),
            Err(ShimError::Wait { need }) => {
                // Over this process's grant: wait for the daemon outside the lock (the
                // agent may have to evict), then check the working set is still live.
                drop(g);
                crate::agent::wait_grant(dev, need);
                crate::agent::gate(dev);
                crate::jobs::wait_turn(dev);
                g = crate::devices::on(dev);
                let st = g.as_mut().expect("created");
                match &mut ws {
                    WorkingSet::Allocs(a) => a.retain(|id| st.is_live(*id)),
                    WorkingSet::Spans(s) => s.retain(|x| st.is_live(x.alloc)),
                    WorkingSet::Tenant => {}
                }
            }
            Err(e) => return report(e, &what()),
        }
    };
    let st = g.as_mut().expect("created");
    for ev in waits {
        let r = if ptsz { crate::real!(cuStreamWaitEvent_ptsz(stream, ev, 0)) } else { crate::real!(cuStreamWaitEvent(stream, ev, 0)) };
        if r != CUDA_SUCCESS {
            return report(crate::driver::CudaError { call: "cuStreamWaitEvent", code: r }.into(), &what());
        }
    }
    laps.lap(&RESIDENT);
    let started = crate::record::start(stream, ptsz);
    let r = real();
    let timing = crate::record::end(started, r, stream, ptsz);
    laps.lap_driver(&DRIVER);
    if r == CUDA_SUCCESS {
        let wait = match st.released(stream, ptsz, &ws, sig) {
            Ok(w) => w,
            Err(e) => return report(e, &what()),
        };
        crate::record::command(timing, kind, &ws, dev);
        laps.lap(&BOOKS);
        if let Some(ev) = wait {
            // Too many commands of this stream in flight: wait for the oldest over the
            // bound outside the lock.
            drop(g);
            crate::real!(cuEventSynchronize(ev));
        }
    }
    r
}

/// A kernel launch; its working set comes from its parameters.
///
/// # Safety
/// The arguments follow `cuLaunchKernel`'s contract.
pub unsafe fn kernel(
    real: impl FnOnce() -> CUresult,
    f: CUfunction,
    stream: CUstream,
    ptsz: bool,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    run(
        real,
        stream,
        ptsz,
        f as u64,
        || format!("kernel {}", kernel_name(f)),
        |st| {
            if config().whole_tenant {
                return WorkingSet::Tenant;
            }
            static SCAN: crate::profile::Entry = crate::profile::Entry::new("(working-set:scan)");
            static ALLOCS: crate::profile::Entry = crate::profile::Entry::new("(working-set:allocations)");
            let mut laps = crate::profile::Laps::start();
            // The parameter words that may be gmux addresses, of this device or (in a process
            // of several) another's: most words are sizes, strides and flags, and a large
            // kernel has hundreds. Inline up to 32 (no heap memory per launch).
            let mut ptrs = smallvec::SmallVec::<[u64; 32]>::new();
            let (own, other) = (st.vmem.span().unwrap_or_default(), crate::devices::reach_span());
            let kernel = st.layouts.of(f);
            if kernel.opaque {
                return WorkingSet::Tenant;
            }
            let layout = kernel.layout.as_ref();
            let keep = |w: u64| own.contains(&w) || other.contains(&w);
            // SAFETY: the launch arguments are valid per the caller's contract.
            let scanned = unsafe {
                scan(layout, params, extra, |w| {
                    if keep(w) {
                        ptrs.push(w)
                    }
                })
            };
            laps.lap(&SCAN);
            match scanned {
                true => {
                    let allocs = st.allocs_of(&ptrs);
                    laps.lap(&ALLOCS);
                    if config().debug.working_sets {
                        crate::predict::log_working_set(st, f, &ptrs, &allocs);
                    }
                    if allocs.is_empty() && crate::log::level() >= crate::log::Level::Debug {
                        let name = kernel_name(f);
                        super::refuse::once(&name, &format!("kernel {name}: no gmux memory found in its parameters"), crate::log::Level::Debug);
                    }
                    WorkingSet::Allocs(allocs)
                }
                false => {
                    crate::log!(Warn, "kernel {}: no parameter layout (cuFuncGetParamInfo failed); treating it as touching all memory", kernel_name(f));
                    WorkingSet::Tenant
                }
            }
        },
    )
}

/// An asynchronous copy, memset or memory operation on `stream` touching `ptrs`.
pub fn op(real: impl FnOnce() -> CUresult, ptrs: &[CUdeviceptr], stream: CUstream, ptsz: bool) -> CUresult {
    run(real, stream, ptsz, COPY_OR_MEMSET, || "copy or memset".into(), |st| WorkingSet::Allocs(st.allocs_of(ptrs)))
}

/// A synchronous copy or memset: on the legacy (or per-thread) default stream.
pub fn sync_op(real: impl FnOnce() -> CUresult, ptrs: &[CUdeviceptr], ptds: bool) -> CUresult {
    op(real, ptrs, std::ptr::null_mut(), ptds)
}

/// A graph launch: its working set is what the executable graph's nodes touch, or all
/// memory where a node cannot be analysed (logged once per reason). A graph whose memory
/// does not fit the limit runs in parts ([`crate::graph_split`]).
pub fn graph(real: impl FnOnce() -> CUresult, exec: CUgraphExec, stream: CUstream, ptsz: bool) -> CUresult {
    let what = || "graph launch (cuGraphLaunch)".to_string();
    if crate::capture::captured(stream, ptsz) {
        return run(real, stream, ptsz, exec as u64, what, |st| graph_ws(st, exec));
    }
    let (parts, done) = match plan_graph(exec) {
        GraphLaunch::Whole(mut ws) => {
            // The allocations were read under an earlier hold of the lock: drop any freed since.
            let live = move |st: &mut Shim| {
                if let WorkingSet::Allocs(a) = &mut ws {
                    a.retain(|id| st.is_live(*id));
                }
                ws
            };
            return run(real, stream, ptsz, exec as u64, what, live);
        }
        GraphLaunch::Parts(parts, done) => (parts, done),
    };
    let on = crate::inflight::default_stream(stream, ptsz);
    // After the last launch of this graph, wherever it ran.
    let r = crate::capture::relaxed(|| crate::real!(cuStreamWaitEvent(on, done, 0)));
    if r != CUDA_SUCCESS {
        return r;
    }
    let n = parts.len();
    for (k, part) in parts.iter().enumerate() {
        let what = || format!("graph launch (cuGraphLaunch), part {} of {n}", k + 1);
        let r = run(|| crate::real!(cuGraphLaunch(part.exec, on)), on, false, part.exec as u64, what, |st| WorkingSet::Allocs(st.allocs_of(&part.touches)));
        if r != CUDA_SUCCESS {
            return r;
        }
    }
    crate::capture::relaxed(|| crate::real!(cuEventRecord(done, on)))
}

/// How a graph launch runs.
enum GraphLaunch {
    /// Whole, over this working set.
    Whole(WorkingSet),
    /// In these parts, after the event of the last launch (recorded again after them).
    Parts(std::sync::Arc<[crate::graph::Part]>, CUevent),
}

/// The working set of a whole launch of `exec`.
fn graph_ws(st: &Shim, exec: CUgraphExec) -> WorkingSet {
    let touches = match st.graphs.get(exec) {
        Some(g) => g.touches(),
        None => Err("a graph instantiated before gmux could see it"),
    };
    match touches {
        Ok(addresses) => WorkingSet::Allocs(st.allocs_of(addresses)),
        Err(why) => {
            super::refuse::once(&format!("graph {why}"), &format!("cuGraphLaunch: {why}; its launches make all memory resident"), crate::log::Level::Warn);
            WorkingSet::Tenant
        }
    }
}

/// Whole when the graph's memory fits the room under the limit or it cannot be cut (a
/// graph that does not fit is then refused by name), else in parts.
fn plan_graph(exec: CUgraphExec) -> GraphLaunch {
    let Ok(mut g) = shim() else { return GraphLaunch::Whole(WorkingSet::Tenant) };
    let st = g.as_mut().expect("created");
    let ws = graph_ws(st, exec);
    let room = st.room();
    let bytes = |st: &Shim, allocs: &[AllocId]| -> Vec<(u64, u64)> { allocs.iter().filter_map(|a| st.vmem.of(*a).map(|r| (a.0 as u64, r.reserved))).collect() };
    let fits = match &ws {
        WorkingSet::Allocs(a) => bytes(st, a).iter().map(|(_, b)| b).sum::<u64>() <= room,
        _ => true,
    };
    // Taken out while it is cut, which reads the rest of the state.
    let Some(mut split) = st.graphs.get_mut(exec).filter(|_| !fits).and_then(|e| e.split.take()) else { return GraphLaunch::Whole(ws) };
    let parts = split.parts(room, |ptrs| bytes(st, &st.allocs_of(ptrs))).and_then(|p| split.done_event().map(|e| (p, e)).map_err(|e| e.to_string()));
    if let Some(e) = st.graphs.get_mut(exec) {
        e.split = Some(split);
    }
    match parts {
        Ok((parts, done)) => GraphLaunch::Parts(parts, done),
        Err(why) => {
            super::refuse::once(
                &format!("split {why}"),
                &format!("cuGraphLaunch: the graph does not fit the limit and cannot run in parts ({why}): it runs whole"),
                crate::log::Level::Warn,
            );
            GraphLaunch::Whole(ws)
        }
    }
}

/// The state of the device that released commands on `stream`: the current context's
/// in a process of one device.
fn tracking(stream: CUstream, ptsz: bool) -> crate::devices::Guard {
    if crate::devices::several() {
        for d in crate::devices::in_use() {
            let g = crate::devices::on(d);
            if g.as_ref().is_some_and(|st| st.inflight.tracks(stream, ptsz)) {
                return g;
            }
        }
    }
    crate::state::existing()
}

/// After a stream synchronize: its commands are done, and what was freed in stream order
/// before them is released.
pub fn synced(real: impl FnOnce() -> CUresult, stream: CUstream, ptsz: bool) -> CUresult {
    let r = real();
    if r == CUDA_SUCCESS {
        if let Some(st) = tracking(stream, ptsz).as_mut() {
            let _ctx = crate::devices::enter(st);
            let _ = crate::capture::relaxed(|| st.inflight.synced(stream, ptsz).map_err(Into::into).and_then(|()| st.reap()));
            crate::agent::notice(st.device(), st.notice());
        }
        crate::record::synced();
    }
    r
}

/// Records the fence of the commands released on `stream` that have none yet (before a
/// capture begins on it or it is destroyed).
pub fn fence_stream(stream: CUstream, ptsz: bool) {
    if let Some(st) = tracking(stream, ptsz).as_mut() {
        let _ctx = crate::devices::enter(st);
        if let Err(e) = crate::capture::relaxed(|| st.inflight.fence_stream(stream, ptsz)) {
            crate::log!(Warn, "cannot fence the commands of a stream ({e}); an eviction will wait for the whole context");
        }
    }
}

/// `cuStreamDestroy*`: its commands are fenced first (the handle is gone after).
pub fn stream_destroyed(real: impl FnOnce() -> CUresult, stream: CUstream) -> CUresult {
    fence_stream(stream, false);
    real()
}

/// After a synchronize of the current context: every command is done, and every free in
/// stream order is released.
pub fn synced_all(real: impl FnOnce() -> CUresult) -> CUresult {
    synced_context(real, std::ptr::null_mut())
}

/// After a synchronize of context `ctx` (`cuCtxSynchronize_v2`; null: the current one):
/// every command of its device is done.
pub fn synced_context(real: impl FnOnce() -> CUresult, ctx: CUcontext) -> CUresult {
    let r = real();
    if r == CUDA_SUCCESS {
        let mut g = match ctx.is_null() {
            true => crate::state::existing(),
            false => match crate::devices::of_ctx(ctx) {
                Some(d) => crate::devices::on(d),
                None => return r,
            },
        };
        if let Some(st) = g.as_mut() {
            let _ctx = crate::devices::enter(st);
            let _ = crate::capture::relaxed(|| st.inflight.synced_all().map_err(Into::into).and_then(|()| st.reap()));
            crate::agent::notice(st.device(), st.notice());
        }
        crate::record::synced();
    }
    r
}

/// The device byte ranges a memcpy node over a `CUDA_MEMCPY3D` needs mapped
/// ([`crate::graph::memcpy_node_ranges`]).
///
/// # Safety
/// `c` is null or points to a valid `CUDA_MEMCPY3D`.
pub unsafe fn memcpy_node_ranges(c: *const CUDA_MEMCPY3D) -> Vec<(CUdeviceptr, u64)> {
    // SAFETY: per this function's contract.
    unsafe { c.as_ref() }.map(crate::graph::memcpy_node_ranges).unwrap_or_default()
}

/// Every address of a batched copy (`cuMemcpyBatchAsync`): `count` destinations and
/// sources (host addresses among them fall outside gmux memory).
///
/// # Safety
/// `dsts` and `srcs` are null or hold `count` addresses each.
pub unsafe fn batch_ptrs(dsts: *const CUdeviceptr, srcs: *const CUdeviceptr, count: usize) -> Vec<CUdeviceptr> {
    // SAFETY: per this function's contract, a non-null side holds `count` addresses.
    let side = |p: *const CUdeviceptr| if p.is_null() { &[][..] } else { unsafe { std::slice::from_raw_parts(p, count) } };
    side(dsts).iter().chain(side(srcs)).copied().collect()
}
