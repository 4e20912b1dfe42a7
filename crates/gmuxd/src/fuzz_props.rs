//! Fuzzing of what tenants and control clients send, at the daemon's state: random,
//! absurd and truncated messages from several users, in any order, must never panic the
//! daemon or make it grant more than its budget to any process.

use crate::ctl::Request;
use crate::fuzzing::{self, Step, BUDGET, OWNER};
use gmux_core::arbiter::Switch;
use gmux_core::protocol::{FromShim, Resume, ShimReport, PROTOCOL};
use gmux_core::sched::Policy;
use proptest::prelude::*;

fn size() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0), Just(1), Just(u64::MAX), 0..BUDGET * 2, any::<u64>()]
}

fn report() -> impl Strategy<Value = ShimReport> {
    (size(), size(), size(), size(), any::<u64>(), any::<u64>(), any::<bool>(), any::<u64>()).prop_map(
        |(held, want, period, blocked, commands, finished, busy, grant)| ShimReport {
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
            launches_held_ns: finished,
            prepare_ns: grant,
        },
    )
}

fn line() -> impl Strategy<Value = String> {
    let name = prop_oneof![4 => Just("a".to_string()), 4 => Just("b".to_string()), 1 => Just(String::new()), 1 => "[a-z\\n\\t]{0,4}", 1 => ".{0,200}"];
    let priority = prop_oneof![3 => -3..3i32, 1 => any::<i32>()];
    let seq = prop_oneof![Just(u64::MAX), Just(u64::MAX - 1), any::<u64>()];
    let resume = proptest::option::of((size(), size(), seq).prop_map(|(held, cap, seq)| Resume { held, cap, seq }));
    let gpu = proptest::option::of(
        prop_oneof![3 => Just("GPU-676d7578-0000-0000-0000-000000000000".to_string()), 1 => Just("GPU-676d7578-0000-0000-0000-000000000001".to_string()), 1 => ".{0,80}"],
    );
    let hello = (prop_oneof![4 => Just(PROTOCOL), 1 => any::<u32>()], name.clone(), priority, proptest::option::of(size()), resume, gpu).prop_map(
        |(version, tenant, priority, high, resume, gpu)| serde_json::to_string(&FromShim::Hello { version, tenant, priority, high, resume, gpu }).unwrap(),
    );
    let rep = report().prop_map(|r| serde_json::to_string(&FromShim::Report(r)).unwrap());
    let knob = prop_oneof![Just("gmem.limit.high"), Just("gmem.limit.low"), Just("compute.timeslice"), Just("compute.freeze"), Just("nope")];
    let value = prop_oneof![Just("1G".to_string()), Just("0".to_string()), Just("max".to_string()), Just("16777216T".to_string()), ".{0,12}"];
    let set = (name.clone(), knob, value).prop_map(|(tenant, knob, value)| serde_json::to_string(&Request::Set { tenant, knob: knob.into(), value }).unwrap());
    let get = (name, any::<bool>()).prop_map(|(tenant, json)| serde_json::to_string(&Request::Get { tenant, knob: None, json }).unwrap());
    let ps = any::<bool>().prop_map(|json| serde_json::to_string(&Request::Ps { json }).unwrap());
    let junk = ".{0,300}";
    prop_oneof![3 => hello, 6 => rep, 1 => set, 1 => get, 1 => ps, 1 => junk.prop_map(String::from)]
}

fn step() -> impl Strategy<Value = Step> {
    let uid = prop_oneof![Just(0), Just(OWNER), Just(2000), Just(3000)];
    prop_oneof![
        12 => (0..6u64, uid, line()).prop_map(|(conn, uid, line)| Step::Line { conn, uid, line }),
        1 => (0..6u64).prop_map(Step::Leave),
        1 => (0..6u64, any::<bool>()).prop_map(|(c, s)| Step::Stuck(c, s)),
        1 => (100..106u32).prop_map(Step::OrphanGone),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn no_sequence_of_messages_panics_the_daemon_or_grants_past_the_budget(policy in prop_oneof![Just(Policy::RoundRobin), Just(Policy::Priority), Just(Policy::Share)], switch in prop_oneof![Just(Switch::Msched), Just(Switch::Whole)], budget in prop_oneof![Just(Some(BUDGET)), Just(None)], orphans in proptest::collection::vec(100..106u32, 0..4), steps in proptest::collection::vec(step(), 1..60)) {
        // A previous daemon's processes, some of which come back (pids 100 + conn).
        let mut d = fuzzing::daemon(policy, switch, budget, &orphans);
        for (i, s) in steps.into_iter().enumerate() {
            let taken = fuzzing::take(&mut d, s, i as u64 * 3_000_000);
            prop_assert!(taken.is_ok(), "{taken:?}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 100_000, ..ProptestConfig::default() })]

    #[test]
    fn no_line_from_anyone_panics_the_daemon(uid in prop_oneof![Just(0u32), Just(OWNER), Just(2000)], line in line()) {
        let mut d = fuzzing::daemon(Policy::RoundRobin, Switch::Msched, Some(BUDGET), &[]);
        let taken = fuzzing::take(&mut d, Step::Line { conn: 1, uid, line }, 0);
        prop_assert!(taken.is_ok(), "{taken:?}");
    }
}
