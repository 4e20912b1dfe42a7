//! Workloads as a scenario writes them, and how each becomes a command stream.

use super::sources::{Cycle, Llm, Requests, ZipfSource};
use super::{whole, Access, AllocSpec, Command, Source};
use crate::model::DeviceModel;
use crate::trace;
use gmux_core::{size::parse_size, CHUNK_BYTES};
use rand::SeedableRng;
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
    /// With `steady`, the program's setup (its commands up to its first task end) is
    /// skipped, as a benchmark's measured window skips it.
    Trace {
        path: String,
        tenant: Option<String>,
        #[serde(default)]
        repeat: bool,
        #[serde(default)]
        steady: bool,
    },
}

fn scaled(s: Size, scale: f64) -> u64 {
    let bytes = (s.0 as f64 * scale) as u64;
    (bytes / CHUNK_BYTES).max(1) * CHUNK_BYTES
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
            WorkloadSpec::Trace { path, tenant, repeat, steady } => {
                let t = trace::load_tenant(std::path::Path::new(path), tenant.as_deref())?;
                let part = if *steady { trace::Part::Steady } else { trace::Part::Whole };
                Box::new(trace::Replay::new(t, scale, *repeat, part))
            }
        })
    }
}
