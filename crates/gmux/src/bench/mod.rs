//! `gmux bench`: GPU benchmarks of the daemon, run with real tenant processes (the
//! PyTorch programs in `gpu/`). Each prints a table, writes JSON, and keeps every
//! process's log under `--out`.

mod lab;
mod micro;
mod priority;

use crate::Failure;

/// `gmux bench` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// MSched §7.1: two vector-add and two matmul tenants at several levels of a budget.
    MschedMicro(micro::MicroArgs),
    /// A real-time inference tenant beside a best-effort training tenant.
    Priority(priority::PriorityArgs),
}

/// Runs a benchmark.
pub fn bench(cmd: &BenchCommand) -> Result<(), Failure> {
    match cmd {
        BenchCommand::MschedMicro(a) => micro::run(a),
        BenchCommand::Priority(a) => priority::run(a),
    }
}
