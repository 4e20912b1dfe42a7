//! The slot running now in time-sliced mode, as a state machine: switched in, then its
//! slice. The slice starts when the tenant's first command after the switch has finished,
//! so that the switch's migration is not charged to it (MSched: suspend, migrate, resume,
//! then the slice). The slot also measures the switch's cost: the time until the memory the
//! division gives the tenant has arrived. A slice is stretched to amortize it
//! ([`stretched`]).

use crate::protocol::ShimReport;
use crate::size::format_size;
use crate::{Nanos, TenantId};

/// Longest a switched-in tenant may take to finish its first command before its slice
/// starts anyway, in timeslices (unstretched).
pub const MAX_SWITCH_SLICES: u64 = 20;

/// A slice is stretched to this many times its tenant's switch cost, so that the switch
/// costs at most a fifth of the slot.
pub const SLICE_PER_SWITCH: u64 = 4;

/// The slice of a tenant whose `compute.timeslice` is `base` and whose switches cost
/// `cost`: [`SLICE_PER_SWITCH`] times the cost, at least `base`, at most `max` (or `base`
/// when `max` is below it).
pub fn stretched(base: Nanos, cost: Nanos, max: Nanos) -> Nanos {
    cost.saturating_mul(SLICE_PER_SWITCH).clamp(base, max.max(base))
}

/// Where the running slot is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Switched in: its memory comes in, and no command released since has finished.
    Switching,
    /// Its slice started at `since`.
    Slicing {
        /// When the slice started.
        since: Nanos,
    },
}

/// The tenant that runs now and where its slot is.
#[derive(Debug, Clone, Copy)]
pub struct Slot {
    /// The tenant.
    pub tenant: TenantId,
    /// When it was switched in.
    pub switched: Nanos,
    /// The tenant's totals at the switch (commands released, bytes copied, time its agent
    /// held its launches), which the slot's own are counted from.
    pub before: ShimReport,
    /// Its slice, stretched ([`stretched`]).
    pub slice: Nanos,
    /// Its `compute.timeslice`, which bounds the switch.
    pub timeslice: Nanos,
    /// Where the slot is.
    pub phase: Phase,
    /// Why it waits has been logged.
    pub waited_logged: bool,
    /// When the memory the division gives it had arrived.
    pub arrived: Option<Nanos>,
}

impl Slot {
    /// `tenant` switched in at `now` with totals `before` so far, for a slice of `slice`
    /// (its timeslice `timeslice`, stretched).
    pub fn switch_in(tenant: TenantId, now: Nanos, before: ShimReport, slice: Nanos, timeslice: Nanos) -> Slot {
        Slot { tenant, switched: now, before, slice, timeslice, phase: Phase::Switching, waited_logged: false, arrived: None }
    }

    /// What the slot has done by `now`, when the tenant's totals are `totals`: "ran N
    /// commands in T ms", the bytes it brought in and sent out, and how long its agent held
    /// its launches, if at all.
    pub fn summary(&self, totals: &ShimReport, now: Nanos) -> String {
        let b = &self.before;
        let held = totals.launches_held_ns.saturating_sub(b.launches_held_ns);
        let held = if held > 0 { format!("; its agent held its launches {:.1} ms", held as f64 / 1e6) } else { String::new() };
        format!(
            "ran {} commands in {:.1} ms, bringing {} in and sending {} out{held}",
            totals.commands.saturating_sub(b.commands),
            now.saturating_sub(self.switched) as f64 / 1e6,
            format_size(totals.bytes_h2d.saturating_sub(b.bytes_h2d)),
            format_size(totals.bytes_d2h.saturating_sub(b.bytes_d2h))
        )
    }

    /// Takes at `now` whether the memory the division gives the tenant is in.
    pub fn observe_memory(&mut self, arrived: bool, now: Nanos) {
        if arrived && self.arrived.is_none() {
            self.arrived = Some(now);
        }
    }

    /// What the switch has cost by `now`: the time from the switch until the tenant's memory
    /// had arrived, or until now while it has not.
    pub fn switch_cost(&self, now: Nanos) -> Nanos {
        self.arrived.unwrap_or(now).saturating_sub(self.switched)
    }

    /// Takes the tenant's count of finished commands at `now`: more than it had released at
    /// the switch means one released after it has finished, and the slice starts. Returns
    /// whether it started now.
    pub fn observe(&mut self, finished: u64, now: Nanos) -> bool {
        if self.phase == Phase::Switching && finished > self.before.commands {
            self.phase = Phase::Slicing { since: now };
            return true;
        }
        false
    }

    /// When the slot ends: a slice after it started, or, if it never starts, after
    /// [`MAX_SWITCH_SLICES`] timeslices from the switch.
    pub fn ends(&self) -> Nanos {
        match self.phase {
            Phase::Slicing { since } => since + self.slice,
            Phase::Switching => self.switched + MAX_SWITCH_SLICES * self.timeslice,
        }
    }

    /// The time to charge the tenant when the slot ends at `now`: its slice so far (the
    /// switch is not charged).
    pub fn charge(&self, now: Nanos) -> Nanos {
        match self.phase {
            Phase::Slicing { since } => now.saturating_sub(since),
            Phase::Switching => 0,
        }
    }

    /// Whether the switch has taken longer than `slices` timeslices by `now`.
    pub fn switching_longer_than(&self, slices: u64, now: Nanos) -> bool {
        self.phase == Phase::Switching && now > self.switched + slices * self.timeslice
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    #[test]
    fn the_slice_starts_when_a_command_released_after_the_switch_finishes() {
        let mut s = Slot::switch_in(TenantId(1), 100 * MS, ShimReport { commands: 40, ..Default::default() }, 50 * MS, 50 * MS);
        assert!(!s.observe(40, 130 * MS), "the 40 released before the switch finishing start nothing");
        assert_eq!(s.ends(), 100 * MS + 20 * 50 * MS, "a switch that never finishes ends after 20 slices");
        assert_eq!(s.charge(130 * MS), 0, "the switch is not charged");
        assert!(s.observe(41, 160 * MS));
        assert_eq!(s.phase, Phase::Slicing { since: 160 * MS });
        assert!(!s.observe(60, 170 * MS), "it starts once");
        assert_eq!(s.ends(), 210 * MS);
        assert_eq!(s.charge(200 * MS), 40 * MS);
    }

    #[test]
    fn a_switch_costs_the_time_until_its_memory_has_arrived() {
        let mut s = Slot::switch_in(TenantId(1), 100 * MS, ShimReport::default(), 50 * MS, 50 * MS);
        s.observe_memory(false, 130 * MS);
        assert_eq!(s.switch_cost(170 * MS), 70 * MS, "not arrived yet: the slot so far");
        s.observe_memory(true, 180 * MS);
        s.observe_memory(true, 250 * MS);
        assert_eq!(s.switch_cost(400 * MS), 80 * MS, "the first time it had arrived");
    }

    #[test]
    fn a_slice_is_stretched_to_amortize_its_switch_within_the_bounds() {
        assert_eq!(stretched(200 * MS, 10 * MS, 1000 * MS), 200 * MS, "a cheap switch keeps the timeslice");
        assert_eq!(stretched(200 * MS, 150 * MS, 1000 * MS), 600 * MS);
        assert_eq!(stretched(200 * MS, 400 * MS, 1000 * MS), 1000 * MS, "at most the bound");
        assert_eq!(stretched(2000 * MS, 400 * MS, 1000 * MS), 2000 * MS, "a bound below the timeslice stretches nothing");
        assert_eq!(stretched(20 * MS, Nanos::MAX, 1000 * MS), 1000 * MS);
    }

    #[test]
    fn a_long_switch_is_told_apart() {
        let mut s = Slot::switch_in(TenantId(1), 0, ShimReport::default(), 200 * MS, 50 * MS);
        assert_eq!(s.ends(), 1000 * MS, "twenty timeslices, not twenty stretched slices");
        assert!(!s.switching_longer_than(10, 500 * MS));
        assert!(s.switching_longer_than(10, 501 * MS));
        s.observe(1, 600 * MS);
        assert!(!s.switching_longer_than(10, 900 * MS), "a slice under way is no longer a switch");
    }
}
