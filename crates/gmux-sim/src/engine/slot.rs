//! Running the scheduler's timeline: buffering commands, forecasting accesses over the
//! coming slots, and running the head slot until its slice ends or it is preempted.

use super::{Engine, Queued, System, MAX_SLOT_CMDS};
use gmux_core::evict::Forecast;
use gmux_core::sched::{Policy, TenantView};
use gmux_core::{ChunkId, TenantId, Timeline};

impl Engine<'_> {
    pub(super) fn main_loop(&mut self) -> Result<(), String> {
        let n = self.runs.len();
        while self.now < self.spec.duration_ns {
            for t in 0..n {
                self.ensure(t, 1);
            }
            let views = self.views(self.now);
            let timeline = self.sched.timeline(&views, 2 * n);
            let Some(slot) = timeline.head() else {
                let next = self.runs.iter().filter_map(|r| r.buf.front()).filter_map(|q| q.cmd.arrival_ns).fold(f64::INFINITY, f64::min);
                if !next.is_finite() {
                    break;
                }
                self.now = next.max(self.now);
                continue;
            };
            self.run_slot(slot.tenant, slot.slice, &timeline)?;
        }
        Ok(())
    }

    fn views(&self, at: f64) -> Vec<TenantView> {
        self.tenants
            .ids()
            .map(|id| {
                let t = self.tenants.get(id);
                let native = self.spec.system == System::Um;
                TenantView {
                    id,
                    ready: self.runs[id.0 as usize].buf.front().is_some_and(|q| q.cmd.arrival_ns.is_none_or(|a| a <= at)),
                    frozen: t.limits.frozen,
                    priority: if native { 0 } else { t.priority },
                    weight: t.limits.weight,
                    timeslice: if native { (self.spec.model.native_timeslice_us * 1e3) as u64 } else { t.limits.timeslice },
                }
            })
            .collect()
    }

    /// Buffers at least `k` commands of tenant `t` (fewer if its stream ends).
    fn ensure(&mut self, t: usize, k: usize) {
        let exact_prediction = self.spec.system != System::GmuxAlloc;
        while self.runs[t].buf.len() < k && !self.runs[t].finished {
            let Some(cmd) = self.runs[t].source.next() else {
                self.runs[t].finished = true;
                break;
            };
            let mut exact = Vec::new();
            let mut predicted = Vec::new();
            for a in &cmd.ws {
                let al = self.mem.alloc(self.runs[t].allocs[a.alloc]).expect("live allocation");
                exact.extend(al.chunks_in(a.offset, a.len).map(|c| (c, a.write)));
                if exact_prediction {
                    predicted.extend(al.chunks_in(a.offset, a.len));
                } else {
                    predicted.extend(al.chunks());
                }
            }
            dedup_keep_order(&mut predicted);
            self.runs[t].buf.push_back(Queued { cmd, exact, predicted });
        }
    }

    /// The global order of predicted accesses over the timeline, and where each command
    /// of the head slot starts in it (one entry past the last).
    fn forecast(&mut self, timeline: &Timeline) -> (Vec<ChunkId>, Vec<u64>) {
        let mut cursor = vec![0usize; self.runs.len()];
        let mut acc = Vec::new();
        let mut head = vec![0u64];
        for (j, slot) in timeline.slots.iter().enumerate() {
            let t = slot.tenant.0 as usize;
            let mut left = slot.slice as f64;
            let start = cursor[t];
            while left > 0.0 && cursor[t] - start < MAX_SLOT_CMDS {
                self.ensure(t, cursor[t] + 1);
                let Some(q) = self.runs[t].buf.get(cursor[t]) else { break };
                if q.cmd.arrival_ns.is_some_and(|a| a > self.now) {
                    break;
                }
                acc.extend_from_slice(&q.predicted);
                left -= q.cmd.duration_ns;
                cursor[t] += 1;
                if j == 0 {
                    head.push(acc.len() as u64);
                }
            }
        }
        (acc, head)
    }

    fn run_slot(&mut self, tenant: TenantId, slice: u64, timeline: &Timeline) -> Result<(), String> {
        let ti = tenant.0 as usize;
        let slot_start = self.now;
        let mut t = self.now;
        if self.last != Some(tenant) {
            t += self.spec.model.switch_us * 1e3;
            self.tenants.get_mut(tenant).stat.switches += 1;
            self.last = Some(tenant);
        }
        let gmux = !self.spec.system.demand_paged();
        let (mut forecast, head) = if gmux {
            let (acc, head) = self.forecast(timeline);
            let forecast = Forecast::from_accesses(acc);
            let mut need: Vec<ChunkId> = self.runs[ti].buf.iter().take(head.len() - 1).flat_map(|q| q.predicted.iter().copied()).collect();
            dedup_keep_order(&mut need);
            let first = self.runs[ti].buf.front().map_or(0, |q| q.predicted.len()).min(need.len());
            self.migrate(tenant, &need, first, &forecast, t)?;
            (forecast, head)
        } else {
            (Forecast::default(), Vec::new())
        };
        // gmux counts a slice in GPU time: waiting for a migration does not use it up.
        // The demand-paging models count wall time, as hardware time slicing does.
        let slot_end = t + slice as f64;
        let mut ran = 0.0;
        let mut executed = 0;
        while if gmux { ran < slice as f64 } else { t < slot_end } {
            self.ensure(ti, 1);
            let Some(q) = self.runs[ti].buf.front() else { break };
            if q.cmd.arrival_ns.is_some_and(|a| a > t) {
                break;
            }
            if executed > 0 && self.preempted(tenant, t) {
                break;
            }
            let start = if gmux {
                forecast.advance_to(head.get(executed).or(head.last()).copied().unwrap_or(0));
                let need = q.predicted.clone();
                if need.iter().any(|c| !self.mem.is_resident(*c)) && self.migrate(tenant, &need, need.len(), &forecast, t)? < need.len() {
                    return Err(self.stuck(tenant, &need));
                }
                need.iter().map(|c| self.ready_at[c.0 as usize]).fold(t, f64::max)
            } else {
                let chunks: Vec<ChunkId> = q.exact.iter().map(|(c, _)| *c).collect();
                t + self.fault_in(tenant, &chunks)?
            };
            if executed > 0 && start > t && self.preempted(tenant, start) {
                let arrival = self.first_arrival_above(tenant, start);
                t = arrival.max(t);
                break;
            }
            let q = self.runs[ti].buf.pop_front().expect("front exists");
            ran += q.cmd.duration_ns;
            t = self.execute(ti, q, start);
            executed += 1;
        }
        self.sched.charge(tenant, (t - slot_start).max(1.0) as u64);
        self.now = t.max(slot_start + 1.0);
        Ok(())
    }
}

impl Engine<'_> {
    /// Earliest arrival, at or before `by`, of a ready tenant with a higher priority than `cur`.
    fn first_arrival_above(&self, cur: TenantId, by: f64) -> f64 {
        let p = self.tenants.get(cur).priority;
        self.tenants
            .ids()
            .filter(|id| self.tenants.get(*id).priority > p)
            .filter_map(|id| self.runs[id.0 as usize].buf.front().map(|q| q.cmd.arrival_ns.unwrap_or(0.0)))
            .filter(|a| *a <= by)
            .fold(by, f64::min)
    }

    fn preempted(&self, cur: TenantId, at: f64) -> bool {
        if self.spec.policy != Policy::Priority || self.spec.system == System::Um {
            return false;
        }
        let p = self.tenants.get(cur).priority;
        self.views(at).iter().any(|v| v.runnable() && v.priority > p)
    }
}

fn dedup_keep_order(v: &mut Vec<ChunkId>) {
    let mut seen = std::collections::HashSet::with_capacity(v.len());
    v.retain(|c| seen.insert(*c));
}
