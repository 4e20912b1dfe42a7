//! Errors a user can cause, each with its cause and what to do.

use thiserror::Error;

/// Every failure of the policy engine. Messages are one line: cause, then the fix.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum CoreError {
    #[error("bad size {0:?}: write a number with an optional unit K, M, G or T (e.g. 16G, 512M)")]
    BadSize(String),
    #[error("unknown knob {0:?}: use one of gmem.limit.high, gmem.limit.low, gmem.current, gmem.swap.current, compute.timeslice, compute.freeze, ggroup.stat")]
    UnknownKnob(String),
    #[error("knob {0} is read-only: it reports usage; set gmem.limit.high or gmem.limit.low instead")]
    ReadOnlyKnob(&'static str),
    #[error("bad value {value:?} for {knob}: {hint}")]
    BadKnobValue { knob: &'static str, value: String, hint: &'static str },
    #[error("unknown tenant {0:?}: list tenants with `gmux ps`")]
    UnknownTenant(String),
    #[error("tenant {0:?} already exists: pick another --tenant name or join it")]
    DuplicateTenant(String),
    #[error("out of budget: {what} needs {need} bytes but only {free} are free; raise the budget or lower the load")]
    OutOfBudget { what: String, need: u64, free: u64 },
    #[error("unknown allocation {0}: it was never allocated or was already freed")]
    UnknownAlloc(u32),
    #[error("chunk {0} cannot go back to unbacked: a move keeps a chunk's data somewhere")]
    Unbacking(u32),
    #[error("allocation of 0 bytes: ask for at least 1 byte")]
    ZeroAlloc,
    #[error("policy rejected tenant {0:?}: {1}")]
    Rejected(String, String),
}
