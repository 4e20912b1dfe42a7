//! `gmem.events`: how often a tenant met each memory boundary, counted as cgroup v2's
//! `memory.events` counts: once each time a condition begins, at the daemon's decisions.

use serde::{Deserialize, Serialize};

/// One of the conditions `gmem.events` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemEvent {
    /// The division gave the tenant less than it held while it held at most its
    /// `gmem.limit.low`: its protection did not hold (the lows of all tenants fit the
    /// budget, so this stays 0 unless something is wrong).
    Low,
    /// It wanted more than its `gmem.limit.high`: it evicts its own memory to stay
    /// under it.
    High,
    /// One command of it needed more at once than its `gmem.limit.high`: part of it ran
    /// from host memory (or the process ended, as `GMUX_OVERSIZE` says).
    Max,
    /// A command of it waited for memory while the budget was all given out.
    Oom,
    /// The division gave it less than it held (or may have grown to under its last
    /// grant, up to what it allocated), taking memory it will use or that others claim:
    /// others' need evicted it. Memory it holds beyond its forecast that nobody claims
    /// is trimmed without a count.
    Swap,
}

impl MemEvent {
    /// All of them, in `gmem.events` order.
    pub const ALL: [MemEvent; 5] = [MemEvent::Low, MemEvent::High, MemEvent::Max, MemEvent::Oom, MemEvent::Swap];

    /// Its name in `gmem.events`.
    pub fn name(self) -> &'static str {
        match self {
            MemEvent::Low => "low",
            MemEvent::High => "high",
            MemEvent::Max => "max",
            MemEvent::Oom => "oom",
            MemEvent::Swap => "swap",
        }
    }
}

/// A tenant's counts, one per [`MemEvent`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemEvents {
    /// [`MemEvent::Low`].
    pub low: u64,
    /// [`MemEvent::High`].
    pub high: u64,
    /// [`MemEvent::Max`].
    pub max: u64,
    /// [`MemEvent::Oom`].
    pub oom: u64,
    /// [`MemEvent::Swap`].
    pub swap: u64,
}

impl MemEvents {
    /// The count of `e`.
    pub fn get(&self, e: MemEvent) -> u64 {
        match e {
            MemEvent::Low => self.low,
            MemEvent::High => self.high,
            MemEvent::Max => self.max,
            MemEvent::Oom => self.oom,
            MemEvent::Swap => self.swap,
        }
    }

    fn bump(&mut self, e: MemEvent) {
        let c = match e {
            MemEvent::Low => &mut self.low,
            MemEvent::High => &mut self.high,
            MemEvent::Max => &mut self.max,
            MemEvent::Oom => &mut self.oom,
            MemEvent::Swap => &mut self.swap,
        };
        *c = c.saturating_add(1);
    }

    /// `gmem.events` as `gmux get` prints it: one `name count` line each.
    pub fn text(&self) -> String {
        MemEvent::ALL.iter().map(|e| format!("{} {}", e.name(), self.get(*e))).collect::<Vec<_>>().join("\n")
    }
}

/// What a tenant is and gets at one decision, as far as `gmem.events` looks.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sight {
    /// GPU memory it holds, or may hold: up to what it was granted since its last report.
    pub held: u64,
    /// What its next slice is forecast to use, or a waiting command needs, if more.
    pub want: u64,
    /// Bytes a command of it waits for beyond its grant (0: none waits).
    pub blocked: u64,
    /// The most one command of it has needed at once.
    pub largest: u64,
    /// What the division gives it.
    pub cap: u64,
    /// `gmem.limit.low`.
    pub low: u64,
    /// `gmem.limit.high` (`None`: max).
    pub high: Option<u64>,
    /// The budget is all given out.
    pub budget_full: bool,
    /// What the division gives the other tenants before spare memory is shared out:
    /// their claims.
    pub others: u64,
    /// The budget (`u64::MAX`: none).
    pub budget: u64,
}

impl Sight {
    /// Whether `e` holds.
    fn holds(&self, e: MemEvent) -> bool {
        match e {
            MemEvent::Low => self.low > 0 && self.held <= self.low && self.cap < self.held,
            MemEvent::High => self.high.is_some_and(|h| self.want > h),
            MemEvent::Max => self.high.is_some_and(|h| self.largest > h),
            MemEvent::Oom => self.blocked > 0 && self.budget_full,
            MemEvent::Swap => self.cap < self.held && (self.cap < self.want || self.held.saturating_add(self.others) > self.budget),
        }
    }
}

/// A tenant's counts and which conditions held at the last decision.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counter {
    /// The counts.
    pub counts: MemEvents,
    held: [bool; 5],
}

impl Counter {
    /// Takes what holds now; returns the conditions that began, each counted.
    pub fn note(&mut self, s: &Sight) -> Vec<MemEvent> {
        let mut began = Vec::new();
        for (i, e) in MemEvent::ALL.into_iter().enumerate() {
            let now = s.holds(e);
            if now && !self.held[i] {
                self.counts.bump(e);
                began.push(e);
            }
            self.held[i] = now;
        }
        began
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = 1 << 20;

    #[test]
    fn each_condition_counts_once_each_time_it_begins() {
        let mut c = Counter::default();
        let fits = Sight { held: 8 * M, want: 8 * M, cap: 8 * M, high: Some(16 * M), ..Default::default() };
        assert!(c.note(&fits).is_empty());
        let over = Sight { want: 32 * M, largest: 20 * M, ..fits };
        assert_eq!(c.note(&over), [MemEvent::High, MemEvent::Max]);
        assert!(c.note(&over).is_empty(), "still over: not counted again");
        c.note(&Sight { largest: 20 * M, ..fits });
        assert_eq!(c.note(&over), [MemEvent::High], "high began again; max never ended");
        let squeezed = Sight { cap: 4 * M, blocked: 2 * M, budget_full: true, low: 8 * M, ..fits };
        assert_eq!(c.note(&squeezed), [MemEvent::Low, MemEvent::Oom, MemEvent::Swap]);
        assert_eq!(c.counts, MemEvents { low: 1, high: 2, max: 1, oom: 1, swap: 1 });
        assert_eq!(c.counts.text(), "low 1\nhigh 2\nmax 1\noom 1\nswap 1");
    }

    #[test]
    fn swap_counts_memory_it_will_use_or_others_claim_not_a_trim_nobody_needs() {
        let mut c = Counter::default();
        let b = 8 * M;
        // It holds 3 MiB, its forecast needs 2, and the others claim 4 of the 8 MiB budget.
        let trimmed = Sight { held: 3 * M, want: 2 * M, cap: 2 * M, others: 4 * M, budget: b, ..Default::default() };
        assert!(c.note(&trimmed).is_empty(), "a trim to its forecast, with room to spare");
        assert_eq!(c.note(&Sight { others: 6 * M, ..trimmed }), [MemEvent::Swap], "the others claim what it gave up");
        c.note(&trimmed);
        assert_eq!(c.note(&Sight { cap: M, ..trimmed }), [MemEvent::Swap], "below its forecast");
        c.note(&trimmed);
        assert!(c.note(&Sight { cap: 3 * M, ..trimmed }).is_empty(), "nothing taken");
    }

    #[test]
    fn without_limits_only_the_budget_counts() {
        let mut c = Counter::default();
        let s = Sight { held: 8 * M, want: 1 << 40, largest: 1 << 40, cap: 8 * M, ..Default::default() };
        assert!(c.note(&s).is_empty(), "no gmem.limit.high: neither high nor max");
        assert_eq!(c.note(&Sight { blocked: M, budget_full: false, ..s }), []);
        assert_eq!(c.note(&Sight { blocked: M, budget_full: true, ..s }), [MemEvent::Oom]);
    }
}
