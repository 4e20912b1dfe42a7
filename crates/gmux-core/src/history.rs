//! A tenant's own past as its forecast (MSched §5: GPU work repeats, iteration after
//! iteration). The commands that followed the last time the same few commands ran are
//! predicted to follow again; the allocations they touch, in order of first use, give
//! OPT its next uses. A context never seen before predicts nothing, and the caller
//! falls back to LRU.

use crate::memory::AllocId;
use std::collections::{HashMap, HashSet, VecDeque};

/// Commands of context: the one about to run and this many before it.
const CONTEXT: usize = 2;

/// Released commands, newest last, and where each context of [`CONTEXT`] + 1 signatures
/// last ended.
#[derive(Debug)]
pub struct History {
    sigs: VecDeque<u64>,
    sets: VecDeque<Box<[AllocId]>>,
    /// Absolute index of `sigs[0]`.
    first: u64,
    /// Context hash → absolute index of the command that completed it.
    seen: HashMap<u64, u64>,
    keep: usize,
    window: usize,
    /// Where the context of the newest command last ended before it (see
    /// [`History::after_last`]).
    last_match: Option<u64>,
}

impl History {
    /// Remembers the last `keep` commands and predicts at most `window` ahead.
    pub fn new(keep: usize, window: usize) -> Self {
        History { sigs: VecDeque::new(), sets: VecDeque::new(), first: 0, seen: HashMap::new(), keep: keep.max(1), window, last_match: None }
    }

    /// Records a released command: its signature (what it runs and on which allocations)
    /// and the allocations it touches.
    pub fn record(&mut self, sig: u64, allocs: &[AllocId]) {
        let ctx = self.context(sig);
        let index = self.first + self.sigs.len() as u64;
        self.last_match = self.seen.insert(ctx, index);
        self.sigs.push_back(sig);
        self.sets.push_back(allocs.into());
        if self.sigs.len() > self.keep {
            self.sigs.pop_front();
            self.sets.pop_front();
            self.first += 1;
        }
        if self.seen.len() > 4 * self.keep {
            let first = self.first;
            self.seen.retain(|_, i| *i >= first);
        }
    }

    /// The allocations predicted for the commands after the one with signature `next`, in
    /// order of first use, without repeats, each with how many commands ahead it is first
    /// used (0: the command right after `next`); `None` when its context never ran
    /// before. The prediction stops where the past reaches the present (one period) or
    /// after `window` commands.
    pub fn predict(&self, next: u64) -> Option<Vec<(AllocId, usize)>> {
        self.following(*self.seen.get(&self.context(next))?)
    }

    /// As [`History::predict`], for the commands after the newest one recorded (what a
    /// tenant runs next when it resumes).
    pub fn after_last(&self) -> Option<Vec<(AllocId, usize)>> {
        self.following(self.last_match?)
    }

    fn following(&self, at: u64) -> Option<Vec<(AllocId, usize)>> {
        let start = at.checked_sub(self.first)? as usize + 1;
        let end = (start + self.window).min(self.sigs.len());
        let mut seen = HashSet::new();
        let ahead = self.sets.range(start..end).enumerate().flat_map(|(k, s)| s.iter().map(move |a| (*a, k)));
        Some(ahead.filter(|(a, _)| seen.insert(*a)).collect())
    }

    /// Commands remembered.
    pub fn len(&self) -> usize {
        self.sigs.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.sigs.is_empty()
    }

    fn context(&self, next: u64) -> u64 {
        let recent = self.sigs.iter().rev().take(CONTEXT);
        recent.fold(mix(next ^ 0x9e37_79b9_7f4a_7c15), |h, s| mix(h ^ s))
    }
}

/// A signature for a command: what it runs (`what`, e.g. a kernel's handle) and the
/// allocations it touches.
pub fn signature(what: u64, allocs: &[AllocId]) -> u64 {
    allocs.iter().fold(mix(what), |h, a| mix(h ^ u64::from(a.0)))
}

/// SplitMix64's finalizer: a cheap, well-spread 64-bit mix.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(h: &mut History, cmds: &[u32]) {
        for &c in cmds {
            h.record(signature(7, &[AllocId(c)]), &[AllocId(c)]);
        }
    }

    fn ids(v: &[u32]) -> Vec<AllocId> {
        v.iter().map(|&a| AllocId(a)).collect()
    }

    fn predicted(h: &History, next: u32) -> Option<Vec<AllocId>> {
        h.predict(signature(7, &[AllocId(next)])).map(|p| p.into_iter().map(|(a, _)| a).collect())
    }

    #[test]
    fn a_loop_predicts_the_rest_of_its_iteration() {
        let mut h = History::new(1000, 1000);
        assert_eq!(predicted(&h, 0), None, "nothing before");
        run(&mut h, &[0, 1, 2, 3, 4, 0, 1]);
        // About to run 2 after 0, 1: last time 3, 4, 0, 1 followed.
        assert_eq!(predicted(&h, 2), Some(ids(&[3, 4, 0, 1])));
        assert_eq!(h.predict(signature(7, &[AllocId(2)])).unwrap().iter().map(|p| p.1).collect::<Vec<_>>(), vec![0, 1, 2, 3], "commands ahead");
        assert_eq!(predicted(&h, 9), None, "a context never seen");
    }

    #[test]
    fn after_the_newest_command_comes_what_followed_it_last_time() {
        let mut h = History::new(1000, 1000);
        run(&mut h, &[0, 1, 2, 3, 4]);
        assert_eq!(h.after_last(), None, "no repeat yet");
        run(&mut h, &[0, 1, 2]);
        let next: Vec<(AllocId, usize)> = h.after_last().unwrap();
        assert_eq!(next, vec![(AllocId(3), 0), (AllocId(4), 1), (AllocId(0), 2), (AllocId(1), 3), (AllocId(2), 4)]);
    }

    #[test]
    fn context_tells_apart_repeats_of_one_command() {
        // Kernel 5 runs twice per iteration; what follows depends on what came before it.
        let mut h = History::new(1000, 1000);
        run(&mut h, &[1, 2, 5, 3, 4, 5, 6, 1, 2]);
        assert_eq!(predicted(&h, 5), Some(ids(&[3, 4, 5, 6, 1, 2])));
        run(&mut h, &[5, 3, 4]);
        assert_eq!(predicted(&h, 5), Some(ids(&[6, 1, 2, 5, 3, 4])));
    }

    #[test]
    fn the_window_and_the_memory_are_bounded() {
        let mut h = History::new(8, 3);
        run(&mut h, &[0, 1, 2, 3, 4, 5, 0, 1]);
        assert_eq!(predicted(&h, 2), Some(ids(&[3, 4, 5])), "window of 3");
        let mut h = History::new(8, 100);
        run(&mut h, &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 1]);
        assert_eq!(h.len(), 8);
        assert_eq!(predicted(&h, 2), None, "0, 1, 2 ran before the 8 remembered commands");
    }
}
