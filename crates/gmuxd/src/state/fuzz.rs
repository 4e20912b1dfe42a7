//! Fuzzing of what tenants and control clients send, at the daemon's state: random,
//! absurd and truncated messages from several users, in any order, must never panic the
//! daemon or make it grant more than its budget to any process.

use super::*;
use crate::ctl::{self, Request};
use crate::server::Peer;
use gmux_core::protocol::{FromShim, PROTOCOL};
use gmux_core::sched::Policy;
use proptest::prelude::*;

const BUDGET: u64 = 1 << 30;
const OWNER: u32 = 1000;

/// What the server does with one line from a peer (`conn` if it said Hello).
fn take_line(d: &mut Daemon, conn: u64, who: Peer, line: &str) {
    let sender = Sender { pid: who.pid, uid: who.uid, admin: who.uid == OWNER || who.uid == 0 };
    match serde_json::from_str::<FromShim>(line) {
        Ok(FromShim::Hello { version, tenant, priority, high }) => {
            let _ = d.admit(conn, sender, &Hello { version, tenant: &tenant, priority, high });
        }
        Ok(FromShim::Report(r)) => {
            d.report(conn, r);
        }
        Err(_) => {
            if let Ok(req) = serde_json::from_str::<Request>(line) {
                if req != Request::Stop {
                    ctl::answer(d, &req, who, OWNER);
                }
            }
        }
    }
}

fn size() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0), Just(1), Just(u64::MAX), 0..BUDGET * 2, any::<u64>()]
}

fn report() -> impl Strategy<Value = ShimReport> {
    (size(), size(), size(), size(), any::<u64>(), any::<u64>(), any::<bool>(), any::<u64>()).prop_map(|(held, want, period, blocked, commands, finished, busy, grant)| ShimReport {
        held,
        resident: held,
        allocated: period,
        swapped: blocked,
        want,
        period,
        blocked,
        commands,
        bytes_h2d: commands,
        bytes_d2h: finished,
        busy,
        waiting: !busy,
        finished,
        grant,
        largest: want,
    })
}

fn line() -> impl Strategy<Value = String> {
    let name = prop_oneof![4 => Just("a".to_string()), 4 => Just("b".to_string()), 1 => Just(String::new()), 1 => "[a-z\\n\\t]{0,4}", 1 => ".{0,200}"];
    let priority = prop_oneof![3 => -3..3i32, 1 => any::<i32>()];
    let hello = (prop_oneof![4 => Just(PROTOCOL), 1 => any::<u32>()], name.clone(), priority, proptest::option::of(size()))
        .prop_map(|(version, tenant, priority, high)| serde_json::to_string(&FromShim::Hello { version, tenant, priority, high }).unwrap());
    let rep = report().prop_map(|r| serde_json::to_string(&FromShim::Report(r)).unwrap());
    let knob = prop_oneof![Just("gmem.limit.high"), Just("gmem.limit.low"), Just("compute.timeslice"), Just("compute.freeze"), Just("nope")];
    let value = prop_oneof![Just("1G".to_string()), Just("0".to_string()), Just("max".to_string()), Just("16777216T".to_string()), ".{0,12}"];
    let set = (name.clone(), knob, value).prop_map(|(tenant, knob, value)| serde_json::to_string(&Request::Set { tenant, knob: knob.into(), value }).unwrap());
    let get = name.prop_map(|tenant| serde_json::to_string(&Request::Get { tenant, knob: None }).unwrap());
    let ps = Just(serde_json::to_string(&Request::Ps).unwrap());
    let junk = ".{0,300}";
    prop_oneof![3 => hello, 6 => rep, 1 => set, 1 => get, 1 => ps, 1 => junk.prop_map(String::from)]
}

/// One step: a line on a connection from a user, a connection closing, or a stall.
#[derive(Debug, Clone)]
enum Step {
    Line { conn: u64, uid: u32, line: String },
    Leave(u64),
    Stuck(u64, bool),
}

fn step() -> impl Strategy<Value = Step> {
    let uid = prop_oneof![Just(0), Just(OWNER), Just(2000), Just(3000)];
    prop_oneof![
        12 => (0..6u64, uid, line()).prop_map(|(conn, uid, line)| Step::Line { conn, uid, line }),
        1 => (0..6u64).prop_map(Step::Leave),
        1 => (0..6u64, any::<bool>()).prop_map(|(c, s)| Step::Stuck(c, s)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn no_sequence_of_messages_panics_the_daemon_or_grants_past_the_budget(policy in prop_oneof![Just(Policy::RoundRobin), Just(Policy::Priority), Just(Policy::Share)], switch in prop_oneof![Just(Switch::Msched), Just(Switch::Whole)], budget in prop_oneof![Just(Some(BUDGET)), Just(None)], steps in proptest::collection::vec(step(), 1..60)) {
        let mut d = Daemon::new(budget, None, policy, switch);
        for (i, s) in steps.into_iter().enumerate() {
            match s {
                Step::Line { conn, uid, line } => take_line(&mut d, conn, Peer { pid: 100 + conn as u32, uid }, &line),
                Step::Leave(conn) => { d.leave(conn); }
                Step::Stuck(conn, stuck) => { d.set_unresponsive(conn, stuck); }
            }
            let limit = budget.unwrap_or(u64::MAX);
            for (_, g) in d.decide(i as u64 * 3_000_000) {
                prop_assert!(g.cap <= limit && g.most <= limit, "{g:?}");
            }
            let granted = d.procs.values().filter_map(|p| p.sent).map(|g| g.cap).fold(0, u64::saturating_add);
            prop_assert!(budget.is_none() || granted <= limit, "the processes' grants add up to {granted}");
            ctl::answer(&mut d, &Request::Ps, Peer { pid: 1, uid: 0 }, OWNER);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 100_000, ..ProptestConfig::default() })]

    #[test]
    fn no_line_from_anyone_panics_the_daemon(uid in prop_oneof![Just(0u32), Just(OWNER), Just(2000)], line in line()) {
        let mut d = Daemon::new(Some(BUDGET), None, Policy::RoundRobin, Switch::Msched);
        take_line(&mut d, 1, Peer { pid: 7, uid }, &line);
        d.decide(0);
    }
}
