//! `gmux record`: `gmux run` that also writes the run as a gmux-sim trace
//! (docs/trace-format.md), so that a GPU run can be replayed in the simulator.

use crate::run::{self, RunArgs};
use crate::Failure;
use std::path::PathBuf;

/// Arguments of `gmux record`.
#[derive(Debug, clap::Args)]
pub struct RecordArgs {
    /// Where to write the trace (JSON Lines; replay it with a scenario's
    /// `workload = { kind = "trace", path = "FILE" }`).
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// Overwrite FILE if it exists.
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub run: RunArgs,
}

/// Creates the trace (header only) and replaces this process with the program, the
/// shim preloaded with `GMUX_RECORD` set (and `GMUX_TENANT`, the trace's tenant, from
/// `--tenant`, standalone too). Returns only on failure.
pub fn record(args: &RecordArgs) -> Result<(), Failure> {
    let mut cmd = run::command(&args.run)?;
    let path = std::path::absolute(&args.output).map_err(|e| Failure::Usage(format!("-o {}: {e}; give a valid path", args.output.display())))?;
    let mut open = std::fs::OpenOptions::new();
    open.write(true);
    if args.force {
        open.create(true).truncate(true);
    } else {
        open.create_new(true);
    }
    let mut file = open.open(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => Failure::Usage(format!("{} already exists; pass --force to overwrite it or give another -o FILE", path.display())),
        _ => Failure::Runtime(format!("cannot create the trace {}: {e}; give a writable path with -o", path.display())),
    })?;
    gmux_sim::trace::write(&mut file, &[])
        .map_err(|e| Failure::Runtime(format!("cannot write the trace {}: {e}; give a writable path with -o", path.display())))?;
    drop(file);
    cmd.env("GMUX_RECORD", &path);
    if let Some(t) = &args.run.tenant {
        cmd.env("GMUX_TENANT", t);
    }
    let failed = run::exec(cmd);
    let _ = std::fs::remove_file(&path);
    failed
}
