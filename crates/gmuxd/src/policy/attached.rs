//! The loaded policies as one set of scheduling hooks.

use crate::server::lock;
use gmux_bpf::sched::SchedPolicy;
use gmux_core::hooks::{Admission, JobAsk, Joining, SchedHooks};
use gmux_core::{Nanos, TenantId};
use std::sync::{Arc, Mutex};

/// The loaded policies as the arbiter's scheduling hooks: each hook runs the one program
/// attached to it.
pub(super) struct Attached(pub(super) Vec<Arc<Mutex<SchedPolicy>>>);

impl Attached {
    fn each(&self, mut f: impl FnMut(&mut SchedPolicy)) {
        for p in &self.0 {
            f(&mut lock(p));
        }
    }
}

impl SchedHooks for Attached {
    fn clock(&mut self, now: Nanos) {
        self.each(|p| p.clock(now));
    }
    fn task_init(&mut self, j: &Joining) -> Admission {
        let mut a = Admission::default();
        self.each(|p| {
            let b = p.task_init(j);
            a = Admission { refuse: a.refuse || b.refuse, priority: b.priority.or(a.priority), timeslice: b.timeslice.or(a.timeslice) };
        });
        a
    }
    fn task_destroy(&mut self, t: TenantId) {
        self.each(|p| p.task_destroy(t));
    }
    fn timeslice(&mut self, t: TenantId, mut slice: Nanos, cost: Option<Nanos>) -> Nanos {
        self.each(|p| slice = p.timeslice(t, slice, cost));
        slice
    }
    fn admits(&self) -> bool {
        self.0.iter().any(|p| lock(p).admits())
    }
    fn admission(&mut self, j: &JobAsk) -> bool {
        let mut yes = true;
        self.each(|p| yes &= p.admission(j));
        yes
    }
}
