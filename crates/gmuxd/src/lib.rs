//! gmuxd (`gmux daemon`): one per GPU. Tenants' shims register over a unix socket; the
//! daemon serves them and control clients (`gmux ps/get/set`, [`ctl`]) over the socket,
//! watches their processes and keeps its journal; the decisions (whose turn it is, how
//! much GPU memory each process may hold) are `gmux_core::arbiter`'s. The `gmux` CLI runs
//! it.

mod channels;
mod conn;
pub mod ctl;
#[cfg(test)]
mod fuzz_props;
pub mod fuzzing;
mod handover;
pub mod journal;
mod log;
pub mod metrics;
mod outbox;
pub mod policy;
mod procfs;
mod rundir;
pub mod server;
mod serves;
mod sockets;
pub mod status;
mod stream;
mod watch;

use gmux_core::arbiter::Switch;
use gmux_core::sched::Policy;
use gmux_core::size::parse_size;
use serves::{each_gpu, serves, Serves};
use std::path::PathBuf;

pub use sockets::{daemon_sockets, ensure_run_dir, gpu_socket, pinned, run_dir, socket_path};

/// Why a gmux command (the daemon, a control request, any subcommand of the CLI) failed,
/// by whose fault; it decides the exit status.
#[derive(Debug, PartialEq)]
pub enum Failure {
    /// Bad arguments or input: the caller's to fix (exit status 2).
    Usage(String),
    /// The work itself failed: the daemon is not there, a file is not ours, ... (exit
    /// status 1).
    Runtime(String),
}

impl Failure {
    /// The process's exit status for it.
    pub fn status(&self) -> u8 {
        match self {
            Failure::Usage(_) => 2,
            Failure::Runtime(_) => 1,
        }
    }

    /// The one-line message: the cause and the fix.
    pub fn message(&self) -> &str {
        match self {
            Failure::Usage(m) | Failure::Runtime(m) => m,
        }
    }
}

/// Arguments of `gmux daemon`.
#[derive(Debug, clap::Args)]
pub struct DaemonArgs {
    /// GPU-memory budget shared by all tenants, e.g. 16G (below the card's size to
    /// emulate a smaller GPU; default: each process's free device memory).
    #[arg(long, value_name = "SIZE")]
    pub hbm: Option<String>,
    /// Host-tier budget for evicted chunks, e.g. 64G: `gmux ps` and `gmux top` show it
    /// beside what the tenants have swapped out (it is not enforced).
    #[arg(long, value_name = "SIZE")]
    pub host: Option<String>,
    /// Scheduling policy: rr (round robin), priority (strict), share (weighted).
    #[arg(long, default_value = "rr", value_parser = Policy::parse)]
    pub policy: Policy,
    /// How a time-sliced switch moves memory: msched (proactive, OPT across tenants)
    /// or whole (the whole-tenant swap baseline).
    #[arg(long, default_value = "msched", value_parser = Switch::parse)]
    pub switch: Switch,
    /// `compute.timeslice` of new tenants, e.g. 50ms.
    #[arg(long, default_value = "20ms", value_name = "DURATION")]
    pub timeslice: String,
    /// Longest a slice is stretched to while switching to its tenant (the time until its
    /// memory has arrived) costs more than a fifth of it, e.g. 500ms; at or below
    /// --timeslice, slices are never stretched.
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    pub max_timeslice: String,
    /// The GPU to serve: its index, its UUID (or the start of one), or `all` for one
    /// daemon process per GPU (the default, unless --socket or GMUX_SOCKET names one
    /// daemon's socket: that daemon serves the GPU of the first process to register).
    /// --hbm is each GPU's budget.
    #[arg(long, value_name = "UUID|INDEX|all")]
    pub gpu: Option<String>,
    /// Socket path (default: $GMUX_SOCKET, else the GPU's UUID in the run directory,
    /// e.g. /run/gmux/GPU-….sock as root; $GMUX_RUN_DIR or $XDG_RUNTIME_DIR/gmux
    /// otherwise).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Highest `--priority` a tenant of a user other than the daemon's owner or root may
    /// ask for.
    #[arg(long, default_value_t = 0, value_name = "N", allow_negative_numbers = true)]
    pub max_priority: i32,
    /// Let the members of this group use the daemon too (each sees and runs only their own
    /// tenants): the socket is made mode 0660 for the group, and its directory, if the
    /// daemon makes it, 0710.
    #[arg(long, value_name = "NAME")]
    pub group: Option<String>,
    /// Log every switch, slice start and slot end (with the commands the slot ran and how
    /// long the tenant's agent held its launches to map and fill memory).
    #[arg(long)]
    pub verbose: bool,
    /// Time-slice even when every tenant's memory fits the budget (by default they then
    /// run at once): the in-GPU-memory time-sliced baseline of `gmux bench workloads`.
    #[arg(long)]
    pub always_slice: bool,
    /// Exit after this many seconds without tenants (0: never).
    #[arg(long, default_value_t = 0, value_name = "SECONDS")]
    pub idle_exit: u64,
    /// Take the settings above from the previous daemon on this socket (its journal,
    /// `<socket>.journal`) when it left them; `gmux run` starts daemons this way. Without
    /// it, the flags given here apply. Either way, the previous daemon's tenants, their
    /// knobs and its processes still running are taken over.
    #[arg(long)]
    pub resume: bool,
    /// Serve Prometheus metrics at http://ADDR/metrics (HOST:PORT; 127.0.0.1:9400 when
    /// given without a value, port 9400 when without one). Whoever reaches ADDR reads
    /// every tenant's name and counters.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1")]
    pub metrics: Option<String>,
    /// Let a tenant's owner load memory policies for that tenant (`gmux policy load
    /// --tenant T`): their programs run in the tenant's own processes and order its own
    /// evictions. Scheduling policies stay the owner's and root's.
    #[arg(long)]
    pub allow_tenant_policies: bool,
    /// What the dispatcher does with the jobs serving applications mark: `none` keeps
    /// them (`gmux ps --json`); `shallow` also keeps the queues of processes running long
    /// jobs shallow while a much shorter job runs elsewhere; `fifo`, `sjf`, `rr` and
    /// `srpt-deficit` choose one job at a time by that order and hold the processes whose
    /// jobs are all far longer (docs/serving.md).
    #[arg(long, value_enum, default_value_t = server::Dispatch::None)]
    pub dispatch: server::Dispatch,
    /// How far `--dispatch srpt-deficit` lets a tenant fall behind its fair share of the
    /// GPU's time, while it has a job waiting, before its job goes first. With two
    /// tenants waiting, 100ms passes a long job over for about 200 ms at a stretch: a few
    /// times a long inference request, a hundred short ones.
    #[arg(long, default_value = "100ms")]
    pub fairness: String,
    /// Start this daemon in the background unless one answers on its socket, with the
    /// settings `gmux run` starts daemons with, and return once it answers (how a
    /// process starts its GPU's daemon).
    #[arg(long, hide = true)]
    pub ensure: bool,
}

fn size(flag: &str, v: &Option<String>) -> Result<Option<u64>, Failure> {
    v.as_deref().map(|s| parse_size(s).map_err(|e| Failure::Usage(format!("--{flag} {s}: {e}")))).transpose()
}

/// Makes a panic anywhere in the daemon end it: a task that died alone (the scheduler,
/// say) would leave a daemon that answers but no longer decides. Its tenants run on and
/// register with the next daemon on the socket.
fn end_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        eprintln!(
            "gmuxd: ending on this panic (a bug: please report it); tenants run on and register with the next daemon on the socket (`gmux daemon --resume`)"
        );
        std::process::abort();
    }));
}

/// Runs the daemon until `gmux stop` (or idle exit).
pub fn daemon(args: &DaemonArgs) -> Result<(), Failure> {
    end_on_panic();
    let hbm = size("hbm", &args.hbm)?;
    if hbm.is_some_and(|h| h < gmux_core::CHUNK_BYTES) {
        return Err(Failure::Usage("--hbm is below one 2 MiB chunk; give at least 2M".into()));
    }
    let host = size("host", &args.host)?;
    let (path, gpu) = match serves(args)? {
        Serves::One { socket, gpu } if args.ensure => return ctl::ensure_daemon(&socket, gpu.as_deref()),
        Serves::One { socket, gpu } => (socket, gpu),
        Serves::Each(gpus) => return each_gpu(&gpus, args.metrics.as_deref().map(metrics::parse_addr).transpose().map_err(Failure::Usage)?),
    };
    let slice = gmux_core::knobs::parse_duration(&args.timeslice)
        .ok_or_else(|| Failure::Usage(format!("--timeslice {}: write a duration between 1us and 10s, e.g. 20ms", args.timeslice)))?;
    let max_slice = gmux_core::knobs::parse_duration(&args.max_timeslice)
        .ok_or_else(|| Failure::Usage(format!("--max-timeslice {}: write a duration between 1us and 10s, e.g. 1s", args.max_timeslice)))?;
    let fairness = gmux_core::knobs::parse_duration(&args.fairness)
        .ok_or_else(|| Failure::Usage(format!("--fairness {}: write a duration between 1us and 10s, e.g. 100ms", args.fairness)))?;
    let settings = journal::Settings {
        hbm,
        host,
        policy: args.policy,
        switch: args.switch,
        timeslice: slice,
        max_timeslice: max_slice,
        max_priority: args.max_priority,
        always_slice: args.always_slice,
        gpu,
    };
    let group = args.group.as_deref().map(rundir::group_id).transpose().map_err(Failure::Usage)?;
    let metrics = args.metrics.as_deref().map(metrics::parse_addr).transpose().map_err(Failure::Usage)?;
    server::serve(
        &path,
        settings,
        &server::Options {
            group,
            idle_exit: args.idle_exit,
            verbose: args.verbose,
            resume: args.resume,
            metrics,
            allow_tenant_policies: args.allow_tenant_policies,
            dispatch: args.dispatch,
            fairness,
        },
    )
}
