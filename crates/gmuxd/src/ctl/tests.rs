//! Tests of the control API: who may read and write what, and the answers' forms.

use super::*;
use gmux_core::arbiter::{Hello, Sender, Switch};
use gmux_core::protocol::PROTOCOL;
use gmux_core::sched::Policy;

const OWNER: u32 = 1000;

fn daemon() -> Arbiter {
    let mut d = Arbiter::new(Some(16 << 30), None, Policy::RoundRobin, Switch::Msched);
    let hello = |tenant| Hello { version: PROTOCOL, tenant, priority: 0, high: None, resume: None, gpu: None };
    d.admit(1, Sender { pid: 4242, uid: 2000, admin: false, start: 0 }, &hello("mine")).unwrap();
    d.admit(2, Sender { pid: 5151, uid: 3000, admin: false, start: 0 }, &hello("theirs")).unwrap();
    d
}

fn ask(d: &mut Arbiter, req: Request, uid: u32, pid: u32) -> Reply {
    answer(d, &req, Peer { pid, uid }, OWNER, &crate::status::no_jobs)
}

#[test]
fn a_tenant_reads_its_own_knobs_and_only_the_owner_writes() {
    let mut d = daemon();
    let get = |t: &str| Request::Get { tenant: t.into(), knob: Some("gmem.limit.high".into()), json: false };
    assert_eq!(ask(&mut d, get("mine"), 2000, 4242), Reply { ok: true, text: "max".into() });
    let r = ask(&mut d, get("theirs"), 2000, 4242);
    let none = ask(&mut d, get("nobody"), 2000, 4242);
    assert_eq!((r.ok, r.text.replace("theirs", "X")), (none.ok, none.text.replace("nobody", "X")), "another user's tenant reads as one that does not exist");
    assert!(!r.ok && r.text.contains("unknown tenant \"theirs\""), "{r:?}");
    assert!(ask(&mut d, get("mine"), 2000, 9999).ok, "any process of the tenant's user reads it, not only its members");
    let set = Request::Set { tenant: "mine".into(), knob: "gmem.limit.high".into(), value: "4G".into() };
    let r = ask(&mut d, set.clone(), 2000, 4242);
    assert!(!r.ok && r.text.contains("owner"), "{r:?}");
    assert!(ask(&mut d, set, OWNER, 1).ok);
    assert_eq!(ask(&mut d, get("mine"), 0, 1).text, (4u64 << 30).to_string(), "root reads everything");
    let ps = ask(&mut d, Request::Ps { json: false }, 2000, 4242).text;
    assert!(ps.contains("mine") && !ps.contains("theirs"), "{ps}");
}

#[test]
fn json_answers_carry_the_same_numbers_and_hide_the_same_tenants() {
    let mut d = daemon();
    let set = Request::Set { tenant: "mine".into(), knob: "gmem.limit.high".into(), value: "4G".into() };
    assert!(ask(&mut d, set, OWNER, 1).ok);
    let ps = ask(&mut d, Request::Ps { json: true }, 2000, 4242);
    let s: crate::status::Status = serde_json::from_str(&ps.text).unwrap();
    assert_eq!(s.tenants.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["mine"], "another user's tenant stays hidden");
    let t = &s.tenants[0];
    assert_eq!((t.uid, t.pids.as_slice(), t.limit_high, s.budget), (Some(2000), &[4242][..], Some(4 << 30), Some(16 << 30)));
    assert_eq!(s.peak_held, None, "the daemon-wide peak would tell of the hidden tenant");
    let all: crate::status::Status = serde_json::from_str(&ask(&mut d, Request::Ps { json: true }, OWNER, 1).text).unwrap();
    assert_eq!((all.tenants.len(), all.peak_held), (2, Some(0)));
    let get = ask(&mut d, Request::Get { tenant: "mine".into(), knob: None, json: true }, OWNER, 1);
    let v: serde_json::Value = serde_json::from_str(&get.text).unwrap();
    assert_eq!(v["gmem.limit.high"], "4294967296");
    assert_eq!(v["ggroup.stat"]["switches"], 0);
    assert_eq!(v.as_object().unwrap().len(), Knob::ALL.len());
    let one = ask(&mut d, Request::Get { tenant: "mine".into(), knob: Some("gmem.limit.low".into()), json: true }, OWNER, 1);
    assert_eq!(one.text, r#"{"gmem.limit.low":"0"}"#);
}

#[test]
fn a_trigger_fires_only_while_its_condition_holds_and_refuses_what_cannot_fire() {
    let mut p = Pressure::default();
    p.some.avg10 = 0.25;
    p.full.avg10 = 0.05;
    let some = Trigger::PressureAbove { kind: StallKind::Some, window: 10, percent: 20.0 };
    let full = Trigger::PressureAbove { kind: StallKind::Full, window: 10, percent: 20.0 };
    assert_eq!(
        some.fires("a", &p, 0, None),
        Some(Event::PressureAbove { tenant: "a".into(), kind: StallKind::Some, window: 10, percent: 25.0, threshold: 20.0 })
    );
    assert_eq!(full.fires("a", &p, 0, None), None);
    assert_eq!(Trigger::PressureAbove { kind: StallKind::Some, window: 60, percent: 20.0 }.fires("a", &p, 0, None), None);
    let below = Trigger::LimitBelowHeld;
    assert_eq!(below.fires("a", &p, 8 << 20, None), None, "max is never below");
    assert_eq!(below.fires("a", &p, 8 << 20, Some(8 << 20)), None);
    assert_eq!(below.fires("a", &p, 8 << 20, Some(4 << 20)), Some(Event::LimitBelowHeld { tenant: "a".into(), limit_high: 4 << 20, held: 8 << 20 }));
    assert!(Trigger::PressureAbove { kind: StallKind::Some, window: 30, percent: 20.0 }.check().unwrap_err().contains("10, 60 or 300"));
    for bad in [0.0, 100.0, f64::NAN, -1.0] {
        assert!(Trigger::PressureAbove { kind: StallKind::Some, window: 10, percent: bad }.check().is_err(), "{bad}");
    }
    let wire = serde_json::to_string(&Request::Watch { tenant: "a".into(), trigger: some }).unwrap();
    assert_eq!(wire, r#"{"op":"watch","tenant":"a","trigger":{"when":"pressure_above","kind":"some","window":10,"percent":20.0}}"#);
}

#[test]
fn a_request_without_json_reads_as_before() {
    assert_eq!(serde_json::from_str::<Request>(r#"{"op":"ps"}"#).unwrap(), Request::Ps { json: false });
    assert_eq!(serde_json::to_string(&Request::Ps { json: false }).unwrap(), r#"{"op":"ps"}"#);
    assert!(serde_json::from_str::<Request>(r#"{"op":"ps","jsn":true}"#).is_err(), "unknown fields are refused");
}

#[test]
fn errors_name_the_cause_and_the_fix() {
    let mut d = daemon();
    let r = ask(&mut d, Request::Get { tenant: "nobody".into(), knob: None, json: false }, OWNER, 1);
    assert!(!r.ok && r.text.contains("gmux ps"), "{r:?}");
    let r = ask(&mut d, Request::Set { tenant: "mine".into(), knob: "gmem.limit".into(), value: "1G".into() }, OWNER, 1);
    assert!(!r.ok && r.text.contains("gmem.limit.high"), "{r:?}");
    let r = ask(&mut d, Request::Set { tenant: "mine".into(), knob: "gmem.current".into(), value: "1G".into() }, OWNER, 1);
    assert!(!r.ok && r.text.contains("read-only"), "{r:?}");
    let all = ask(&mut d, Request::Get { tenant: "mine".into(), knob: None, json: false }, OWNER, 1).text;
    assert_eq!(all.lines().filter(|l| l.starts_with("gmem.") || l.starts_with("compute.") || l.starts_with("ggroup.")).count(), 10, "{all}");
}
