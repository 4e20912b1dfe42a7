//! Copy engines, disk and the driver-call threads as a fluid model.
//!
//! Each lane serves each of its queues in order (a queue is one process's stream: a
//! CUDA stream runs its work in order, while another process's stream goes on beside it).
//! The transfers under way on a lane share its rate, and host→device and device→host
//! share the link's full-duplex cap when both transfer at once. An item may wait for
//! earlier items (a population waits for the eviction that frees its physical chunk).
//! With one queue this is a FIFO per lane.

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
    /// Indices of earlier items that must complete first.
    pub deps: [Option<usize>; 2],
    /// Earliest start, ns.
    pub earliest: f64,
}

/// A lane's queue: (lane, queue).
type Key = (usize, u32);

/// Lanes with the time each queue becomes free, carried from one batch to the next.
#[derive(Debug, Clone, Default)]
pub struct Lanes {
    free_at: HashMap<Key, f64>,
}

/// An item under way: its index, fixed latency left, bytes left.
type Running = (usize, f64, f64);

impl Lanes {
    /// Runs `items` from `start`; returns each item's completion time.
    pub fn schedule(&mut self, model: &DeviceModel, start: f64, items: &[Item]) -> Vec<f64> {
        let mut done = vec![f64::NAN; items.len()];
        let mut queues: BTreeMap<Key, VecDeque<usize>> = BTreeMap::new();
        for (i, it) in items.iter().enumerate() {
            queues.entry((it.lane as usize, it.queue)).or_default().push_back(i);
        }
        let floor = self.free_at.clone();
        let floor_of = |k: &Key| floor.get(k).copied().unwrap_or(0.0);
        let mut cur: BTreeMap<Key, Running> = BTreeMap::new();
        let mut t = start;
        loop {
            for (k, q) in queues.iter_mut() {
                if cur.contains_key(k) || t < floor_of(k) {
                    continue;
                }
                if let Some(&i) = q.front() {
                    let it = &items[i];
                    if it.deps.iter().flatten().all(|&d| done[d] <= t) && it.earliest <= t {
                        q.pop_front();
                        cur.insert(*k, (i, it.fixed_ns, it.bytes as f64));
                    }
                }
            }
            if cur.is_empty() && queues.values().all(VecDeque::is_empty) {
                break;
            }
            let rate = rates(model, &cur, &floor, t);
            let mut dt = f64::INFINITY;
            for (k, r) in &cur {
                dt = dt.min(if r.1 > 0.0 { r.1 } else { r.2 / rate[k] });
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
            // A transfer of an earlier batch on another queue that ends leaves its lane's
            // rate to the transfers sharing it now.
            for (k, until) in &floor {
                if *until > t && cur.keys().any(|c| c.0 == k.0 && c.1 != k.1) {
                    dt = dt.min(until - t);
                }
            }
            assert!(dt.is_finite(), "mover lanes deadlocked: an item waits on one that never runs");
            t += dt;
            cur.retain(|k, (i, fixed, bytes)| {
                if *fixed > 0.0 {
                    *fixed = (*fixed - dt).max(0.0);
                    if *fixed <= 1e-9 {
                        *fixed = 0.0;
                    }
                } else {
                    *bytes -= rate[k] * dt;
                }
                let finished = *fixed == 0.0 && *bytes <= 1e-6;
                if finished {
                    done[*i] = t;
                    self.free_at.insert(*k, t);
                }
                !finished
            });
        }
        done
    }
}

/// The rate of each queue's transfer now. The transfers on a lane share its rate, with
/// a transfer of an earlier batch still under way on another queue counted as one; a copy
/// lane still busy with an earlier batch counts as moving, so that batches issued at
/// different times also share the duplex cap.
fn rates(m: &DeviceModel, cur: &BTreeMap<Key, Running>, floor: &HashMap<Key, f64>, t: f64) -> HashMap<Key, f64> {
    let mut sharing = [0u32; LANES];
    for (k, r) in cur {
        if r.1 == 0.0 {
            sharing[k.0] += 1;
        }
    }
    let mut earlier = [0u32; LANES];
    let mut busy = [false; LANES];
    for (k, until) in floor {
        if t < *until {
            busy[k.0] = true;
            if !cur.contains_key(k) {
                earlier[k.0] += 1;
            }
        }
    }
    let moving = |l: Lane| sharing[l as usize] > 0 || busy[l as usize];
    let (mut h2d, mut d2h) = (m.h2d_gbps, m.d2h_gbps);
    if moving(Lane::H2D) && moving(Lane::D2H) && h2d + d2h > m.duplex_gbps {
        let scale = m.duplex_gbps / (h2d + d2h);
        h2d *= scale;
        d2h *= scale;
    }
    let lane_rate = [h2d, d2h, m.disk_read_gbps, m.disk_write_gbps, 1.0];
    cur.keys().map(|k| (*k, lane_rate[k.0] / f64::from((sharing[k.0] + earlier[k.0]).max(1)))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(lane: Lane, bytes: u64) -> Item {
        Item { lane, queue: 0, bytes, fixed_ns: 0.0, deps: [None, None], earliest: 0.0 }
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

    #[test]
    fn a_transfer_of_an_earlier_batch_on_another_queue_shares_the_lane() {
        let m = DeviceModel::default();
        let mut lanes = Lanes::default();
        lanes.schedule(&m, 0.0, &[item(Lane::H2D, 53_000)]);
        let mut b = item(Lane::H2D, 53_000);
        b.queue = 1;
        let done = lanes.schedule(&m, 0.0, &[b]);
        assert!((done[0] - 1500.0).abs() < 1e-3, "half the rate while the first runs, then all of it: {}", done[0]);
    }
}
