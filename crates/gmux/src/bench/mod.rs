//! `gmux bench`: benchmarks of the daemon. The GPU ones run real tenant processes (the
//! PyTorch programs in `gpu/`) and keep every process's log under `--out`; `daemon-scale`
//! `daemon-fuzz`, `forecast`, `hooks` and `channel` run on the CPU. Each prints a table and writes JSON.

mod channel;
mod cooperate;
mod forecast;
mod fuzz;
mod hooks;
mod lab;
mod launch;
mod launch_loop;
mod micro;
mod priority;
mod scale;
mod serving;
mod workloads;

use crate::Failure;

/// `gmux bench` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// MSched §7.1: two vector-add and two matmul tenants at several levels of a budget.
    MschedMicro(micro::MicroArgs),
    /// Real programs as tenants (LLM decoding, DNN training, fine-tuning) at several
    /// levels of a budget: native, in-GPU time-sliced, gmux and the whole-tenant swap.
    Workloads(workloads::WorkloadsArgs),
    /// Six inference models as tenants, requests arriving with lognormal gaps: short-job
    /// latency, long-job throughput and fairness, natively and under gmux.
    Serving(serving::ServingArgs),
    /// A real-time inference tenant beside a best-effort training tenant.
    Priority(priority::PriorityArgs),
    /// A high-priority inference tenant beside a cache tenant that gives memory back on
    /// gmux's swap events, against one that keeps it (Ghost's GhostAC in miniature).
    Cooperate(cooperate::CooperateArgs),
    /// The daemon's decisions with many tenants (CPU only).
    DaemonScale(scale::ScaleArgs),
    /// A real daemon fed random and absurd messages over its socket (CPU only).
    DaemonFuzz(fuzz::FuzzArgs),
    /// How well each process's forecast of its next slice matched what the slice used,
    /// on recorded traces (CPU only).
    Forecast(forecast::ForecastArgs),
    /// What one call of each hook costs with a policy's programs attached, compiled and
    /// interpreted (CPU only).
    Hooks(hooks::HooksArgs),
    /// The serving channel's round trip through a real daemon's dispatcher, and what an
    /// idle client and daemon cost (CPU only).
    Channel(channel::ChannelArgs),
    /// What gmux adds to a kernel launch: native against `gmux run`, one GPU.
    Launch(launch::LaunchArgs),
    /// The launch loop `gmux bench launch` runs in each child process.
    #[command(hide = true)]
    LaunchLoop(launch_loop::LoopArgs),
}

/// Runs a benchmark.
pub fn bench(cmd: &BenchCommand) -> Result<(), Failure> {
    match cmd {
        BenchCommand::MschedMicro(a) => micro::run(a),
        BenchCommand::Workloads(a) => workloads::run(a),
        BenchCommand::Priority(a) => priority::run(a),
        BenchCommand::Serving(a) => serving::run(a),
        BenchCommand::Cooperate(a) => cooperate::run(a),
        BenchCommand::DaemonScale(a) => scale::run(a),
        BenchCommand::DaemonFuzz(a) => fuzz::run(a),
        BenchCommand::Forecast(a) => forecast::run(a),
        BenchCommand::Hooks(a) => hooks::run(a),
        BenchCommand::Channel(a) => channel::run(a),
        BenchCommand::Launch(a) => launch::run(a),
        BenchCommand::LaunchLoop(a) => launch_loop::run(a),
    }
}
