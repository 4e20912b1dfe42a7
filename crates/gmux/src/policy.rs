//! `gmux policy`: eBPF policy programs. `gmux policy check FILE.o` loads an object file
//! as gmux would (its programs verified for their hooks, its maps created) and says what
//! it holds, or the instruction and reason of a refusal.

use crate::Failure;
use gmux_bpf::{MapKind, Policy};
use std::path::PathBuf;

/// `gmux policy` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum PolicyCommand {
    /// Verify an object file's programs (clang -O2 -target bpf -c) and list them and
    /// their maps; a refused program's instruction and reason otherwise.
    Check {
        /// The object file.
        file: PathBuf,
        /// Print one JSON object: programs (hook, name, instructions) and maps.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a `gmux policy` subcommand.
pub fn policy(cmd: &PolicyCommand) -> Result<(), Failure> {
    match cmd {
        PolicyCommand::Check { file, json } => check(file, *json),
    }
}

fn check(file: &PathBuf, json: bool) -> Result<(), Failure> {
    let name = file.display();
    let data = std::fs::read(file).map_err(|e| Failure::Usage(format!("cannot read {name}: {e}")))?;
    let obj = gmux_bpf::elf::parse(&data).map_err(|e| Failure::Usage(format!("{name}: {e}")))?;
    Policy::load(&data).map_err(|e| Failure::Usage(format!("{name}: {e}")))?;
    let kind = |k: MapKind| match k {
        MapKind::Array => "array",
        MapKind::Hash => "hash",
    };
    if json {
        let programs: Vec<_> = obj.programs.iter().map(|p| serde_json::json!({ "hook": p.hook, "name": p.name, "instructions": p.code.len() / 8 })).collect();
        let maps: Vec<_> = obj
            .maps
            .iter()
            .map(|(n, d)| serde_json::json!({ "name": n, "kind": kind(d.kind), "key_size": d.key_size, "value_size": d.value_size, "entries": d.entries }))
            .collect();
        println!("{}", serde_json::json!({ "file": name.to_string(), "verified": true, "programs": programs, "maps": maps }));
        return Ok(());
    }
    let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    println!("{name}: {}, {}, verified", plural(obj.programs.len(), "program"), plural(obj.maps.len(), "map"));
    for p in &obj.programs {
        println!("  {:<14} {:<20} {}", p.hook, p.name, plural(p.code.len() / 8, "instruction"));
    }
    for (n, d) in &obj.maps {
        println!("  map {n}: {}, {}-byte keys, {}-byte values, {} entries", kind(d.kind), d.key_size, d.value_size, d.entries);
    }
    Ok(())
}
