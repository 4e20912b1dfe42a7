//! The arbiter with scheduling hooks: what task_init answers is applied within bounds, a
//! refusal reaches the process, timeslice changes slices within bounds, and task_destroy
//! comes once per tenant.

use super::trust::{Hello, Sender};
use super::*;
use crate::hooks::{Admission, Joining, SchedHooks};
use crate::protocol::PROTOCOL;
use std::sync::{Arc, Mutex};

const G: u64 = 1 << 30;
const MS: Nanos = 1_000_000;

/// Refuses uid 666, gives new tenants priority 7 and a 50 ms slice (uid 1000) or asks
/// absurd values (uid 1001); doubles each slice (or asks for none); logs what it saw.
#[derive(Default)]
struct Rules {
    seen: Arc<Mutex<Vec<String>>>,
    zero_slices: bool,
}

impl SchedHooks for Rules {
    fn task_init(&mut self, j: &Joining) -> Admission {
        self.seen.lock().unwrap().push(format!("init {} new {} procs {} prio {}", j.uid, j.new_tenant, j.processes, j.priority));
        match j.uid {
            666 => Admission { refuse: true, ..Default::default() },
            1001 => Admission { refuse: false, priority: Some(i32::MAX), timeslice: Some(u64::MAX) },
            _ => Admission { refuse: false, priority: Some(7), timeslice: Some(50 * MS) },
        }
    }
    fn task_destroy(&mut self, t: TenantId) {
        self.seen.lock().unwrap().push(format!("destroy {}", t.0));
    }
    fn timeslice(&mut self, _t: TenantId, slice: Nanos, _cost: Option<Nanos>) -> Nanos {
        if self.zero_slices {
            0
        } else {
            2 * slice
        }
    }
}

fn hello(tenant: &str) -> Hello<'_> {
    Hello { version: PROTOCOL, tenant, priority: 0, high: None, resume: None, gpu: None }
}

fn sender(pid: u32, uid: u32) -> Sender {
    Sender { pid, uid, admin: false, start: 1 }
}

#[test]
fn task_init_refuses_or_sets_priority_and_slice_within_bounds() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut d = Arbiter::new(Some(8 * G), None, Policy::RoundRobin, Switch::Msched);
    d.sched_hooks = Box::new(Rules { seen: seen.clone(), zero_slices: false });
    let e = d.admit(1, sender(100, 666), &hello("x")).unwrap_err();
    assert!(e.contains("policy (task_init) refused a process of tenant \"x\""), "{e}");
    assert!(d.live().is_empty(), "nothing joined");
    let a = d.admit(2, sender(200, 1000), &hello("a")).unwrap();
    assert_eq!((d.tenants.get(a).priority, d.tenants.get(a).limits.timeslice), (7, 50 * MS), "above the caller's ceiling of 0: the owner loaded the policy");
    let b = d.admit(3, sender(300, 1001), &hello("b")).unwrap();
    assert_eq!((d.tenants.get(b).priority, d.tenants.get(b).limits.timeslice), (1_000_000, crate::knobs::MAX_TIMESLICE), "kept within the daemon's bounds");
    d.admit(4, sender(400, 1000), &hello("a")).unwrap();
    assert_eq!(d.tenants.get(a).limits.timeslice, 50 * MS);
    assert_eq!(
        *seen.lock().unwrap(),
        ["init 666 new true procs 0 prio 0", "init 1000 new true procs 0 prio 0", "init 1001 new true procs 1 prio 0", "init 1000 new false procs 2 prio 0"]
    );
    d.leave(2);
    assert_eq!(seen.lock().unwrap().len(), 4, "a still has a process");
    d.leave(4);
    d.leave(3);
    assert_eq!(seen.lock().unwrap()[4..], ["destroy 0".to_string(), "destroy 1".to_string()]);
}

#[test]
fn timeslice_changes_each_slice_within_bounds() {
    for (zero, expected) in [(false, 40 * MS), (true, 1_000)] {
        let mut d = Arbiter::new(Some(8 * G), None, Policy::RoundRobin, Switch::Msched);
        d.sched_hooks = Box::new(Rules { seen: Arc::default(), zero_slices: zero });
        for c in 0..2 {
            d.join(c, 100 + c as u32, &format!("t{c}"), 0);
            d.report(c, ShimReport { held: 0, want: 8 * G, allocated: 8 * G, busy: true, ..Default::default() });
        }
        d.decide(0);
        assert_eq!(d.running.map(|r| r.slice), Some(expected), "a 20 ms timeslice, zero slices: {zero}");
    }
}
