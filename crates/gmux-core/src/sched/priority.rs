//! Strict priority: only the highest runnable class runs; round robin inside it.

use super::round_robin::{cycle, Rotation};
use super::{Scheduler, TenantView};
use crate::size::Nanos;
use crate::tenant::TenantId;
use crate::timeline::Timeline;

/// Strict priority classes (larger first), round robin inside a class.
///
/// Each class resumes after its own most recently charged tenant, so a class that
/// was preempted by a higher one picks up its rotation where it left off.
#[derive(Debug, Clone, Default)]
pub struct StrictPriority {
    rotation: Rotation,
}

impl Scheduler for StrictPriority {
    fn name(&self) -> &'static str {
        "priority"
    }

    /// The top runnable class repeated; lower classes never appear while it is runnable.
    fn timeline(&self, tenants: &[TenantView], len: usize) -> Timeline {
        let Some(top) = tenants.iter().filter(|t| t.runnable()).map(|t| t.priority).max() else {
            return Timeline::default();
        };
        let class: Vec<TenantView> = tenants.iter().filter(|t| t.priority == top).copied().collect();
        let after = self.rotation.latest(|id| class.iter().any(|t| t.id == id));
        let turn = class.into_iter().filter(|t| t.runnable()).collect();
        cycle(turn, after, len)
    }

    fn charge(&mut self, tenant: TenantId, _ran: Nanos) {
        self.rotation.charge(tenant);
    }
}

#[cfg(test)]
mod tests {
    use super::super::round_robin::tests::view;
    use super::*;
    use proptest::prelude::*;

    fn ids(t: &Timeline) -> Vec<u32> {
        t.slots.iter().map(|s| s.tenant.0).collect()
    }

    #[test]
    fn top_class_only_with_rotation() {
        let mut ts = [view(0, 0, 1, 5), view(1, 9, 1, 7), view(2, 0, 1, 5), view(3, 9, 1, 7)];
        let mut p = StrictPriority::default();
        assert_eq!(ids(&p.timeline(&ts, 4)), [1, 3, 1, 3]);
        assert_eq!(p.timeline(&ts, 1).head().unwrap().slice, 7);
        p.charge(TenantId(1), 7);
        assert_eq!(ids(&p.timeline(&ts, 3)), [3, 1, 3]);
        ts[1].frozen = true;
        ts[3].ready = false;
        assert_eq!(ids(&p.timeline(&ts, 4)), [0, 2, 0, 2]);
        p.charge(TenantId(0), 5);
        p.charge(TenantId(2), 5);
        p.charge(TenantId(0), 5);
        assert_eq!(ids(&p.timeline(&ts, 2)), [2, 0]);
        ts[3].ready = true;
        p.charge(TenantId(3), 7);
        assert_eq!(ids(&p.timeline(&ts, 2)), [3, 3]);
        ts[3].ready = false;
        assert_eq!(ids(&p.timeline(&ts, 2)), [2, 0], "low class resumes its own rotation");
    }

    #[test]
    fn nothing_runnable_gives_empty() {
        let mut ts = [view(0, 5, 1, 5)];
        ts[0].frozen = true;
        assert!(StrictPriority::default().timeline(&ts, 3).slots.is_empty());
    }

    proptest! {
        #[test]
        fn never_shows_a_lower_class(
            flags in prop::collection::vec((any::<bool>(), any::<bool>(), -3i32..3), 1..8),
            charges in prop::collection::vec(0u32..8, 0..20),
            len in 0usize..20,
        ) {
            let ts: Vec<TenantView> = flags
                .iter()
                .enumerate()
                .map(|(i, &(ready, frozen, prio))| TenantView { ready, frozen, ..view(i as u32, prio, 1, 10) })
                .collect();
            let mut p = StrictPriority::default();
            for id in charges {
                p.charge(TenantId(id), 10);
            }
            let top = ts.iter().filter(|t| t.runnable()).map(|t| t.priority).max();
            let tl = p.timeline(&ts, len);
            prop_assert_eq!(tl.slots.len(), if top.is_some() { len } else { 0 });
            for s in &tl.slots {
                let t = &ts[s.tenant.0 as usize];
                prop_assert!(t.runnable());
                prop_assert_eq!(Some(t.priority), top);
            }
        }
    }
}
