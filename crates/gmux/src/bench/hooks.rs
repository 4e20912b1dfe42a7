//! `gmux bench hooks`: what one call of each hook costs with a policy's programs
//! attached, compiled (rbpf's JIT) and interpreted. Each hook is called through the same
//! entry points gmux's planner and arbiter use, with contexts that vary from call to call;
//! `evict_prepare` ranks 64 candidates per call and counts one call per candidate.

use crate::Failure;
use gmux_bpf::hooks::PolicyHooks;
use gmux_bpf::sched::SchedPolicy;
use gmux_bpf::Policy;
use gmux_core::hooks::{short_name, Candidate, JobAsk, Joining, MemoryHooks, SchedHooks};
use gmux_core::{ChunkId, TenantId};
use std::path::PathBuf;
use std::time::Instant;

/// Options of `gmux bench hooks`.
#[derive(Debug, clap::Args)]
pub struct HooksArgs {
    /// The policy object (policies/noop.c, compiled, has a program on every memory hook).
    #[arg(long, value_name = "FILE.o")]
    pub policy: PathBuf,
    /// Calls per hook, engine and round.
    #[arg(long, default_value_t = 1_000_000)]
    pub calls: u64,
    /// Rounds; the median is reported.
    #[arg(long, default_value_t = 5)]
    pub rounds: u32,
    /// Folder for the JSON results.
    #[arg(long, default_value = "bench-out", value_name = "DIR")]
    pub out: PathBuf,
}

/// Candidates per `evict_prepare` call.
const CANDIDATES: u64 = 64;

/// Runs the benchmark: prints a table and writes `hooks.json` under `--out`.
pub fn run(a: &HooksArgs) -> Result<(), Failure> {
    let name = a.policy.display().to_string();
    let data = std::fs::read(&a.policy).map_err(|e| Failure::Usage(format!("cannot read {name}: {e}")))?;
    let load = || Policy::load(&data).map_err(|e| Failure::Usage(format!("{name}: {e}")));
    let hooks: Vec<&'static str> = load()?.hooks().collect();
    if hooks.is_empty() {
        return Err(Failure::Usage(format!("{name} has no programs")));
    }
    std::fs::create_dir_all(&a.out).map_err(|e| Failure::Runtime(format!("cannot create {}: {e}", a.out.display())))?;
    println!("{name}: {} calls per hook and engine, median of {} rounds", a.calls, a.rounds);
    println!("{:<14} {:>12} {:>16}", "hook", "JIT ns/call", "interp. ns/call");
    let mut rows = Vec::new();
    for hook in hooks {
        let mut per = [0.0f64; 2];
        for (k, jit) in [true, false].into_iter().enumerate() {
            let mut rounds: Vec<f64> = (0..a.rounds).map(|_| Ok::<_, Failure>(time(hook, load()?, jit, a.calls))).collect::<Result<_, _>>()?;
            rounds.sort_by(f64::total_cmp);
            per[k] = rounds[rounds.len() / 2];
        }
        println!("{hook:<14} {:>12.1} {:>16.1}", per[0], per[1]);
        rows.push(serde_json::json!({ "hook": hook, "jit_ns": per[0], "interpreted_ns": per[1] }));
    }
    let json = serde_json::json!({ "benchmark": "hooks", "policy": name, "calls": a.calls, "rounds": a.rounds, "rows": rows });
    let path = a.out.join("hooks.json");
    std::fs::write(&path, serde_json::to_string_pretty(&json).expect("serializable"))
        .map_err(|e| Failure::Runtime(format!("cannot write {}: {e}", path.display())))?;
    println!("results: {}", path.display());
    Ok(())
}

/// Nanoseconds per call of `hook` over `calls` calls, compiled or interpreted.
fn time(hook: &str, policy: Policy, jit: bool, calls: u64) -> f64 {
    let engine = |p: &mut Option<gmux_bpf::Program>| {
        if let Some(p) = p.as_mut().filter(|_| !jit) {
            p.interpret();
        }
    };
    if matches!(hook, "task_init" | "task_destroy" | "timeslice" | "admission") {
        let mut s: SchedPolicy = policy.into_sched();
        [&mut s.task_init, &mut s.task_destroy, &mut s.timeslice, &mut s.admission].into_iter().for_each(engine);
        let t0 = Instant::now();
        for i in 0..calls {
            let t = TenantId((i % 64) as u32);
            match hook {
                "task_init" => {
                    let j = Joining {
                        tenant: t,
                        new_tenant: i % 2 == 0,
                        uid: 1000,
                        priority: 0,
                        timeslice: 20_000_000,
                        processes: 3,
                        held: i,
                        budget: u64::MAX,
                        name: short_name("bench"),
                        name_len: 5,
                    };
                    std::hint::black_box(s.task_init(&j));
                }
                "task_destroy" => s.task_destroy(t),
                "admission" => {
                    let j = JobAsk {
                        tenant: t,
                        pid: 100,
                        job: i,
                        kind: short_name("bench"),
                        estimate: 20_000_000,
                        waited: i,
                        running: 3,
                        admitted: 2,
                        shortest: 2_000_000,
                    };
                    std::hint::black_box(s.admission(&j));
                }
                _ => {
                    std::hint::black_box(s.timeslice(t, 20_000_000 + i, Some(1000)));
                }
            }
        }
        return t0.elapsed().as_nanos() as f64 / calls as f64;
    }
    let mut h: PolicyHooks = policy.into_hooks();
    [&mut h.activate, &mut h.access, &mut h.evict_prepare, &mut h.prefetch].into_iter().for_each(engine);
    let t0 = Instant::now();
    let chunk = |i: u64| ChunkId((i % 4096) as u32);
    match hook {
        "activate" => (0..calls).for_each(|i| h.activate(chunk(i), TenantId(0))),
        "access" => (0..calls).for_each(|i| h.access(chunk(i), TenantId(0), i)),
        "prefetch" => (0..calls).for_each(|_| {
            std::hint::black_box(h.prefetch(TenantId(0)));
        }),
        _ => {
            let mut cands: Vec<Candidate> = (0..CANDIDATES)
                .map(|i| Candidate { chunk: chunk(i), tenant: TenantId(0), last_use: i, next_use: CANDIDATES - i, resident: CANDIDATES })
                .collect();
            for _ in 0..calls / CANDIDATES {
                h.evict_prepare(TenantId(0), &mut cands);
            }
        }
    }
    t0.elapsed().as_nanos() as f64 / calls as f64
}
