//! Copy engines, disk and the driver-call threads as a fluid model.
//!
//! Each lane serves each of its queues in order (a queue is one process's stream: a
//! CUDA stream runs its work in order, while another process's stream goes on beside it).
//! The transfers under way on a lane share its rate, and host→device and device→host
//! share the link's full-duplex cap when both transfer at once. Work is scheduled batch by
//! batch, as it is issued: a batch's transfers get what the transfers of earlier batches
//! leave of each rate and of the cap, so that no lane and no link ever moves more than
//! its rate. An item may wait for earlier items (a population waits for the eviction
//! that frees its physical chunk). With one queue this is a FIFO per lane.

use crate::model::DeviceModel;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// A serial resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Copy engine host → device.
    H2D,
    /// Copy engine device → host.
    D2H,
    /// Disk reads.
    DiskRead,
    /// Disk writes.
    DiskWrite,
    /// The mover's thread issuing create / map / unmap calls.
    Ctl,
}

const LANES: usize = 5;

/// One transfer or driver call.
#[derive(Debug, Clone, Copy)]
pub struct Item {
    /// Where it runs.
    pub lane: Lane,
    /// The queue of the lane it waits in (one per process).
    pub queue: u32,
    /// Bytes to transfer (0 for driver calls).
    pub bytes: u64,
    /// Fixed latency before the transfer, ns.
    pub fixed_ns: f64,
    /// The fixed latency instead, when the item starts while the device→host copies of
    /// earlier batches move data (a mapping's `cuMemSetAccess` under eviction copies), ns.
    pub busy_fixed_ns: f64,
    /// Indices of earlier items that must complete first.
    pub deps: [Option<usize>; 2],
    /// Earliest start, ns.
    pub earliest: f64,
}

/// A lane's queue: (lane, queue).
type Key = (usize, u32);

/// The rates, in bytes per ns, that transfers hold on each lane over time: a step
/// function, each entry holding from its time to the next entry's (none after the last).
#[derive(Debug, Clone, Default)]
struct Profile(Vec<(f64, [f64; LANES])>);

impl Profile {
    /// Forgets what ends before `t`.
    fn forget_before(&mut self, t: f64) {
        let keep = self.0.iter().position(|(at, _)| *at > t).map_or(self.0.len().saturating_sub(1), |i| i.saturating_sub(1));
        self.0.drain(..keep);
    }

    /// Sets the rates from `t` on (`t` not before the last entry).
    fn push(&mut self, t: f64, rates: [f64; LANES]) {
        match self.0.last_mut() {
            Some(last) if last.1 == rates => {}
            Some(last) if last.0 == t => last.1 = rates,
            _ => self.0.push((t, rates)),
        }
    }

    /// The sum of two step functions.
    fn add(&self, other: &Profile) -> Profile {
        let (a, b) = (&self.0, &other.0);
        let (mut i, mut j) = (0, 0);
        let mut out = Profile::default();
        let at = |v: &Vec<(f64, [f64; LANES])>, k: usize| if k == 0 { [0.0; LANES] } else { v[k - 1].1 };
        while i < a.len() || j < b.len() {
            let t = match (a.get(i), b.get(j)) {
                (Some(x), Some(y)) => x.0.min(y.0),
                (Some(x), None) => x.0,
                (None, Some(y)) => y.0,
                (None, None) => unreachable!(),
            };
            while a.get(i).is_some_and(|x| x.0 <= t) {
                i += 1;
            }
            while b.get(j).is_some_and(|y| y.0 <= t) {
                j += 1;
            }
            let (x, y) = (at(a, i), at(b, j));
            out.push(t, std::array::from_fn(|l| x[l] + y[l]));
        }
        out
    }
}

/// Reads a [`Profile`] at times that only grow.
struct Cursor<'a> {
    profile: &'a Profile,
    next: usize,
}

impl Cursor<'_> {
    /// The rates held at `t` and when they next change.
    fn at(&mut self, t: f64) -> ([f64; LANES], Option<f64>) {
        let p = &self.profile.0;
        while self.next < p.len() && p[self.next].0 <= t {
            self.next += 1;
        }
        let now = if self.next == 0 { [0.0; LANES] } else { p[self.next - 1].1 };
        (now, p.get(self.next).map(|e| e.0))
    }
}

/// Lanes with the time each queue becomes free and the rates earlier batches hold,
/// carried from one batch to the next.
#[derive(Debug, Clone, Default)]
pub struct Lanes {
    free_at: HashMap<Key, f64>,
    held: Profile,
}

/// An item under way: its index, fixed latency left, bytes left.
type Running = (usize, f64, f64);

impl Lanes {
    /// Runs `items` from `start`; returns each item's completion time.
    pub fn schedule(&mut self, model: &DeviceModel, start: f64, items: &[Item]) -> Vec<f64> {
        self.held.forget_before(start);
        let mut done = vec![f64::NAN; items.len()];
        let mut queues: BTreeMap<Key, VecDeque<usize>> = BTreeMap::new();
        for (i, it) in items.iter().enumerate() {
            queues.entry((it.lane as usize, it.queue)).or_default().push_back(i);
        }
        let floor = self.free_at.clone();
        let floor_of = |k: &Key| floor.get(k).copied().unwrap_or(0.0);
        let mut cur: BTreeMap<Key, Running> = BTreeMap::new();
        let mut taken = Profile::default();
        let mut earlier = Cursor { profile: &self.held, next: 0 };
        let mut t = start;
        loop {
            let (held, change) = earlier.at(t);
            for (k, q) in queues.iter_mut() {
                if cur.contains_key(k) || t < floor_of(k) {
                    continue;
                }
                if let Some(&i) = q.front() {
                    let it = &items[i];
                    if it.deps.iter().flatten().all(|&d| done[d] <= t) && it.earliest <= t {
                        q.pop_front();
                        // Eviction copies of earlier batches: a batch's own copies are
                        // issued after its mappings.
                        let evicting = held[Lane::D2H as usize] > 0.0;
                        cur.insert(*k, (i, if evicting { it.busy_fixed_ns } else { it.fixed_ns }, it.bytes as f64));
                    }
                }
            }
            if cur.is_empty() && queues.values().all(VecDeque::is_empty) {
                break;
            }
            let rate = rates(model, &cur, held);
            // What earlier batches hold changes at the next step of their profile.
            let mut dt = change.map_or(f64::INFINITY, |c| c - t);
            for (k, r) in &cur {
                if r.1 > 0.0 {
                    dt = dt.min(r.1);
                } else if rate[k] > 0.0 {
                    dt = dt.min(r.2 / rate[k]);
                }
            }
            for (k, q) in &queues {
                if cur.contains_key(k) {
                    continue;
                }
                if let Some(&i) = q.front() {
                    let it = &items[i];
                    let ready = it.deps.iter().flatten().fold(it.earliest.max(floor_of(k)), |r, &d| r.max(done[d]));
                    if ready > t {
                        dt = dt.min(ready - t);
                    }
                }
            }
            assert!(dt.is_finite(), "mover lanes deadlocked: an item waits on one that never runs");
            let mut moving = [0.0f64; LANES];
            cur.retain(|k, (i, fixed, bytes)| {
                if *fixed > 0.0 {
                    *fixed = (*fixed - dt).max(0.0);
                    if *fixed <= 1e-9 {
                        *fixed = 0.0;
                    }
                } else if rate[k] > 0.0 {
                    *bytes -= rate[k] * dt;
                    moving[k.0] += rate[k];
                }
                let finished = *fixed == 0.0 && *bytes <= 1e-6;
                if finished {
                    done[*i] = t + dt;
                    self.free_at.insert(*k, t + dt);
                }
                !finished
            });
            taken.push(t, moving);
            t += dt;
        }
        taken.push(t, [0.0; LANES]);
        self.held = self.held.add(&taken);
        done
    }
}

/// The rate of each queue's transfer now: what the earlier batches' transfers leave of
/// each lane's rate and of the duplex cap, shared evenly by this batch's transfers on
/// that lane.
fn rates(m: &DeviceModel, cur: &BTreeMap<Key, Running>, taken: [f64; LANES]) -> HashMap<Key, f64> {
    let mut sharing = [0u32; LANES];
    for (k, r) in cur {
        if r.1 == 0.0 {
            sharing[k.0] += 1;
        }
    }
    let full = [m.h2d_gbps, m.d2h_gbps, m.disk_read_gbps, m.disk_write_gbps, 1.0];
    let mut left: [f64; LANES] = std::array::from_fn(|l| if sharing[l] > 0 { (full[l] - taken[l]).max(0.0) } else { 0.0 });
    let (h, d) = (Lane::H2D as usize, Lane::D2H as usize);
    let link_left = (m.duplex_gbps - taken[h] - taken[d]).max(0.0);
    let both = (sharing[h] > 0 || taken[h] > 0.0) && (sharing[d] > 0 || taken[d] > 0.0);
    if both && left[h] + left[d] > link_left {
        let scale = link_left / (left[h] + left[d]);
        left[h] *= scale;
        left[d] *= scale;
    }
    cur.keys().map(|k| (*k, left[k.0] / f64::from(sharing[k.0].max(1)))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(lane: Lane, bytes: u64) -> Item {
        Item { lane, queue: 0, bytes, fixed_ns: 0.0, busy_fixed_ns: 0.0, deps: [None, None], earliest: 0.0 }
    }

    #[test]
    fn one_direction_runs_at_link_rate() {
        let m = DeviceModel::default();
        let items: Vec<_> = (0..10).map(|_| item(Lane::H2D, 53_000)).collect();
        let done = Lanes::default().schedule(&m, 0.0, &items);
        assert!((done[9] - 10_000.0).abs() < 1e-3, "{}", done[9]);
    }

    #[test]
    fn both_directions_share_the_duplex_cap() {
        let m = DeviceModel::default();
        let gb = 1_000_000_000;
        let items = vec![item(Lane::H2D, gb), item(Lane::D2H, gb)];
        let done = Lanes::default().schedule(&m, 0.0, &items);
        let total_gbps = 2.0 * gb as f64 / done[0].max(done[1]);
        assert!(total_gbps > 80.0 && total_gbps <= 86.0 + 1e-6, "{total_gbps}");
        let sequential = gb as f64 / 53.0 + gb as f64 / 55.0;
        assert!(done[0].max(done[1]) < 0.65 * sequential, "pipelined is at least 1.5x sequential");
    }

    #[test]
    fn dependencies_and_fixed_costs_are_honoured() {
        let m = DeviceModel::default();
        let mut a = item(Lane::D2H, 55_000);
        a.fixed_ns = 500.0;
        let mut b = item(Lane::H2D, 53_000);
        b.deps[0] = Some(0);
        let done = Lanes::default().schedule(&m, 100.0, &[a, b]);
        assert!((done[0] - 1600.0).abs() < 1e-6, "{}", done[0]);
        assert!((done[1] - 2600.0).abs() < 1e-6, "{}", done[1]);
    }

    #[test]
    fn lanes_stay_busy_across_batches() {
        let m = DeviceModel::default();
        let mut lanes = Lanes::default();
        lanes.schedule(&m, 0.0, &[item(Lane::H2D, 53_000)]);
        let done = lanes.schedule(&m, 0.0, &[item(Lane::H2D, 53_000)]);
        assert!((done[0] - 2000.0).abs() < 1e-6);
    }

    #[test]
    fn batches_issued_apart_still_share_the_duplex_cap() {
        let m = DeviceModel::default();
        let mut lanes = Lanes::default();
        let gb = 1_000_000_000;
        let first = lanes.schedule(&m, 0.0, &[item(Lane::D2H, gb)])[0];
        let second = lanes.schedule(&m, 0.0, &[item(Lane::H2D, gb)])[0];
        let total_gbps = 2.0 * gb as f64 / first.max(second);
        assert!(total_gbps <= 86.0 + 1e-6, "{total_gbps} GB/s over the 86 GB/s cap");
    }

    #[test]
    fn queues_of_one_lane_go_on_beside_each_other_and_share_its_rate() {
        let m = DeviceModel::default();
        let mut waiting = item(Lane::D2H, 55_000);
        waiting.earliest = 10_000.0;
        let mut other = item(Lane::D2H, 55_000);
        other.queue = 1;
        let done = Lanes::default().schedule(&m, 0.0, &[waiting, other]);
        assert!((done[1] - 1000.0).abs() < 1e-3, "another process's copy runs while the first waits: {}", done[1]);
        assert!((done[0] - 11_000.0).abs() < 1e-3, "{}", done[0]);
        let mut b = item(Lane::H2D, 53_000);
        b.queue = 1;
        let done = Lanes::default().schedule(&m, 0.0, &[item(Lane::H2D, 53_000), b]);
        assert!(done.iter().all(|d| (d - 2000.0).abs() < 1e-3), "two transfers share the lane: {done:?}");
    }

    proptest::proptest! {
        /// However batches arrive, no lane moves more than its rate, the link no more than
        /// its duplex cap, and every byte issued is moved.
        #[test]
        fn batches_never_exceed_the_rates(batches in proptest::collection::vec(
            (0.0f64..5_000.0, proptest::collection::vec((proptest::bool::ANY, 0u32..3, 1u64..200_000), 1..6)), 1..8)) {
            let m = DeviceModel::default();
            let mut lanes = Lanes::default();
            let mut now = 0.0;
            let (mut issued, mut moved) = (0.0, 0.0);
            let mut profile = Profile::default();
            for (gap, copies) in batches {
                now += gap;
                let items: Vec<Item> = copies.iter().map(|&(up, queue, bytes)| {
                    let mut it = item(if up { Lane::H2D } else { Lane::D2H }, bytes);
                    it.queue = queue;
                    it
                }).collect();
                issued += copies.iter().map(|c| c.2 as f64).sum::<f64>();
                let mut before = lanes.held.clone();
                before.forget_before(now);
                lanes.schedule(&m, now, &items);
                // What this batch added: the profile now less what it held before.
                let negated = Profile(before.0.iter().map(|(t, r)| (*t, r.map(|x| -x))).collect());
                let added = lanes.held.add(&negated);
                for w in added.0.windows(2) {
                    moved += (w[1].0 - w[0].0) * (w[0].1[0] + w[0].1[1]);
                }
                profile = profile.add(&added);
            }
            for (_, r) in &profile.0 {
                proptest::prop_assert!(r[0] <= m.h2d_gbps + 1e-6 && r[1] <= m.d2h_gbps + 1e-6, "{r:?}");
                proptest::prop_assert!(r[0] + r[1] <= m.duplex_gbps + 1e-6, "{r:?}");
            }
            proptest::prop_assert!((moved - issued).abs() <= 1e-6 * issued + 1.0, "moved {moved} of {issued} bytes");
        }
    }

    #[test]
    fn a_transfer_of_an_earlier_batch_on_another_queue_keeps_its_rate() {
        let m = DeviceModel::default();
        let mut lanes = Lanes::default();
        let first = lanes.schedule(&m, 0.0, &[item(Lane::H2D, 53_000)])[0];
        let mut b = item(Lane::H2D, 53_000);
        b.queue = 1;
        let done = lanes.schedule(&m, 0.0, &[b]);
        assert!((first - 1000.0).abs() < 1e-3, "{first}");
        assert!((done[0] - 2000.0).abs() < 1e-3, "the lane moves 53 GB/s in all, so the second ends after both: {}", done[0]);
    }

    #[test]
    fn an_earlier_batch_leaves_the_other_direction_what_the_duplex_cap_allows() {
        let m = DeviceModel::default();
        let mut lanes = Lanes::default();
        let d2h = lanes.schedule(&m, 0.0, &[item(Lane::D2H, 55_000)])[0];
        let mut b = item(Lane::H2D, 53_000);
        b.queue = 1;
        let h2d = lanes.schedule(&m, 0.0, &[b])[0];
        assert!((d2h - 1000.0).abs() < 1e-3, "{d2h}");
        // 31 GB/s (86 - 55) while the eviction runs, then 53 GB/s for the remaining 22 kB.
        let want = 1000.0 + (53_000.0 - 31_000.0) / 53.0;
        assert!((h2d - want).abs() < 1e-3, "{h2d} vs {want}");
    }
}
