//! The daemon's loaded policies (`gmux policy load|list|unload|map`): each object file's
//! scheduling programs, verified and attached to the arbiter's scheduling hooks between
//! two decisions, at most one program per hook across policies.

use super::ctl::{MapAction, Reply};
use super::server::{lock, Peer};
use gmux_bpf::sched::SchedPolicy;
use gmux_bpf::{MapKind, Policy};
use gmux_core::arbiter::Arbiter;
use gmux_core::hooks::{Admission, Joining, SchedHooks};
use gmux_core::{Nanos, TenantId};
use std::sync::{Arc, Mutex};

/// Most policies loaded at once.
pub const MAX_POLICIES: usize = 16;

/// One loaded policy.
struct Loaded {
    id: u32,
    name: String,
    uid: u32,
    at: String,
    hooks: Vec<&'static str>,
    policy: Arc<Mutex<SchedPolicy>>,
}

/// The loaded policies.
#[derive(Default)]
pub(crate) struct Policies {
    list: Vec<Loaded>,
    next: u32,
}

/// The loaded policies as the arbiter's scheduling hooks: each hook runs the one program
/// attached to it.
struct Attached(Vec<Arc<Mutex<SchedPolicy>>>);

impl Attached {
    fn each(&self, mut f: impl FnMut(&mut SchedPolicy)) {
        for p in &self.0 {
            f(&mut lock(p));
        }
    }
}

impl SchedHooks for Attached {
    fn clock(&mut self, now: Nanos) {
        self.each(|p| p.clock(now));
    }
    fn task_init(&mut self, j: &Joining) -> Admission {
        let mut a = Admission::default();
        self.each(|p| {
            let b = p.task_init(j);
            a = Admission { refuse: a.refuse || b.refuse, priority: b.priority.or(a.priority), timeslice: b.timeslice.or(a.timeslice) };
        });
        a
    }
    fn task_destroy(&mut self, t: TenantId) {
        self.each(|p| p.task_destroy(t));
    }
    fn timeslice(&mut self, t: TenantId, mut slice: Nanos, cost: Option<Nanos>) -> Nanos {
        self.each(|p| slice = p.timeslice(t, slice, cost));
        slice
    }
}

/// A policy verified and compiled, ready to attach.
pub(crate) struct Prepared {
    name: String,
    hooks: Vec<&'static str>,
    policy: SchedPolicy,
}

/// Whether `who` may load, list, unload or read policies.
fn admin(who: Peer, owner: u32) -> Result<(), Reply> {
    if who.uid == owner || who.uid == 0 {
        Ok(())
    } else {
        Err(Reply::error(format!("permission denied: only the daemon's owner (uid {owner}) or root may load, list, unload or read policies")))
    }
}

/// The policy a load request carries, verified and compiled: done before the decision
/// lock is taken, so that no decision waits for it.
pub(crate) fn prepare(name: &str, object: &str, who: Peer, owner: u32) -> Result<Prepared, Reply> {
    admin(who, owner)?;
    let name: String = name.chars().filter(|c| !c.is_control()).take(gmux_core::arbiter::MAX_NAME).collect();
    let bytes = unhex(object).ok_or_else(|| Reply::error("the object is not hex: use the gmux CLI of the same version as the daemon".into()))?;
    let policy = Policy::load(&bytes).map_err(|e| Reply::error(format!("{name}: {e}")))?;
    let hooks: Vec<&'static str> = policy.hooks().collect();
    if let Some(h) = hooks.iter().find(|h| gmux_bpf::sched::SCHED_HOOKS.iter().all(|s| s.name != **h)) {
        return Err(Reply::error(format!(
            "{name}: {h} is a memory hook: memory programs run in each tenant's process, and attaching them to running tenants is not supported yet (gmux policy check verifies them)"
        )));
    }
    Ok(Prepared { name, hooks, policy: policy.into_sched() })
}

impl Policies {
    /// Answers a policy request from `who` (the daemon's owner is `owner`); `d` is the
    /// arbiter, locked by the caller, whose hooks change between two of its decisions. A
    /// load comes `prepared` ([`prepare`]).
    pub(crate) fn answer(&mut self, d: &mut Arbiter, req: &super::ctl::Request, prepared: Option<Result<Prepared, Reply>>, who: Peer, owner: u32) -> Reply {
        use super::ctl::Request;
        if let Err(e) = admin(who, owner) {
            return e;
        }
        match req {
            Request::PolicyLoad { .. } => match prepared {
                Some(Ok(p)) => self.load(d, p, who.uid),
                Some(Err(e)) => e,
                None => Reply::error("a load comes prepared".into()),
            },
            Request::PolicyList { json } => Reply::ok(self.list(*json)),
            Request::PolicyUnload { id } => match self.list.iter().position(|l| l.id == *id) {
                Some(i) => {
                    let gone = self.list.remove(i);
                    self.attach(d);
                    Reply::ok(format!("unloaded policy {id} ({}); its hooks are gmux's own again", gone.name))
                }
                None => Reply::error(format!("no policy {id}: list them with `gmux policy list`")),
            },
            Request::PolicyMap { id, map, action } => self.map(*id, map, action),
            _ => Reply::error("not a policy request".into()),
        }
    }

    fn load(&mut self, d: &mut Arbiter, p: Prepared, uid: u32) -> Reply {
        if self.list.len() >= MAX_POLICIES {
            return Reply::error(format!("{MAX_POLICIES} policies are loaded, the most there may be: unload one first"));
        }
        let name = p.name;
        if let Some((h, other)) = p.hooks.iter().find_map(|h| self.list.iter().find(|l| l.hooks.contains(h)).map(|l| (h, l))) {
            return Reply::error(format!(
                "{name}: the {h} hook has policy {} ({}) attached: unload it first (`gmux policy unload {}`)",
                other.id, other.name, other.id
            ));
        }
        self.next += 1;
        let id = self.next;
        let at = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
        let hooks = p.hooks.join(", ");
        self.list.push(Loaded { id, name: name.clone(), uid, at, hooks: p.hooks, policy: Arc::new(Mutex::new(p.policy)) });
        self.attach(d);
        Reply::ok(format!("loaded policy {id} ({name}): {hooks}"))
    }

    /// Points the arbiter's hooks at the loaded policies (between two decisions: the
    /// caller holds the arbiter).
    fn attach(&self, d: &mut Arbiter) {
        d.sched_hooks =
            if self.list.is_empty() { Box::new(gmux_core::hooks::NoHooks) } else { Box::new(Attached(self.list.iter().map(|l| l.policy.clone()).collect())) };
    }

    /// The trace lines the programs wrote since the last call, each naming its policy.
    pub(crate) fn traces(&self) -> Vec<String> {
        let mut out = Vec::new();
        for l in &self.list {
            for t in lock(&l.policy).take_traces() {
                out.push(format!("policy {} ({}): {t}", l.id, l.name));
            }
        }
        out
    }

    fn list(&self, json: bool) -> String {
        let maps = |l: &Loaded| -> Vec<String> { lock(&l.policy).maps().map(|(n, _)| n.to_string()).collect() };
        if json {
            let v: Vec<_> = self
                .list
                .iter()
                .map(|l| serde_json::json!({ "id": l.id, "name": l.name, "uid": l.uid, "loaded": l.at, "hooks": l.hooks, "maps": maps(l), "failures": lock(&l.policy).failures }))
                .collect();
            return serde_json::Value::Array(v).to_string();
        }
        if self.list.is_empty() {
            return "no policies loaded: gmux's own decisions everywhere".into();
        }
        let mut out = format!("{:<4} {:<24} {:<6} {:<20} {:<30} {}", "ID", "NAME", "UID", "LOADED", "HOOKS", "MAPS");
        for l in &self.list {
            out += &format!("\n{:<4} {:<24} {:<6} {:<20} {:<30} {}", l.id, l.name, l.uid, l.at, l.hooks.join(","), maps(l).join(","));
        }
        out
    }

    fn map(&self, id: u32, name: &str, action: &MapAction) -> Reply {
        let Some(l) = self.list.iter().find(|l| l.id == id) else { return Reply::error(format!("no policy {id}: list them with `gmux policy list`")) };
        let p = lock(&l.policy);
        let Some((_, m)) = p.maps().find(|m| m.0 == name) else {
            let names: Vec<&str> = p.maps().map(|m| m.0).collect();
            return Reply::error(format!("policy {id} has no map {name:?}; its maps: {}", if names.is_empty() { "none".into() } else { names.join(", ") }));
        };
        let (ks, vs) = (m.def.key_size, m.def.value_size);
        match action {
            MapAction::Dump => {
                let kind = if m.def.kind == MapKind::Array { "array" } else { "hash" };
                let mut out = format!("map {name} of policy {id}: {kind}, {ks}-byte keys, {vs}-byte values");
                for (k, v) in m.entries() {
                    out += &format!("\n{} {}", show(&k), show(&v));
                }
                Reply::ok(out)
            }
            MapAction::Update { key, value } => {
                let (k, v) = match (bytes(key, ks, "key"), bytes(value, vs, "value")) {
                    (Ok(k), Ok(v)) => (k, v),
                    (Err(e), _) | (_, Err(e)) => return Reply::error(e),
                };
                match m.update(&k, &v) {
                    Ok(()) => Reply::ok(String::new()),
                    Err(e) => Reply::error(format!("map {name}: {e}")),
                }
            }
            MapAction::Delete { key } => match bytes(key, ks, "key") {
                Ok(k) if m.delete(&k) => Reply::ok(String::new()),
                Ok(_) => Reply::error(format!("map {name} has no key {key}")),
                Err(e) => Reply::error(e),
            },
        }
    }
}

/// A key or value as `gmux policy map` writes it: a decimal number (little-endian, for
/// sizes up to 8 bytes) or `0x` and the bytes in hex.
fn bytes(text: &str, size: u32, what: &str) -> Result<Vec<u8>, String> {
    let size = size as usize;
    let out = match text.strip_prefix("0x") {
        Some(h) => unhex(h).filter(|b| b.len() == size),
        None => text.parse::<u64>().ok().filter(|_| size <= 8).and_then(|n| {
            let b = n.to_le_bytes();
            b[size..].iter().all(|x| *x == 0).then(|| b[..size].to_vec())
        }),
    };
    out.ok_or_else(|| format!("the {what} is {size} bytes: write a number that fits (up to 8 bytes) or 0x and {} hex digits", 2 * size))
}

/// A key or value as `gmux policy map dump` prints it: a number up to 8 bytes, else hex.
fn show(b: &[u8]) -> String {
    if b.len() <= 8 {
        let mut w = [0u8; 8];
        w[..b.len()].copy_from_slice(b);
        u64::from_le_bytes(w).to_string()
    } else {
        format!("0x{}", hex(b))
    }
}

/// Bytes as lowercase hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Hex as bytes; `None` if not an even number of hex digits.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| s.get(i..i + 2).and_then(|d| u8::from_str_radix(d, 16).ok())).collect()
}
