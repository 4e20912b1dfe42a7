//! Round robin: each runnable tenant in turn, by [`TenantId`], for its timeslice.

use super::{Scheduler, TenantView};
use crate::size::Nanos;
use crate::tenant::TenantId;
use crate::timeline::{Slot, Timeline};
use std::collections::BTreeMap;

/// Who was charged most recently; shared with [`super::StrictPriority`], which
/// rotates inside each class from the class's own most recent tenant.
#[derive(Debug, Clone, Default)]
pub(super) struct Rotation {
    seq: u64,
    charged: BTreeMap<TenantId, u64>,
}

impl Rotation {
    pub(super) fn charge(&mut self, tenant: TenantId) {
        self.seq += 1;
        self.charged.insert(tenant, self.seq);
    }

    /// The most recently charged tenant for which `among` holds.
    pub(super) fn latest(&self, among: impl Fn(TenantId) -> bool) -> Option<TenantId> {
        self.charged.iter().filter(|(id, _)| among(**id)).max_by_key(|(_, seq)| **seq).map(|(id, _)| *id)
    }
}

/// `len` slots cycling through `turn` by id, starting with the first id after `after`.
pub(super) fn cycle(mut turn: Vec<TenantView>, after: Option<TenantId>, len: usize) -> Timeline {
    if turn.is_empty() {
        return Timeline::default();
    }
    turn.sort_by_key(|t| t.id);
    let start = after.and_then(|a| turn.iter().position(|t| t.id > a)).unwrap_or(0);
    let slots = (0..len)
        .map(|i| {
            let t = &turn[(start + i) % turn.len()];
            Slot { tenant: t.id, slice: t.timeslice }
        })
        .collect();
    Timeline { slots }
}

/// Round robin over runnable tenants, resuming after the last charged one.
#[derive(Debug, Clone, Default)]
pub struct RoundRobin {
    rotation: Rotation,
}

impl Scheduler for RoundRobin {
    fn name(&self) -> &'static str {
        "rr"
    }

    fn timeline(&self, tenants: &[TenantView], len: usize) -> Timeline {
        let runnable = tenants.iter().filter(|t| t.runnable()).copied().collect();
        cycle(runnable, self.rotation.latest(|_| true), len)
    }

    fn charge(&mut self, tenant: TenantId, _ran: Nanos) {
        self.rotation.charge(tenant);
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use proptest::prelude::*;

    pub(crate) fn view(id: u32, priority: i32, weight: u32, timeslice: Nanos) -> TenantView {
        TenantView { id: TenantId(id), ready: true, frozen: false, priority, weight, timeslice }
    }

    fn ids(t: &Timeline) -> Vec<u32> {
        t.slots.iter().map(|s| s.tenant.0).collect()
    }

    #[test]
    fn equal_shares_over_30_slots() {
        let ts = [view(0, 0, 1, 10), view(1, 0, 1, 20), view(2, 0, 1, 30)];
        let mut rr = RoundRobin::default();
        let mut count = [0; 3];
        for _ in 0..30 {
            let head = rr.timeline(&ts, 4).head().unwrap();
            assert_eq!(head.slice, ts[head.tenant.0 as usize].timeslice);
            count[head.tenant.0 as usize] += 1;
            rr.charge(head.tenant, head.slice);
        }
        assert_eq!(count, [10, 10, 10]);
    }

    #[test]
    fn resumes_after_last_charged_and_is_pure() {
        let ts = [view(0, 0, 1, 5), view(3, 0, 1, 5), view(7, 0, 1, 5)];
        let mut rr = RoundRobin::default();
        assert_eq!(ids(&rr.timeline(&ts, 5)), [0, 3, 7, 0, 3]);
        rr.charge(TenantId(3), 5);
        assert_eq!(ids(&rr.timeline(&ts, 4)), [7, 0, 3, 7]);
        assert_eq!(rr.timeline(&ts, 4), rr.timeline(&ts, 4));
        rr.charge(TenantId(5), 5);
        assert_eq!(ids(&rr.timeline(&ts, 2)), [7, 0]);
    }

    #[test]
    fn frozen_and_idle_never_appear() {
        let mut ts = [view(0, 0, 1, 5), view(1, 0, 1, 5), view(2, 0, 1, 5)];
        ts[0].frozen = true;
        ts[2].ready = false;
        let rr = RoundRobin::default();
        assert_eq!(ids(&rr.timeline(&ts, 6)), [1; 6]);
        ts[1].ready = false;
        assert!(rr.timeline(&ts, 6).slots.is_empty());
    }

    proptest! {
        #[test]
        fn slot_counts_differ_by_at_most_one(
            flags in prop::collection::vec((any::<bool>(), any::<bool>(), 1u64..1000), 1..8),
            first in prop::collection::vec(0u32..8, 0..5),
            steps in 0usize..200,
        ) {
            let ts: Vec<TenantView> = flags
                .iter()
                .enumerate()
                .map(|(i, &(ready, frozen, slice))| TenantView { ready, frozen, ..view(i as u32, 0, 1, slice) })
                .collect();
            let mut rr = RoundRobin::default();
            for id in first {
                rr.charge(TenantId(id), 1);
            }
            let mut count = vec![0usize; ts.len()];
            for _ in 0..steps {
                let Some(head) = rr.timeline(&ts, 1).head() else { break };
                count[head.tenant.0 as usize] += 1;
                rr.charge(head.tenant, head.slice);
            }
            let runnable: Vec<usize> = ts.iter().filter(|t| t.runnable()).map(|t| count[t.id.0 as usize]).collect();
            for t in ts.iter().filter(|t| !t.runnable()) {
                prop_assert_eq!(count[t.id.0 as usize], 0);
            }
            if let (Some(lo), Some(hi)) = (runnable.iter().min(), runnable.iter().max()) {
                prop_assert!(hi - lo <= 1, "counts {:?}", count);
            }
        }
    }
}
