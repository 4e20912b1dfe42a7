//! A fast hasher for maps keyed by what a process makes itself (allocation ids, handles,
//! stream keys, signatures), on the path of every command. It multiplies and rotates,
//! as rustc's own hasher does: a few cycles per key where the standard SipHash takes
//! tens. It is not resistant to chosen keys, so maps of anything another process sends
//! keep the standard hasher.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// The hasher; see the module documentation.
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher(u64);

const SEED: u64 = 0xf135_7aea_2e62_a9c5;

impl IdHasher {
    fn add(&mut self, word: u64) {
        self.0 = self.0.wrapping_add(word).wrapping_mul(SEED);
    }
}

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }
    fn write_u8(&mut self, n: u8) {
        self.add(n.into());
    }
    fn write_u32(&mut self, n: u32) {
        self.add(n.into());
    }
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
    fn finish(&self) -> u64 {
        // The multiply leaves the low bits, which pick the bucket, the weakest.
        self.0.rotate_left(26)
    }
}

/// A `HashMap` with [`IdHasher`].
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;
/// A `HashSet` with [`IdHasher`].
pub type IdSet<K> = HashSet<K, BuildHasherDefault<IdHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_ids_spread_over_the_buckets() {
        // Ids 0..4096 into 256 buckets by the low bits, as a table of 256 would.
        let mut buckets = [0u32; 256];
        for id in 0u64..4096 {
            let mut h = IdHasher::default();
            h.write_u64(id);
            buckets[(h.finish() & 255) as usize] += 1;
        }
        let fullest = *buckets.iter().max().unwrap();
        assert!(fullest <= 48, "sequential ids pile up: {fullest} of 4096 in one of 256 buckets");
    }

    #[test]
    fn maps_behave_as_maps() {
        let mut m: IdMap<u64, u64> = IdMap::default();
        for i in 0..10_000u64 {
            m.insert(i << 21, i);
        }
        assert_eq!(m.len(), 10_000);
        assert!((0..10_000u64).all(|i| m[&(i << 21)] == i));
    }
}
