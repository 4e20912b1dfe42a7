//! Invariants of the GPU-memory division among tenants.

use gmux_core::hbm::{divide, Claim, AHEAD};
use gmux_core::{TenantId, CHUNK_BYTES};
use proptest::prelude::*;

fn claims() -> impl Strategy<Value = Vec<Claim>> {
    prop::collection::vec((0u64..64, 0u64..64, 0u64..16, prop::option::of(0u64..64), prop_oneof![4 => 0u64..6, 1 => Just(u64::MAX)]), 1..7).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (held, want, low, high, next_run))| Claim {
                id: TenantId(i as u32),
                held: held * CHUNK_BYTES,
                want: want * CHUNK_BYTES,
                low: low * CHUNK_BYTES,
                high: high.map(|h| h.max(low) * CHUNK_BYTES),
                next_run,
            })
            .collect()
    })
}

proptest! {
    /// The budget holds, protection holds, and no tenant gets more than it wants or its
    /// high limit. Belady across tenants: while a tenant of the first `AHEAD` turns lacks
    /// memory, every tenant that runs later has only its protected bytes; while a tenant
    /// further ahead lacks some of what it holds, every tenant that runs later has only
    /// its protected bytes; and a tenant further ahead grows past what it holds only when
    /// every tenant that runs sooner has all it wants. The running tenant is served at
    /// least what it holds; a tenant with no run ahead never grows past what it holds.
    #[test]
    fn division_keeps_budgets_and_belady_order(cs in claims(), hbm in 0u64..160) {
        let hbm = hbm * CHUNK_BYTES;
        let ceiling = |c: &Claim| if c.next_run == 0 { c.want.max(c.held) } else { c.want }.min(c.high.unwrap_or(u64::MAX));
        let protected: Vec<u64> = cs.iter().map(|c| c.held.min(c.low).min(ceiling(c))).collect();
        prop_assume!(protected.iter().sum::<u64>() <= hbm);
        let caps = divide(Some(hbm), &cs);
        prop_assert!(caps.iter().sum::<u64>() <= hbm, "caps {caps:?} over {hbm}");
        let mut turns: Vec<u64> = cs.iter().map(|c| c.next_run).collect();
        turns.sort_unstable();
        turns.dedup();
        let soon = |c: &Claim| c.next_run != u64::MAX && turns.iter().position(|t| *t == c.next_run).expect("listed") < AHEAD;
        for (i, c) in cs.iter().enumerate() {
            prop_assert!(caps[i] >= protected[i]);
            prop_assert!(caps[i] <= ceiling(c));
            prop_assert_eq!(caps[i] % CHUNK_BYTES, 0);
            if c.next_run == u64::MAX {
                prop_assert!(caps[i] <= protected[i].max(c.held.min(ceiling(c))), "{} has no run ahead yet grows", i);
            }
            let short = if soon(c) { caps[i] < ceiling(c) } else { caps[i] < c.held.min(ceiling(c)) };
            for (j, d) in cs.iter().enumerate() {
                if d.next_run > c.next_run && short {
                    prop_assert_eq!(caps[j], protected[j], "{} runs later than {} yet keeps more", j, i);
                }
                if d.next_run > c.next_run && !soon(d) && caps[i] < ceiling(c) {
                    prop_assert!(caps[j] <= protected[j].max(d.held.min(ceiling(d))), "{} grows past what it holds while {} lacks", j, i);
                }
            }
        }
    }
}
