//! The daemon's state driven by what peers may send, for the fuzz tests: the proptest
//! in `state/fuzz.rs` and the `cargo fuzz` target in `fuzz/`. Whatever the steps, the
//! daemon must not panic, and no grant, nor all of them together, may exceed the budget.

use crate::ctl::{self, Request};
use crate::server::Peer;
use gmux_core::arbiter::{Arbiter, Hello, Sender, Silence, Switch};
use gmux_core::protocol::FromShim;
use gmux_core::sched::Policy;
use gmux_core::Nanos;

/// The daemon's owner in these runs.
pub const OWNER: u32 = 1000;

/// The budget of a daemon that has one.
pub const BUDGET: u64 = 1 << 30;

/// The users steps come from: root, the owner, and two others.
pub const UIDS: [u32; 4] = [0, OWNER, 2000, 3000];

/// One thing that happens to the daemon.
#[derive(Debug, Clone)]
pub enum Step {
    /// A line on connection `conn` from a process of user `uid` (pid 100 + `conn`).
    Line {
        /// The connection.
        conn: u64,
        /// Its user.
        uid: u32,
        /// What it sent.
        line: String,
    },
    /// The connection closed.
    Leave(u64),
    /// The connection's process went silent (it stopped reading its grants, or was
    /// stopped: even connections the one, odd the other), or answers again.
    Stuck(u64, bool),
    /// A process a previous daemon's journal named exited.
    OrphanGone(u32),
}

/// A daemon as the fuzz tests start it: the previous daemon's processes `orphans` (pids;
/// those of 100 to 105 may come back as connections 0 to 5) are awaited.
pub fn daemon(policy: Policy, switch: Switch, budget: Option<u64>, orphans: &[u32]) -> Arbiter {
    let mut d = Arbiter::new(budget, None, policy, switch);
    d.restore(&[], orphans.iter().map(|pid| (*pid, start_of(*pid), "a".to_string())));
    d
}

/// The start time the fuzz tests give process `pid`.
fn start_of(pid: u32) -> u64 {
    7000 + u64::from(pid)
}

/// Takes `step` as the server would, decides at `now`, and checks the grants: `Err` says
/// what broke.
pub fn take(d: &mut Arbiter, step: Step, now: Nanos) -> Result<(), String> {
    match step {
        Step::Line { conn, uid, line } => take_line(d, conn, Peer { pid: 100 + conn as u32, uid }, &line),
        Step::Leave(conn) => {
            d.leave(conn);
        }
        Step::Stuck(conn, stuck) => {
            d.set_silent(conn, if conn % 2 == 0 { Silence::NotReading } else { Silence::Stopped }, stuck);
        }
        Step::OrphanGone(pid) => {
            d.orphan_gone(pid, start_of(pid));
        }
    }
    let limit = d.settings.hbm.unwrap_or(u64::MAX);
    for (_, g) in d.decide(now) {
        if g.cap > limit || g.most > limit {
            return Err(format!("a grant past the budget of {limit}: {g:?}"));
        }
    }
    let exposed = d.exposure();
    if d.settings.hbm.is_some() && exposed > limit {
        return Err(format!("the caps the processes may have applied add up to {exposed}, past the budget of {limit}"));
    }
    for t in d.live() {
        let p = d.pressure(t);
        for a in [p.some, p.full] {
            if ![a.avg10, a.avg60, a.avg300].iter().all(|v| (0.0..=1.0).contains(v)) || a.total_ns > now {
                return Err(format!("pressure out of bounds at {now} ns: {p:?}"));
            }
        }
    }
    d.notices.clear();
    for json in [false, true] {
        ctl::answer(d, &Request::Ps { json }, Peer { pid: 1, uid: 0 }, OWNER, &crate::status::no_jobs);
    }
    Ok(())
}

/// What the server does with one line from a peer (`conn` if it said Hello).
fn take_line(d: &mut Arbiter, conn: u64, who: Peer, line: &str) {
    let sender = Sender { pid: who.pid, uid: who.uid, admin: who.uid == OWNER || who.uid == 0, start: start_of(who.pid) };
    match serde_json::from_str::<FromShim>(line) {
        Ok(FromShim::Hello { version, tenant, priority, high, resume, gpu }) => {
            let _ = d.admit(conn, sender, &Hello { version, tenant: &tenant, priority, high, resume, gpu: gpu.as_deref() });
        }
        Ok(FromShim::Report(r)) => {
            d.report(conn, r);
        }
        // Told to `gmux events` or kept by the server's policies, never seen by the arbiter.
        Ok(FromShim::Trace { .. } | FromShim::MapSnapshot { .. }) => {}
        // Answered outside the arbiter, which only finds the asker's connection.
        Ok(FromShim::Channel { .. }) => {
            let _ = d.conn_of_pid(who.pid);
        }
        Err(_) => {
            if let Ok(req) = serde_json::from_str::<Request>(line) {
                if req != Request::Stop {
                    ctl::answer(d, &req, who, OWNER, &crate::status::no_jobs);
                }
            }
        }
    }
}

/// Reads raw bytes as a daemon and its steps: the first byte picks the policy, the switch,
/// the budget and the orphans; then each line is one step, its first byte picking the
/// connection, the user and the kind of step.
pub fn from_bytes(bytes: &[u8]) -> (Arbiter, Vec<Step>) {
    let (head, rest) = bytes.split_first().map_or((0, &[][..]), |(h, r)| (*h, r));
    let policy = [Policy::RoundRobin, Policy::Priority, Policy::Share][usize::from(head % 3)];
    let switch = if head & 4 == 0 { Switch::Msched } else { Switch::Whole };
    let budget = (head & 8 == 0).then_some(BUDGET);
    let orphans: Vec<u32> = (0..4).filter(|i| head & (16 << i) != 0).map(|i| 100 + i).collect();
    let steps = rest
        .split(|b| *b == b'\n')
        .filter_map(|l| l.split_first())
        .map(|(c, line)| {
            let conn = u64::from(c % 6);
            match c >> 5 {
                0 => Step::Leave(conn),
                1 => Step::Stuck(conn, c & 8 != 0),
                2 => Step::OrphanGone(100 + u32::from(c % 6)),
                _ => Step::Line { conn, uid: UIDS[usize::from(c >> 3 & 3)], line: String::from_utf8_lossy(line).into_owned() },
            }
        })
        .collect();
    (daemon(policy, switch, budget, &orphans), steps)
}
