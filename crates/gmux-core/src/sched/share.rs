//! Weighted share: stride scheduling, GPU time proportional to weight.

use super::{Scheduler, TenantView};
use crate::size::Nanos;
use crate::tenant::TenantId;
use crate::timeline::{Slot, Timeline};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::Mutex;

/// Stride scheduling over runnable tenants.
///
/// Each tenant has a pass; the runnable tenant with the smallest pass runs next (ties
/// by [`TenantId`]) and `charge` adds `ran * SCALE / weight` to its pass (weight 0
/// counts as 1). The timeline simulates those picks assuming full timeslices.
///
/// Idle tenants bank no credit. The scheduler keeps a virtual time: the pass at which
/// the most recently charged slot started, i.e. the smallest pass among the runnable
/// tenants when it was picked (start-time fair queueing). A tenant's effective pass
/// is `max(pass, virtual time)`, both in `timeline` and in `charge`, so a tenant
/// returning from idle (or new) starts level with the others, at most one slice
/// ahead of them. Charges are expected to follow the timeline's head.
///
/// `charge` receives no weight, so weights are taken from the views last passed to
/// `timeline` (a memo only: it never changes what `timeline` returns); a tenant
/// charged before any timeline showed it counts with weight 1.
#[derive(Debug, Default)]
pub struct WeightedShare {
    pass: BTreeMap<TenantId, u128>,
    vtime: u128,
    weights: Mutex<BTreeMap<TenantId, u32>>,
}

impl WeightedShare {
    /// Pass units per nanosecond at weight 1.
    pub const SCALE: u128 = 1 << 20;

    /// Effective pass of `tenant`: its pass, raised to the virtual time.
    pub fn pass(&self, tenant: TenantId) -> u128 {
        self.pass.get(&tenant).copied().unwrap_or(0).max(self.vtime)
    }

    fn stride(ran: Nanos, weight: u32) -> u128 {
        ran as u128 * Self::SCALE / weight.max(1) as u128
    }

    fn weights(&self) -> std::sync::MutexGuard<'_, BTreeMap<TenantId, u32>> {
        self.weights.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Clone for WeightedShare {
    fn clone(&self) -> Self {
        WeightedShare { pass: self.pass.clone(), vtime: self.vtime, weights: Mutex::new(self.weights().clone()) }
    }
}

impl Scheduler for WeightedShare {
    fn name(&self) -> &'static str {
        "share"
    }

    fn timeline(&self, tenants: &[TenantView], len: usize) -> Timeline {
        self.weights().extend(tenants.iter().map(|t| (t.id, t.weight)));
        let run: Vec<TenantView> = tenants.iter().filter(|t| t.runnable()).copied().collect();
        if run.is_empty() {
            return Timeline::default();
        }
        // The smallest pass first, ties by id: a heap keeps each pick O(log n).
        let mut heap: BinaryHeap<Reverse<(u128, TenantId, usize)>> = run.iter().enumerate().map(|(i, t)| Reverse((self.pass(t.id), t.id, i))).collect();
        let slots = (0..len)
            .map(|_| {
                let Reverse((pass, id, i)) = heap.pop().expect("non-empty");
                let t = &run[i];
                heap.push(Reverse((pass + Self::stride(t.timeslice, t.weight).max(1), id, i)));
                Slot { tenant: t.id, slice: t.timeslice }
            })
            .collect();
        Timeline { slots }
    }

    fn charge(&mut self, tenant: TenantId, ran: Nanos) {
        let weight = self.weights().get(&tenant).copied().unwrap_or(1);
        let start = self.pass(tenant);
        self.vtime = start;
        self.pass.insert(tenant, start + Self::stride(ran, weight));
    }
}

#[cfg(test)]
mod tests {
    use super::super::round_robin::tests::view;
    use super::*;
    use proptest::prelude::*;

    const MS: Nanos = 1_000_000;

    fn run(s: &mut WeightedShare, ts: &[TenantView], slots: usize) -> BTreeMap<u32, Nanos> {
        let mut time = BTreeMap::new();
        for _ in 0..slots {
            let head = s.timeline(ts, 3).head().unwrap();
            *time.entry(head.tenant.0).or_insert(0) += head.slice;
            s.charge(head.tenant, head.slice);
        }
        time
    }

    #[test]
    fn weights_1_to_3_give_time_1_to_3() {
        for (slice_a, slice_b) in [(MS, MS), (3 * MS, MS), (MS, 2 * MS)] {
            let ts = [view(0, 0, 1, slice_a), view(1, 0, 3, slice_b)];
            let time = run(&mut WeightedShare::default(), &ts, 400);
            let ratio = time[&1] as f64 / time[&0] as f64;
            assert!((ratio / 3.0 - 1.0).abs() < 0.02, "ratio {ratio} for slices {slice_a}/{slice_b}");
        }
    }

    #[test]
    fn timeline_simulates_strides_and_is_pure() {
        let ts = [view(0, 0, 1, MS), view(1, 0, 2, MS)];
        let s = WeightedShare::default();
        let ids: Vec<u32> = s.timeline(&ts, 6).slots.iter().map(|x| x.tenant.0).collect();
        assert_eq!(ids, [0, 1, 1, 0, 1, 1]);
        assert_eq!(s.timeline(&ts, 6), s.timeline(&ts, 6));
    }

    #[test]
    fn idle_tenant_banks_no_credit() {
        let mut ts = [view(0, 0, 1, MS), view(1, 0, 1, MS)];
        ts[1].ready = false;
        let mut s = WeightedShare::default();
        assert_eq!(run(&mut s, &ts, 100)[&0], 100 * MS);
        ts[1].ready = true;
        let head: Vec<u32> = s.timeline(&ts, 20).slots.iter().map(|x| x.tenant.0).collect();
        assert_eq!(head.iter().filter(|&&t| t == 1).count(), 10);
        let time = run(&mut s, &ts, 20);
        assert_eq!((time[&0], time[&1]), (10 * MS, 10 * MS));
    }

    #[test]
    fn weight_zero_counts_as_one_and_frozen_never_runs() {
        let mut ts = [view(0, 0, 0, MS), view(1, 0, 1, MS), view(2, 0, 5, MS)];
        ts[2].frozen = true;
        let time = run(&mut WeightedShare::default(), &ts, 40);
        assert_eq!((time[&0], time[&1], time.get(&2)), (20 * MS, 20 * MS, None));
        ts[0].ready = false;
        ts[1].ready = false;
        assert!(WeightedShare::default().timeline(&ts, 5).slots.is_empty());
    }

    proptest! {
        #[test]
        fn passes_stay_within_one_stride(
            specs in prop::collection::vec((1u32..10, 1u64..5_000), 1..6),
            steps in 0usize..300,
        ) {
            let ts: Vec<TenantView> =
                specs.iter().enumerate().map(|(i, &(w, slice))| view(i as u32, 0, w, slice)).collect();
            let mut s = WeightedShare::default();
            run(&mut s, &ts, steps);
            let max_stride = ts.iter().map(|t| WeightedShare::stride(t.timeslice, t.weight)).max().unwrap();
            let passes: Vec<u128> = ts.iter().map(|t| s.pass(t.id)).collect();
            let spread = passes.iter().max().unwrap() - passes.iter().min().unwrap();
            prop_assert!(spread <= max_stride, "passes {:?}, max stride {}", passes, max_stride);
        }
    }
}
