//! The generators behind the workloads: fixed cycles, requests, LLM decode and Zipf.

use super::{whole, Access, AllocSpec, Arrivals, Command, Source};
use crate::model::DeviceModel;
use gmux_core::CHUNK_BYTES;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Zipf};
use std::collections::VecDeque;

/// Repeats a fixed command list forever.
pub(super) struct Cycle {
    allocs: Vec<AllocSpec>,
    cmds: Vec<Command>,
    at: usize,
}

impl Cycle {
    pub(super) fn new(allocs: Vec<AllocSpec>, cmds: Vec<Command>) -> Self {
        Cycle { allocs, cmds, at: 0 }
    }
}

impl Source for Cycle {
    fn allocs(&self) -> Vec<AllocSpec> {
        self.allocs.clone()
    }
    fn next(&mut self) -> Option<Command> {
        let c = self.cmds[self.at].clone();
        self.at = (self.at + 1) % self.cmds.len();
        Some(c)
    }
}

/// A cycle whose tasks are requests with arrival times.
pub(super) struct Requests {
    pub(super) inner: Cycle,
    pub(super) arrivals: Option<Arrivals>,
    pub(super) rng: ChaCha8Rng,
    pub(super) next_arrival: f64,
    pub(super) at_start: bool,
}

impl Source for Requests {
    fn allocs(&self) -> Vec<AllocSpec> {
        self.inner.allocs()
    }
    fn next(&mut self) -> Option<Command> {
        let mut c = self.inner.next()?;
        if let (Some(a), true) = (self.arrivals, self.at_start) {
            self.next_arrival += a.gap(&mut self.rng);
            c.arrival_ns = Some(self.next_arrival);
        }
        self.at_start = c.task_end;
        Some(c)
    }
}

/// LLM decode steps over growing KV caches.
pub(super) struct Llm {
    pub(super) layers: usize,
    pub(super) w: u64,
    pub(super) kv: u64,
    pub(super) inc: u64,
    pub(super) tokens: u32,
    pub(super) step: u32,
    pub(super) model: DeviceModel,
    pub(super) pending: VecDeque<Command>,
}

impl Source for Llm {
    fn allocs(&self) -> Vec<AllocSpec> {
        let mut a = vec![AllocSpec { bytes: self.w, on_disk: false }; self.layers];
        a.extend(vec![AllocSpec { bytes: self.kv, on_disk: false }; self.layers]);
        a
    }
    fn next(&mut self) -> Option<Command> {
        if self.pending.is_empty() {
            let used = self.inc * self.step as u64;
            for l in 0..self.layers {
                let mut ws = vec![whole(l, self.w, false)];
                if used > 0 {
                    ws.push(Access { alloc: self.layers + l, offset: 0, len: used, write: false });
                }
                ws.push(Access { alloc: self.layers + l, offset: used, len: self.inc, write: true });
                self.pending.push_back(Command {
                    duration_ns: DeviceModel::ns(self.w + used + self.inc, self.model.hbm_gbps),
                    ws,
                    task_end: l + 1 == self.layers,
                    arrival_ns: None,
                });
            }
            self.step = (self.step + 1) % self.tokens;
        }
        self.pending.pop_front()
    }
}

/// Random chunk accesses with Zipf popularity.
pub(super) struct ZipfSource {
    pub(super) bytes: u64,
    pub(super) touches: u32,
    pub(super) dist: Zipf<f64>,
    pub(super) rng: ChaCha8Rng,
    pub(super) kernel_ns: f64,
}

impl Source for ZipfSource {
    fn allocs(&self) -> Vec<AllocSpec> {
        vec![AllocSpec { bytes: self.bytes, on_disk: false }]
    }
    fn next(&mut self) -> Option<Command> {
        let ws = (0..self.touches)
            .map(|_| {
                let rank = self.dist.sample(&mut self.rng) as u64 - 1;
                Access { alloc: 0, offset: rank * CHUNK_BYTES, len: CHUNK_BYTES, write: self.rng.gen_bool(0.25) }
            })
            .collect();
        Some(Command { duration_ns: self.kernel_ns, ws, task_end: true, arrival_ns: None })
    }
}
