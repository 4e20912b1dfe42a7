//! Messages between a tenant's shim and the daemon: JSON, one object per line, over
//! the daemon's unix socket. State is sent whole (not as deltas), so a lost or
//! repeated message does no harm.

use serde::{Deserialize, Serialize};

/// Version of these messages. A `Hello` of another version is refused with a
/// [`Refused`] that says so: a shim and a daemon of different builds never half-agree.
pub const PROTOCOL: u32 = 6;

/// Shim → daemon.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum FromShim {
    /// First message: joins (or creates) tenant `tenant`. The pid comes from the socket.
    Hello {
        /// [`PROTOCOL`] of the shim (absent, 0, from shims older than versioning).
        #[serde(default)]
        version: u32,
        /// Tenant name (`gmux run --tenant`).
        tenant: String,
        /// Strict-priority class (larger first).
        priority: i32,
        /// `gmem.limit.high` asked for with `gmux run --mem-limit`.
        high: Option<u64>,
        /// What a process that lost its daemon holds, when it registers with the next one.
        #[serde(default)]
        resume: Option<Resume>,
        /// The UUID of the GPU the process's memory is on (`GPU-…`): a daemon serves one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        gpu: Option<String>,
    },
    /// The shim's state now.
    Report(ShimReport),
    /// The first line of a second connection of a registered process: asks for its
    /// serving channel, which the daemon hands over with a [`ChannelReady`] line.
    Channel {
        /// [`PROTOCOL`] of the shim.
        version: u32,
    },
    /// A trace line of a memory program of the daemon's policy `policy` (at most
    /// [`MAX_TRACE`] bytes; the daemon cuts and rate-limits what it is sent).
    Trace {
        /// The policy (`gmux policy list`).
        policy: u32,
        /// The line.
        text: String,
    },
    /// What a map of the daemon's policy `policy` holds in this process (its memory
    /// programs keep their maps in each process), for `gmux policy map dump`: a hash
    /// map's entries, an array's that are not zero, as many as [`snapshot_entries`]
    /// allows. Sent about once a second while a policy is attached, and at exit.
    MapSnapshot {
        /// The policy (`gmux policy list`).
        policy: u32,
        /// The map's name in the policy's object file.
        map: String,
        /// How many entries the map holds, sent or not.
        total: u64,
        /// Keys and values, each in hex.
        entries: Vec<(String, String)>,
    },
}

/// Longest trace line a shim sends, in bytes.
pub const MAX_TRACE: usize = 256;

/// Most bytes the entries of one [`FromShim::MapSnapshot`] take in its line (the daemon
/// reads lines of up to 64 KiB; the rest is left for the map's name and the counts).
pub const MAX_SNAPSHOT: usize = 48 << 10;

/// Longest map name a [`FromShim::MapSnapshot`] carries.
pub const MAX_SNAPSHOT_NAME: usize = 256;

/// Most entries of `key`- and `value`-byte keys and values one [`FromShim::MapSnapshot`]
/// carries: each takes both in hex and 8 bytes of JSON around them (`["…","…"],`).
pub fn snapshot_entries(key: usize, value: usize) -> usize {
    MAX_SNAPSHOT / (2 * (key + value) + 8)
}

/// What a process holds when it registers again after losing its daemon (which crashed,
/// or was stopped or restarted): it kept running within its last grant meanwhile.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resume {
    /// Physical GPU memory it holds.
    pub held: u64,
    /// The cap of the last grant it applied: it may grow to it without asking again.
    pub cap: u64,
    /// That grant's sequence number; the new daemon's grants to it continue after it.
    pub seq: u64,
}

/// What one process of a tenant reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShimReport {
    /// Physical GPU memory held, mapped or spare (what counts against the budget).
    pub held: u64,
    /// Bytes of chunks resident.
    pub resident: u64,
    /// Bytes allocated through gmux.
    pub allocated: u64,
    /// Bytes in host memory (evicted).
    pub swapped: u64,
    /// Bytes its next slice is forecast to use (its footprint without a forecast).
    pub want: u64,
    /// Bytes its forecast uses over a whole period (an iteration; its footprint without
    /// a forecast): what it needs to run on without time slicing.
    pub period: u64,
    /// Bytes a command waits for beyond the current cap (0: none waits).
    pub blocked: u64,
    /// Commands released.
    pub commands: u64,
    /// Bytes copied host → device.
    pub bytes_h2d: u64,
    /// Bytes copied device → host.
    pub bytes_d2h: u64,
    /// Has released commands that may not have finished.
    pub busy: bool,
    /// A launch waits at the gate (the process has work but is paused).
    pub waiting: bool,
    /// Commands seen finished.
    pub finished: u64,
    /// Sequence number of the newest grant applied before this report.
    pub grant: u64,
    /// Bytes the largest command so far needed resident at once (of those that had to
    /// bring memory in): a limit below it ends the process at its next such command.
    #[serde(default)]
    pub largest: u64,
    /// Nanoseconds, in all, that the agent held the process's state lock, which its
    /// launches wait for: while it issues eviction and fill steps (their mappings and
    /// copies) and builds its reports.
    #[serde(default)]
    pub launches_held_ns: u64,
    /// Nanoseconds, in all, that its launches spent bringing their memory in: waiting for
    /// a grant, planning and issuing the moves.
    #[serde(default)]
    pub prepare_ns: u64,
}

/// Daemon → shim, in place of the first grant: the `Hello` was refused, and why (with
/// what to do).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Refused {
    /// The cause and the fix, one line.
    pub refused: String,
}

/// Daemon → shim, on the connection that asked for a channel: the line that carries the
/// channel's memfd and eventfd (`SCM_RIGHTS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelReady {
    /// Slots of each of its rings.
    pub slots: u32,
}

/// Daemon → shim: write a key of map `map` of the daemon's policy `policy` in the
/// process's copy (`gmux policy map … update|delete`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MapWrite {
    /// The policy (`gmux policy list`).
    pub policy: u32,
    /// The map's name.
    pub map: String,
    /// For a per-tenant array, the tenant whose copy is written.
    pub tenant: Option<u32>,
    /// The key, in hex.
    pub key: String,
    /// The value, in hex; `None`: delete the key.
    pub value: Option<String>,
}

/// Daemon → shim: the whole grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    /// Bytes of GPU memory the process may hold; above it, it evicts its own chunks.
    pub cap: u64,
    /// The most it can ever be granted (the budget, or `gmem.limit.high`): a command
    /// needing more fails; one needing less waits for its grant to grow.
    pub most: u64,
    /// May release commands (`false`: its launches wait; in-flight work drains).
    pub run: bool,
    /// Before releasing commands, bring in its forecast working set up to `cap`
    /// (`whole`: everything it has allocated — the whole-tenant swap baseline).
    pub fill: Fill,
    /// Most released, unfinished commands per stream (0: the shim's own setting).
    pub inflight: u32,
    /// Increases with every grant sent to the process; reports echo it.
    pub seq: u64,
}

/// Daemon → shim: the memory policies attached to the process's tenant, whole (none:
/// an empty list). A shim runs their programs in its own planner; it loads a policy it
/// has not seen, and drops one no longer listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policies {
    /// The tenant's number in the daemon (`gmux ps --json`'s `id`): the `tenant` its
    /// programs see.
    pub tenant: u32,
    /// The policies, in load order.
    pub policies: Vec<PolicyObject>,
}

/// One memory policy as the daemon hands it to a shim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyObject {
    /// The daemon's number for it (`gmux policy list`).
    pub id: u32,
    /// Its name, for log lines.
    pub name: String,
    /// The memory hooks whose programs run (the object's other programs do not).
    pub hooks: Vec<String>,
    /// The object file, in hex ([`hex`]).
    pub object: String,
}

/// Bytes as lowercase hex: how an object file travels in a JSON line.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Hex as bytes; `None` unless it is an even number of hex digits.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| s.get(i..i + 2).and_then(|d| u8::from_str_radix(d, 16).ok())).collect()
}

/// What a shim brings in when it is switched in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fill {
    /// Nothing ahead: each command brings in its own working set.
    None,
    /// Its forecast for the next slice, in first-use order, while commands start as
    /// soon as their own chunks are in (MSched's proactive switch).
    Forecast,
    /// All of its memory, before any command runs (whole-tenant swap).
    Whole,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_json_line_each_and_round_trip() {
        let m = FromShim::Report(ShimReport { held: 4 << 20, busy: true, ..Default::default() });
        let line = serde_json_line(&m);
        assert!(!line.contains('\n'));
        assert!(line.contains("\"op\":\"report\""), "{line}");
        assert_eq!(serde_json::from_str::<FromShim>(&line).unwrap(), m);
        let g = Grant { cap: 2 << 30, most: 4 << 30, run: false, fill: Fill::Forecast, inflight: 4, seq: 7 };
        assert_eq!(serde_json_line(&g), r#"{"cap":2147483648,"most":4294967296,"run":false,"fill":"forecast","inflight":4,"seq":7}"#);
    }

    #[test]
    fn hex_round_trips_and_refuses_what_is_not_hex() {
        let b: Vec<u8> = (0..=255).collect();
        assert_eq!(unhex(&hex(&b)).as_deref(), Some(&b[..]));
        assert_eq!(hex(&[0x0a, 0xff]), "0aff");
        for bad in ["a", "0g", "é1"] {
            assert_eq!(unhex(bad), None, "{bad}");
        }
    }

    fn serde_json_line<T: Serialize>(v: &T) -> String {
        serde_json::to_string(v).expect("serializable")
    }
}
