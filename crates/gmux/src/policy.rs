//! `gmux policy`: eBPF policy programs. `gmux policy check FILE.o` loads an object file
//! as gmux would (its programs verified for their hooks, its maps created) and says what
//! it holds, or the instruction and reason of a refusal; `load`, `list`, `unload` and
//! `map` manage the daemon's policies.

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
    /// Load an object file into the daemon: its scheduling programs take effect at the
    /// daemon's next decision, its memory programs in the tenants' processes at their
    /// next plan.
    Load {
        /// The object file.
        file: PathBuf,
        /// What `gmux policy list` calls it (default: the file's name).
        #[arg(long)]
        name: Option<String>,
        /// Attach only the program of this hook (default: all of them).
        #[arg(long, value_name = "HOOK")]
        hook: Option<String>,
        /// Run its memory programs in this tenant's processes only.
        #[arg(long, value_name = "TENANT", conflicts_with = "all")]
        tenant: Option<String>,
        /// Run its memory programs in every tenant's processes (the default).
        #[arg(long)]
        all: bool,
    },
    /// List the daemon's policies: id, name, who loaded them and when, tenant, hooks,
    /// maps.
    List {
        /// Print a JSON array.
        #[arg(long)]
        json: bool,
    },
    /// Unload a policy: its hooks are gmux's own again from the next decision.
    Unload {
        /// Its id (`gmux policy list`).
        id: u32,
    },
    /// Read or write a map of a loaded policy: dump, update KEY VALUE, delete KEY. Keys
    /// and values are numbers (little-endian, up to 8 bytes), 0x and hex bytes, or str:
    /// and text (zero-padded: a tenant's name as `struct gmux_name`).
    Map {
        /// The policy's id.
        id: u32,
        /// The map's name.
        map: String,
        /// dump | update KEY VALUE | delete KEY
        #[arg(num_args = 1..=3, required = true)]
        action: Vec<String>,
    },
}

/// Runs a `gmux policy` subcommand.
pub fn policy(cmd: &PolicyCommand) -> Result<(), Failure> {
    use gmuxd::ctl::{MapAction, Request};
    match cmd {
        PolicyCommand::Check { file, json } => check(file, *json),
        PolicyCommand::Load { file, name, hook, tenant, all: _ } => {
            let data = std::fs::read(file).map_err(|e| Failure::Usage(format!("cannot read {}: {e}", file.display())))?;
            if data.len() > MAX_OBJECT {
                return Err(Failure::Usage(format!(
                    "{} is {} bytes, over the {MAX_OBJECT} a policy may be: compile it without -g",
                    file.display(),
                    data.len()
                )));
            }
            let name = name.clone().unwrap_or_else(|| file.file_name().map_or("policy".into(), |n| n.to_string_lossy().into_owned()));
            crate::control(Request::PolicyLoad { name, object: gmux_core::protocol::hex(&data), hook: hook.clone(), tenant: tenant.clone() })
        }
        PolicyCommand::List { json } => crate::control(Request::PolicyList { json: *json }),
        PolicyCommand::Unload { id } => crate::control(Request::PolicyUnload { id: *id }),
        PolicyCommand::Map { id, map, action } => {
            let action = match action.as_slice() {
                [a] if a == "dump" => MapAction::Dump,
                [a, key, value] if a == "update" => MapAction::Update { key: key.clone(), value: value.clone() },
                [a, key] if a == "delete" => MapAction::Delete { key: key.clone() },
                _ => return Err(Failure::Usage("gmux policy map ID MAP dump | update KEY VALUE | delete KEY".into())),
            };
            crate::control(Request::PolicyMap { id: *id, map: map.clone(), action })
        }
    }
}

/// Largest object file `gmux policy load` sends (the daemon reads a request of at most
/// 64 KiB, the object in hex).
const MAX_OBJECT: usize = 30 << 10;

fn check(file: &PathBuf, json: bool) -> Result<(), Failure> {
    let name = file.display();
    let data = std::fs::read(file).map_err(|e| Failure::Usage(format!("cannot read {name}: {e}")))?;
    let obj = gmux_bpf::elf::parse(&data).map_err(|e| Failure::Usage(format!("{name}: {e}")))?;
    Policy::from_object(&obj).map_err(|e| Failure::Usage(format!("{name}: {e}")))?;
    let kind = |k: MapKind| k.name();
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
