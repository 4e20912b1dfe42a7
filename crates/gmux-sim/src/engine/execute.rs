//! Executing a command, and the memory traffic before it: gmux's planned migrations on
//! the mover's lanes or demand paging's faults, with the bytes they move counted.

use super::{Engine, Queued};
use crate::model::DeviceModel;
use gmux_core::evict::Forecast;
use gmux_core::memory::Tier;
use gmux_core::planner::{Move, Moved, Request};
use gmux_core::{ChunkId, TenantId, CHUNK_BYTES};

impl Engine<'_> {
    /// Runs one command from `start`: checks the residency invariant, records accesses.
    pub(super) fn execute(&mut self, ti: usize, q: Queued, start: f64) -> f64 {
        for &(c, write) in &q.exact {
            if !self.mem.is_resident(c) {
                self.out.violations += 1;
            }
            self.tick += 1;
            self.planner.access(&mut self.mem, c, self.tick, write);
        }
        if self.spec.record_accesses {
            self.out.accesses.push(q.exact.iter().map(|(c, _)| *c));
        }
        let end = start + q.cmd.duration_ns;
        self.out.compute_ns += q.cmd.duration_ns;
        let run = &mut self.runs[ti];
        let stat = &mut self.tenants.get_mut(TenantId(ti as u32)).stat;
        stat.submitted += 1;
        stat.finished += 1;
        if let Some(a) = q.cmd.arrival_ns {
            run.open_request = Some(a);
            run.out.latency_critical = true;
        }
        if q.cmd.task_end && end <= self.spec.duration_ns {
            run.out.tasks += 1;
            if let Some(a) = run.open_request.take() {
                run.out.latencies_ns.push(end - a);
            }
        }
        end
    }

    /// Plans and starts the migration that makes `need` resident, as far as the budgets
    /// allow; returns how much of `need` is covered (gmux systems).
    pub(super) fn migrate(&mut self, tenant: TenantId, need: &[ChunkId], required: usize, forecast: &Forecast, at: f64) -> Result<usize, String> {
        let req = Request { tenant, need, required, pinned: &|_| false };
        let plan = self.planner.plan(&self.mem, &self.tenants, &req, forecast);
        self.dev.begin(at);
        let ready = self.mover.issue(&plan, &self.mem, &mut self.dev).map_err(|e| format!("mover bug: {e}"))?;
        self.dev.run_batch();
        let moved = self.planner.apply(&mut self.mem, &plan).map_err(|e| format!("planner bug: {e}"))?;
        self.account(tenant, moved);
        self.grow_ready();
        for (c, ev) in ready {
            self.ready_at[c.0 as usize] = self.dev.time(ev);
        }
        Ok(plan.covered)
    }

    /// Demand paging: faults the command's chunks in, evicting LRU; returns the stall, ns.
    pub(super) fn fault_in(&mut self, tenant: TenantId, chunks: &[ChunkId]) -> Result<f64, String> {
        let plan =
            self.planner.plan(&self.mem, &self.tenants, &Request { tenant, need: chunks, required: chunks.len(), pinned: &|_| false }, &Forecast::default());
        if plan.covered < chunks.len() {
            return Err(self.stuck(tenant, chunks));
        }
        let m = self.spec.model;
        let faults_per_chunk = CHUNK_BYTES.div_ceil(m.um_fault_bytes);
        let mut stall = 0.0;
        for mv in &plan.moves {
            stall += match *mv {
                Move::Create(_) => (m.create_us + m.map_us + m.set_access_us) * 1e3,
                Move::Populate { from, .. } => {
                    self.out.faults += faults_per_chunk;
                    let disk = if from == Tier::Disk { DeviceModel::ns(CHUNK_BYTES, m.disk_read_gbps) } else { 0.0 };
                    disk + faults_per_chunk as f64 * m.um_fault_us * 1e3 + DeviceModel::ns(CHUNK_BYTES, m.h2d_gbps)
                }
                Move::Evict { chunk, to } => {
                    let write = to == Tier::Disk && !self.mem.chunk(chunk).disk_copy;
                    DeviceModel::ns(CHUNK_BYTES, m.d2h_gbps) + if write { DeviceModel::ns(CHUNK_BYTES, m.disk_write_gbps) } else { 0.0 }
                }
                Move::MapHost(_) | Move::UnmapHost(_) => unreachable!("only a plan for a command over the limit maps on the host"),
                Move::Demote(c) => {
                    if self.mem.chunk(c).disk_copy {
                        0.0
                    } else {
                        DeviceModel::ns(CHUNK_BYTES, m.disk_write_gbps)
                    }
                }
            };
        }
        let moved = self.planner.apply(&mut self.mem, &plan).map_err(|e| format!("planner bug: {e}"))?;
        self.account(tenant, moved);
        self.grow_ready();
        Ok(stall)
    }

    pub(super) fn stuck(&self, tenant: TenantId, need: &[ChunkId]) -> String {
        let t = self.tenants.get(tenant);
        format!(
            "tenant {}: one command needs {} MiB but its gmem.limit.high and the GPU budget leave no room; raise gmem.limit.high or the GPU budget",
            t.name,
            (need.iter().collect::<std::collections::HashSet<_>>().len() as u64 * CHUNK_BYTES) >> 20
        )
    }

    /// Adds what an applied plan moved to the run's and the tenant's counters.
    fn account(&mut self, tenant: TenantId, moved: Moved) {
        let (h2d, d2h) = (moved.populated * CHUNK_BYTES, moved.evicted * CHUNK_BYTES);
        self.out.bytes_h2d += h2d;
        self.out.bytes_d2h += d2h;
        self.out.bytes_disk_read += moved.disk_reads * CHUNK_BYTES;
        self.out.bytes_disk_write += moved.disk_writes * CHUNK_BYTES;
        let stat = &mut self.tenants.get_mut(tenant).stat;
        stat.bytes_h2d += h2d;
        stat.bytes_d2h += d2h;
    }

    fn grow_ready(&mut self) {
        if self.ready_at.len() < self.mem.id_bound() {
            self.ready_at.resize(self.mem.id_bound(), 0.0);
        }
    }
}
