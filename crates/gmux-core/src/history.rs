//! A tenant's own past as its forecast (MSched §5: GPU work repeats, iteration after
//! iteration). The commands that followed the last time the same few commands ran are
//! predicted to follow again; the allocations they touch, in order of first use, give
//! OPT its next uses. A context never seen before backs off to the command alone (where
//! a loop wraps around, its first command follows the last, a context that the first
//! pass did not have). Before the first repeat, a sweep in progress (each command's
//! highest allocation above the one before, as a loop over layers or matrices runs
//! through memory in allocation order) predicts that it goes on, wrapping around; with
//! none of these, nothing is predicted and the caller falls back to LRU.

use crate::idhash::IdMap;
use crate::memory::AllocId;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, VecDeque};

/// Commands of context: the one about to run and this many before it.
const CONTEXT: usize = 2;

/// Commands with allocations that a sweep is recognized over.
const SWEEP: usize = 8;

/// Earlier runs of a context weighed against each other (see [`History::best_run`]).
const CANDIDATES: usize = 128;

/// Commands before a run of a context compared with those before the present.
const SIMILAR: u64 = 32;

/// Commands after which [`History::after_last`] forecasts anew.
const STALE: u64 = 64;

/// Allocations in order of first use, each with how many commands ahead.
type Ahead = Vec<(AllocId, usize)>;

/// No earlier run.
const NONE: u64 = u64::MAX;

/// Places of [`SIMILAR`] that must agree for the alignment found last to be kept
/// without a search.
const KEEP_ALIGNED: usize = SIMILAR as usize * 3 / 4;

/// Released commands, newest last, and where each context of [`CONTEXT`] + 1 signatures
/// last ended.
#[derive(Debug)]
pub struct History {
    sigs: VecDeque<u64>,
    /// The allocations of the commands remembered, back to back (no allocation per
    /// command: recording is on every launch's path).
    flat: VecDeque<AllocId>,
    /// Where each remembered command's allocations end, as a count of every allocation
    /// recorded so far; `flat` starts at `flat_first`.
    ends: VecDeque<u64>,
    flat_first: u64,
    /// Absolute index of `sigs[0]`.
    first: u64,
    /// Context hash → absolute index of the command that completed it.
    seen: IdMap<u64, u64>,
    /// Signature → absolute index of its newest command (the back-off of `seen`).
    seen_alone: IdMap<u64, u64>,
    /// For each remembered command, where its context ran the time before ([`NONE`]: it
    /// did not), and where its signature alone did: the chains of earlier runs.
    prev: VecDeque<[u64; 2]>,
    /// The last run chosen, as (present, run): later presents try the same distance
    /// first.
    aligned: Cell<Option<(u64, u64)>>,
    /// Scratch of [`History::following`]: per allocation id, the stamp of the last
    /// forecast that saw it, and the current stamp (no set to clear or hash).
    marks: RefCell<(Vec<u32>, u32)>,
    /// The last forecast of [`History::after_last`] that spans a period: the newest
    /// command then, the period, the forecast.
    last_forecast: RefCell<Option<(u64, usize, Ahead)>>,
    keep: usize,
    window: usize,
    /// Where the context of the newest command last ended before it, and where the
    /// newest command alone last ran (see [`History::after_last`]).
    last_match: [Option<u64>; 2],
    /// How many remembered commands touch each allocation (a hash map: updated for
    /// every allocation of every command).
    uses: IdMap<AllocId, u32>,
    /// The allocations in `uses`, in order (for the sweep; changed only when one joins
    /// or leaves).
    ids: BTreeSet<AllocId>,
}

impl History {
    /// Remembers the last `keep` commands and predicts at most `window` ahead.
    pub fn new(keep: usize, window: usize) -> Self {
        History {
            sigs: VecDeque::new(),
            flat: VecDeque::new(),
            ends: VecDeque::new(),
            flat_first: 0,
            first: 0,
            seen: IdMap::default(),
            seen_alone: IdMap::default(),
            prev: VecDeque::new(),
            aligned: Cell::new(None),
            marks: RefCell::new((Vec::new(), 0)),
            last_forecast: RefCell::new(None),
            keep: keep.max(1),
            window,
            last_match: [None; 2],
            uses: IdMap::default(),
            ids: BTreeSet::new(),
        }
    }

    /// Records a released command: its signature (what it runs and on which allocations)
    /// and the allocations it touches.
    pub fn record(&mut self, sig: u64, allocs: &[AllocId]) {
        let ctx = self.context(sig);
        let index = self.first + self.sigs.len() as u64;
        self.last_match = [self.seen.insert(ctx, index), self.seen_alone.insert(sig, index)];
        self.prev.push_back(self.last_match.map(|m| m.unwrap_or(NONE)));
        self.sigs.push_back(sig);
        for &a in allocs {
            self.flat.push_back(a);
        }
        self.ends.push_back(self.ends.back().copied().unwrap_or(self.flat_first) + allocs.len() as u64);
        for a in allocs {
            let n = self.uses.entry(*a).or_default();
            *n += 1;
            if *n == 1 {
                self.ids.insert(*a);
            }
        }
        if self.sigs.len() > self.keep {
            self.sigs.pop_front();
            self.prev.pop_front();
            let end = self.ends.pop_front().expect("longer than keep");
            for a in self.flat.drain(..(end - self.flat_first) as usize) {
                if let Some(n) = self.uses.get_mut(&a) {
                    *n -= 1;
                    if *n == 0 {
                        self.uses.remove(&a);
                        self.ids.remove(&a);
                    }
                }
            }
            self.flat_first = end;
            self.first += 1;
        }
        if self.seen.len() > 4 * self.keep {
            let first = self.first;
            self.seen.retain(|_, i| *i >= first);
        }
        if self.seen_alone.len() > 4 * self.keep {
            let first = self.first;
            self.seen_alone.retain(|_, i| *i >= first);
        }
    }

    /// The allocations predicted for the commands after the one with signature `next`, in
    /// order of first use, without repeats, each with how many commands ahead it is first
    /// used (0: the command right after `next`). What followed an earlier run of the same
    /// context is predicted to follow again: of its last [`CANDIDATES`] runs, the one
    /// whose [`SIMILAR`] commands before it match those before the present best (a step
    /// of a loop over layers, not the same point in the layer before). The prediction
    /// stops where the past reaches the present (one period) or after `window` commands.
    /// When the context never ran before, what followed `next` alone; when `next` never
    /// ran either, the sweep in progress ([`History::sweep`]), else `None`.
    pub fn predict(&self, next: u64) -> Option<Vec<(AllocId, usize)>> {
        let present = self.first + self.sigs.len() as u64;
        self.after([self.seen.get(&self.context(next)).copied(), self.seen_alone.get(&next).copied()], present).0
    }

    /// As [`History::predict`], for the commands after the newest one recorded (what a
    /// tenant runs next when it resumes). A forecast of a whole period made fewer than
    /// [`STALE`] commands ago is given again, what the commands since used moved to the
    /// next period: reports and fill steps ask often.
    pub fn after_last(&self) -> Option<Vec<(AllocId, usize)>> {
        let newest = (self.first + self.sigs.len() as u64).checked_sub(1)?;
        let mut last = self.last_forecast.borrow_mut();
        if let Some((at, period, f)) = last.as_ref().filter(|(at, _, _)| *at <= newest && newest - at < STALE) {
            // One period on, what was used in the commands since is used again.
            let gone = (newest - at) as usize;
            let mut f: Vec<(AllocId, usize)> = f.iter().map(|(a, k)| (*a, (k + period - gone % period) % period)).collect();
            f.sort_by_key(|(_, k)| *k);
            return Some(f);
        }
        let (f, period) = self.after(self.last_match, newest);
        *last = f.clone().zip(period).map(|(f, p)| (newest, p, f));
        f
    }

    /// What followed the best of the runs chained from the first of `matches` still
    /// remembered (`present`: the index the runs stand for), else the sweep; and the
    /// period in commands, where the forecast covers one whole.
    fn after(&self, matches: [Option<u64>; 2], present: u64) -> (Option<Vec<(AllocId, usize)>>, Option<usize>) {
        let mut runs = matches.into_iter().enumerate().filter_map(|(chain, at)| Some((chain, at?)));
        let found = runs.find_map(|(chain, at)| {
            let run = self.best_run(at, chain, present);
            let period = Some((present - run) as usize).filter(|p| *p <= self.window);
            self.following(run).map(|f| (f, period))
        });
        match found {
            Some((f, period)) => (Some(f), period),
            None => (self.sweep(), None),
        }
    }

    /// Of the runs chained back from `at` (`chain` 0: of the context, 1: of the signature
    /// alone), the one whose preceding commands equal those before `present` in most
    /// places, the newest of equals. The distance chosen last time is kept while it
    /// still agrees in [`KEEP_ALIGNED`] places: the search runs when the program's
    /// rhythm changes, not at every forecast.
    fn best_run(&self, at: u64, chain: usize, present: u64) -> u64 {
        let sig = |i: u64| i.checked_sub(self.first).and_then(|k| self.sigs.get(k as usize));
        let score = |at: u64| (1..=SIMILAR).filter(|k| at >= *k && present >= *k && sig(at - k).is_some_and(|s| Some(s) == sig(present - k))).count();
        if let Some((p, run)) = self.aligned.get() {
            let kept = (run + present).checked_sub(p).filter(|r| *r < present && *r >= self.first);
            if let Some(r) = kept.filter(|r| score(*r) >= KEEP_ALIGNED) {
                self.aligned.set(Some((present, r)));
                return r;
            }
        }
        let mut best = (score(at), at);
        let mut run = at;
        for _ in 1..CANDIDATES {
            if best.0 == SIMILAR as usize {
                break;
            }
            match run.checked_sub(self.first).and_then(|k| self.prev.get(k as usize)).map(|p| p[chain]) {
                Some(p) if p != NONE && p >= self.first => run = p,
                _ => break,
            }
            let s = score(run);
            if s > best.0 {
                best = (s, run);
            }
        }
        self.aligned.set(Some((present, best.1)));
        best.1
    }

    /// The sweep in progress, if the last [`SWEEP`] commands with allocations each reached
    /// a higher allocation than the one before (or each a lower one): the remembered
    /// allocations past the newest command's highest (lowest), in sweep order and
    /// wrapping around, each as many commands ahead as the sweep's pace puts it.
    pub fn sweep(&self) -> Option<Vec<(AllocId, usize)>> {
        let newest = self.sigs.len();
        let mut fronts: Vec<(AllocId, AllocId)> =
            (newest.saturating_sub(4 * SWEEP)..newest).rev().filter_map(|i| Some((self.set(i).min()?, self.set(i).max()?))).take(SWEEP).collect();
        if fronts.len() < SWEEP {
            return None;
        }
        fronts.reverse();
        let up = fronts.windows(2).all(|w| w[1].1 > w[0].1);
        let down = fronts.windows(2).all(|w| w[1].0 < w[0].0);
        let (from, to, order): (AllocId, AllocId, Vec<AllocId>) = if up {
            let (from, to) = (fronts[0].1, fronts[SWEEP - 1].1);
            let past = self.ids.range(to..).skip(1).chain(self.ids.range(..=to)).copied();
            (from, to, past.collect())
        } else if down {
            let (from, to) = (fronts[SWEEP - 1].0, fronts[0].0);
            let past = self.ids.range(..from).rev().chain(self.ids.range(from..).rev()).copied();
            (from, to, past.collect())
        } else {
            return None;
        };
        // Allocations passed per command over the window.
        let pace = self.ids.range(from..=to).count().saturating_sub(1) as f64 / (SWEEP - 1) as f64;
        let ahead = |k: usize| (k as f64 / pace.max(1e-9)) as usize;
        Some(order.into_iter().enumerate().map(|(k, a)| (a, ahead(k))).take_while(|(_, n)| *n < self.window).collect())
    }

    /// The allocations first used in the `window` commands after `at` (up to the
    /// present), in order, each with how many commands ahead; it stops early once every
    /// remembered allocation has appeared.
    fn following(&self, at: u64) -> Option<Vec<(AllocId, usize)>> {
        let start = at.checked_sub(self.first)? as usize + 1;
        let end = (start + self.window).min(self.sigs.len());
        let mut marks = self.marks.borrow_mut();
        let (stamps, stamp) = &mut *marks;
        *stamp = stamp.wrapping_add(1);
        if *stamp == 0 {
            stamps.iter_mut().for_each(|s| *s = 0);
            *stamp = 1;
        }
        let mut out = Vec::new();
        for (k, i) in (start..end).enumerate() {
            for a in self.set(i) {
                let slot = a.0 as usize;
                if slot >= stamps.len() {
                    stamps.resize(slot + 1, 0);
                }
                if stamps[slot] != *stamp {
                    stamps[slot] = *stamp;
                    out.push((a, k));
                }
            }
            if out.len() == self.ids.len() {
                break;
            }
        }
        Some(out)
    }

    /// The allocations of the `i`-th command remembered (0: the oldest).
    fn set(&self, i: usize) -> impl Iterator<Item = AllocId> + '_ {
        let start = if i == 0 { self.flat_first } else { self.ends[i - 1] };
        let (from, to) = ((start - self.flat_first) as usize, (self.ends[i] - self.flat_first) as usize);
        self.flat.range(from..to).copied()
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

    /// A step runs four layers, each one command on its weights (10 + layer) among five
    /// on one activation (100), so the last three commands ran alike one command ago.
    /// The forecast follows the run one step back, not the one a command back.
    #[test]
    fn a_context_that_repeats_inside_a_step_forecasts_the_rest_of_the_step() {
        let layer = |l: u32| [100, 10 + l, 100, 100, 100, 100];
        let step: Vec<u32> = (0..4).flat_map(layer).collect();
        let mut h = History::new(1000, 1000);
        for _ in 0..3 {
            run(&mut h, &step);
        }
        run(&mut h, &[layer(0), layer(1)].concat());
        let next: Vec<AllocId> = h.after_last().unwrap().into_iter().map(|(a, _)| a).collect();
        assert_eq!(next, ids(&[100, 12, 13, 10, 11]), "layers 2 and 3, then the next step's");
        assert_eq!(predicted(&h, 100).unwrap(), ids(&[12, 100, 13, 10, 11]), "the same for the command about to run");
    }

    #[test]
    fn a_forecast_given_again_moves_what_was_just_used_to_the_next_period() {
        let mut h = History::new(1000, 1000);
        run(&mut h, &[0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4]);
        assert_eq!(h.after_last().unwrap(), [0, 1, 2, 3, 4].map(|a| (AllocId(a), a as usize)));
        run(&mut h, &[0, 1]);
        let again = h.after_last().unwrap();
        let mut one = History::new(1000, 1000);
        run(&mut one, &[7, 7, 7]);
        assert_eq!(one.after_last().unwrap(), vec![(AllocId(7), 0)]);
        run(&mut one, &[7, 7]);
        assert_eq!(one.after_last().unwrap(), vec![(AllocId(7), 0)], "a period of one command, two on");
        assert_eq!(again, vec![(AllocId(2), 0), (AllocId(3), 1), (AllocId(4), 2), (AllocId(0), 3), (AllocId(1), 4)]);
        *h.last_forecast.borrow_mut() = None;
        assert_eq!(h.after_last().unwrap(), again, "as a fresh forecast");
    }

    /// Setup touches allocations 0..20 in one command, then commands run over pairs
    /// `[a, a + 1]` for each `a` in `pairs`.
    fn sweep_over(pairs: impl Iterator<Item = u32>) -> History {
        let mut h = History::new(1000, 1000);
        let all = ids(&(0..20).collect::<Vec<_>>());
        h.record(signature(1, &all), &all);
        for a in pairs {
            let set = ids(&[a, a + 1]);
            h.record(signature(7, &set), &set);
        }
        h
    }

    #[test]
    fn a_first_pass_upwards_predicts_the_rest_of_it_then_the_start() {
        let h = sweep_over(0..9);
        let next = h.after_last().expect("a sweep");
        let want: Vec<(AllocId, usize)> = (10..20).chain(0..10).enumerate().map(|(k, a)| (AllocId(a), k)).collect();
        assert_eq!(next, want, "one allocation per command, wrapping around");
        assert_eq!(predicted(&h, 10).unwrap()[..3], ids(&[10, 11, 12]), "an unseen context falls back to the sweep");
    }

    #[test]
    fn where_a_loop_wraps_around_the_command_alone_predicts() {
        // The loop starts over: [0, 1] now follows [18, 19], a context the first pass did
        // not have, and the sweep is broken.
        let h = sweep_over((0..19).chain([0]));
        assert_eq!(h.sweep(), None);
        assert_eq!(h.after_last().expect("a back-off")[..3], [(AllocId(1), 0), (AllocId(2), 0), (AllocId(3), 1)]);
        let next = h.predict(signature(7, &ids(&[1, 2]))).expect("a back-off");
        assert_eq!(next[..3], [(AllocId(2), 0), (AllocId(3), 0), (AllocId(4), 1)], "what followed [1, 2] last time");
    }

    #[test]
    fn a_sweep_downwards_and_its_pace() {
        let h = sweep_over((3..11).rev());
        let next = h.after_last().expect("a sweep");
        assert_eq!(next[..4], [(AllocId(2), 0), (AllocId(1), 1), (AllocId(0), 2), (AllocId(19), 3)]);
        // Two allocations per command: [0, 1], [2, 3], ...
        let mut h = History::new(1000, 1000);
        for a in (0..10).map(|k| 2 * k) {
            let set = ids(&[a, a + 1]);
            h.record(signature(7, &set), &set);
        }
        let next = h.after_last().expect("a sweep");
        assert_eq!(next[..4], [(AllocId(0), 0), (AllocId(1), 0), (AllocId(2), 1), (AllocId(3), 1)], "wrapped, two per command");
    }

    #[test]
    fn no_sweep_no_repeat_no_prediction() {
        let mut h = History::new(1000, 1000);
        run(&mut h, &[3, 9, 1, 7, 2, 8, 4, 6, 0, 19]);
        assert_eq!(h.after_last(), None);
        run(&mut h, &[10, 11, 12, 13, 14, 15, 16]);
        assert_eq!(h.after_last(), None, "7 rising commands are not yet a sweep");
        run(&mut h, &[17]);
        assert_eq!(
            h.after_last().unwrap()[..3],
            [(AllocId(19), 0), (AllocId(0), 1), (AllocId(1), 2)],
            "8 are; on to the allocations seen past 17, then around"
        );
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
