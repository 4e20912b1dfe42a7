//! Copy engines, disk and the mover's control thread as a fluid model.
//!
//! Each lane serves its items in order. Host→device and device→host share the link's
//! full-duplex cap when both transfer at once. An item may wait for earlier items
//! (a population waits for the eviction that frees its physical chunk).

use crate::model::DeviceModel;

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
    /// Bytes to transfer (0 for driver calls).
    pub bytes: u64,
    /// Fixed latency before the transfer, ns.
    pub fixed_ns: f64,
    /// Indices of earlier items that must complete first.
    pub deps: [Option<usize>; 2],
    /// Earliest start, ns.
    pub earliest: f64,
}

/// Lanes with the time each becomes free, carried from one batch to the next.
#[derive(Debug, Clone, Default)]
pub struct Lanes {
    free_at: [f64; LANES],
}

impl Lanes {
    /// Runs `items` from `start`; returns each item's completion time.
    pub fn schedule(&mut self, model: &DeviceModel, start: f64, items: &[Item]) -> Vec<f64> {
        let mut done = vec![f64::NAN; items.len()];
        let mut queues: [std::collections::VecDeque<usize>; LANES] = Default::default();
        for (i, it) in items.iter().enumerate() {
            queues[it.lane as usize].push_back(i);
        }
        let mut cur: [Option<(usize, f64, f64)>; LANES] = [None; LANES];
        let mut t = start;
        let t_floor = self.free_at;
        loop {
            for l in 0..LANES {
                if cur[l].is_some() || t < t_floor[l] {
                    continue;
                }
                if let Some(&i) = queues[l].front() {
                    let it = &items[i];
                    let deps_done = it.deps.iter().flatten().all(|&d| done[d] <= t);
                    if deps_done && it.earliest <= t {
                        queues[l].pop_front();
                        cur[l] = Some((i, it.fixed_ns, it.bytes as f64));
                    }
                }
            }
            if cur.iter().all(Option::is_none) && queues.iter().all(|q| q.is_empty()) {
                break;
            }
            let rates = rates(model, &cur, &t_floor, t);
            let mut dt = f64::INFINITY;
            for l in 0..LANES {
                match cur[l] {
                    Some((_, fixed, _)) if fixed > 0.0 => dt = dt.min(fixed),
                    Some((_, _, bytes)) => dt = dt.min(bytes / rates[l]),
                    None => {
                        if let Some(&i) = queues[l].front() {
                            let it = &items[i];
                            let mut ready = it.earliest.max(t_floor[l]);
                            for &d in it.deps.iter().flatten() {
                                ready = ready.max(done[d]);
                            }
                            if ready > t {
                                dt = dt.min(ready - t);
                            }
                        }
                    }
                }
            }
            assert!(dt.is_finite(), "mover lanes deadlocked: an item waits on one that never runs");
            t += dt;
            for l in 0..LANES {
                if let Some((i, fixed, bytes)) = cur[l].as_mut() {
                    if *fixed > 0.0 {
                        *fixed = (*fixed - dt).max(0.0);
                        if *fixed <= 1e-9 {
                            *fixed = 0.0;
                        }
                    } else {
                        *bytes -= rates[l] * dt;
                    }
                    if *fixed == 0.0 && *bytes <= 1e-6 {
                        done[*i] = t;
                        self.free_at[l] = t;
                        cur[l] = None;
                    }
                }
            }
        }
        done
    }
}

/// Rates now. A copy lane still busy with an earlier batch counts as moving, so that
/// batches issued at different times also share the duplex cap.
fn rates(m: &DeviceModel, cur: &[Option<(usize, f64, f64)>; LANES], busy_until: &[f64; LANES], t: f64) -> [f64; LANES] {
    let moving = |l: Lane| matches!(cur[l as usize], Some((_, f, _)) if f == 0.0) || t < busy_until[l as usize];
    let (mut h2d, mut d2h) = (m.h2d_gbps, m.d2h_gbps);
    if moving(Lane::H2D) && moving(Lane::D2H) && h2d + d2h > m.duplex_gbps {
        let scale = m.duplex_gbps / (h2d + d2h);
        h2d *= scale;
        d2h *= scale;
    }
    [h2d, d2h, m.disk_read_gbps, m.disk_write_gbps, 1.0]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(lane: Lane, bytes: u64) -> Item {
        Item { lane, bytes, fixed_ns: 0.0, deps: [None, None], earliest: 0.0 }
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
}
