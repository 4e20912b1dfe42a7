//! Commands of one device that reach gmux memory of others: a copy between two devices'
//! memory, a kernel that reads a peer's buffer. Every mapping of a process of several
//! devices grants all of them access ([`crate::devices`]), so the command itself runs as
//! the driver would run it; what gmux adds is residency on each device. Each device's
//! part of the working set is made resident under that device's lock (taken in
//! ascending order, each device's mover working in its own context), the command is
//! issued, and the devices are held until it is done: the host waits for the stream.
//! Such commands are rare (a pipeline's hand-over between stages), and waiting spares
//! each device from tracking another device's streams in flight.

use super::report;
use crate::cuda::*;
use crate::devices::{self, Reach};
use crate::state::{ShimError, WorkingSet};

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
    loop {
        for &d in &devs {
            crate::agent::gate(d);
        }
        let mut held = Vec::with_capacity(devs.len());
        let mut short = None;
        for &d in &devs {
            let mut g = devices::on(d);
            let Some(st) = g.as_mut() else { continue };
            let part = if d == own {
                live(st, ws.clone())
            } else {
                let ranges: Vec<(CUdeviceptr, u64)> = reached.iter().filter(|r| r.dev == d).map(|r| (r.start, r.len)).collect();
                WorkingSet::Allocs(st.allocs_over(&ranges))
            };
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
        }
        devices::take_reached();
        if let Some((d, need)) = short {
            drop(held);
            crate::agent::wait_grant(d, need);
            continue;
        }
        let r = real();
        if r != CUDA_SUCCESS {
            return r;
        }
        let done = if ptsz { crate::real!(cuStreamSynchronize_ptsz(stream)) } else { crate::real!(cuStreamSynchronize(stream)) };
        crate::log!(Debug, "{what} ran on device {own} over memory of devices {devs:?}");
        return done;
    }
}

/// `ws` less the allocations freed since it was computed.
fn live(st: &crate::state::Shim, mut ws: WorkingSet) -> WorkingSet {
    match &mut ws {
        WorkingSet::Allocs(a) => a.retain(|id| st.is_live(*id)),
        WorkingSet::Spans(s) => s.retain(|x| st.is_live(x.alloc)),
        WorkingSet::Tenant => {}
    }
    ws
}
