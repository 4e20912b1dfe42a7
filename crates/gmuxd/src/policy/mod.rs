//! The daemon's loaded policies (`gmux policy load|list|unload|map`). A policy's
//! scheduling programs are attached to the arbiter's hooks between two decisions; its
//! memory programs run in the processes of the tenants it is loaded for (every tenant,
//! or one), whose shims get the object file ([`Policies::post`]). A hook has at most one
//! program across policies (for memory hooks, among those a tenant gets).

mod attached;
mod map;
mod snapshot;

use super::ctl::Reply;
use super::outbox::Outbox;
use super::server::{lock, Peer};
use attached::Attached;
use gmux_bpf::sched::SchedPolicy;
use gmux_bpf::Policy;
use gmux_core::arbiter::Arbiter;
use gmux_core::hooks::SchedHooks;
use gmux_core::protocol::{unhex, PolicyObject};
use gmux_core::TenantId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Most policies loaded at once.
pub const MAX_POLICIES: usize = 16;

/// Most policies one user other than the owner and root may have loaded at once.
pub const MAX_POLICIES_PER_USER: usize = 4;

/// Whose processes run a policy's memory programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// Every tenant's.
    All,
    /// One tenant's.
    Tenant(TenantId),
}

impl Scope {
    fn covers(self, t: TenantId) -> bool {
        self == Scope::All || self == Scope::Tenant(t)
    }

    fn overlaps(self, other: Scope) -> bool {
        self == Scope::All || other == Scope::All || self == other
    }
}

/// One loaded policy.
struct Loaded {
    id: u32,
    name: String,
    uid: u32,
    at: String,
    /// The hooks its programs are attached to, scheduling and memory.
    hooks: Vec<&'static str>,
    scope: Scope,
    /// What `gmux policy list` shows as the scope.
    scope_name: String,
    policy: Arc<Mutex<SchedPolicy>>,
    /// The object file in hex, for the shims, when it has memory programs attached.
    object: Option<Arc<str>>,
}

impl Loaded {
    fn memory_hooks(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.hooks.iter().copied().filter(|h| !is_sched(h))
    }
}

/// Whether `hook` is a scheduling hook (run in the daemon).
fn is_sched(hook: &str) -> bool {
    gmux_bpf::sched::SCHED_HOOKS.iter().any(|s| s.name == hook)
}

/// The loaded policies.
#[derive(Default)]
pub(crate) struct Policies {
    list: Vec<Loaded>,
    next: u32,
    /// What their memory programs' maps hold in the processes, as those said.
    snapshots: snapshot::Snapshots,
}

/// A policy verified and compiled, ready to attach.
pub(crate) struct Prepared {
    name: String,
    hooks: Vec<&'static str>,
    policy: SchedPolicy,
    object: String,
}

/// Whether `who` may act on policies of every tenant.
fn is_admin(who: Peer, owner: u32) -> bool {
    who.uid == owner || who.uid == 0
}

/// Whether `who` may load, list, unload or read policies at all.
fn admin(who: Peer, owner: u32, tenant_policies: bool) -> Result<(), Reply> {
    if is_admin(who, owner) || tenant_policies {
        Ok(())
    } else {
        Err(Reply::error(format!(
            "permission denied: only the daemon's owner (uid {owner}) or root may load, list, unload or read policies (a tenant's owner may load one for it where the daemon runs with --allow-tenant-policies)"
        )))
    }
}

/// What a load asks for.
pub(crate) struct LoadRequest<'a> {
    /// What `gmux policy list` calls it.
    pub name: &'a str,
    /// The object file in hex.
    pub object: &'a str,
    /// Attach only this hook's program.
    pub hook: Option<&'a str>,
    /// Run its memory programs in this tenant's processes only.
    pub tenant: Option<&'a str>,
}

/// The policy a load request carries, verified and compiled: done before the decision
/// lock is taken, so that no decision waits for it. `tenant_policies`: the daemon lets a
/// tenant's owner load memory programs for it.
pub(crate) fn prepare(r: &LoadRequest, who: Peer, owner: u32, tenant_policies: bool) -> Result<Prepared, Reply> {
    admin(who, owner, tenant_policies)?;
    if !is_admin(who, owner) && r.tenant.is_none() {
        return Err(Reply::error(format!(
            "permission denied: only the daemon's owner (uid {owner}) or root may load a policy for every tenant; name your tenant with --tenant"
        )));
    }
    let name: String = r.name.chars().filter(|c| !c.is_control()).take(gmux_core::arbiter::MAX_NAME).collect();
    let bytes = unhex(r.object).ok_or_else(|| Reply::error("the object is not hex: use the gmux CLI of the same version as the daemon".into()))?;
    let policy = Policy::load(&bytes).map_err(|e| Reply::error(format!("{name}: {e}")))?;
    let mut hooks: Vec<&'static str> = policy.hooks().collect();
    if let Some(h) = r.hook {
        if !hooks.contains(&h) {
            return Err(Reply::error(format!("{name} has no program for the {h} hook; it has: {}", hooks.join(", "))));
        }
        hooks.retain(|x| *x == h);
    }
    if let Some(h) = hooks.iter().find(|h| is_sched(h)).filter(|_| !is_admin(who, owner)) {
        return Err(Reply::error(format!(
            "permission denied: {name}'s {h} program decides for every tenant, and only the daemon's owner (uid {owner}) or root may load one; load its memory programs alone with --hook"
        )));
    }
    let mut sched = policy.into_sched();
    for (h, prog) in [
        ("task_init", &mut sched.task_init),
        ("task_destroy", &mut sched.task_destroy),
        ("timeslice", &mut sched.timeslice),
        ("admission", &mut sched.admission),
    ] {
        if !hooks.contains(&h) {
            *prog = None;
        }
    }
    Ok(Prepared { name, hooks, policy: sched, object: r.object.to_string() })
}

impl Policies {
    /// Answers a policy request from `who` (the daemon's owner is `owner`); `d` is the
    /// arbiter, locked by the caller, whose hooks change between two of its decisions. A
    /// load comes `prepared` ([`prepare`]). Returns whether the policies changed: the
    /// caller then posts them to the tenants' processes ([`Policies::post`]).
    pub(crate) fn answer(
        &mut self,
        d: &mut Arbiter,
        req: &super::ctl::Request,
        prepared: Option<Result<Prepared, Reply>>,
        who: Peer,
        owner: u32,
        tenant_policies: bool,
    ) -> (Reply, bool) {
        use super::ctl::Request;
        if let Err(e) = admin(who, owner, tenant_policies) {
            return (e, false);
        }
        let mine = |l: &Loaded| is_admin(who, owner) || l.uid == who.uid;
        let missing = |id: u32| Reply::error(format!("no policy {id} of yours: list them with `gmux policy list`"));
        match req {
            Request::PolicyLoad { tenant, .. } => match prepared {
                Some(Ok(p)) => self.load(d, p, who, owner, tenant.as_deref()),
                Some(Err(e)) => (e, false),
                None => (Reply::error("a load comes prepared".into()), false),
            },
            Request::PolicyList { json } => (Reply::ok(self.list(*json, mine)), false),
            Request::PolicyUnload { id } => match self.list.iter().position(|l| l.id == *id && mine(l)) {
                Some(i) => {
                    let gone = self.list.remove(i);
                    self.snapshots.forget(gone.id);
                    self.attach(d);
                    (Reply::ok(format!("unloaded policy {id} ({}); its hooks are gmux's own again", gone.name)), true)
                }
                None => (missing(*id), false),
            },
            Request::PolicyMap { .. } => {
                let live = d.live();
                (self.answer_map(req, who, owner, tenant_policies, &|t| live.contains(&gmux_core::TenantId(t))).0, false)
            }
            _ => (Reply::error("not a policy request".into()), false),
        }
    }

    fn load(&mut self, d: &mut Arbiter, p: Prepared, who: Peer, owner: u32, tenant: Option<&str>) -> (Reply, bool) {
        let refuse = |text: String| (Reply::error(text), false);
        if self.list.len() >= MAX_POLICIES {
            return refuse(format!("{MAX_POLICIES} policies are loaded, the most there may be: unload one first"));
        }
        if !is_admin(who, owner) && self.list.iter().filter(|l| l.uid == who.uid).count() >= MAX_POLICIES_PER_USER {
            return refuse(format!("you have {MAX_POLICIES_PER_USER} policies loaded, the most a user may: unload one first (`gmux policy list`)"));
        }
        let scope = match tenant {
            None => Scope::All,
            // Another user's tenant answers as one that does not exist.
            Some(name) => match d.tenants.find(name).ok().filter(|t| is_admin(who, owner) || d.tenants.get(*t).owner == Some(who.uid)) {
                Some(t) => Scope::Tenant(t),
                None => {
                    return refuse(format!(
                        "unknown tenant {name:?}: load a policy for a tenant of yours this daemon knows (running, in `gmux ps`, or run since it started)"
                    ))
                }
            },
        };
        let name = p.name;
        let clash = |l: &Loaded, h: &str| l.hooks.contains(&h) && (is_sched(h) || l.scope.overlaps(scope));
        if let Some((h, other)) = p.hooks.iter().find_map(|h| self.list.iter().find(|l| clash(l, h)).map(|l| (h, l))) {
            return refuse(format!(
                "{name}: the {h} hook has policy {} ({}) attached: unload it first (`gmux policy unload {}`)",
                other.id, other.name, other.id
            ));
        }
        self.next += 1;
        let id = self.next;
        let at = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
        let hooks = p.hooks.join(", ");
        let has_memory = p.hooks.iter().any(|h| !is_sched(h));
        let scope_name = match (scope, tenant) {
            (Scope::Tenant(_), Some(t)) => t.to_string(),
            _ => "all".into(),
        };
        let object = has_memory.then(|| Arc::from(p.object));
        self.list.push(Loaded { id, name: name.clone(), uid: who.uid, at, hooks: p.hooks, scope, scope_name, policy: Arc::new(Mutex::new(p.policy)), object });
        self.attach(d);
        let runs_in = if has_memory {
            format!("; its memory programs run in the processes of {}", if tenant.is_some() { "that tenant" } else { "every tenant" })
        } else {
            String::new()
        };
        (Reply::ok(format!("loaded policy {id} ({name}): {hooks}{runs_in}")), has_memory)
    }

    /// The loaded policy with an `admission` program, as the dispatcher's hooks.
    pub(crate) fn admission(&self) -> Option<Box<dyn SchedHooks>> {
        let with: Vec<_> = self.list.iter().filter(|l| lock(&l.policy).admits()).map(|l| l.policy.clone()).collect();
        (!with.is_empty()).then(|| Box::new(Attached(with)) as Box<dyn SchedHooks>)
    }

    /// Points the arbiter's hooks at the loaded policies (between two decisions: the
    /// caller holds the arbiter).
    fn attach(&self, d: &mut Arbiter) {
        d.sched_hooks =
            if self.list.is_empty() { Box::new(gmux_core::hooks::NoHooks) } else { Box::new(Attached(self.list.iter().map(|l| l.policy.clone()).collect())) };
    }

    /// Posts to each connection in `out` (of `d`'s processes) the memory policies its
    /// tenant runs: whole, so that a process drops those no longer listed. With `conn`
    /// (a process that just registered, which starts with none), only to it, and only if
    /// its tenant runs some.
    pub(crate) fn post(&self, d: &Arbiter, out: &HashMap<u64, Outbox>, conn: Option<u64>) {
        for (c, o) in out.iter().filter(|(c, _)| conn.is_none_or(|x| x == **c)) {
            let Some(t) = d.tenant_of_conn(*c) else { continue };
            let policies = self
                .list
                .iter()
                .filter(|l| l.scope.covers(t))
                .filter_map(|l| {
                    let object = l.object.as_ref()?.to_string();
                    Some(PolicyObject { id: l.id, name: l.name.clone(), hooks: l.memory_hooks().map(str::to_string).collect(), object })
                })
                .collect::<Vec<_>>();
            if conn.is_some() && policies.is_empty() {
                continue;
            }
            let mut line = serde_json::to_string(&gmux_core::protocol::Policies { tenant: t.0, policies }).expect("serializable");
            line.push('\n');
            o.post_policies(line);
        }
    }

    /// The trace lines the daemon's programs wrote since the last call: each policy's
    /// number, its line for the daemon's log, and the line.
    pub(crate) fn traces(&self) -> Vec<(u32, String, String)> {
        let mut out = Vec::new();
        for l in &self.list {
            for t in lock(&l.policy).take_traces() {
                out.push((l.id, format!("policy {} ({}): {t}", l.id, l.name), t));
            }
        }
        out
    }

    /// Keeps what the process `pid` on `conn`, of tenant `t` (named `tenant`), says map
    /// `map` of policy `id` holds in it: refused, with the reason, unless that policy runs
    /// memory programs in `t`, has that map, and the snapshot fits it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn keep_snapshot(
        &mut self,
        id: u32,
        t: TenantId,
        tenant: &str,
        (conn, pid): (u64, u32),
        map: &str,
        total: u64,
        entries: &[(String, String)],
    ) -> Result<(), String> {
        let l = self
            .list
            .iter()
            .find(|l| l.id == id && l.object.is_some() && l.scope.covers(t))
            .ok_or_else(|| format!("a snapshot of policy {id}, which runs no memory programs in its tenant"))?;
        let p = lock(&l.policy);
        let m = p
            .maps()
            .find(|m| m.0 == map)
            .map(|m| m.1)
            .ok_or_else(|| format!("a snapshot of policy {id}'s map {:?}, which it has not", map.chars().take(64).collect::<String>()))?;
        let flat = snapshot::check(m, total, entries).map_err(|why| format!("a snapshot of policy {id}'s map {map}: {why}"))?;
        let sizes = (m.def.key_size as usize, m.def.value_size as usize);
        drop(p);
        self.snapshots.keep(id, map, (conn, pid), tenant, total, sizes, flat);
        Ok(())
    }

    /// The process on `conn` has exited: its maps' snapshots stay, for reading.
    pub(crate) fn process_left(&mut self, conn: u64) {
        self.snapshots.left(conn);
    }

    /// Whether policy `id` runs memory programs in the processes of tenant `t`.
    pub(crate) fn runs_in(&self, id: u32, t: TenantId) -> bool {
        self.list.iter().any(|l| l.id == id && l.object.is_some() && l.scope.covers(t))
    }

    fn list(&self, json: bool, shown: impl Fn(&Loaded) -> bool) -> String {
        let maps = |l: &Loaded| -> Vec<String> { lock(&l.policy).maps().map(|(n, _)| n.to_string()).collect() };
        let shown: Vec<&Loaded> = self.list.iter().filter(|l| shown(l)).collect();
        if json {
            let v: Vec<_> = shown
                .iter()
                .map(|l| {
                    serde_json::json!({ "id": l.id, "name": l.name, "uid": l.uid, "loaded": l.at, "hooks": l.hooks, "tenant": l.scope_name, "maps": maps(l), "failures": lock(&l.policy).failures })
                })
                .collect();
            return serde_json::Value::Array(v).to_string();
        }
        if shown.is_empty() {
            return "no policies loaded: gmux's own decisions everywhere".into();
        }
        let mut out = format!("{:<4} {:<24} {:<6} {:<20} {:<12} {:<30} {}", "ID", "NAME", "UID", "LOADED", "TENANT", "HOOKS", "MAPS");
        for l in shown {
            out += &format!("\n{:<4} {:<24} {:<6} {:<20} {:<12} {:<30} {}", l.id, l.name, l.uid, l.at, l.scope_name, l.hooks.join(","), maps(l).join(","));
        }
        out
    }
}
