//! gmux: share one GPU among many CUDA processes. Command-line entry point.

mod plot;
mod run;
mod sim;
mod table;
#[cfg(test)]
mod testdata;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Command-line arguments.
#[derive(Debug, Parser)]
#[command(
    name = "gmux",
    version,
    about = "Share one GPU among many CUDA processes."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The subcommands (`ps`, `get`, `set`, `record`, `bench` go here).
#[derive(Debug, Subcommand)]
enum Command {
    /// Run a program under gmux with a device-memory limit: gmux run --mem-limit 4G -- CMD...
    Run(run::RunArgs),
    /// Run a scenario file on the simulator and print its results.
    Sim(sim::SimArgs),
}

/// Why a command failed; decides the exit status.
#[derive(Debug, PartialEq)]
pub enum Failure {
    /// Bad arguments or input (exit status 2).
    Usage(String),
    /// The work itself failed (exit status 1).
    Runtime(String),
}

impl Failure {
    fn status(&self) -> u8 {
        match self {
            Failure::Usage(_) => 2,
            Failure::Runtime(_) => 1,
        }
    }

    fn message(&self) -> &str {
        match self {
            Failure::Usage(m) | Failure::Runtime(m) => m,
        }
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            let text = e.render().to_string();
            eprint!("gmux: {}", text.strip_prefix("error: ").unwrap_or(&text));
            return ExitCode::from(2);
        }
        Err(e) => e.exit(),
    };
    let result = match cli.command {
        Command::Run(args) => run::run(&args),
        Command::Sim(args) => sim::sim(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("gmux: {}", failure.message());
            ExitCode::from(failure.status())
        }
    }
}
