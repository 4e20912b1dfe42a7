//! What the maps of memory programs hold in the processes that run them, as those
//! processes last said (`FromShim::MapSnapshot`), for `gmux policy map dump`. A process
//! is trusted with nothing here: a snapshot is kept only for a policy that runs in its
//! tenant, for a map of that policy, and only if every key and value has the map's sizes
//! and the counts fit the map; and what is kept is bounded.

use gmux_bpf::{Map, MapKind};
use gmux_core::protocol::{snapshot_entries, unhex};
use std::collections::HashSet;
use std::time::Instant;

/// Most snapshots kept, over every policy, map and process (live ones and those of
/// processes that exited, the oldest of which go first).
pub(super) const MAX_KEPT: usize = 256;

/// Most snapshots kept of one tenant's processes: one tenant's many processes do not push
/// out the others'.
pub(super) const MAX_PER_TENANT: usize = 64;

/// Most processes' copies one dump shows, the newest first.
pub(super) const MAX_SHOWN: usize = 16;

/// One map as one process said it held it.
#[derive(Clone)]
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
    /// Its entries' keys and values back to back, `key` and `value` bytes each.
    flat: Vec<u8>,
    key: usize,
    value: usize,
}

/// The entries of a snapshot checked against the map it claims to be of, `m`: keys and
/// values back to back, or why not.
pub(super) fn check(m: &Map, total: u64, entries: &[(String, String)]) -> Result<Vec<u8>, String> {
    let (ks, vs) = (m.def.key_size as usize, m.def.value_size as usize);
    if m.def.kind == MapKind::RingBuf {
        return Err("a ring buffer's records are not sent".into());
    }
    if total > u64::from(m.def.entries) || entries.len() as u64 > total {
        return Err(format!("{} entries sent of {total}, in a map of {}", entries.len(), m.def.entries));
    }
    if entries.len() > snapshot_entries(ks, vs) {
        return Err(format!("{} entries of {} bytes, over the {} a snapshot carries", entries.len(), ks + vs, snapshot_entries(ks, vs)));
    }
    let mut flat = Vec::with_capacity(entries.len() * (ks + vs));
    let mut seen = HashSet::new();
    for (k, v) in entries {
        let key = unhex(k).filter(|b| b.len() == ks).ok_or_else(|| format!("a key that is not {ks} bytes in hex"))?;
        let value = unhex(v).filter(|b| b.len() == vs).ok_or_else(|| format!("a value that is not {vs} bytes in hex"))?;
        if matches!(m.def.kind, MapKind::Array | MapKind::TenantArray) && key.as_slice().try_into().map(u32::from_le_bytes).map_or(true, |i| i >= m.def.entries)
        {
            return Err(format!("an array index past its {} entries", m.def.entries));
        }
        if !seen.insert(key.clone()) {
            return Err("a key sent twice".into());
        }
        flat.extend(key);
        flat.extend(value);
    }
    Ok(flat)
}

/// The snapshots kept.
#[derive(Default)]
pub(super) struct Snapshots(Vec<Snapshot>);

impl Snapshots {
    /// Keeps a checked snapshot of `map` of policy `policy` (keys and values of `sizes`
    /// bytes, `flat` from [`check`]) from process `pid` on `conn`, of tenant `tenant`, in
    /// place of that process's last one.
    #[allow(clippy::too_many_arguments)]
    pub fn keep(&mut self, policy: u32, map: &str, (conn, pid): (u64, u32), tenant: &str, total: u64, (key, value): (usize, usize), flat: Vec<u8>) {
        self.0.retain(|s| !(s.policy == policy && s.map == map && s.conn == conn));
        if self.0.iter().filter(|s| s.tenant == tenant).count() >= MAX_PER_TENANT {
            self.drop_oldest(|s| s.tenant == tenant);
        }
        if self.0.len() >= MAX_KEPT {
            self.drop_oldest(|_| true);
        }
        self.0.push(Snapshot { policy, map: map.into(), conn, pid, tenant: tenant.into(), at: Instant::now(), left: false, total, flat, key, value });
    }

    /// Drops the oldest of those `of` picks, those of exited processes first.
    fn drop_oldest(&mut self, of: impl Fn(&Snapshot) -> bool) {
        if let Some(i) = self.0.iter().enumerate().filter(|(_, s)| of(s)).min_by_key(|(_, s)| (!s.left, s.at)).map(|(i, _)| i) {
            self.0.remove(i);
        }
    }

    /// The process on `conn` has exited: its snapshots stay, marked so.
    pub fn left(&mut self, conn: u64) {
        self.0.iter_mut().filter(|s| s.conn == conn).for_each(|s| s.left = true);
    }

    /// Forgets policy `policy`'s (it was unloaded).
    pub fn forget(&mut self, policy: u32) {
        self.0.retain(|s| s.policy != policy);
    }

    /// Copies of map `map` of policy `policy`'s snapshots, the newest [`MAX_SHOWN`] first,
    /// and how many older ones there are.
    pub fn of(&self, policy: u32, map: &str) -> (Vec<Snapshot>, usize) {
        let mut mine: Vec<&Snapshot> = self.0.iter().filter(|s| s.policy == policy && s.map == map).collect();
        mine.sort_by_key(|s| std::cmp::Reverse(s.at));
        let older = mine.len().saturating_sub(MAX_SHOWN);
        (mine.into_iter().take(MAX_SHOWN).cloned().collect(), older)
    }
}

/// What `gmux policy map dump` adds for the snapshots `shown` (and `older` not shown):
/// each process's, keys and values written by `show`.
pub(super) fn dump(shown: &[Snapshot], older: usize, show: impl Fn(&[u8]) -> String) -> String {
    let mut out = String::new();
    for s in shown {
        let exited = if s.left { ", exited" } else { "" };
        let entries: Vec<(&[u8], &[u8])> = s.flat.chunks_exact(s.key + s.value).map(|e| e.split_at(s.key)).collect();
        let listed = if entries.len() as u64 == s.total { String::new() } else { format!(", {} shown", entries.len()) };
        out += &format!(
            "\nin process {} of tenant {:?}{exited}, as it said {:.1} s ago: {} entries{listed}",
            s.pid,
            s.tenant,
            s.at.elapsed().as_secs_f64(),
            s.total
        );
        for (k, v) in entries {
            out += &format!("\n{} {}", show(k), show(v));
        }
    }
    if older > 0 {
        out += &format!("\n({older} older copies not shown)");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gmux_bpf::MapDef;
    use gmux_core::protocol::{hex, FromShim, MAX_SNAPSHOT_NAME};
    use proptest::prelude::*;

    fn hash_map() -> Map {
        Map::new(MapDef { kind: MapKind::Hash, key_size: 8, value_size: 4, entries: 16 }).expect("map")
    }

    fn entry(k: u64, v: u32) -> (String, String) {
        (hex(&k.to_le_bytes()), hex(&v.to_le_bytes()))
    }

    /// A snapshot is kept only as the map it names could hold it; each refusal says why.
    #[test]
    fn a_snapshot_must_fit_its_map() {
        let m = hash_map();
        let flat = check(&m, 2, &[entry(1, 7), entry(2, 9)]).expect("fits");
        assert_eq!(flat, [&1u64.to_le_bytes()[..], &7u32.to_le_bytes(), &2u64.to_le_bytes(), &9u32.to_le_bytes()].concat());
        assert!(check(&m, 40, &[]).unwrap_err().contains("in a map of 16"));
        assert!(check(&m, 1, &[entry(1, 7), entry(2, 9)]).unwrap_err().contains("2 entries sent of 1"));
        assert!(check(&m, 2, &[entry(1, 7), entry(1, 9)]).unwrap_err().contains("a key sent twice"));
        assert!(check(&m, 1, &[("00".into(), entry(1, 7).1)]).unwrap_err().contains("a key that is not 8 bytes"));
        assert!(check(&m, 1, &[(entry(1, 7).0, "zz".into())]).unwrap_err().contains("a value that is not 4 bytes"));
        let ring = Map::new(MapDef { kind: MapKind::RingBuf, key_size: 4, value_size: 8, entries: 4 }).expect("ring");
        assert!(check(&ring, 0, &[]).unwrap_err().contains("ring buffer"));
        let array = Map::new(MapDef { kind: MapKind::Array, key_size: 4, value_size: 4, entries: 8 }).expect("array");
        assert!(check(&array, 1, &[(hex(&8u32.to_le_bytes()), hex(&1u32.to_le_bytes()))]).unwrap_err().contains("past its 8 entries"));
        let big = Map::new(MapDef { kind: MapKind::Hash, key_size: 256, value_size: 4096, entries: 64 }).expect("big");
        let one = ("00".repeat(256), "00".repeat(4096));
        assert!(check(&big, 6, &vec![one; 6]).unwrap_err().contains("over the 5 a snapshot carries"));
    }

    /// The largest snapshot a shim sends, of any map's sizes, is one line the daemon reads.
    #[test]
    fn the_largest_snapshot_fits_one_line() {
        for (k, v) in [(1, 1), (4, 1), (4, 4), (8, 4), (8, 8), (16, 64), (256, 4096)] {
            let n = snapshot_entries(k, v);
            let e = (hex(&vec![0xab; k]), hex(&vec![0xcd; v]));
            let m = FromShim::MapSnapshot { policy: u32::MAX, map: "m".repeat(MAX_SNAPSHOT_NAME), total: u64::MAX, entries: vec![e; n] };
            let line = serde_json::to_string(&m).expect("JSON");
            assert!(n >= 1 && (line.len() as u64) < crate::conn::MAX_LINE, "{k}+{v} bytes: {n} entries, {} bytes", line.len());
        }
    }

    /// A process's new snapshot replaces its last; at most [`MAX_PER_TENANT`] of one
    /// tenant and [`MAX_KEPT`] in all are kept, those of exited processes leaving first;
    /// a dump shows the newest [`MAX_SHOWN`]; an unloaded policy's go.
    #[test]
    fn snapshots_are_bounded_and_the_live_ones_stay() {
        let mut s = Snapshots::default();
        let one = |k: u8| vec![k, 1];
        s.keep(1, "uses", (7, 70), "a", 1, (1, 1), one(1));
        s.keep(1, "uses", (7, 70), "a", 1, (1, 1), one(2));
        let (shown, older) = s.of(1, "uses");
        assert_eq!((shown.len(), older), (1, 0));
        let text = dump(&shown, older, |b| b[0].to_string());
        assert!(text.starts_with("\nin process 70 of tenant \"a\", as it said ") && text.ends_with(" s ago: 1 entries\n2 1"), "{text}");
        s.left(7);
        for conn in 100..100 + MAX_PER_TENANT as u64 {
            s.keep(1, "uses", (conn, conn as u32), "a", 0, (1, 1), Vec::new());
        }
        assert_eq!(s.0.len(), MAX_PER_TENANT, "a's exited process's went first");
        assert!(!s.0.iter().any(|x| x.conn == 7));
        for conn in 1000..1000 + MAX_KEPT as u64 {
            s.keep(2, "m", (conn, conn as u32), &format!("t{}", conn % 8), 0, (1, 1), Vec::new());
        }
        assert_eq!(s.0.len(), MAX_KEPT);
        let (shown, older) = s.of(2, "m");
        assert_eq!((shown.len(), older), (MAX_SHOWN, MAX_KEPT - MAX_SHOWN - s.0.iter().filter(|x| x.policy == 1).count()));
        assert!(dump(&shown, older, |_| String::new()).ends_with(&format!("({older} older copies not shown)")));
        s.forget(2);
        assert!(s.0.iter().all(|x| x.policy == 1));
    }

    proptest! {
        /// Whatever a process sends, checking it neither panics nor accepts an entry of
        /// other sizes than the map's.
        #[test]
        fn any_snapshot_is_checked_without_panicking(
            total in 0u64..40,
            entries in proptest::collection::vec(("[0-9a-fz]{0,20}", "[0-9a-fz]{0,10}"), 0..20),
        ) {
            if let Ok(flat) = check(&hash_map(), total, &entries) {
                prop_assert!(entries.len() as u64 <= total && total <= 16);
                prop_assert_eq!(flat.len(), entries.len() * 12);
            }
        }
    }
}
