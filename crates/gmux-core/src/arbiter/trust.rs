//! What the daemon takes from a tenant, checked: a `Hello` joins only a tenant of its own
//! user and asks only for what it may, a knob write keeps the tenants' protected memory
//! within the budget, and a report is believed only as far as the grants allow.

use super::record::{Entry, TenantRecord};
use super::{Arbiter, Proc};
use crate::hooks::{Admission, Joining};
use crate::knobs::Knob;
use crate::protocol::{Resume, ShimReport, PROTOCOL};
use crate::size::format_size;
use crate::TenantId;

/// Longest tenant name, in bytes.
pub const MAX_NAME: usize = 128;

/// Largest priority magnitude anyone may ask for (the daemon's owner included), so that
/// differences of priorities never overflow.
pub const MAX_PRIORITY_MAGNITUDE: i32 = 1_000_000;

/// Who sent a message: from `SO_PEERCRED`, and whether that user administers the daemon
/// (its owner or root).
#[derive(Debug, Clone, Copy)]
pub struct Sender {
    /// Process id.
    pub pid: u32,
    /// User id.
    pub uid: u32,
    /// The daemon's owner or root.
    pub admin: bool,
    /// Its process's start time (0: unknown).
    pub start: u64,
}

/// A `Hello`'s fields.
#[derive(Debug, Clone)]
pub struct Hello<'a> {
    /// The shim's protocol version.
    pub version: u32,
    /// Tenant name.
    pub tenant: &'a str,
    /// Priority asked for.
    pub priority: i32,
    /// `gmem.limit.high` asked for.
    pub high: Option<u64>,
    /// What it holds, when it registers again after losing its daemon.
    pub resume: Option<Resume>,
    /// The UUID of the GPU its memory is on.
    pub gpu: Option<&'a str>,
}

/// Longest GPU UUID a `Hello` may name, in bytes (the driver's are 40).
pub const MAX_GPU: usize = 64;

/// Whether `gpu` looks like a device UUID as the driver prints them (`GPU-` or `MIG-`
/// and hex digits and dashes), so that it can name a socket and a log line safely.
pub fn is_gpu_uuid(gpu: &str) -> bool {
    let body = gpu.strip_prefix("GPU-").or_else(|| gpu.strip_prefix("MIG-"));
    gpu.len() <= MAX_GPU && body.is_some_and(|b| !b.is_empty() && b.bytes().all(|c| c.is_ascii_hexdigit() || c == b'-'))
}

impl Arbiter {
    /// Registers the sender's process as connection `conn` of the tenant its `Hello`
    /// names, or says why not (one line, with what to do).
    pub fn admit(&mut self, conn: u64, who: Sender, h: &Hello) -> Result<TenantId, String> {
        if h.version != PROTOCOL {
            return Err(format!("this libgmux.so speaks protocol {}, gmuxd speaks {PROTOCOL}: run the shim and the daemon of one build", h.version));
        }
        if h.tenant.is_empty() || h.tenant.len() > MAX_NAME || h.tenant.chars().any(char::is_control) {
            return Err(format!("tenant names are 1 to {MAX_NAME} bytes with no control characters; pick another --tenant"));
        }
        if let Some(gpu) = h.gpu {
            if !is_gpu_uuid(gpu) {
                let shown: String = gpu.chars().take(MAX_GPU).collect();
                return Err(format!("{shown:?} is not a GPU's UUID (GPU-… as the driver gives it); a shim of this build sends its device's own"));
            }
            if let Some(served) = self.settings.gpu.as_deref().filter(|s| *s != gpu) {
                return Err(format!(
                    "this daemon serves GPU {served}, and the process's memory is on GPU {gpu}: `gmux run` registers each process with its GPU's daemon (unset GMUX_SOCKET), or start one with `gmux daemon --gpu {gpu}`"
                ));
            }
        }
        // A process of the previous daemon is taken back as it is: its priority and limit
        // are brought within what this daemon allows instead of refused, since refusing it
        // would leave its memory unaccounted and nobody could grow.
        let resuming = h.resume.is_some() && self.is_awaited(who.pid, who.start);
        let ceiling = if who.admin { MAX_PRIORITY_MAGNITUDE } else { self.settings.max_priority };
        let priority = if resuming { h.priority.clamp(-MAX_PRIORITY_MAGNITUDE, ceiling) } else { h.priority };
        if priority.unsigned_abs() > MAX_PRIORITY_MAGNITUDE.unsigned_abs() || priority > ceiling {
            return Err(format!(
                "priority {} is out of range: you may ask for -{MAX_PRIORITY_MAGNITUDE} to {ceiling} (the daemon's owner sets the ceiling with --max-priority)",
                h.priority
            ));
        }
        let existing = self.tenants.find(h.tenant).ok();
        if let Some(t) = existing {
            if self.tenants.get(t).owner.is_some_and(|o| o != who.uid) && who.uid != 0 {
                return Err(format!("tenant {:?} is another user's; pick another --tenant name", h.tenant));
            }
        }
        let mut limits = existing.map(|t| self.tenants.get(t).limits.clone()).unwrap_or_default();
        let high = if let Some(mut asked) = h.high {
            let pinned = existing.filter(|t| self.tenants.get(*t).high_set_by_admin).and_then(|t| self.tenants.get(t).limits.high);
            if let (true, Some(set)) = (resuming, pinned) {
                asked = asked.min(set);
            }
            if let Some(set) = pinned.filter(|set| asked > *set) {
                return Err(format!(
                    "--mem-limit {} is above tenant {:?}'s gmem.limit.high of {}, which the daemon's owner set; ask for at most that, or ask the owner to raise it",
                    format_size(asked),
                    h.tenant,
                    format_size(set)
                ));
            }
            limits.set(Knob::LimitHigh, &asked.to_string()).map_err(|e| format!("--mem-limit: {e}"))?;
            Some(limits.high)
        } else {
            None
        };
        // A loaded policy's task_init (not for a process taken back: it holds memory).
        let new_tenant = existing.is_none_or(|t| !self.members.contains_key(&t));
        let joining = Joining {
            tenant: existing.unwrap_or(TenantId(self.tenants.len() as u32)),
            new_tenant,
            uid: who.uid,
            priority,
            timeslice: existing.map_or(self.settings.timeslice, |t| self.tenants.get(t).limits.timeslice),
            processes: self.procs.len() as u32,
            held: self.procs.values().map(|p| p.report.held).fold(0, u64::saturating_add),
            budget: self.settings.hbm.unwrap_or(u64::MAX),
            name: crate::hooks::short_name(h.tenant),
            name_len: h.tenant.len() as u32,
        };
        let answer = if resuming { Admission::default() } else { self.sched_hooks.task_init(&joining) };
        if answer.refuse {
            return Err(format!(
                "the daemon's policy (task_init) refused a process of tenant {:?}; its owner lists policies with `gmux policy list`",
                h.tenant
            ));
        }
        let priority = answer.priority.map_or(priority, |p| p.clamp(-MAX_PRIORITY_MAGNITUDE, MAX_PRIORITY_MAGNITUDE));
        let before = existing.map(|t| TenantRecord::of(self.tenants.get(t)));
        if let (None, Some(gpu)) = (&self.settings.gpu, h.gpu) {
            self.settings.gpu = Some(gpu.to_string());
            self.journal.push(Entry::Gpu { gpu: gpu.to_string() });
        }
        let t = self.join(conn, who.pid, h.tenant, priority);
        let tenant = self.tenants.get_mut(t);
        tenant.owner.get_or_insert(who.uid);
        if let Some(slice) = answer.timeslice.filter(|_| new_tenant) {
            tenant.limits.timeslice = slice.clamp(1_000, crate::knobs::MAX_TIMESLICE);
        }
        if let Some(high) = high {
            tenant.limits.high = high;
        }
        let after = TenantRecord::of(tenant);
        if before.as_ref() != Some(&after) {
            self.journal.push(Entry::Tenant(after));
        }
        self.procs.get_mut(&conn).expect("joined").start = who.start;
        self.journal.push(Entry::Join { pid: who.pid, start: who.start, tenant: h.tenant.to_string() });
        if let Some(r) = h.resume {
            self.resume(conn, who.pid, who.start, r);
        } else if self.is_awaited(who.pid, who.start) {
            // An orphan that starts over (a second connection): its reports say what it holds.
            self.orphan_gone(who.pid, who.start);
        }
        Ok(t)
    }

    /// `gmux set` by the daemon's owner or root. A `gmem.limit.high` set this way is one
    /// that a joining process cannot raise; `gmem.limit.low`s together stay within the
    /// budget. Returns a warning when the new limit is below what the tenant's largest
    /// command so far needed.
    pub fn set_knob(&mut self, tenant: &str, knob: &str, value: &str) -> Result<Option<String>, String> {
        let t = self.tenants.find(tenant).map_err(|e| e.to_string())?;
        let k = Knob::parse(knob).map_err(|e| e.to_string())?;
        let mut limits = self.tenants.get(t).limits.clone();
        limits.set(k, value).map_err(|e| e.to_string())?;
        if let (Knob::LimitLow, Some(budget)) = (k, self.settings.hbm) {
            let others: u64 = self.tenants.ids().filter(|u| *u != t).map(|u| self.tenants.get(u).limits.low).fold(0, u64::saturating_add);
            if others.saturating_add(limits.low) > budget {
                return Err(format!(
                    "gmem.limit.low {value} would protect {} in all, more than the budget of {}: the others protect {}; lower theirs first or ask for at most {}",
                    format_size(others.saturating_add(limits.low)),
                    format_size(budget),
                    format_size(others),
                    format_size(budget.saturating_sub(others))
                ));
            }
        }
        let largest = self.usage(t).largest;
        let tenant = self.tenants.get_mut(t);
        tenant.limits = limits;
        if k != Knob::LimitHigh {
            let record = Entry::Tenant(TenantRecord::of(tenant));
            self.journal.push(record);
            return Ok(None);
        }
        tenant.high_set_by_admin = tenant.limits.high.is_some();
        let record = Entry::Tenant(TenantRecord::of(tenant));
        self.journal.push(record);
        let tenant = self.tenants.get(t);
        Ok(tenant.limits.high.filter(|h| *h < largest).map(|h| {
            format!(
                "warning: tenant {tenant:?}'s largest command so far needed {} at once, more than the new gmem.limit.high of {}: its next such command ends its process (status 86)",
                format_size(largest),
                format_size(h)
            )
        }))
    }
}

/// `r` as far as it can be believed of process `p`: memory held at most what its grants
/// let it hold (or what it held before, while it shrinks), memory wanted, allocated or
/// swapped at most `budget`, counters never going back. Returns what
/// was not believed, to log.
pub fn believable(p: &Proc, mut r: ShimReport, budget: u64) -> (ShimReport, Option<String>) {
    let mut doubts = Vec::new();
    // A process grows only under a grant, and shrinks toward a smaller one over several
    // reports: it may hold what it held, or up to any cap it may have acted on.
    let may_hold = p.exposure.max(p.sent.map_or(0, |g| g.cap)).max(p.report.held);
    if r.held > may_hold {
        doubts.push(format!("holding {} (granted at most {})", format_size(r.held), format_size(may_hold)));
        r.held = may_hold;
    }
    r.resident = r.resident.min(r.held);
    for (name, v) in [
        ("want", &mut r.want),
        ("period", &mut r.period),
        ("blocked", &mut r.blocked),
        ("largest", &mut r.largest),
        ("allocated", &mut r.allocated),
        ("swapped", &mut r.swapped),
    ] {
        if *v > budget {
            doubts.push(format!("{name} {} (budget {})", format_size(*v), format_size(budget)));
            *v = budget;
        }
    }
    let last = &p.report;
    for (name, v, was) in [
        ("commands", &mut r.commands, last.commands),
        ("finished", &mut r.finished, last.finished),
        ("bytes_h2d", &mut r.bytes_h2d, last.bytes_h2d),
        ("bytes_d2h", &mut r.bytes_d2h, last.bytes_d2h),
        ("launches_held_ns", &mut r.launches_held_ns, last.launches_held_ns),
        ("prepare_ns", &mut r.prepare_ns, last.prepare_ns),
    ] {
        if *v < was {
            doubts.push(format!("{name} going back from {was} to {v}"));
            *v = was;
        }
    }
    (r, (!doubts.is_empty()).then(|| doubts.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arbiter::Switch;
    use crate::protocol::Grant;
    use crate::sched::Policy;

    const G: u64 = 1 << 30;
    const ALICE: Sender = Sender { pid: 100, uid: 2000, admin: false, start: 0 };
    const BOB: Sender = Sender { pid: 200, uid: 3000, admin: false, start: 0 };
    const ROOT: Sender = Sender { pid: 1, uid: 0, admin: true, start: 0 };

    fn hello(tenant: &str) -> Hello<'_> {
        Hello { version: PROTOCOL, tenant, priority: 0, high: None, resume: None, gpu: None }
    }

    fn daemon() -> Arbiter {
        Arbiter::new(Some(8 * G), None, Policy::RoundRobin, Switch::Msched)
    }

    #[test]
    fn a_hello_joins_only_a_tenant_of_its_own_user() {
        let mut d = daemon();
        let t = d.admit(1, ALICE, &hello("train")).unwrap();
        assert_eq!(d.tenants.get(t).owner, Some(2000));
        let e = d.admit(2, BOB, &Hello { high: Some(2 << 20), ..hello("train") }).unwrap_err();
        assert!(e.contains("another user's") && e.contains("--tenant"), "{e}");
        assert_eq!(d.tenants.get(t).limits.high, None, "the refused Hello changed nothing");
        assert_eq!(d.pids(t), vec![100]);
        assert_eq!(d.admit(3, Sender { pid: 101, ..ALICE }, &hello("train")), Ok(t), "a second process of the same user");
        assert_eq!(d.admit(4, ROOT, &hello("train")), Ok(t), "root joins any tenant");
        assert_eq!(d.tenants.get(t).owner, Some(2000), "joining does not take a tenant over");
    }

    #[test]
    fn a_hello_asks_for_a_valid_limit_and_never_above_the_owners() {
        let mut d = daemon();
        d.settings.timeslice = 5_000_000;
        let t = d.admit(1, ALICE, &Hello { high: Some(6 * G), ..hello("job") }).unwrap();
        assert_eq!(d.tenants.get(t).limits.high, Some(6 * G));
        assert_eq!(d.tenants.get(t).limits.timeslice, 5_000_000, "a new tenant gets the daemon's --timeslice");
        for tiny in [0, 1, (2 << 20) - 1] {
            let e = d.admit(2, ALICE, &Hello { high: Some(tiny), ..hello("job") }).unwrap_err();
            assert!(e.contains("--mem-limit") && e.contains("2M"), "{e}");
        }
        assert_eq!(d.set_knob("job", "gmem.limit.high", "4G"), Ok(None));
        let e = d.admit(3, ALICE, &Hello { high: Some(u64::MAX), ..hello("job") }).unwrap_err();
        assert!(e.contains("above") && e.contains("4.0 GiB"), "{e}");
        assert_eq!(d.tenants.get(t).limits.high, Some(4 * G));
        d.admit(4, ALICE, &Hello { high: Some(2 * G), ..hello("job") }).unwrap();
        assert_eq!(d.tenants.get(t).limits.high, Some(2 * G), "asking for less is fine");
    }

    #[test]
    fn priorities_above_the_ceiling_are_the_owners_and_every_priority_is_bounded() {
        let mut d = daemon();
        d.settings.max_priority = 2;
        let e = d.admit(1, ALICE, &Hello { priority: 3, ..hello("a") }).unwrap_err();
        assert!(e.contains("priority 3") && e.contains("--max-priority"), "{e}");
        assert!(d.admit(2, ALICE, &Hello { priority: 2, ..hello("b") }).is_ok());
        assert!(d.admit(3, ROOT, &Hello { priority: 50, ..hello("c") }).is_ok());
        for p in [i32::MIN, i32::MAX, -MAX_PRIORITY_MAGNITUDE - 1] {
            assert!(d.admit(4, ROOT, &Hello { priority: p, ..hello("d") }).is_err(), "priority {p}");
        }
    }

    #[test]
    fn a_daemon_serves_one_gpu_the_first_process_names_unless_told() {
        const A: &str = "GPU-676d7578-0000-0000-0000-000000000000";
        const B: &str = "GPU-676d7578-0000-0000-0000-000000000001";
        let mut d = daemon();
        let e = d.admit(1, ALICE, &Hello { gpu: Some(B), priority: 3, ..hello("early") }).unwrap_err();
        assert!(e.contains("priority"), "{e}");
        assert_eq!(d.settings.gpu, None, "a refused Hello binds nothing");
        d.admit(2, ALICE, &Hello { gpu: Some(A), ..hello("a") }).unwrap();
        assert_eq!(d.settings.gpu.as_deref(), Some(A));
        assert!(
            d.journal.contains(&Entry::Gpu { gpu: A.into() }) && d.snapshot().contains(&Entry::Gpu { gpu: A.into() }),
            "the binding is kept for the next daemon"
        );
        let e = d.admit(3, ALICE, &Hello { gpu: Some(B), ..hello("b") }).unwrap_err();
        assert!(e.contains(&format!("serves GPU {A}")) && e.contains(&format!("--gpu {B}")), "{e}");
        assert!(d.tenants.find("b").is_err(), "the process of the other GPU made no tenant");
        assert!(d.admit(4, ALICE, &hello("c")).is_ok(), "a shim that names no GPU is taken as before");
        for bad in ["", "GPU-", "gpu0", "GPU-12/../x", "GPU-zz", &format!("GPU-{}", "0".repeat(MAX_GPU))] {
            let e = d.admit(5, ALICE, &Hello { gpu: Some(bad), ..hello("d") }).unwrap_err();
            assert!(e.contains("not a GPU's UUID") && e.len() < 2 * MAX_GPU + 100, "{bad:?}: {e}");
        }
        assert!(is_gpu_uuid(A) && is_gpu_uuid("MIG-9a1b2c3d-0000-1111-2222-333344445555"));
        let mut told = daemon();
        told.settings.gpu = Some(B.into());
        assert!(told.admit(1, ALICE, &Hello { gpu: Some(A), ..hello("a") }).unwrap_err().contains("--gpu"), "--gpu decides, not the first process");
    }

    #[test]
    fn a_hello_of_another_protocol_or_with_a_bad_name_is_refused_by_name() {
        let mut d = daemon();
        let e = d.admit(1, ALICE, &Hello { version: 0, ..hello("a") }).unwrap_err();
        assert!(e.contains("protocol 0") && e.contains(&format!("speaks {PROTOCOL}")), "{e}");
        let long = "x".repeat(MAX_NAME + 1);
        for bad in ["", "a\nb", "tab\there", long.as_str()] {
            assert!(d.admit(2, ALICE, &hello(bad)).unwrap_err().contains("tenant names"), "{bad:?}");
        }
        assert!(d.tenants.is_empty(), "nothing refused made a tenant");
    }

    #[test]
    fn protected_memory_never_exceeds_the_budget() {
        let mut d = daemon();
        for (c, n) in [(1, "a"), (2, "b"), (3, "c")] {
            d.admit(c, ALICE, &hello(n)).unwrap();
        }
        assert_eq!(d.set_knob("a", "gmem.limit.low", "5G"), Ok(None));
        let e = d.set_knob("b", "gmem.limit.low", "4G").unwrap_err();
        assert!(e.contains("9.0 GiB") && e.contains("8.0 GiB") && e.contains("at most 3.0 GiB"), "{e}");
        d.set_knob("b", "gmem.limit.low", "3G").unwrap();
        d.set_knob("a", "gmem.limit.low", "4G").unwrap();
        assert!(d.set_knob("c", "gmem.limit.low", "1G").is_ok());
    }

    #[test]
    fn a_report_of_more_memory_than_granted_is_not_believed() {
        let mut d = daemon();
        d.admit(1, ALICE, &hello("liar")).unwrap();
        d.admit(2, BOB, &hello("honest")).unwrap();
        let fair = ShimReport { want: 4 * G, period: 4 * G, busy: true, ..Default::default() };
        d.report(1, fair);
        d.report(2, fair);
        let sent = |d: &Arbiter, c: u64| -> Grant { d.procs[&c].sent.expect("granted") };
        d.decide(0);
        let before = sent(&d, 2).cap;
        assert!(before >= 2 * G, "{before}");
        // Before the fix, holding 1 PiB left nothing of the budget for the neighbour.
        let lie = ShimReport { held: 1 << 50, resident: 1 << 50, commands: u64::MAX, grant: sent(&d, 1).seq, ..fair };
        let why = d.report(1, lie).expect("doubted");
        assert!(why.contains("holding 1024.0 TiB"), "{why}");
        assert_eq!(d.report(1, lie), None, "logged once per process");
        assert!(d.procs[&1].report.held <= sent(&d, 1).cap);
        d.decide(1);
        assert_eq!(sent(&d, 2).cap, before, "the neighbour keeps its grant");
        let back = ShimReport { commands: 5, ..lie };
        d.report(1, back);
        assert_eq!(d.procs[&1].report.commands, u64::MAX, "counters do not go back");
        // Wants past the budget count as the budget; sums never overflow.
        d.report(1, ShimReport { want: u64::MAX, period: u64::MAX, blocked: u64::MAX, ..lie });
        let u = d.usage(d.tenants.find("liar").unwrap());
        assert_eq!((u.want, u.period, u.blocked), (8 * G, 8 * G, 8 * G));
        d.decide(2);
    }

    #[test]
    fn a_limit_below_the_largest_command_so_far_is_set_with_a_warning() {
        let mut d = daemon();
        d.admit(1, ALICE, &hello("big")).unwrap();
        d.report(1, ShimReport { largest: 3 * G, ..Default::default() });
        assert_eq!(d.set_knob("big", "gmem.limit.high", "4G"), Ok(None));
        let w = d.set_knob("big", "gmem.limit.high", "2G").unwrap().expect("a warning");
        assert!(w.contains("3.0 GiB") && w.contains("2.0 GiB") && w.contains("status 86"), "{w}");
        assert_eq!(d.tenants.get(d.tenants.find("big").unwrap()).limits.high, Some(2 * G), "set all the same");
    }

    #[test]
    fn a_process_shrinking_over_several_reports_is_believed() {
        // The shim reports having applied a smaller grant after each eviction step, while
        // it still holds more than the new cap.
        let mut d = daemon();
        d.admit(1, ALICE, &hello("t")).unwrap();
        d.report(1, ShimReport { want: 6 * G, busy: true, ..Default::default() });
        d.decide(0);
        let big = d.procs[&1].sent.unwrap();
        d.report(1, ShimReport { held: big.cap, want: 6 * G, busy: true, grant: big.seq, ..Default::default() });
        d.set_knob("t", "gmem.limit.high", "2G").unwrap();
        d.decide(1);
        let small = d.procs[&1].sent.unwrap();
        assert!(small.cap <= 2 * G && small.cap < big.cap, "{small:?}");
        for held in [big.cap - G, 3 * G, 2 * G] {
            let why = d.report(1, ShimReport { held, want: 6 * G, busy: true, grant: small.seq, ..Default::default() });
            assert_eq!((why, d.procs[&1].report.held), (None, held), "an honest shrink step was doubted");
        }
        let why = d.report(1, ShimReport { held: 5 * G, want: 6 * G, busy: true, grant: small.seq, ..Default::default() });
        assert!(why.is_some() && d.procs[&1].report.held == 2 * G, "growing again past the grant is not believed");
    }
}
