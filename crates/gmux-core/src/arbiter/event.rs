//! What the daemon did, for those who watch it (`gmux events`, the switch-time
//! histogram of `/metrics`): tenants' births and deaths, refusals, switches, slot ends,
//! knob changes and policies' trace lines. Its JSON is documented in docs/observability.md.

use super::mem_events::MemEvent;
use crate::pressure::StallKind;
use crate::size::format_size;
use crate::Nanos;
use serde::{Deserialize, Serialize};

/// One thing the daemon did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case", deny_unknown_fields)]
pub enum Event {
    /// A process joined a tenant (making it, if it was new).
    Joined {
        /// The tenant.
        tenant: String,
        /// The process.
        pid: u32,
        /// Its strict-priority class.
        priority: i32,
    },
    /// A process was refused at registration.
    Refused {
        /// The tenant it asked for.
        tenant: String,
        /// The process.
        pid: u32,
        /// Why, as the process was told.
        why: String,
    },
    /// A process left its tenant.
    Left {
        /// The tenant.
        tenant: String,
        /// The process.
        pid: u32,
        /// How: exited, killed, disconnected, ...
        why: String,
        /// GPU memory it held, which went to the others.
        held: u64,
    },
    /// A tenant was switched in to run its slot.
    SwitchedIn {
        /// The tenant.
        tenant: String,
        /// Its slice, stretched to amortize the switch.
        slice_ns: Nanos,
    },
    /// A tenant's slot ended.
    SlotEnded {
        /// The tenant.
        tenant: String,
        /// From the switch until the memory it was given had arrived (the whole slot if
        /// it never did).
        switch_ns: Nanos,
        /// From the switch to the slot's end.
        ran_ns: Nanos,
        /// Commands released in the slot.
        commands: u64,
        /// Bytes copied host to device in the slot.
        bytes_h2d: u64,
        /// Bytes copied device to host in the slot.
        bytes_d2h: u64,
    },
    /// A watcher's trigger fired: the tenant's pressure rose above its threshold (sent to
    /// that watcher alone).
    PressureAbove {
        /// The tenant.
        tenant: String,
        /// Which stall.
        kind: StallKind,
        /// The average's window, in seconds.
        window: u32,
        /// The average now, in percent.
        percent: f64,
        /// The watcher's threshold, in percent.
        threshold: f64,
    },
    /// A watcher's trigger fired: the tenant's `gmem.limit.high` is below what it holds,
    /// so it is about to be evicted down to it (sent to that watcher alone).
    LimitBelowHeld {
        /// The tenant.
        tenant: String,
        /// `gmem.limit.high`.
        limit_high: u64,
        /// What it holds.
        held: u64,
    },
    /// A `gmem.events` condition began for the tenant ([`MemEvent`]).
    Memory {
        /// The tenant.
        tenant: String,
        /// Which.
        counter: MemEvent,
    },
    /// A loaded policy's program wrote a trace line (`trace`): a scheduling program in the
    /// daemon (no tenant; seen by the owner and root), or a memory program in a tenant's
    /// process (seen by the tenant's owner too).
    PolicyTrace {
        /// The tenant whose process ran it (empty: the daemon).
        tenant: String,
        /// That process (0: the daemon).
        pid: u32,
        /// The policy (`gmux policy list`).
        policy: u32,
        /// The line, as the program wrote it.
        text: String,
    },
    /// The daemon's owner or root set a knob.
    KnobSet {
        /// The tenant.
        tenant: String,
        /// The knob's Ghost name.
        knob: String,
        /// The value as given.
        value: String,
    },
}

impl Event {
    /// The tenant it concerns.
    pub fn tenant(&self) -> &str {
        match self {
            Event::Joined { tenant, .. }
            | Event::Refused { tenant, .. }
            | Event::Left { tenant, .. }
            | Event::SwitchedIn { tenant, .. }
            | Event::SlotEnded { tenant, .. }
            | Event::PressureAbove { tenant, .. }
            | Event::LimitBelowHeld { tenant, .. }
            | Event::Memory { tenant, .. }
            | Event::PolicyTrace { tenant, .. }
            | Event::KnobSet { tenant, .. } => tenant,
        }
    }
}

fn ms(ns: Nanos) -> String {
    format!("{:.1} ms", ns as f64 / 1e6)
}

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::Joined { tenant, pid, priority } => write!(f, "pid {pid} joined tenant {tenant:?} (priority {priority})"),
            Event::Refused { tenant, pid, why } => write!(f, "pid {pid} refused tenant {tenant:?}: {why}"),
            Event::Left { tenant, pid, why, held } => write!(f, "pid {pid} left tenant {tenant:?} ({why}); its {} went to the others", format_size(*held)),
            Event::SwitchedIn { tenant, slice_ns } => write!(f, "{tenant} switched in for a {} slice", ms(*slice_ns)),
            Event::SlotEnded { tenant, switch_ns, ran_ns, commands, bytes_h2d, bytes_d2h } => write!(
                f,
                "{tenant}'s slot ended: {commands} commands in {}, {} in and {} out; its memory arrived in {}",
                ms(*ran_ns),
                format_size(*bytes_h2d),
                format_size(*bytes_d2h),
                ms(*switch_ns)
            ),
            Event::PressureAbove { tenant, kind, window, percent, threshold } => {
                let kind = if *kind == StallKind::Some { "some" } else { "full" };
                write!(f, "{tenant}'s pressure ({kind}, avg{window}) is {percent:.1}%, above {threshold}%")
            }
            Event::LimitBelowHeld { tenant, limit_high, held } => {
                write!(f, "{tenant}'s gmem.limit.high of {} is below the {} it holds: it gives the rest back", format_size(*limit_high), format_size(*held))
            }
            Event::Memory { tenant, counter } => {
                let what = match counter {
                    MemEvent::Low => "its protected memory (gmem.limit.low) is being taken",
                    MemEvent::High => "it wants more than its gmem.limit.high and evicts its own memory",
                    MemEvent::Max => "a command of it needs more at once than its gmem.limit.high",
                    MemEvent::Oom => "a command of it waits for memory and the budget is all given out",
                    MemEvent::Swap => "others' need evicts it",
                };
                write!(f, "{tenant}: gmem.events {}: {what}", counter.name())
            }
            Event::PolicyTrace { tenant, pid: 0, policy, text } if tenant.is_empty() => write!(f, "policy {policy} in the daemon: {text}"),
            Event::PolicyTrace { tenant, pid, policy, text } => write!(f, "policy {policy} in pid {pid} of {tenant}: {text}"),
            Event::KnobSet { tenant, knob, value } => write!(f, "{tenant}: {knob} set to {value}"),
        }
    }
}

/// An event, and the user who may see it besides the daemon's owner and root: the
/// tenant's (`None`: nobody else).
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    /// Who else may see it.
    pub uid: Option<u32>,
    /// What happened.
    pub event: Event,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_one_flat_json_object_named_by_its_kind() {
        let e = Event::SlotEnded { tenant: "a".into(), switch_ns: 3_000_000, ran_ns: 200_000_000, commands: 120, bytes_h2d: 8 << 20, bytes_d2h: 4 << 20 };
        let text = serde_json::to_string(&e).unwrap();
        assert_eq!(
            text,
            r#"{"event":"slot_ended","tenant":"a","switch_ns":3000000,"ran_ns":200000000,"commands":120,"bytes_h2d":8388608,"bytes_d2h":4194304}"#
        );
        assert_eq!(serde_json::from_str::<Event>(&text).unwrap(), e);
        assert_eq!(e.to_string(), "a's slot ended: 120 commands in 200.0 ms, 8.0 MiB in and 4.0 MiB out; its memory arrived in 3.0 ms");
        assert_eq!(e.tenant(), "a");
    }
}
