//! A daemon that takes over from a previous one on the same socket (which crashed, or was
//! stopped or restarted while tenants ran). Their processes ran on within the old grants
//! meanwhile. The journal names them; until each has registered again (saying what it
//! holds) or exited, no process is granted more than it holds, so the budget is never
//! oversubscribed by memory the new daemon cannot see.

use super::record::{Entry, TenantRecord};
use super::Arbiter;
use crate::protocol::Resume;
use crate::size::format_size;

impl Arbiter {
    /// Takes over what a previous daemon's journal kept: its tenants with their owners and
    /// knobs, and its processes that still run (pid, start time, tenant), awaited until
    /// they register again or exit. Returns what could not be taken over, to log.
    pub fn restore(&mut self, tenants: &[TenantRecord], orphans: impl IntoIterator<Item = (u32, u64, String)>) -> Vec<String> {
        let mut warnings = Vec::new();
        let budget = self.settings.hbm.unwrap_or(u64::MAX);
        let mut protected = 0u64;
        for r in tenants {
            let Ok(id) = self.tenants.add(&r.name) else { continue };
            let (mut limits, bad) = r.checked_limits();
            warnings.extend(bad.into_iter().map(|b| format!("tenant {:?}'s kept {b}; left at its default", r.name)));
            if protected.saturating_add(limits.low) > budget {
                warnings.push(format!(
                    "tenant {:?}'s gmem.limit.low of {} does not fit the budget of {} beside the others'; set to 0",
                    r.name,
                    format_size(limits.low),
                    format_size(budget)
                ));
                limits.low = 0;
            }
            protected = protected.saturating_add(limits.low);
            let t = self.tenants.get_mut(id);
            t.limits = limits;
            t.owner = r.owner;
            t.priority = r.priority;
            t.high_set_by_admin = r.high_set_by_admin && t.limits.high.is_some();
        }
        if self.settings.hbm.is_some() {
            self.awaited.extend(orphans.into_iter().map(|(pid, start, tenant)| (pid, (start, tenant))));
        }
        warnings
    }

    /// Whether processes of a previous daemon may still hold memory it has not been told
    /// of: then nobody grows.
    pub fn recovering(&self) -> bool {
        !self.awaited.is_empty()
    }

    /// The processes of a previous daemon awaited: pid, start time and tenant.
    pub fn awaited(&self) -> impl Iterator<Item = (u32, u64, &str)> {
        self.awaited.iter().map(|(pid, (start, t))| (*pid, *start, t.as_str()))
    }

    /// Whether process `pid` started at `start` is one of the previous daemon's, awaited.
    pub fn is_awaited(&self, pid: u32, start: u64) -> bool {
        self.awaited.get(&pid).is_some_and(|(s, _)| *s == start)
    }

    /// Process `pid` started at `start` exited; returns whether it was awaited.
    pub fn orphan_gone(&mut self, pid: u32, start: u64) -> bool {
        self.is_awaited(pid, start) && self.awaited.remove(&pid).is_some()
    }

    /// The process on `conn` (pid `pid`, started at `start`) registered again after losing
    /// its daemon, holding what `r` says. What it holds is believed as far as nobody else
    /// holds or may hold it, so the budget is never oversubscribed on paper, and it may grow
    /// to its old cap as far as that room and its limit allow. A process the journal does
    /// not name is believed in nothing while named ones are awaited: the memory it claims
    /// may be theirs. (A liar among the named can take room from those that come after it,
    /// which are then told to shrink: never more than its own limit.)
    pub(super) fn resume(&mut self, conn: u64, pid: u32, start: u64, r: Resume) {
        let expected = self.is_awaited(pid, start);
        if expected {
            self.awaited.remove(&pid);
        }
        let Some(t) = self.procs.get(&conn).map(|p| p.tenant) else { return };
        let budget = self.settings.hbm.unwrap_or(u64::MAX);
        let others = self.procs.iter().filter(|(c, _)| **c != conn).map(|(_, q)| q.report.held.max(q.exposure)).fold(0, u64::saturating_add);
        let room = if expected || !self.recovering() { budget.saturating_sub(others) } else { 0 };
        let high = self.tenants.get(t).limits.high.unwrap_or(u64::MAX);
        let held = r.held.min(room).min(high);
        let cap = r.cap.min(high).min(room).max(held);
        let p = self.procs.get_mut(&conn).expect("registered above");
        p.report.held = held;
        p.report.resident = held;
        p.exposure = cap;
        p.first_seq = r.seq.saturating_add(1);
        self.events.push(format!(
            "pid {pid} registered again{} holding {} under a grant of {} (it said {} under {})",
            if expected { "" } else { " (not in the journal)" },
            format_size(held),
            format_size(cap),
            format_size(r.held),
            format_size(r.cap)
        ));
    }

    /// Everything a daemon after this one must know, as the journal's lines (its first
    /// line, the settings, is the server's): the tenants with processes or with knobs of
    /// their own (one whose processes are all gone, at the defaults, is not kept: names
    /// made per run would otherwise pile up), and the processes.
    pub fn snapshot(&self) -> Vec<Entry> {
        let fresh = crate::knobs::Limits { timeslice: self.settings.timeslice, ..Default::default() };
        let kept = |t: &crate::tenant::Tenant| t.limits != fresh || t.high_set_by_admin || self.awaited.values().any(|(_, name)| *name == t.name);
        let bound = self.settings.gpu.iter().map(|gpu| Entry::Gpu { gpu: gpu.clone() });
        let mut out: Vec<Entry> = bound
            .chain(
                self.tenants
                    .ids()
                    .filter(|t| self.members.contains_key(t) || kept(self.tenants.get(*t)))
                    .map(|t| Entry::Tenant(TenantRecord::of(self.tenants.get(t)))),
            )
            .collect();
        let mut seen = std::collections::BTreeSet::new();
        for p in self.procs.values() {
            if seen.insert(p.pid) {
                out.push(Entry::Join { pid: p.pid, start: p.start, tenant: self.tenants.get(p.tenant).name.clone() });
            }
        }
        for (pid, (start, tenant)) in &self.awaited {
            if seen.insert(*pid) {
                out.push(Entry::Join { pid: *pid, start: *start, tenant: tenant.clone() });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arbiter::{Hello, Sender, Switch};
    use crate::protocol::{Grant, ShimReport, PROTOCOL};
    use crate::sched::Policy;

    const G: u64 = 1 << 30;

    fn sender(pid: u32) -> Sender {
        Sender { pid, uid: 1000, admin: false, start: 7000 + u64::from(pid) }
    }

    fn hello(tenant: &str, resume: Option<Resume>) -> Hello<'_> {
        Hello { version: PROTOCOL, tenant, priority: 0, high: None, resume, gpu: None }
    }

    fn total(d: &Arbiter) -> u64 {
        d.procs.values().map(|p| p.sent.map_or(0, |g| g.cap).max(p.report.held)).sum()
    }

    fn cap(d: &Arbiter, conn: u64) -> Grant {
        d.procs[&conn].sent.expect("granted")
    }

    #[test]
    fn a_new_daemon_grants_nothing_ahead_until_every_orphan_is_back() {
        let mut d = Arbiter::new(Some(8 * G), None, Policy::RoundRobin, Switch::Msched);
        let warnings = d.restore(&[], [(100, 7100, "a".to_string()), (200, 7200, "b".to_string())]);
        assert!(warnings.is_empty() && d.recovering());
        // A newcomer that wants 4 GiB waits: the orphans may hold all of the budget.
        d.admit(3, sender(300), &hello("c", None)).unwrap();
        d.report(3, ShimReport { want: 4 * G, period: 4 * G, blocked: 2 * G, busy: true, ..Default::default() });
        d.decide(0);
        assert_eq!(cap(&d, 3).cap, 0);
        // Orphan a comes back holding 3 GiB under its old 4 GiB grant, seq 40: it keeps
        // that grant, and its next one continues the sequence.
        d.admit(1, sender(100), &hello("a", Some(Resume { held: 3 * G, cap: 4 * G, seq: 40 }))).unwrap();
        d.report(1, ShimReport { held: 3 * G, want: 4 * G, period: 4 * G, busy: true, grant: 40, ..Default::default() });
        d.decide(1);
        assert_eq!((cap(&d, 1).cap, cap(&d, 1).seq, cap(&d, 3).cap), (4 * G, 41, 0));
        assert!(d.recovering(), "b is still out there");
        assert_eq!(d.awaited().collect::<Vec<_>>(), vec![(200, 7200, "b")]);
        // Orphan b comes back holding 4 GiB: recovery is over, and the newcomer gets what
        // is free (the budget is full: it waits for a turn's eviction).
        d.admit(2, sender(200), &hello("b", Some(Resume { held: 4 * G, cap: 4 * G, seq: 9 }))).unwrap();
        assert!(!d.recovering());
        for now in 2..40 {
            d.decide(now * 10_000_000);
            assert!(total(&d) <= 8 * G, "{} granted or held against an 8 GiB budget", total(&d));
        }
        // Once b has let go of its memory (it is idle), c grows into it.
        d.report(2, ShimReport { grant: cap(&d, 2).seq, ..Default::default() });
        d.decide(500_000_000);
        assert!(total(&d) <= 8 * G);
        assert!(cap(&d, 3).cap > 0, "the newcomer got nothing after recovery: {:?}", cap(&d, 3));
    }

    /// An idle tenant that registered again holding 4 GiB keeps what `gmem.limit.low`
    /// protects, and a busy newcomer gets the rest.
    #[test]
    fn a_returning_idle_tenant_keeps_its_protected_memory() {
        let mut d = Arbiter::new(Some(8 * G), None, Policy::RoundRobin, Switch::Msched);
        d.restore(&[], [(200, 7200, "b".to_string())]);
        d.admit(2, sender(200), &hello("b", Some(Resume { held: 4 * G, cap: 4 * G, seq: 9 }))).unwrap();
        let b = d.procs[&2].tenant;
        d.tenants.get_mut(b).limits.low = 2 * G;
        d.report(2, ShimReport { held: 4 * G, resident: 4 * G, want: 4 * G, period: 4 * G, grant: 9, ..Default::default() });
        d.admit(3, sender(300), &hello("c", None)).unwrap();
        d.report(3, ShimReport { want: 8 * G, period: 8 * G, blocked: 2 * G, busy: true, ..Default::default() });
        d.decide(0);
        assert_eq!(cap(&d, 2).cap, 2 * G, "b keeps what its low limit protects");
        d.report(2, ShimReport { held: 2 * G, resident: 2 * G, want: 4 * G, period: 4 * G, grant: cap(&d, 2).seq, ..Default::default() });
        d.decide(1);
        assert_eq!(cap(&d, 3).cap, 6 * G, "c grows into the rest");
    }

    #[test]
    fn an_orphan_that_exits_ends_the_wait_and_a_recycled_pid_does_not() {
        let mut d = Arbiter::new(Some(8 * G), None, Policy::RoundRobin, Switch::Msched);
        d.restore(&[], [(100, 7100, "a".to_string()), (200, 1, "b".to_string())]);
        // Pid 200 now belongs to a process started later: it is not the orphan.
        d.admit(2, sender(200), &hello("b", Some(Resume { held: G, cap: G, seq: 1 }))).unwrap();
        assert_eq!(d.awaited().count(), 2);
        assert!(!d.orphan_gone(200, 9), "another process of that pid exited");
        assert!(d.orphan_gone(200, 1) && d.orphan_gone(100, 7100) && !d.orphan_gone(100, 7100));
        assert!(!d.recovering());
    }

    #[test]
    fn a_claim_from_a_process_not_in_the_journal_never_squeezes_another() {
        let mut d = Arbiter::new(Some(8 * G), None, Policy::RoundRobin, Switch::Msched);
        d.admit(1, sender(100), &hello("honest", None)).unwrap();
        d.report(1, ShimReport { want: 6 * G, period: 6 * G, busy: true, ..Default::default() });
        d.decide(0);
        d.report(1, ShimReport { held: 5 * G, want: 6 * G, period: 6 * G, busy: true, grant: cap(&d, 1).seq, ..Default::default() });
        d.decide(1);
        let before = cap(&d, 1).cap;
        // A process nobody awaited claims to hold a petabyte under a petabyte's grant.
        d.admit(2, sender(200), &hello("liar", Some(Resume { held: 1 << 50, cap: 1 << 50, seq: u64::MAX }))).unwrap();
        assert_eq!(d.procs[&2].report.held, 8 * G - before, "believed past what nobody holds");
        d.decide(2);
        assert!(cap(&d, 1).cap >= 6 * G, "the honest tenant was squeezed below what it wants: {:?}", cap(&d, 1));
        assert!(total(&d) <= 8 * G);
        assert_eq!(cap(&d, 2).seq, u64::MAX, "the sequence saturates instead of overflowing");
        // While orphans are awaited, such a claim is believed in nothing.
        d.restore(&[], [(900, 7900, "gone".to_string())]);
        d.admit(3, sender(300), &hello("liar", Some(Resume { held: G, cap: G, seq: 1 }))).unwrap();
        assert_eq!((d.procs[&3].report.held, d.procs[&3].exposure), (0, 0));
    }

    #[test]
    fn a_claim_never_passes_the_tenants_limit_nor_overflows_the_sequence() {
        let mut d = Arbiter::new(Some(8 * G), None, Policy::RoundRobin, Switch::Msched);
        d.admit(1, sender(100), &hello("x", None)).unwrap();
        d.set_knob("x", "gmem.limit.high", "1G").unwrap();
        d.admit(2, sender(101), &hello("x", Some(Resume { held: 7 * G, cap: 7 * G, seq: u64::MAX - 1 }))).unwrap();
        assert_eq!((d.procs[&2].report.held, d.procs[&2].exposure), (G, G), "believed past its own limit");
        for (i, want) in [G, 2 * G, G, 3 * G].into_iter().enumerate() {
            d.report(2, ShimReport { want, period: want, busy: true, ..Default::default() });
            d.decide(i as u64 * 10_000_000);
        }
        assert_eq!(cap(&d, 2).seq, u64::MAX, "the sequence saturates");
        // A newcomer gets what x does not hold.
        d.admit(3, sender(300), &hello("y", None)).unwrap();
        d.report(3, ShimReport { want: 4 * G, period: 4 * G, blocked: 4 * G, busy: true, ..Default::default() });
        d.decide(100_000_000);
        assert!(cap(&d, 3).cap >= 4 * G, "{:?}", cap(&d, 3));
    }

    #[test]
    fn an_orphan_asking_past_this_daemons_ceilings_is_taken_back_within_them() {
        let mut d = Arbiter::new(Some(8 * G), None, Policy::RoundRobin, Switch::Msched);
        d.settings.max_priority = 0;
        let kept = TenantRecord {
            name: "a".into(),
            owner: Some(1000),
            priority: 5,
            high_set_by_admin: true,
            limits: crate::knobs::Limits { high: Some(2 * G), ..Default::default() },
        };
        d.restore(&[kept], [(100, 7100, "a".to_string())]);
        let back = Hello { priority: 5, high: Some(4 * G), ..hello("a", Some(Resume { held: G, cap: 2 * G, seq: 3 })) };
        let t = d.admit(1, sender(100), &back).expect("an orphan is taken back");
        assert!(!d.recovering());
        assert_eq!(d.tenants.get(t).limits.high, Some(2 * G), "the owner's limit holds");
        // The same Hello from a process nobody awaits is refused, as ever.
        let e = d.admit(2, sender(101), &back).unwrap_err();
        assert!(e.contains("priority 5"), "{e}");
    }

    #[test]
    fn the_tenant_of_an_orphan_still_awaited_is_kept_with_its_owner() {
        // Its knobs are the defaults and it has no process yet: only the wait keeps it, so
        // that a daemon after a second restart still knows whose name it is.
        let plain = TenantRecord { name: "a".into(), owner: Some(1000), priority: 0, high_set_by_admin: false, limits: crate::knobs::Limits::default() };
        let mut d = Arbiter::new(Some(8 * G), None, Policy::RoundRobin, Switch::Msched);
        d.restore(std::slice::from_ref(&plain), [(100, 7100, "a".to_string())]);
        assert_eq!(d.snapshot()[0], Entry::Tenant(plain));
        assert!(d.orphan_gone(100, 7100));
        assert!(d.snapshot().is_empty(), "once it is gone, the tenant is not kept");
    }

    #[test]
    fn kept_tenants_come_back_with_their_knobs_and_owners() {
        let mut d = Arbiter::new(Some(8 * G), None, Policy::RoundRobin, Switch::Msched);
        d.admit(1, sender(100), &Hello { high: Some(2 * G), ..hello("a", None) }).unwrap();
        d.set_knob("a", "gmem.limit.low", "1G").unwrap();
        d.admit(2, sender(200), &hello("b", None)).unwrap();
        let snap = d.snapshot();
        let records: Vec<TenantRecord> = snap.iter().filter_map(|e| if let Entry::Tenant(r) = e { Some(r.clone()) } else { None }).collect();
        assert_eq!(records.len(), 2);
        // A tenant of the defaults whose processes are gone is not kept; one with a knob is.
        d.admit(3, sender(300), &hello("c", None)).unwrap();
        d.leave(3);
        d.leave(1);
        let names = |d: &Arbiter| d.snapshot().iter().filter_map(|e| if let Entry::Tenant(r) = e { Some(r.name.clone()) } else { None }).collect::<Vec<_>>();
        assert_eq!(names(&d), vec!["a", "b"]);
        let orphans = snap.iter().filter_map(|e| if let Entry::Join { pid, start, tenant } = e { Some((*pid, *start, tenant.clone())) } else { None });
        let mut next = Arbiter::new(Some(4 * G), None, Policy::RoundRobin, Switch::Msched);
        assert!(next.restore(&records, orphans).is_empty());
        let a = next.tenants.get(next.tenants.find("a").unwrap());
        assert_eq!((a.limits.high, a.limits.low, a.owner), (Some(2 * G), G, Some(1000)));
        assert_eq!(next.awaited().collect::<Vec<_>>(), vec![(100, 7100, "a"), (200, 7200, "b")]);
        let e = next.admit(3, Sender { uid: 2000, ..sender(300) }, &hello("a", None)).unwrap_err();
        assert!(e.contains("another user's"), "ownership was not kept: {e}");
    }
}
