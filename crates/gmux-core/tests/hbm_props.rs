//! Invariants of the GPU-memory division among tenants.

use gmux_core::hbm::{divide, Claim};
use gmux_core::{TenantId, CHUNK_BYTES};
use proptest::prelude::*;

fn claims() -> impl Strategy<Value = Vec<Claim>> {
    prop::collection::vec((0u64..64, 0u64..64, 0u64..16, prop::option::of(0u64..64), 0u64..6), 1..7).prop_map(|v| {
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
    /// The budget holds, protection holds, no tenant gets more than it wants or its
    /// high limit, and a tenant that runs later keeps more than its protected bytes only
    /// when every tenant that runs sooner has all it wants (Belady across tenants).
    #[test]
    fn division_keeps_budgets_and_belady_order(cs in claims(), hbm in 0u64..160) {
        let hbm = hbm * CHUNK_BYTES;
        let protected: Vec<u64> = cs.iter().map(|c| c.held.min(c.low).min(c.want.min(c.high.unwrap_or(u64::MAX)))).collect();
        prop_assume!(protected.iter().sum::<u64>() <= hbm);
        let caps = divide(Some(hbm), &cs);
        prop_assert!(caps.iter().sum::<u64>() <= hbm, "caps {caps:?} over {hbm}");
        for (i, c) in cs.iter().enumerate() {
            let ceiling = c.want.min(c.high.unwrap_or(u64::MAX));
            prop_assert!(caps[i] >= protected[i]);
            prop_assert!(caps[i] <= ceiling);
            prop_assert_eq!(caps[i] % CHUNK_BYTES, 0);
            for (j, d) in cs.iter().enumerate() {
                if d.next_run > c.next_run && caps[i] < ceiling {
                    prop_assert_eq!(caps[j], protected[j], "{} runs later than {} yet keeps more", j, i);
                }
            }
        }
    }
}
