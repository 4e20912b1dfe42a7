//! Commands of one device that reach gmux memory of others: a copy between two devices'
//! memory, a kernel that reads a peer's buffer. Every mapping of a process of several
//! devices grants all of them access ([`crate::devices`]), so the command itself runs as
//! the driver would run it; what gmux adds is residency on each device. Each device's
//! part of the working set (whole allocations for pointers, the bytes of copies) is made
//! resident under that device's lock (taken in ascending order, each device's mover
//! working in its own context) and the command is issued. Its own device then tracks it
//! in flight as any command; each other device holds an event recorded after it
//! ([`gmux_cuda::held`]), which its evictions wait for on the GPU and a free of that
//! memory on the host. No lock is held while the command runs.

use super::report;
use crate::cuda::*;
use crate::devices::{self, Reach};
use crate::driver::{check, CudaError};
use crate::state::{Shim, ShimError, Span, WorkingSet};
use gmux_core::AllocId;

/// Runs `real` on `stream` of device `own`, whose working set there is `ws` and which
/// reaches `reached` on other devices. (Not generic: one copy serves every entry point.)
pub(super) fn run(
    real: Box<dyn FnOnce() -> CUresult + '_>,
    stream: CUstream,
    ptsz: bool,
    own: usize,
    ws: WorkingSet,
    reached: &[Reach],
    what: &str,
) -> CUresult {
    let mut devs: Vec<usize> = reached.iter().map(|r| r.dev).chain([own]).collect();
    devs.sort_unstable();
    devs.dedup();
    if let Some(apart) = devs.iter().find(|d| !devices::is_peer(**d)) {
        return super::refuse::call(
            &format!("{what} across devices"),
            &format!("it runs on device {own} over gmux memory of devices {devs:?}, and device {apart} has no peer-to-peer access to the others"),
        );
    }
    let (mut held, parts) = loop {
        for &d in &devs {
            crate::agent::gate(d);
            crate::jobs::wait_turn(d);
        }
        let (mut held, mut parts, mut short) = (Vec::with_capacity(devs.len()), Vec::with_capacity(devs.len()), None);
        for &d in &devs {
            let mut g = devices::on(d);
            let Some(st) = g.as_mut() else { continue };
            let part = if d == own { live(st, ws.clone()) } else { reached_on(st, reached) };
            let scope = gmux_cuda::context::Scope::enter(st.ctx());
            let prepared = st.prepare(&part, None, 0);
            drop(scope);
            match prepared {
                Ok(events) => {
                    for ev in events {
                        let r = crate::real!(cuEventSynchronize(ev));
                        if r != CUDA_SUCCESS {
                            return r;
                        }
                    }
                }
                Err(ShimError::Wait { need }) => {
                    short = Some((d, need));
                    break;
                }
                Err(e) => return report(e, what),
            }
            held.push(g);
            parts.push((d, part));
        }
        devices::take_reached();
        match short {
            Some((d, need)) => {
                drop(held);
                crate::agent::wait_grant(d, need);
            }
            None => break (held, parts),
        }
    };
    let r = real();
    if r != CUDA_SUCCESS {
        return r;
    }
    // Each part stays until the command is done: its own device tracks the command in
    // flight, the others hold an event recorded after it.
    let mut wait = None;
    for (g, (d, part)) in held.iter_mut().zip(&parts) {
        let st = g.as_mut().expect("held with state");
        if *d == own {
            match st.released(stream, ptsz, part, 0) {
                Ok(w) => wait = w,
                Err(e) => return report(e, what),
            }
            continue;
        }
        match fence(stream, ptsz) {
            Ok(ev) => st.inflight.held.hold(ev, allocs(part)),
            Err(e) => return report(e.into(), what),
        }
    }
    drop(held);
    crate::log!(Debug, "{what} ran on device {own} over memory of devices {devs:?}");
    if let Some(ev) = wait {
        crate::real!(cuEventSynchronize(ev));
    }
    r
}

/// The memory of `st`'s device that `reached` names: the bytes of byte ranges, the whole
/// allocations of pointers (with those they refer to).
fn reached_on(st: &Shim, reached: &[Reach]) -> WorkingSet {
    let mine = reached.iter().filter(|r| r.dev == st.device());
    let (ptrs, ranges): (Vec<&Reach>, Vec<&Reach>) = mine.partition(|r| r.len <= 1);
    let mut spans = st.spans_over(&ranges.iter().map(|r| (r.start, r.len)).collect::<Vec<_>>());
    let whole = st.allocs_of(&ptrs.iter().map(|r| r.start).collect::<Vec<_>>());
    spans.extend(whole.iter().filter_map(|a| st.vmem.of(*a).map(|r| Span { alloc: *a, offset: 0, len: r.reserved })));
    WorkingSet::Spans(spans)
}

/// The allocations of a working set that names them.
fn allocs(ws: &WorkingSet) -> Vec<AllocId> {
    let mut v: Vec<AllocId> = match ws {
        WorkingSet::Allocs(a) => a.to_vec(),
        WorkingSet::Spans(s) => s.iter().map(|x| x.alloc).collect(),
        WorkingSet::Tenant => Vec::new(),
    };
    v.sort_unstable();
    v.dedup();
    v
}

/// An event recorded after the command just issued on `stream`, owned by the caller.
fn fence(stream: CUstream, ptsz: bool) -> Result<CUevent, CudaError> {
    let mut ev = std::ptr::null_mut();
    check(crate::real!(cuEventCreate(&mut ev, CU_EVENT_DISABLE_TIMING)), "cuEventCreate")?;
    let r = if ptsz { crate::real!(cuEventRecord_ptsz(ev, stream)) } else { crate::real!(cuEventRecord(ev, stream)) };
    if let Err(e) = check(r, "cuEventRecord") {
        crate::real!(cuEventDestroy_v2(ev));
        return Err(e);
    }
    Ok(ev)
}

/// `ws` less the allocations freed since it was computed.
fn live(st: &Shim, mut ws: WorkingSet) -> WorkingSet {
    match &mut ws {
        WorkingSet::Allocs(a) => a.retain(|id| st.is_live(*id)),
        WorkingSet::Spans(s) => s.retain(|x| st.is_live(x.alloc)),
        WorkingSet::Tenant => {}
    }
    ws
}
