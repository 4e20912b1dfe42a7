//! Division of the GPU-memory budget among tenants (MSched's OPT across tenants, at
//! tenant granularity; Ghost's limits).
//!
//! Each tenant's shim evicts and populates its own chunks; the daemon decides only how
//! many bytes each tenant may hold. Belady's rule over the timeline: the memory of the
//! tenant that runs furthest in the future is taken first, so the tenant running and
//! the next one are served first, each up to what its next slice uses (the one running,
//! at least what it holds: its forecast may miss what it still uses). A tenant further
//! ahead keeps what it holds and grows only into memory nobody holds: taking memory
//! from another tenant that also runs before it comes round would only move bytes back
//! and forth (two vector adds that each take from the other to fill ahead of their
//! turns both pay the copies again). A tenant with no run ahead (idle, frozen, silent)
//! never grows: it keeps at most what it holds. Granting it free memory would only fill
//! memory it may not use for a long time, and a grant that follows what it holds echoes
//! its own moves back to it. `gmem.limit.low` protects what a tenant holds, up to that
//! limit, from others; `gmem.limit.high` caps it. Inside a tenant, the shim evicts in OPT
//! order over its own forecast.

use crate::tenant::TenantId;
use crate::CHUNK_BYTES;

/// What the daemon knows of one tenant's GPU memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    /// Which tenant.
    pub id: TenantId,
    /// Bytes of GPU memory it holds now.
    pub held: u64,
    /// Bytes its next slice uses (its forecast working set; its footprint without one).
    pub want: u64,
    /// `gmem.limit.low`.
    pub low: u64,
    /// `gmem.limit.high`; `None` is `max`.
    pub high: Option<u64>,
    /// Position of its next run in the timeline (0: running now); `u64::MAX`: not
    /// scheduled (frozen or idle).
    pub next_run: u64,
}

impl Claim {
    /// Most it is served: its want; while it runs, at least what it holds. Taking memory
    /// from the running tenant to fill ahead for the next one would take chunks it may
    /// still use before its slice ends (a forecast misses what a program allocates
    /// anew), and it would fetch them again at once.
    fn ceiling(&self) -> u64 {
        if self.next_run == 0 {
            round(self.want.max(self.held).min(self.high.unwrap_or(u64::MAX)))
        } else {
            self.wanted()
        }
    }

    /// Its want, within `gmem.limit.high`.
    fn wanted(&self) -> u64 {
        round(self.want.min(self.high.unwrap_or(u64::MAX)))
    }

    fn protected(&self) -> u64 {
        round(self.held.min(self.low)).min(self.ceiling())
    }
}

fn round(bytes: u64) -> u64 {
    bytes.div_ceil(CHUNK_BYTES).saturating_mul(CHUNK_BYTES)
}

/// Turns in the timeline (the running tenant's, the next one's) served before anyone
/// keeps what it holds.
pub const AHEAD: usize = 2;

/// The bytes each tenant may hold (in the order of `claims`), within `hbm` (`None`:
/// unlimited). Protected bytes are granted first. Then, in order of next run, each up to
/// its want and `gmem.limit.high`: the tenants whose next run is one of the first
/// [`AHEAD`] distinct ones; the others, what they hold; the others that have a run
/// ahead, what is left.
pub fn divide(hbm: Option<u64>, claims: &[Claim]) -> Vec<u64> {
    let mut caps: Vec<u64> = claims.iter().map(Claim::protected).collect();
    let Some(hbm) = hbm else {
        return claims.iter().map(Claim::ceiling).collect();
    };
    let mut left = hbm.saturating_sub(caps.iter().fold(0, |a, c| a.saturating_add(*c)));
    let mut order: Vec<usize> = (0..claims.len()).collect();
    order.sort_by_key(|&i| (claims[i].next_run, claims[i].id));
    let mut turns: Vec<u64> = claims.iter().map(|c| c.next_run).collect();
    turns.sort_unstable();
    turns.dedup();
    let after_soon = turns.get(AHEAD).copied().unwrap_or(u64::MAX);
    let (soon, later): (Vec<usize>, Vec<usize>) = order.into_iter().partition(|&i| claims[i].next_run < after_soon);
    let want = |i: usize| claims[i].ceiling();
    let holds = |i: usize| round(claims[i].held).min(claims[i].ceiling());
    let mut serve = |tenants: &[usize], upto: &dyn Fn(usize) -> u64| {
        for &i in tenants {
            let more = upto(i).saturating_sub(caps[i]).min(left) / CHUNK_BYTES * CHUNK_BYTES;
            caps[i] += more;
            left -= more;
        }
    };
    serve(&soon, &want);
    serve(&later, &holds);
    let scheduled: Vec<usize> = later.into_iter().filter(|&i| claims[i].next_run != u64::MAX).collect();
    serve(&scheduled, &want);
    caps
}

/// Whether every tenant's want fits at once: then all run concurrently and only
/// priority gates them.
pub fn all_fit(hbm: Option<u64>, claims: &[Claim]) -> bool {
    hbm.is_none_or(|h| claims.iter().map(Claim::wanted).fold(0u64, u64::saturating_add) <= h)
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;

    fn claim(id: u32, held: u64, want: u64, next_run: u64) -> Claim {
        Claim { id: TenantId(id), held, want, low: 0, high: None, next_run }
    }

    #[test]
    fn the_tenant_running_latest_gives_first() {
        // 16 GiB, four tenants of 8 GiB: the running one and the next get all of it.
        let c = [claim(0, 8 * G, 8 * G, 3), claim(1, 8 * G, 8 * G, 0), claim(2, 0, 8 * G, 1), claim(3, 0, 8 * G, 2)];
        assert_eq!(divide(Some(16 * G), &c), vec![0, 8 * G, 8 * G, 0]);
    }

    /// 200% of 16 GiB: two matmuls whose slices use 3 and 1.5 GiB, two vector adds of 8.
    /// While the first matmul runs, the second is next: the vector adds keep what they
    /// hold, and neither takes from the other to fill ahead of its turn.
    #[test]
    fn tenants_further_ahead_keep_what_they_hold() {
        let m = 3 * G / 2;
        let c = [claim(0, 2 * m, 2 * m, 0), claim(1, m, m, 1), claim(2, 7 * m / 3, 8 * G, 2), claim(3, 8 * G, 8 * G, 3)];
        assert_eq!(divide(Some(16 * G), &c), vec![2 * m, m, 7 * m / 3, 8 * G], "nothing moves");
        // Next slot: the second matmul runs, the first vector add is next and takes what it
        // lacks from the tenant running last (the first matmul), then from the other add.
        let c = [claim(0, 2 * m, 2 * m, 3), claim(1, m, m, 0), claim(2, 7 * m / 3, 8 * G, 1), claim(3, 8 * G, 8 * G, 2)];
        assert_eq!(divide(Some(16 * G), &c), vec![0, m, 8 * G, 8 * G - m]);
        // Free memory still goes to tenants further ahead, in the order of their turns.
        let c = [claim(0, 0, G, 0), claim(1, G, 4 * G, 2), claim(2, 2 * G, 4 * G, 3)];
        assert_eq!(divide(Some(8 * G), &c), vec![G, 4 * G, 3 * G]);
    }

    /// 5 GiB: one tenant runs and needs 1 GiB; two idle ones hold the rest but part. An
    /// idle one that gave memory back does not get it back, and the free memory stays
    /// for the tenant that runs (nothing moves back and forth).
    #[test]
    fn a_tenant_with_no_run_ahead_never_grows() {
        let idle = |id, held| claim(id, held, 3 * G + G / 2, u64::MAX);
        let c = [claim(0, 0, G, 0), idle(1, 3 * G), idle(2, G)];
        assert_eq!(divide(Some(5 * G), &c), vec![G, 3 * G, G]);
        let c = [claim(0, 0, G, 0), idle(1, 2 * G), idle(2, G / 2)];
        assert_eq!(divide(Some(5 * G), &c), vec![G, 2 * G, G / 2], "the idle ones keep what they hold, no more");
        // Third in turn, the same tenant grows into what is free; idle, it keeps what it holds.
        let c = [claim(0, 0, G, 0), claim(1, 2 * G, 4 * G, 1), claim(2, G / 2, 4 * G, 2)];
        assert_eq!(divide(Some(8 * G), &c), vec![G, 4 * G, 3 * G]);
        let c = [claim(0, 0, G, 0), claim(1, 2 * G, 4 * G, 1), claim(2, G / 2, 4 * G, u64::MAX)];
        assert_eq!(divide(Some(8 * G), &c), vec![G, 4 * G, G / 2]);
    }

    /// 200% of three decoders: the running one holds 3.5 GiB though its forecast says
    /// 3.3 (what it allocated since is not in it). The next one fills only into the rest.
    #[test]
    fn the_running_tenant_keeps_what_it_holds_through_its_slice() {
        const M: u64 = 1 << 20;
        let c = [claim(0, 3584 * M, 3380 * M, 0), claim(1, 1740 * M, 3482 * M, 1), claim(2, 0, 3482 * M, 2)];
        assert_eq!(divide(Some(5324 * M), &c), vec![3584 * M, 1740 * M, 0]);
        // Next in turn rather than running, the same tenant is held to its want.
        let c = [claim(0, 3584 * M, 3380 * M, 1), claim(1, 1740 * M, 3482 * M, 0)];
        assert_eq!(divide(Some(5324 * M), &c), vec![1842 * M, 3482 * M]);
    }

    /// Whether all fit counts what each wants, not spare memory a tenant still holds.
    #[test]
    fn all_fit_counts_wants_not_what_is_held() {
        assert!(all_fit(Some(8 * G), &[claim(0, 6 * G, 2 * G, 0), claim(1, 0, 2 * G, 0)]));
        assert!(!all_fit(Some(8 * G), &[claim(0, 0, 6 * G, 0), claim(1, 0, 3 * G, 0)]));
    }

    #[test]
    fn low_protects_what_is_held_and_high_caps() {
        let mut a = claim(0, 6 * G, 8 * G, 5);
        a.low = 4 * G;
        let mut b = claim(1, 0, 20 * G, 0);
        b.high = Some(10 * G);
        // a keeps 4 GiB although it runs last; b is capped at 10 GiB; a gets 2 back.
        assert_eq!(divide(Some(16 * G), &[a, b]), vec![6 * G, 10 * G]);
        b.high = None;
        assert_eq!(divide(Some(16 * G), &[a, b]), vec![4 * G, 12 * G]);
    }

    #[test]
    fn everything_fits_means_everyone_gets_its_want() {
        let c = [claim(0, 0, 3 * G, 0), claim(1, 0, 5 * G, 1)];
        assert!(all_fit(Some(8 * G), &c));
        assert!(!all_fit(Some(8 * G - CHUNK_BYTES), &c));
        assert_eq!(divide(Some(8 * G), &c), vec![3 * G, 5 * G]);
        assert_eq!(divide(None, &c), vec![3 * G, 5 * G]);
    }
}
