//! Workloads: generators of command streams with their working sets.
//!
//! Sizes in a scenario are those at 100% subscription; a subscription level scales
//! every size of every tenant by the same factor.

use crate::model::DeviceModel;
use crate::trace;
use gmux_core::{size::parse_size, CHUNK_BYTES};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp, LogNormal, Zipf};
use serde::{Deserialize, Deserializer};
use std::collections::VecDeque;

/// A size in a scenario: `"16G"`, `"512M"` or a number of bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Size(pub u64);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => Ok(Size(n)),
            Raw::S(s) => parse_size(&s).map(Size).map_err(serde::de::Error::custom),
        }
    }
}

/// How requests arrive; absent means back to back.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(tag = "process", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Arrivals {
    /// Exponential inter-arrival times at `rate` per second.
    Poisson { rate: f64 },
    /// Lognormal inter-arrival times with mean `1/rate` seconds and shape `sigma`.
    Lognormal { rate: f64, sigma: f64 },
}

impl Arrivals {
    /// Next inter-arrival gap in ns.
    pub fn gap(&self, rng: &mut ChaCha8Rng) -> f64 {
        match *self {
            Arrivals::Poisson { rate } => Exp::new(rate).expect("validated rate").sample(rng) * 1e9,
            Arrivals::Lognormal { rate, sigma } => {
                let mu = (1.0 / rate).ln() - sigma * sigma / 2.0;
                LogNormal::new(mu, sigma).expect("validated sigma").sample(rng) * 1e9
            }
        }
    }

    fn validate(&self) -> Result<(), String> {
        let (rate, sigma) = match *self {
            Arrivals::Poisson { rate } => (rate, 0.0),
            Arrivals::Lognormal { rate, sigma } => (rate, sigma),
        };
        if !(rate.is_finite() && rate > 0.0 && sigma.is_finite() && sigma >= 0.0) {
            return Err(format!("arrivals: rate {rate} and sigma {sigma} must be positive"));
        }
        Ok(())
    }
}

/// A workload as written in a scenario (`kind = "..."`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum WorkloadSpec {
    /// Streaming vector add `c = a + b` over three equal vectors: memory-bound.
    Vecadd { footprint: Size },
    /// `n`×`n` FP32 matrix products over a footprint of matrices: compute-bound.
    Matmul { footprint: Size, n: u64 },
    /// LLM decode: every step reads all weights and the KV cache, which grows per token.
    Llm { weights: Size, layers: u32, kv_max: Size, kv_per_token: Size, tokens: u32 },
    /// DNN layer sequence; `train` adds a backward pass that writes the weights.
    Dnn {
        weights: Size,
        layers: u32,
        activations: Size,
        layer_us: f64,
        #[serde(default)]
        train: bool,
        #[serde(default)]
        arrivals: Option<Arrivals>,
    },
    /// Kernels touching `touches` chunks drawn from a Zipf distribution over the footprint.
    Zipf { footprint: Size, touches: u32, exponent: f64, kernel_us: f64 },
    /// Cyclic scan of a data set that starts on disk, `window` bytes per kernel.
    Scan { dataset: Size, window: Size, kernel_us: f64 },
    /// Replay of a recorded trace (docs/trace-format.md); `tenant` picks one tenant of it.
    Trace {
        path: String,
        tenant: Option<String>,
        #[serde(default)]
        repeat: bool,
    },
}

/// An allocation a workload makes before its first command.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AllocSpec {
    /// Bytes.
    pub bytes: u64,
    /// Contents start in the disk tier (a data set read from SSD).
    pub on_disk: bool,
}

/// A byte range a command touches, inside one of the workload's allocations.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Access {
    /// Index into the workload's allocations.
    pub alloc: usize,
    /// First byte.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// Written (invalidates a clean disk copy).
    pub write: bool,
}

/// One command of a tenant.
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    /// Time on the GPU when its data is resident, ns.
    pub duration_ns: f64,
    /// What it touches.
    pub ws: Vec<Access>,
    /// Last command of a task or request.
    pub task_end: bool,
    /// Arrival of the request this command starts, ns; it may not run earlier.
    pub arrival_ns: Option<f64>,
}

/// A stream of commands.
pub trait Source {
    /// Allocations made up front.
    fn allocs(&self) -> Vec<AllocSpec>;
    /// Next command; `None` when the workload is finished.
    fn next(&mut self) -> Option<Command>;
}

fn scaled(s: Size, scale: f64) -> u64 {
    let bytes = (s.0 as f64 * scale) as u64;
    (bytes / CHUNK_BYTES).max(1) * CHUNK_BYTES
}

fn whole(alloc: usize, bytes: u64, write: bool) -> Access {
    Access { alloc, offset: 0, len: bytes, write }
}

impl WorkloadSpec {
    /// Builds the generator at a size scale; `seed` fixes its randomness.
    pub fn build(&self, scale: f64, model: &DeviceModel, seed: u64) -> Result<Box<dyn Source>, String> {
        let rng = ChaCha8Rng::seed_from_u64(seed);
        Ok(match self {
            WorkloadSpec::Vecadd { footprint } => {
                let v = scaled(Size(footprint.0 / 3), scale);
                let dur = DeviceModel::ns(3 * v, model.hbm_gbps);
                let cmd = Command { duration_ns: dur, ws: vec![whole(0, v, false), whole(1, v, false), whole(2, v, true)], task_end: true, arrival_ns: None };
                Box::new(Cycle::new(vec![AllocSpec { bytes: v, on_disk: false }; 3], vec![cmd]))
            }
            WorkloadSpec::Matmul { footprint, n } => {
                let m = (4 * n * n).div_ceil(CHUNK_BYTES) * CHUNK_BYTES;
                let count = (scaled(*footprint, scale) / m).max(3) as usize;
                let dur = 2.0 * (*n as f64).powi(3) / (model.fp32_tflops * 1e3);
                let kernels = count / 3;
                let cmds = (0..kernels)
                    .map(|k| Command {
                        duration_ns: dur,
                        ws: vec![whole(3 * k, m, false), whole(3 * k + 1, m, false), whole(3 * k + 2, m, true)],
                        task_end: k + 1 == kernels,
                        arrival_ns: None,
                    })
                    .collect();
                Box::new(Cycle::new(vec![AllocSpec { bytes: m, on_disk: false }; count], cmds))
            }
            WorkloadSpec::Llm { weights, layers, kv_max, kv_per_token, tokens } => {
                if *layers == 0 || *tokens == 0 {
                    return Err("llm: layers and tokens must be at least 1".into());
                }
                let l = *layers as u64;
                let w = scaled(Size(weights.0 / l), scale);
                let kv = scaled(Size(kv_max.0 / l), scale);
                let inc = ((kv_per_token.0 as f64 * scale) as u64 / l).max(1);
                if inc * *tokens as u64 > kv {
                    return Err(format!("llm: {tokens} tokens of kv_per_token overflow kv_max; raise kv_max or lower tokens"));
                }
                Box::new(Llm { layers: *layers as usize, w, kv, inc, tokens: *tokens, step: 0, model: model.clone(), pending: VecDeque::new() })
            }
            WorkloadSpec::Dnn { weights, layers, activations, layer_us, train, arrivals } => {
                if *layers == 0 {
                    return Err("dnn: layers must be at least 1".into());
                }
                if let Some(a) = arrivals {
                    a.validate()?;
                }
                let l = *layers as usize;
                let w = scaled(Size(weights.0 / l as u64), scale);
                let act = scaled(*activations, scale);
                let mut allocs = vec![AllocSpec { bytes: w, on_disk: false }; l];
                allocs.push(AllocSpec { bytes: act, on_disk: false });
                let half = act / 2;
                let layer = |i: usize, step: usize, write_w: bool| Command {
                    duration_ns: layer_us * 1e3,
                    ws: vec![
                        whole(i, w, write_w),
                        Access { alloc: l, offset: (step % 2) as u64 * half, len: half.max(1), write: false },
                        Access { alloc: l, offset: ((step + 1) % 2) as u64 * half, len: half.max(1), write: true },
                    ],
                    task_end: false,
                    arrival_ns: None,
                };
                let mut cmds: Vec<Command> = (0..l).map(|i| layer(i, i, false)).collect();
                if *train {
                    cmds.extend((0..l).rev().map(|i| layer(i, l + (l - 1 - i), true)));
                }
                cmds.last_mut().expect("layers >= 1").task_end = true;
                Box::new(Requests { inner: Cycle::new(allocs, cmds), arrivals: *arrivals, rng, next_arrival: 0.0, at_start: true })
            }
            WorkloadSpec::Zipf { footprint, touches, exponent, kernel_us } => {
                let bytes = scaled(*footprint, scale);
                let chunks = bytes / CHUNK_BYTES;
                let dist = Zipf::new(chunks, *exponent).map_err(|e| format!("zipf: {e}"))?;
                Box::new(ZipfSource { bytes, touches: *touches, dist, rng, kernel_ns: kernel_us * 1e3 })
            }
            WorkloadSpec::Scan { dataset, window, kernel_us } => {
                let bytes = scaled(*dataset, scale);
                let win = scaled(*window, scale).min(bytes);
                let windows = bytes / win;
                let cmds = (0..windows)
                    .map(|i| Command {
                        duration_ns: kernel_us * 1e3,
                        ws: vec![Access { alloc: 0, offset: i * win, len: win, write: false }],
                        task_end: true,
                        arrival_ns: None,
                    })
                    .collect();
                Box::new(Cycle::new(vec![AllocSpec { bytes, on_disk: true }], cmds))
            }
            WorkloadSpec::Trace { path, tenant, repeat } => {
                let t = trace::load_tenant(std::path::Path::new(path), tenant.as_deref())?;
                Box::new(trace::Replay::new(t, scale, *repeat))
            }
        })
    }
}

/// Repeats a fixed command list forever.
struct Cycle {
    allocs: Vec<AllocSpec>,
    cmds: Vec<Command>,
    at: usize,
}

impl Cycle {
    fn new(allocs: Vec<AllocSpec>, cmds: Vec<Command>) -> Self {
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
struct Requests {
    inner: Cycle,
    arrivals: Option<Arrivals>,
    rng: ChaCha8Rng,
    next_arrival: f64,
    at_start: bool,
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
struct Llm {
    layers: usize,
    w: u64,
    kv: u64,
    inc: u64,
    tokens: u32,
    step: u32,
    model: DeviceModel,
    pending: VecDeque<Command>,
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
struct ZipfSource {
    bytes: u64,
    touches: u32,
    dist: Zipf<f64>,
    rng: ChaCha8Rng,
    kernel_ns: f64,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> DeviceModel {
        DeviceModel::default()
    }

    #[test]
    fn vecadd_touches_everything_once_per_task() {
        let spec = WorkloadSpec::Vecadd { footprint: Size(3 << 30) };
        let mut s = spec.build(1.0, &model(), 1).unwrap();
        assert_eq!(s.allocs().iter().map(|a| a.bytes).sum::<u64>(), 3 << 30);
        let c = s.next().unwrap();
        assert!(c.task_end);
        assert!((c.duration_ns - (3u64 << 30) as f64 / 4000.0).abs() < 1.0);
        let doubled = spec.build(2.0, &model(), 1).unwrap();
        assert_eq!(doubled.allocs().iter().map(|a| a.bytes).sum::<u64>(), 6 << 30);
    }

    #[test]
    fn llm_kv_grows_then_resets() {
        let spec = WorkloadSpec::Llm { weights: Size(1 << 30), layers: 2, kv_max: Size(64 << 20), kv_per_token: Size(4 << 20), tokens: 4 };
        let mut s = spec.build(1.0, &model(), 1).unwrap();
        let kv_reads: Vec<u64> = (0..10).map(|_| s.next().unwrap()).filter(|c| c.ws.len() == 3).map(|c| c.ws[1].len).collect();
        assert_eq!(kv_reads, vec![2 << 20, 2 << 20, 4 << 20, 4 << 20, 6 << 20, 6 << 20]);
    }

    #[test]
    fn requests_carry_arrivals_on_their_first_command() {
        let spec = WorkloadSpec::Dnn {
            weights: Size(64 << 20),
            layers: 4,
            activations: Size(8 << 20),
            layer_us: 100.0,
            train: false,
            arrivals: Some(Arrivals::Poisson { rate: 100.0 }),
        };
        let mut s = spec.build(1.0, &model(), 7).unwrap();
        let cmds: Vec<_> = (0..400).map(|_| s.next().unwrap()).collect();
        let arrivals: Vec<f64> = cmds.iter().filter_map(|c| c.arrival_ns).collect();
        assert_eq!(arrivals.len(), 100);
        assert!(cmds.iter().step_by(4).all(|c| c.arrival_ns.is_some()));
        let mean_gap = arrivals.last().unwrap() / 100.0;
        assert!((mean_gap - 1e7).abs() < 2.5e6, "mean gap {mean_gap} ns for 100/s");
    }
}
