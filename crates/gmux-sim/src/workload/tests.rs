//! Unit tests of the workload generators.

use super::*;
use crate::model::DeviceModel;

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
