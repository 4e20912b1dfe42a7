//! A tenant's memory pressure, as Linux's PSI reports it for memory: the share of time
//! its commands waited for GPU memory. `some` is the time at least one of its processes
//! waited, `full` the time all of them did; each is averaged over 10, 60 and 300 s and
//! kept as a total (`gmem.pressure`).
//!
//! A process waits for memory, while the daemon lets it run, as long as a launch of it
//! brings its memory in (`prepare_ns` of its reports: waiting for a grant, planning and
//! issuing the moves), its agent holds its launches to map and fill memory
//! (`launches_held_ns`), or a command of it waits for memory beyond its grant (`blocked`
//! in a report, from that report to the next). Waiting for its turn is not pressure. A
//! report's stall longer than the time since the last decision is counted over the next
//! decisions, so that frequent decisions do not hide it. The averages decay
//! continuously, so that they are fresh at every decision rather than every 2 s as in
//! Linux.

use crate::protocol::ShimReport;
use crate::Nanos;
use serde::{Deserialize, Serialize};

/// The windows of the averages, in seconds.
pub const WINDOWS_S: [f64; 3] = [10.0, 60.0, 300.0];

/// Shares of time stalled (0 to 1) over the last 10, 60 and 300 s, and the total.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Averages {
    /// Over the last 10 s.
    pub avg10: f64,
    /// Over the last 60 s.
    pub avg60: f64,
    /// Over the last 300 s.
    pub avg300: f64,
    /// Nanoseconds stalled in all.
    pub total_ns: u64,
}

impl Averages {
    /// Takes `stalled` nanoseconds of stall in the last `dt` (at most `dt`).
    pub fn add(&mut self, stalled: Nanos, dt: Nanos) {
        if dt == 0 {
            return;
        }
        let stalled = stalled.min(dt);
        self.total_ns = self.total_ns.saturating_add(stalled);
        let share = stalled as f64 / dt as f64;
        let secs = dt as f64 / 1e9;
        for (avg, window) in [&mut self.avg10, &mut self.avg60, &mut self.avg300].into_iter().zip(WINDOWS_S) {
            let keep = (-secs / window).exp();
            *avg = (*avg * keep + share * (1.0 - keep)).min(1.0);
        }
    }

    /// The average over `window` seconds (10, 60 or 300).
    pub fn over(&self, window: u32) -> Option<f64> {
        match window {
            10 => Some(self.avg10),
            60 => Some(self.avg60),
            300 => Some(self.avg300),
            _ => None,
        }
    }
}

/// Which of a tenant's stalls: at least one process waiting, or all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StallKind {
    /// At least one of its processes waited.
    Some,
    /// All of its processes waited.
    Full,
}

impl StallKind {
    /// Parses `some` or `full`.
    pub fn parse(s: &str) -> Result<StallKind, String> {
        match s {
            "some" => Ok(StallKind::Some),
            "full" => Ok(StallKind::Full),
            _ => Err(format!("{s:?} is not a kind of pressure: write some or full")),
        }
    }
}

/// A tenant's pressure: `some` and `full`. With several processes, `some` is the most
/// any of them waited and `full` the least: bounds of the time at least one, and all of
/// them, waited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Pressure {
    /// At least one of its processes waited for memory.
    pub some: Averages,
    /// All of its processes waited for memory.
    pub full: Averages,
}

impl Pressure {
    /// Takes the stalls of the tenant's processes over the last `dt` (none: it has no
    /// process, and its averages decay).
    pub fn add(&mut self, stalls: &[Nanos], dt: Nanos) {
        let some = stalls.iter().max().copied().unwrap_or(0);
        let full = stalls.iter().min().copied().unwrap_or(0);
        self.some.add(some, dt);
        self.full.add(full, dt);
    }

    /// The averages of one kind.
    pub fn of(&self, kind: StallKind) -> &Averages {
        match kind {
            StallKind::Some => &self.some,
            StallKind::Full => &self.full,
        }
    }

    /// `gmem.pressure` as cgroup v2's `memory.pressure` reads: percentages and the total
    /// in microseconds.
    pub fn text(&self) -> String {
        let line = |name: &str, a: &Averages| {
            format!("{name} avg10={:.2} avg60={:.2} avg300={:.2} total={}", a.avg10 * 100.0, a.avg60 * 100.0, a.avg300 * 100.0, a.total_ns / 1000)
        };
        format!("{}\n{}", line("some", &self.some), line("full", &self.full))
    }
}

/// Most stall carried over to later decisions: a process cannot make its tenant's
/// pressure stay high for longer than this after it stops waiting.
const MAX_CARRY: Nanos = 10_000_000_000;

/// What a process had waited at the last decision, and what of it is still to count.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StallMark {
    held_ns: u64,
    prepare_ns: u64,
    blocked: bool,
    carry: Nanos,
}

impl StallMark {
    /// The process's stall over the last `dt`, now that it reports `r` and `running`
    /// says whether the daemon lets it run; the mark moves to `r`. At most `dt` counts
    /// now, the rest over the next decisions. A counter that went back counts nothing;
    /// while it may not run, nothing counts.
    pub fn stall(&mut self, r: &ShimReport, running: bool, dt: Nanos) -> Nanos {
        let held = r.launches_held_ns.saturating_sub(self.held_ns);
        let prepare = r.prepare_ns.saturating_sub(self.prepare_ns);
        let blocked = if self.blocked { dt } else { 0 };
        let owed = if running { self.carry.saturating_add(held).saturating_add(prepare).saturating_add(blocked) } else { 0 };
        let now = owed.min(dt);
        *self = StallMark {
            held_ns: r.launches_held_ns.max(self.held_ns),
            prepare_ns: r.prepare_ns.max(self.prepare_ns),
            blocked: r.blocked > 0,
            carry: (owed - now).min(MAX_CARRY),
        };
        now
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: Nanos = 1_000_000_000;

    #[test]
    fn a_tenant_stalled_a_fifth_of_the_time_reads_twenty_percent_once_the_window_has_passed() {
        let mut a = Averages::default();
        // 60 s of 20 ms steps, 4 ms of each stalled.
        for _ in 0..3000 {
            a.add(4_000_000, 20_000_000);
        }
        assert!((a.avg10 - 0.2).abs() < 0.001, "{a:?}");
        assert!((a.avg60 - 0.2 * (1.0 - (-1.0f64).exp())).abs() < 0.002, "one window in: {a:?}");
        assert_eq!(a.total_ns, 12 * S);
        // Then 10 s without a stall: avg10 falls by e.
        for _ in 0..500 {
            a.add(0, 20_000_000);
        }
        assert!((a.avg10 - 0.2 / 1f64.exp()).abs() < 0.002, "{a:?}");
    }

    #[test]
    fn some_is_the_most_stalled_process_and_full_the_least() {
        let mut p = Pressure::default();
        p.add(&[10 * S, 2 * S], 10 * S);
        assert_eq!((p.some.total_ns, p.full.total_ns), (10 * S, 2 * S));
        assert!(p.text().starts_with("some avg10=63.21 avg60=15.35 avg300=3.28 total=10000000\nfull avg10=12.64"), "{}", p.text());
        p.add(&[], S);
        assert_eq!(p.some.total_ns, 10 * S, "no process, nothing counted");
    }

    #[test]
    fn a_process_stalls_while_its_launches_are_held_or_bring_memory_in_and_while_blocked() {
        let mut m = StallMark::default();
        let r = |held_ns, blocked| ShimReport { launches_held_ns: held_ns, blocked, ..Default::default() };
        assert_eq!(m.stall(&r(5_000_000, 0), true, 20_000_000), 5_000_000);
        assert_eq!(m.stall(&r(5_000_000, 1 << 20), true, 20_000_000), 0, "blocked from this report on");
        assert_eq!(m.stall(&r(5_000_000, 0), true, 20_000_000), 20_000_000, "blocked the whole step");
        assert_eq!(m.stall(&r(1, 0), true, 20_000_000), 0, "a counter that went back counts nothing");
        assert_eq!(m.stall(&r(7_000_000, 0), true, 20_000_000), 2_000_000, "and counts on from its highest");
        let launch = ShimReport { launches_held_ns: 7_000_000, prepare_ns: 3_000_000, ..Default::default() };
        assert_eq!(m.stall(&launch, true, 20_000_000), 3_000_000, "a launch bringing its memory in stalls too");
    }

    #[test]
    fn a_stall_longer_than_the_time_between_decisions_is_counted_over_the_next_ones() {
        let mut m = StallMark::default();
        let held = |ns| ShimReport { launches_held_ns: ns, ..Default::default() };
        // A report of 15 ms waited, with decisions every 5 ms (others' reports, `gmux ps`).
        assert_eq!(m.stall(&held(15_000_000), true, 5_000_000), 5_000_000);
        assert_eq!(m.stall(&held(15_000_000), true, 5_000_000), 5_000_000);
        assert_eq!(m.stall(&held(15_000_000), true, 5_000_000), 5_000_000);
        assert_eq!(m.stall(&held(15_000_000), true, 5_000_000), 0, "all 15 ms counted, once");
    }

    #[test]
    fn waiting_for_a_turn_is_not_pressure_and_a_tenant_without_processes_decays() {
        let mut m = StallMark::default();
        let blocked = ShimReport { blocked: 1 << 20, launches_held_ns: 4_000_000, ..Default::default() };
        assert_eq!(m.stall(&blocked, false, 20_000_000), 0, "paused: nothing counts");
        assert_eq!(m.stall(&blocked, false, 20_000_000), 0);
        assert_eq!(m.stall(&blocked, true, 20_000_000), 20_000_000, "running and still blocked");
        let mut p = Pressure::default();
        p.add(&[S], S);
        let before = p.some.avg10;
        p.add(&[], 10 * S);
        assert!((p.some.avg10 - before / 1f64.exp()).abs() < 1e-9, "no process: it decays");
    }

    proptest! {
        #[test]
        fn averages_stay_shares_and_the_total_never_exceeds_the_time(steps in proptest::collection::vec((any::<u64>(), 0..10 * S), 1..200)) {
            let mut a = Averages::default();
            let mut time: u64 = 0;
            for (stalled, dt) in steps {
                a.add(stalled, dt);
                time = time.saturating_add(dt);
                for v in [a.avg10, a.avg60, a.avg300] {
                    prop_assert!((0.0..=1.0).contains(&v), "{a:?}");
                }
                prop_assert!(a.total_ns <= time);
            }
        }
    }
}
