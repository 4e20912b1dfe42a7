//! The `ideal` bound (modelled): Belady's OPT migration volume over the executed command
//! sequence, at link bandwidth, plus compute.
//!
//! OPT here works at command granularity: every chunk of a command must be resident at
//! once (a kernel cannot run with part of its data), so a command's own chunks are never
//! victims while it loads. Per-chunk Belady would undercut what any real system can do.

use gmux_core::ChunkId;
use std::collections::{BTreeSet, HashMap, HashSet};

/// Chunks moved each way by OPT with `capacity` resident chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OptVolume {
    /// Chunks brought in (first touches excluded: they are created, not copied).
    pub populated: u64,
    /// Chunks evicted after their first touch.
    pub evicted: u64,
}

/// Executed commands as a flat chunk list with command boundaries.
#[derive(Debug, Clone, Default)]
pub struct Commands {
    /// All chunks, command after command.
    pub chunks: Vec<ChunkId>,
    /// `chunks[ends[k-1]..ends[k]]` is command `k`.
    pub ends: Vec<usize>,
}

impl Commands {
    /// Appends one command's chunks (repeats within it are ignored).
    pub fn push(&mut self, cmd: impl IntoIterator<Item = ChunkId>) {
        let mut seen = HashSet::new();
        self.chunks.extend(cmd.into_iter().filter(|c| seen.insert(*c)));
        self.ends.push(self.chunks.len());
    }

    fn get(&self, k: usize) -> &[ChunkId] {
        let start = if k == 0 { 0 } else { self.ends[k - 1] };
        &self.chunks[start..self.ends[k]]
    }
}

/// OPT over `cmds` with room for `capacity` chunks.
pub fn opt_volume(cmds: &Commands, capacity: usize) -> OptVolume {
    let n = cmds.ends.len();
    let mut uses: HashMap<ChunkId, Vec<usize>> = HashMap::new();
    for k in 0..n {
        for &c in cmds.get(k) {
            let u = uses.entry(c).or_default();
            if u.last() != Some(&k) {
                u.push(k);
            }
        }
    }
    let next_after = |c: ChunkId, k: usize| {
        let u = &uses[&c];
        u.get(u.partition_point(|&x| x <= k)).copied().unwrap_or(usize::MAX)
    };
    let mut resident: BTreeSet<(usize, ChunkId)> = BTreeSet::new();
    let mut key: HashMap<ChunkId, usize> = HashMap::new();
    let mut touched: HashSet<ChunkId> = HashSet::new();
    let mut v = OptVolume::default();
    for k in 0..n {
        let mut cmd: Vec<ChunkId> = cmds.get(k).to_vec();
        cmd.sort_unstable();
        cmd.dedup();
        let mut held = 0;
        let mut missing = Vec::new();
        for &c in &cmd {
            match key.remove(&c) {
                Some(old) => {
                    resident.remove(&(old, c));
                    held += 1;
                }
                None => missing.push(c),
            }
        }
        for c in missing {
            while resident.len() + held >= capacity.max(1) {
                let Some(victim) = resident.pop_last() else { break };
                key.remove(&victim.1);
                v.evicted += 1;
            }
            if !touched.insert(c) {
                v.populated += 1;
            }
            held += 1;
        }
        for &c in &cmd {
            let next = next_after(c, k);
            resident.insert((next, c));
            key.insert(c, next);
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmds(list: &[&[u32]]) -> Commands {
        let mut c = Commands::default();
        for cmd in list {
            c.push(cmd.iter().map(|&i| ChunkId(i)));
        }
        c
    }

    #[test]
    fn belady_on_a_cycle() {
        let seq = cmds(&[&[0], &[1], &[2], &[0], &[1], &[2], &[0], &[1], &[2]]);
        assert_eq!(opt_volume(&seq, 2), OptVolume { populated: 3, evicted: 4 });
        assert_eq!(opt_volume(&seq, 3), OptVolume::default());
    }

    #[test]
    fn a_command_keeps_all_its_chunks() {
        // Per-chunk Belady would evict 0 while loading 1; a command needs both at once.
        let seq = cmds(&[&[0, 1], &[2, 3], &[0, 1], &[2, 3]]);
        assert_eq!(opt_volume(&seq, 2), OptVolume { populated: 2 + 2, evicted: 6 });
    }
}
