//! gmux: share one GPU among many CUDA processes. Command-line entry point.

mod bench;
mod daemons;
mod events;
mod plot;
mod policy;
mod record;
mod run;
mod sim;
mod table;
#[cfg(test)]
mod testdata;
mod top;

use clap::{CommandFactory, Parser, Subcommand};
use std::process::ExitCode;

/// The version and the build it names (`gmux --version`).
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("GMUX_BUILD"), ")");

/// Command-line arguments.
#[derive(Debug, Parser)]
#[command(name = "gmux", version = VERSION, about = "Share one GPU among many CUDA processes.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The subcommands (`ps`, `get`, `set`, `record`, `bench` go here).
#[derive(Debug, Subcommand)]
enum Command {
    /// Run a program under gmux with a device-memory limit: gmux run --mem-limit 4G -- CMD...
    Run(run::RunArgs),
    /// Run a program like `gmux run` and write its trace for the simulator: gmux record -o run.jsonl -- CMD...
    Record(record::RecordArgs),
    /// Run a scenario file on the simulator and print its results.
    Sim(sim::SimArgs),
    /// Run gmuxd, the per-GPU daemon that schedules tenants and divides GPU memory.
    Daemon(gmuxd::DaemonArgs),
    /// List the tenants of every GPU's daemon.
    Ps {
        /// Print the daemon's status as one JSON object (schema: docs/observability.md);
        /// with the daemons of several GPUs, a JSON array of them.
        #[arg(long)]
        json: bool,
    },
    /// Print the daemon's events as they happen: joins, leaves, refusals, switches, slot
    /// ends and knob changes.
    Events {
        #[command(flatten)]
        args: events::EventsArgs,
        #[command(flatten)]
        gpu: daemons::GpuArg,
    },
    /// Tell each time a tenant's memory pressure rises above a threshold, or its
    /// gmem.limit.high falls below what it holds: gmux watch TENANT --pressure-above 20
    Watch {
        #[command(flatten)]
        args: events::WatchArgs,
        #[command(flatten)]
        gpu: daemons::GpuArg,
    },
    /// Watch the daemon and its tenants live (q quits; one plain line per refresh when
    /// not on a terminal).
    Top {
        #[command(flatten)]
        args: top::TopArgs,
        #[command(flatten)]
        gpu: daemons::GpuArg,
    },
    /// Read a tenant's knobs (all, or one by its Ghost name); a tenant is per GPU.
    Get {
        tenant: String,
        knob: Option<String>,
        /// Print a JSON object of knob names and values (with several GPUs' daemons, one
        /// such object per GPU, by UUID).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        gpu: daemons::GpuArg,
    },
    /// Set a tenant's knob: gmux set TENANT gmem.limit.high 8G (on each GPU whose
    /// daemon knows the tenant, unless --gpu names one)
    Set {
        tenant: String,
        knob: String,
        value: String,
        #[command(flatten)]
        gpu: daemons::GpuArg,
    },
    /// Stop the daemon (every GPU's, unless GMUX_SOCKET names one).
    Stop,
    /// Print the completions of a shell (bash, zsh, fish, elvish, powershell), e.g.
    /// gmux completions bash > /usr/share/bash-completion/completions/gmux
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page of gmux (roff): gmux man > gmux.1
    Man,
    /// GPU benchmarks of gmuxd with real tenant processes.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// eBPF policy programs: gmux policy check|load|list|unload|map
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
}

/// Why a command failed; decides the exit status (one type for the CLI and the daemon).
pub use gmuxd::Failure;

/// Sends a control request to the one daemon and prints its answer.
pub(crate) fn control(req: gmuxd::ctl::Request) -> Result<(), Failure> {
    daemons::control(req, &daemons::GpuArg { gpu: None })
}

/// Whether `c` is a command whose output a reader may stop reading early (`| head`): it
/// then ends quietly on SIGPIPE, as other command-line tools do, where Rust's default would
/// panic at the next write. Not the daemon, nor the commands that run a program or
/// daemons: their writes to a closed socket are errors they report.
fn prints_for_a_reader(c: &Command) -> bool {
    matches!(
        c,
        Command::Sim(_)
            | Command::Ps { .. }
            | Command::Events { .. }
            | Command::Watch { .. }
            | Command::Get { .. }
            | Command::Policy(_)
            | Command::Completions { .. }
            | Command::Man
    )
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
    if prints_for_a_reader(&cli.command) {
        // SAFETY: setting a signal's disposition to the default, before any other thread
        // exists; no handler runs.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    let result = match cli.command {
        Command::Run(args) => run::run(&args),
        Command::Record(args) => record::record(&args),
        Command::Sim(args) => sim::sim(&args),
        Command::Daemon(args) => gmuxd::daemon(&args),
        Command::Ps { json } => daemons::each(gmuxd::ctl::Request::Ps { json }, json),
        Command::Events { args, gpu } => daemons::one(&gpu).and_then(|s| events::events(&args, &s)),
        Command::Watch { args, gpu } => daemons::one(&gpu).and_then(|s| events::watch(&args, &s)),
        Command::Top { args, gpu } => daemons::one(&gpu).and_then(|s| top::top(&args, &s)),
        Command::Get { tenant, knob, json, gpu } => daemons::of_tenant(gmuxd::ctl::Request::Get { tenant: tenant.clone(), knob, json }, &tenant, &gpu, json),
        Command::Set { tenant, knob, value, gpu } => daemons::of_tenant(gmuxd::ctl::Request::Set { tenant: tenant.clone(), knob, value }, &tenant, &gpu, false),
        Command::Stop => daemons::each(gmuxd::ctl::Request::Stop, false),
        Command::Bench(cmd) => bench::bench(&cmd),
        Command::Policy(cmd) => policy::policy(&cmd),
        Command::Completions { shell } => {
            let mut text = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "gmux", &mut text);
            match std::io::Write::write_all(&mut std::io::stdout(), &text) {
                // A reader that stops early (`| head`) is no failure.
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Failure::Runtime(format!("cannot write the completions: {e}"))),
                _ => Ok(()),
            }
        }
        Command::Man => match clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout()) {
            // A reader that stops early (`| head`) is no failure.
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Failure::Runtime(format!("cannot write the man page: {e}"))),
            _ => Ok(()),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("gmux: {}", failure.message());
            ExitCode::from(failure.status())
        }
    }
}
