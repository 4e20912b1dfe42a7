//! `gmux policy map`: reading and writing a loaded policy's maps, the daemon's copy and,
//! for a policy with memory programs, the copies in the processes that run them; keys
//! and values written as numbers or hex.

use super::{admin, is_admin, lock, snapshot};
use crate::ctl::{MapAction, Reply, Request};
use crate::outbox::Outbox;
use crate::server::Peer;
use gmux_bpf::sched::SchedPolicy;
use gmux_bpf::MapKind;
use gmux_core::arbiter::Arbiter;
use gmux_core::protocol::{hex, unhex, MapWrite};
use std::collections::HashMap;

/// Answers `gmux policy map` on map `name` of policy `id`, whose daemon-side programs and
/// maps are `p`; `has_memory`: it also has memory programs, which keep maps of their own
/// in the tenants' processes (a dump's caller adds what those said). A per-tenant array's
/// copy is written only for a tenant that `live` says has a process: a copy lives while
/// its tenant runs, and goes when it leaves.
fn answer(id: u32, p: &SchedPolicy, has_memory: bool, name: &str, action: &MapAction, live: &dyn Fn(u32) -> bool) -> Reply {
    let Some((_, m)) = p.maps().find(|m| m.0 == name) else {
        let names: Vec<&str> = p.maps().map(|m| m.0).collect();
        return Reply::error(format!("policy {id} has no map {name:?}; its maps: {}", if names.is_empty() { "none".into() } else { names.join(", ") }));
    };
    let (ks, vs) = (m.def.key_size, m.def.value_size);
    if m.def.kind == MapKind::RingBuf {
        return ring(id, m, has_memory, name, action);
    }
    let key_of = |text: &'_ str| -> Result<Vec<u8>, String> {
        let (t, k) = key(m, name, text)?;
        if let Some(t) = t {
            if !live(t) {
                return Err(format!(
                    "tenant {t} has no process: a per-tenant array's copy lives while its tenant runs (`gmux ps --json` gives the live tenants' numbers)"
                ));
            }
            m.set_tenant(t);
        }
        Ok(k)
    };
    match action {
        MapAction::Dump if m.def.kind == MapKind::TenantArray => {
            let mut out = format!("map {name} of policy {id}: per-tenant array, {ks}-byte keys, {vs}-byte values, by tenant number (TENANT:INDEX VALUE)");
            for t in m.tenants() {
                m.set_tenant(t);
                for (k, v) in m.entries().into_iter().filter(|(_, v)| v.iter().any(|b| *b != 0)) {
                    out += &format!("\n{t}:{} {}", show(&k), show(&v));
                }
            }
            Reply::ok(out)
        }
        MapAction::Dump => {
            let kind = m.def.kind.name();
            let mut out = format!("map {name} of policy {id}: {kind}, {ks}-byte keys, {vs}-byte values");
            if has_memory {
                out += " (the daemon's copy, which its scheduling programs use; its memory programs keep one of their own in each process, below)";
            }
            for (k, v) in m.entries() {
                out += &format!("\n{} {}", show(&k), show(&v));
            }
            Reply::ok(out)
        }
        MapAction::Update { key, value } => {
            let (k, v) = match (key_of(key), bytes(value, vs, "value")) {
                (Ok(k), Ok(v)) => (k, v),
                (Err(e), _) | (_, Err(e)) => return Reply::error(e),
            };
            match m.update(&k, &v) {
                Ok(()) => Reply::ok(String::new()),
                Err(e) => Reply::error(format!("map {name}: {e}")),
            }
        }
        MapAction::Delete { key } => match key_of(key) {
            Ok(k) if m.delete(&k) => Reply::ok(String::new()),
            Ok(_) => Reply::error(format!("map {name} has no key {key}")),
            Err(e) => Reply::error(e),
        },
    }
}

impl super::Policies {
    /// Answers `gmux policy map` (`req`) from `who`: it needs no decision of the daemon,
    /// so the caller need not hold the arbiter. The processes' copies are formatted after
    /// the policy's lock is let go. With the answer, an update's or delete's write for the
    /// processes that run the policy's memory programs, whether or not the daemon's copy
    /// took it ([`Policies::post_write`]).
    /// `live` says which tenants have a process (see [`answer`]).
    pub(crate) fn answer_map(&self, req: &Request, who: Peer, owner: u32, tenant_policies: bool, live: &dyn Fn(u32) -> bool) -> (Reply, Option<MapWrite>) {
        let Request::PolicyMap { id, map, action } = req else { return (Reply::error("not a map request".into()), None) };
        if let Err(e) = admin(who, owner, tenant_policies) {
            return (e, None);
        }
        let Some(l) = self.list.iter().find(|l| l.id == *id && (is_admin(who, owner) || l.uid == who.uid)) else {
            return (Reply::error(format!("no policy {id} of yours: list them with `gmux policy list`")), None);
        };
        let copies = l.object.is_some().then(|| self.snapshots.of(*id, map));
        let p = lock(&l.policy);
        let mut reply = answer(l.id, &p, copies.is_some(), map, action, live);
        // The processes' copies take a write their own way: a key their programs wrote may be
        // in none of the daemon's.
        let write = if l.object.is_some() { write(l.id, &p, map, action) } else { None };
        drop(p);
        if let (Some((shown, older)), true, MapAction::Dump) = (copies, reply.ok, action) {
            reply.text += &snapshot::dump(&shown, older, show);
        }
        (reply, write)
    }

    /// Posts write `w` to the processes that run policy `w.policy`'s memory programs (of
    /// `d`'s tenants, through `out`): those of its tenants, or for a per-tenant array's
    /// key, of that tenant. Returns how many.
    pub(crate) fn post_write(&self, d: &Arbiter, out: &HashMap<u64, Outbox>, w: &MapWrite) -> usize {
        let Some(l) = self.list.iter().find(|l| l.id == w.policy) else { return 0 };
        let mut line = serde_json::to_string(w).expect("serializable");
        line.push('\n');
        let mut n = 0;
        for (c, o) in out {
            let Some(t) = d.tenant_of_conn(*c) else { continue };
            if l.scope.covers(t) && w.tenant.is_none_or(|x| x == t.0) {
                o.post_write(line.clone());
                n += 1;
            }
        }
        n
    }
}

/// A key as `gmux policy map` writes it for map `m` (named `name`): the tenant, for a
/// per-tenant array (written TENANT:INDEX), and the key's bytes.
fn key(m: &gmux_bpf::Map, name: &str, text: &str) -> Result<(Option<u32>, Vec<u8>), String> {
    if m.def.kind != MapKind::TenantArray {
        return Ok((None, bytes(text, m.def.key_size, "key")?));
    }
    let (t, k) = text.split_once(':').ok_or_else(|| format!("map {name} is a per-tenant array: write its key as TENANT:INDEX, e.g. 3:0"))?;
    let t: u32 = t.parse().map_err(|_| format!("{t:?} is not a tenant number (`gmux ps --json` gives them)"))?;
    Ok((Some(t), bytes(k, m.def.key_size, "key")?))
}

/// What an update or delete (`action`) of map `name` of policy `id` sends the processes
/// that run its memory programs; `None` for a dump, a ring buffer or a key or value that
/// does not parse.
fn write(id: u32, p: &SchedPolicy, name: &str, action: &MapAction) -> Option<MapWrite> {
    let m = p.maps().find(|m| m.0 == name && m.1.def.kind != MapKind::RingBuf)?.1;
    let (text, value) = match action {
        MapAction::Update { key, value } => (key, Some(bytes(value, m.def.value_size, "value").ok()?)),
        MapAction::Delete { key } => (key, None),
        MapAction::Dump => return None,
    };
    let (tenant, k) = key(m, name, text).ok()?;
    Some(MapWrite { policy: id, map: name.into(), tenant, key: hex(&k), value: value.map(|v| hex(&v)) })
}

/// `gmux policy map` on a ring buffer: a dump takes its records, oldest first; they are
/// not updated or deleted by key.
fn ring(id: u32, m: &gmux_bpf::Map, has_memory: bool, name: &str, action: &MapAction) -> Reply {
    if !matches!(action, MapAction::Dump) {
        return Reply::error(format!(
            "map {name} is a ring buffer: its records are written by the policy and taken by `gmux policy map dump {id} {name}`, not updated or deleted by key"
        ));
    }
    let (records, dropped) = m.take_records();
    let mut out = format!(
        "map {name} of policy {id}: ring buffer of {} records of at most {} bytes; {} taken, {dropped} dropped since the last dump",
        m.def.entries,
        m.def.value_size,
        records.len()
    );
    if has_memory {
        out += " (the daemon's, which its scheduling programs write; its memory programs keep one of their own in each process)";
    }
    for r in records {
        out += &format!("\n{}", show(&r));
    }
    Reply::ok(out)
}

/// A key or value as `gmux policy map` writes it: a decimal number (little-endian, for
/// sizes up to 8 bytes), `0x` and the bytes in hex, or `str:` and text, zero-padded
/// (a tenant's name as `struct gmux_name`).
fn bytes(text: &str, size: u32, what: &str) -> Result<Vec<u8>, String> {
    let size = size as usize;
    let out = if let Some(h) = text.strip_prefix("0x") {
        unhex(h).filter(|b| b.len() == size)
    } else if let Some(s) = text.strip_prefix("str:") {
        (s.len() <= size).then(|| {
            let mut b = s.as_bytes().to_vec();
            b.resize(size, 0);
            b
        })
    } else {
        text.parse::<u64>().ok().filter(|_| size <= 8).and_then(|n| {
            let b = n.to_le_bytes();
            b[size..].iter().all(|x| *x == 0).then(|| b[..size].to_vec())
        })
    };
    out.ok_or_else(|| {
        format!("the {what} is {size} bytes: write a number that fits (up to 8 bytes), 0x and {} hex digits, or str: and up to {size} characters", 2 * size)
    })
}

/// A key or value as `gmux policy map dump` prints it: a number up to 8 bytes, else
/// `str:` and text where it is printable text zero-padded, else hex.
fn show(b: &[u8]) -> String {
    let text = b.iter().position(|x| *x == 0).unwrap_or(b.len());
    if b.len() <= 8 {
        let mut w = [0u8; 8];
        w[..b.len()].copy_from_slice(b);
        u64::from_le_bytes(w).to_string()
    } else if text > 0 && b[..text].iter().all(|x| x.is_ascii_graphic()) && b[text..].iter().all(|x| *x == 0) {
        format!("str:{}", String::from_utf8_lossy(&b[..text]))
    } else {
        format!("0x{}", gmux_core::protocol::hex(b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gmux_bpf::elf::Object;
    use gmux_bpf::{MapDef, Policy};

    fn policy(kind: MapKind) -> SchedPolicy {
        let maps = vec![("m".to_string(), MapDef { kind, key_size: 4, value_size: 8, entries: 2 })];
        Policy::from_object(&Object { programs: Vec::new(), maps }).expect("maps alone").into_sched()
    }

    /// Tenants 3 and 5 have processes.
    fn run(p: &SchedPolicy, action: MapAction) -> Reply {
        answer(1, p, false, "m", &action, &|t| t == 3 || t == 5)
    }

    /// A per-tenant array is written TENANT:INDEX, and its dump lists each tenant's values
    /// that are not zero.
    #[test]
    fn a_per_tenant_array_is_read_and_written_by_tenant() {
        let p = policy(MapKind::TenantArray);
        let update = |key: &str, value: &str| run(&p, MapAction::Update { key: key.into(), value: value.into() });
        assert!(update("3:1", "70").ok && update("5:0", "9").ok);
        let bad = update("1", "2");
        assert!(!bad.ok && bad.text.contains("write its key as TENANT:INDEX, e.g. 3:0"), "{}", bad.text);
        assert!(update("x:0", "2").text.contains("\"x\" is not a tenant number"));
        assert!(update("3:2", "1").text.contains("no room for this key"), "index 2 of 2 entries");
        // A tenant with no process gets no copy: none would ever be given back.
        let gone = update("4:0", "1");
        assert!(!gone.ok && gone.text.contains("tenant 4 has no process"), "{}", gone.text);
        assert!(!run(&p, MapAction::Delete { key: "4:0".into() }).ok);
        assert_eq!(p.maps().next().expect("one map").1.tenants(), vec![3, 5]);
        let dump = run(&p, MapAction::Dump);
        assert_eq!(dump.text, "map m of policy 1: per-tenant array, 4-byte keys, 8-byte values, by tenant number (TENANT:INDEX VALUE)\n3:1 70\n5:0 9");
        assert!(run(&p, MapAction::Delete { key: "3:1".into() }).ok);
        assert!(!run(&p, MapAction::Dump).text.contains("3:1"));
        // A plain array's keys stay plain numbers.
        let a = policy(MapKind::Array);
        assert!(run(&a, MapAction::Update { key: "1".into(), value: "4".into() }).ok);
        assert!(run(&a, MapAction::Dump).text.ends_with("\n0 0\n1 4"));
    }

    /// A 16-byte key written `str:NAME` is the name zero-padded, and dumps the same way;
    /// a name longer than the key is refused with the sizes.
    #[test]
    fn a_name_key_is_written_and_shown_as_text() {
        assert_eq!(bytes("str:rt", 16, "key").expect("fits"), b"rt\0\0\0\0\0\0\0\0\0\0\0\0\0\0");
        assert_eq!(show(b"rt\0\0\0\0\0\0\0\0\0\0\0\0\0\0"), "str:rt");
        assert_eq!(bytes("str:", 16, "key").expect("empty"), [0; 16]);
        assert_eq!(show(&[0; 16]), format!("0x{}", "00".repeat(16)));
        assert_eq!(show(b"r\0t\0\0\0\0\0\0\0\0\0\0\0\0\0"), "0x72007400000000000000000000000000");
        let e = bytes("str:a-name-of-17-chars", 16, "key").unwrap_err();
        assert!(e.contains("the key is 16 bytes") && e.contains("str: and up to 16 characters"), "{e}");
        assert_eq!(bytes("str:ab", 2, "value").expect("fits"), b"ab");
    }
}
