//! The `admission` hook in the dispatcher: a loaded program may keep marked jobs
//! waiting, within gmux's bounds ([`gmux_core::sched::dispatch::admit`]). A process
//! whose running jobs all wait is held through its channel's word, as a release policy
//! holds one.

use super::{Channels, Open};
use crate::server::lock;
use gmux_core::hooks::SchedHooks;
use gmux_core::sched::dispatch::{admit, Candidate};
use gmux_core::Nanos;
use std::sync::atomic::Ordering;

impl Channels {
    /// The loaded policies' `admission` program from now on (`None`: none). A process
    /// held for the old one is decided again at the dispatcher's next tick.
    pub(crate) fn set_admission(&self, hooks: Option<Box<dyn SchedHooks>>) {
        *lock(&self.admission) = hooks;
        self.bounded.store(true, Ordering::Relaxed);
    }

    /// Asks the `admission` program, if one is loaded, about the jobs of `open` that wait,
    /// and holds (in `bounds`) the processes whose running jobs all wait. Returns whether
    /// a job still waits.
    pub(super) fn hold_for_admission(&self, open: &mut [&mut Open], bounds: &mut [u32], now: Nanos) -> bool {
        let mut hooks = lock(&self.admission);
        let Some(hooks) = hooks.as_mut().filter(|h| h.admits()) else { return false };
        let mut procs: Vec<Candidate<'_>> = open
            .iter_mut()
            .zip(bounds.iter())
            .map(|(o, b)| Candidate { tenant: o.tenant, pid: o.pid, jobs: &mut o.jobs, free: *b != gmux_channel::HOLD })
            .collect();
        let held = admit(&mut procs, now, &mut |j| hooks.admission(j));
        let mut waiting = false;
        for ((p, h), b) in procs.iter_mut().zip(&held).zip(bounds.iter_mut()) {
            waiting |= p.jobs.admitted() < p.jobs.running();
            if *h {
                *b = gmux_channel::HOLD;
            }
        }
        waiting
    }
}
