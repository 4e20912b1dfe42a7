//! What a daemon keeps for the one after it on the same socket (its journal, one JSON
//! line per [`Entry`]): its settings, its tenants with their owners and knobs, and the
//! processes registered with it, each known by pid and start time. Reading and writing
//! the journal is the daemon's.

use super::Switch;
use crate::knobs::{Knob, Limits};
use crate::sched::Policy;
use crate::tenant::Tenant;
use crate::Nanos;
use serde::{Deserialize, Serialize};

/// The daemon's settings, kept so that a daemon started with `--resume` takes them over.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// GPU-memory budget (`--hbm`).
    pub hbm: Option<u64>,
    /// Host-tier budget (`--host`).
    pub host: Option<u64>,
    /// Scheduling policy.
    pub policy: Policy,
    /// How a switch moves memory.
    pub switch: Switch,
    /// `compute.timeslice` of new tenants.
    pub timeslice: Nanos,
    /// Longest a slice is stretched to so that its switch's migration costs at most a
    /// fifth of the slot (`--max-timeslice`; at or below a tenant's timeslice: never).
    #[serde(default = "default_max_timeslice")]
    pub max_timeslice: Nanos,
    /// Highest priority a user other than the owner or root may ask for.
    pub max_priority: i32,
    /// Time-slice even when every tenant fits (`--always-slice`).
    #[serde(default)]
    pub always_slice: bool,
    /// The UUID of the GPU served (`--gpu`); `None` until the first process says which.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
}

fn default_max_timeslice() -> Nanos {
    crate::knobs::DEFAULT_MAX_TIMESLICE
}

/// A tenant as the journal keeps it: who owns it and its writable knobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantRecord {
    /// Its name.
    pub name: String,
    /// Uid of its owner.
    pub owner: Option<u32>,
    /// Its priority class.
    pub priority: i32,
    /// `gmem.limit.high` was set by the daemon's owner or root.
    pub high_set_by_admin: bool,
    /// Its knobs.
    pub limits: Limits,
}

impl TenantRecord {
    /// The record of `t`.
    pub fn of(t: &Tenant) -> TenantRecord {
        TenantRecord { name: t.name.clone(), owner: t.owner, priority: t.priority, high_set_by_admin: t.high_set_by_admin, limits: t.limits.clone() }
    }

    /// Its knobs, each validated as a `gmux set` would be (a knob that fails is left at
    /// its default, and named in the error list).
    pub fn checked_limits(&self) -> (Limits, Vec<String>) {
        let mut l = Limits::default();
        let mut bad = Vec::new();
        for k in [Knob::LimitHigh, Knob::LimitLow, Knob::Timeslice, Knob::Freeze, Knob::Weight] {
            if let Some(v) = self.limits.get(k) {
                if let Err(e) = l.set(k, &v) {
                    bad.push(format!("{}: {e}", k.name()));
                }
            }
        }
        (l, bad)
    }
}

/// One line of the journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "entry", rename_all = "snake_case", deny_unknown_fields)]
pub enum Entry {
    /// First line: the machine's boot and the daemon's settings.
    Start {
        /// `/proc/sys/kernel/random/boot_id`: processes of another boot are gone.
        boot: String,
        /// The settings.
        settings: Settings,
    },
    /// A tenant as it is now (made, or a knob of it set).
    Tenant(TenantRecord),
    /// A process registered.
    Join {
        /// Its pid.
        pid: u32,
        /// Its start time (clock ticks after boot, `/proc/PID/stat`).
        start: u64,
        /// Its tenant.
        tenant: String,
    },
    /// A process left (exited or hung up).
    Leave {
        /// Its pid.
        pid: u32,
    },
    /// The GPU the daemon serves (its UUID): the one its first process named, when no
    /// `--gpu` did.
    Gpu {
        /// Its UUID.
        gpu: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_knob_kept_out_of_range_is_reset_not_taken() {
        let r = TenantRecord {
            name: "a".into(),
            owner: None,
            priority: 0,
            high_set_by_admin: true,
            limits: Limits { high: Some(1), low: 0, timeslice: 5_000_000, frozen: true, weight: 0 },
        };
        let (l, bad) = r.checked_limits();
        assert_eq!((l.high, l.timeslice, l.frozen, l.weight), (None, 5_000_000, true, 1));
        assert!(bad.len() == 2 && bad[0].starts_with("gmem.limit.high") && bad[1].starts_with("compute.weight"), "{bad:?}");
    }
}
