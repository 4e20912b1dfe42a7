//! The `ideal` bound (modelled): OPT (Belady) migration volume over the executed access
//! sequence at link bandwidth, plus compute.

use gmux_core::ChunkId;
use std::collections::{BTreeSet, HashMap, HashSet};

/// Chunks moved each way by Belady's OPT with `capacity` resident chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OptVolume {
    /// Chunks brought in (first touches excluded: they are created, not copied).
    pub populated: u64,
    /// Chunks evicted after their first touch.
    pub evicted: u64,
}

/// Belady over `accesses` with room for `capacity` chunks.
pub fn opt_volume(accesses: &[ChunkId], capacity: usize) -> OptVolume {
    let mut next = vec![usize::MAX; accesses.len()];
    let mut last_seen: HashMap<ChunkId, usize> = HashMap::new();
    for (i, c) in accesses.iter().enumerate().rev() {
        next[i] = last_seen.insert(*c, i).unwrap_or(usize::MAX);
    }
    let mut resident: BTreeSet<(usize, ChunkId)> = BTreeSet::new();
    let mut next_of: HashMap<ChunkId, usize> = HashMap::new();
    let mut touched: HashSet<ChunkId> = HashSet::new();
    let mut v = OptVolume::default();
    for (i, &c) in accesses.iter().enumerate() {
        if let Some(n) = next_of.remove(&c) {
            resident.remove(&(n, c));
        } else {
            if !touched.insert(c) {
                v.populated += 1;
            }
            if resident.len() >= capacity.max(1) {
                let victim = *resident.iter().next_back().expect("full set is not empty");
                resident.remove(&victim);
                next_of.remove(&victim.1);
                v.evicted += 1;
            }
        }
        resident.insert((next[i], c));
        next_of.insert(c, next[i]);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn belady_on_a_cycle() {
        let seq: Vec<ChunkId> = (0..3).cycle().take(9).map(ChunkId).collect();
        let v = opt_volume(&seq, 2);
        assert_eq!(v, OptVolume { populated: 3, evicted: 4 });
        assert_eq!(opt_volume(&seq, 3), OptVolume::default());
    }
}
