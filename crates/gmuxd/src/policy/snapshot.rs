//! What the maps of memory programs hold in the processes that run them, as those
//! processes last said (`FromShim::MapSnapshot`), for `gmux policy map dump`. A process
//! is trusted with nothing here: a snapshot is kept only for a policy that runs in its
//! tenant, for a map of that policy, and only if every key and value has the map's sizes
//! and the counts fit the map; and what is kept is bounded.

use gmux_bpf::{Entry, Map, MapKind};
use gmux_core::protocol::{unhex, MAX_SNAPSHOT};
use std::time::Instant;

/// Most snapshots kept, over every policy, map and process (live ones and those of
/// processes that exited, the oldest of which go first).
pub(super) const MAX_KEPT: usize = 256;

/// One map as one process said it held it.
pub(super) struct Snapshot {
    pub policy: u32,
    pub map: String,
    conn: u64,
    pid: u32,
    tenant: String,
    at: Instant,
    /// The process has exited.
    left: bool,
    total: u64,
    entries: Vec<Entry>,
}

/// The entries of a snapshot checked against the map it claims to be of, `m`: decoded,
/// or why not.
pub(super) fn check(m: &Map, total: u64, entries: &[(String, String)]) -> Result<Vec<Entry>, String> {
    let (ks, vs) = (m.def.key_size as usize, m.def.value_size as usize);
    if m.def.kind == MapKind::RingBuf {
        return Err("a ring buffer's records are not sent".into());
    }
    if total > u64::from(m.def.entries) || entries.len() as u64 > total {
        return Err(format!("{} entries sent of {total}, in a map of {}", entries.len(), m.def.entries));
    }
    if entries.len() * (ks + vs) > MAX_SNAPSHOT {
        return Err(format!("{} entries of {} bytes, over {MAX_SNAPSHOT} bytes", entries.len(), ks + vs));
    }
    let decode = |h: &str, size: usize, what: &str| unhex(h).filter(|b| b.len() == size).ok_or_else(|| format!("a {what} that is not {size} bytes in hex"));
    entries.iter().map(|(k, v)| Ok((decode(k, ks, "key")?, decode(v, vs, "value")?))).collect()
}

/// The snapshots kept.
#[derive(Default)]
pub(super) struct Snapshots(Vec<Snapshot>);

impl Snapshots {
    /// Keeps a checked snapshot of `map` of policy `policy` from process `pid` on `conn`,
    /// of tenant `tenant`, in place of that process's last one.
    #[allow(clippy::too_many_arguments)]
    pub fn keep(&mut self, policy: u32, map: &str, conn: u64, pid: u32, tenant: &str, total: u64, entries: Vec<Entry>) {
        self.0.retain(|s| !(s.policy == policy && s.map == map && s.conn == conn));
        if self.0.len() >= MAX_KEPT {
            let oldest = self.0.iter().enumerate().min_by_key(|(_, s)| (!s.left, s.at)).map(|(i, _)| i);
            self.0.remove(oldest.expect("full"));
        }
        self.0.push(Snapshot { policy, map: map.into(), conn, pid, tenant: tenant.into(), at: Instant::now(), left: false, total, entries });
    }

    /// The process on `conn` has exited: its snapshots stay, marked so.
    pub fn left(&mut self, conn: u64) {
        self.0.iter_mut().filter(|s| s.conn == conn).for_each(|s| s.left = true);
    }

    /// Forgets policy `policy`'s (it was unloaded).
    pub fn forget(&mut self, policy: u32) {
        self.0.retain(|s| s.policy != policy);
    }

    /// What `gmux policy map dump` adds for map `map` of policy `policy`: each process's
    /// snapshot, newest first, keys and values written by `show`.
    pub fn dump(&self, policy: u32, map: &str, show: impl Fn(&[u8]) -> String) -> String {
        let mut mine: Vec<&Snapshot> = self.0.iter().filter(|s| s.policy == policy && s.map == map).collect();
        mine.sort_by_key(|s| std::cmp::Reverse(s.at));
        let mut out = String::new();
        for s in mine {
            let exited = if s.left { ", exited" } else { "" };
            let shown = if s.entries.len() as u64 == s.total { String::new() } else { format!(", {} shown", s.entries.len()) };
            out += &format!(
                "\nin process {} of tenant {:?}{exited}, as it said {:.1} s ago: {} entries{shown}",
                s.pid,
                s.tenant,
                s.at.elapsed().as_secs_f64(),
                s.total
            );
            for (k, v) in &s.entries {
                out += &format!("\n{} {}", show(k), show(v));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gmux_bpf::MapDef;
    use proptest::prelude::*;

    fn hash_map() -> Map {
        Map::new(MapDef { kind: MapKind::Hash, key_size: 8, value_size: 4, entries: 16 }).expect("map")
    }

    fn entry(k: u64, v: u32) -> (String, String) {
        (gmux_core::protocol::hex(&k.to_le_bytes()), gmux_core::protocol::hex(&v.to_le_bytes()))
    }

    /// A snapshot is kept only as the map it names could hold it; each refusal says why.
    #[test]
    fn a_snapshot_must_fit_its_map() {
        let m = hash_map();
        assert_eq!(
            check(&m, 2, &[entry(1, 7), entry(2, 9)]),
            Ok(vec![(1u64.to_le_bytes().to_vec(), 7u32.to_le_bytes().to_vec()), (2u64.to_le_bytes().to_vec(), 9u32.to_le_bytes().to_vec())])
        );
        assert!(check(&m, 40, &[]).unwrap_err().contains("in a map of 16"));
        assert!(check(&m, 1, &[entry(1, 7), entry(2, 9)]).unwrap_err().contains("2 entries sent of 1"));
        assert!(check(&m, 1, &[("00".into(), entry(1, 7).1)]).unwrap_err().contains("a key that is not 8 bytes"));
        assert!(check(&m, 1, &[(entry(1, 7).0, "zz".into())]).unwrap_err().contains("a value that is not 4 bytes"));
        let ring = Map::new(MapDef { kind: MapKind::RingBuf, key_size: 4, value_size: 8, entries: 4 }).expect("ring");
        assert!(check(&ring, 0, &[]).unwrap_err().contains("ring buffer"));
        let big = Map::new(MapDef { kind: MapKind::Hash, key_size: 256, value_size: 4096, entries: 64 }).expect("big");
        let one = ("00".repeat(256), "00".repeat(4096));
        assert!(check(&big, 6, &vec![one; 6]).unwrap_err().contains(&format!("over {MAX_SNAPSHOT} bytes")));
    }

    /// A process's new snapshot replaces its last; at most [`MAX_KEPT`] are kept, those of
    /// exited processes leaving first; an unloaded policy's go.
    #[test]
    fn snapshots_are_bounded_and_the_live_ones_stay() {
        let mut s = Snapshots::default();
        let one = |k: u64| vec![(k.to_le_bytes().to_vec(), vec![1, 0, 0, 0])];
        s.keep(1, "uses", 7, 70, "a", 1, one(1));
        s.keep(1, "uses", 7, 70, "a", 1, one(2));
        assert_eq!(s.0.len(), 1);
        assert!(s.dump(1, "uses", |b| b[0].to_string()).ends_with("1 entries\n2 1"), "{}", s.dump(1, "uses", |b| b[0].to_string()));
        s.left(7);
        for conn in 100..100 + MAX_KEPT as u64 {
            s.keep(2, "m", conn, conn as u32, "b", 0, Vec::new());
        }
        assert_eq!(s.0.len(), MAX_KEPT);
        assert!(s.dump(1, "uses", |_| String::new()).is_empty(), "the exited process's went first");
        s.keep(2, "m", 999, 999, "b", 0, Vec::new());
        assert_eq!(s.0.len(), MAX_KEPT);
        assert!(!s.0.iter().any(|x| x.conn == 100), "then the oldest live one");
        s.forget(2);
        assert!(s.0.is_empty());
    }

    proptest! {
        /// Whatever a process sends, checking it neither panics nor accepts an entry of
        /// other sizes than the map's.
        #[test]
        fn any_snapshot_is_checked_without_panicking(
            total in 0u64..40,
            entries in proptest::collection::vec(("[0-9a-fz]{0,20}", "[0-9a-fz]{0,10}"), 0..20),
        ) {
            if let Ok(got) = check(&hash_map(), total, &entries) {
                prop_assert!(got.len() as u64 <= total && total <= 16);
                prop_assert!(got.iter().all(|(k, v)| k.len() == 8 && v.len() == 4));
            }
        }
    }
}
