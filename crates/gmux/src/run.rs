//! `gmux run`: runs a program under libgmux.so with a device-memory limit.

use crate::Failure;
use gmux_core::size::{format_size, parse_size};
use gmux_core::CHUNK_BYTES;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// Arguments of `gmux run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Device memory the program may keep resident, e.g. 4G or 512M (default: what the
    /// device has free). Allocations beyond it are kept in host memory and moved in
    /// before the kernels that use them.
    #[arg(long, value_name = "SIZE")]
    pub mem_limit: Option<String>,
    /// Tenant to join or create (default: the program's name and pid). Under the daemon,
    /// --mem-limit becomes the tenant's gmem.limit.high.
    #[arg(long, value_name = "NAME")]
    pub tenant: Option<String>,
    /// Strict-priority class under `--policy priority` (larger runs first).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i32,
    /// Run alone under --mem-limit, without registering with gmuxd.
    #[arg(long)]
    pub standalone: bool,
    /// The GPUs the program may use, by index or UUID, e.g. 0,1 (default: those
    /// CUDA_VISIBLE_DEVICES shows). The program sees them as devices 0, 1, … in this
    /// order (CUDA_VISIBLE_DEVICES is set to their UUIDs); each process registers with
    /// the daemon of the GPU its memory is on, and --mem-limit is its limit on each.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub gpus: Option<Vec<String>>,
    /// PyTorch allocates each tensor on its own (PYTORCH_CUDA_ALLOC_CONF=
    /// backend:cudaMallocAsync, unless the program's environment sets the variable), so
    /// that a kernel's working set is its tensors rather than the caching allocator's
    /// segments. torch.compile's reduce-overhead mode (CUDA graph trees) does not run on
    /// that allocator.
    #[arg(long)]
    pub tensor_allocs: bool,
    /// The program and its arguments (after `--`).
    #[arg(required = true, num_args = 1.., trailing_var_arg = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Where libgmux.so may be, in order: `GMUX_SHIM`, next to this executable, in its
/// `deps/` (a cargo build tree), in `../lib/` (an install tree).
fn shim_candidates(exe: &Path) -> Vec<PathBuf> {
    let dir = exe.parent().unwrap_or(Path::new("."));
    let mut v = Vec::new();
    if let Some(p) = std::env::var_os("GMUX_SHIM").filter(|p| !p.is_empty()) {
        v.push(PathBuf::from(p));
        return v;
    }
    v.push(dir.join("libgmux.so"));
    v.push(dir.join("deps/libgmux.so"));
    v.push(dir.join("../lib/libgmux.so"));
    v
}

/// Finds libgmux.so or says where it looked and how to get it.
pub fn find_shim() -> Result<PathBuf, Failure> {
    let exe = std::env::current_exe().map_err(|e| Failure::Runtime(format!("cannot locate the gmux executable: {e}")))?;
    let candidates = shim_candidates(&exe);
    candidates.iter().find(|p| p.is_file()).map(|p| p.canonicalize().unwrap_or_else(|_| p.clone())).ok_or_else(|| {
        let looked: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
        Failure::Runtime(format!(
            "cannot find libgmux.so (looked in {}); build it with `cargo build --release -p gmux` or point GMUX_SHIM at it",
            looked.join(", ")
        ))
    })
}

/// Parses `--mem-limit`: at least one 2 MiB chunk.
pub fn parse_limit(text: &str) -> Result<u64, Failure> {
    let bytes = parse_size(text).map_err(|e| Failure::Usage(format!("--mem-limit {text}: {e}")))?;
    if bytes < CHUNK_BYTES {
        return Err(Failure::Usage(format!("--mem-limit {text}: {} is below one 2 MiB chunk; give at least 2M", format_size(bytes))));
    }
    Ok(bytes)
}

/// Framework settings `gmux run` gives a program that has not set them itself.
/// - JAX by default preallocates 75% of the device in one allocation, which every
///   kernel's working set would then hold whole; without preallocation it grows as needed.
/// - NCCL's peer-to-peer transport exports device memory to the other ranks' processes,
///   which gmux refuses for the memory it migrates, and its NVLink SHARP transport binds
///   device memory to multicast objects gmux does not know: NCCL then fails to start.
///   With both off, the GPUs of a host exchange data through host shared memory.
pub const FRAMEWORK_DEFAULTS: &[(&str, &str)] = &[("XLA_PYTHON_CLIENT_PREALLOCATE", "false"), ("NCCL_P2P_DISABLE", "1"), ("NCCL_NVLS_ENABLE", "0")];

/// The setting of `--tensor-allocs`: PyTorch's stream-ordered allocator, one allocation
/// per tensor.
pub const TENSOR_ALLOCS: (&str, &str) = ("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync");

/// Sets on `cmd` each of [`FRAMEWORK_DEFAULTS`], and [`TENSOR_ALLOCS`] if `tensors`, that
/// `is_set` says the user has not set.
fn framework_defaults(cmd: &mut std::process::Command, tensors: bool, is_set: impl Fn(&str) -> bool) {
    let extra = tensors.then_some(&TENSOR_ALLOCS);
    for (name, value) in FRAMEWORK_DEFAULTS.iter().chain(extra).filter(|(n, _)| !is_set(n)) {
        cmd.env(name, value);
    }
}

/// Replaces this process with the program, the shim preloaded. Returns only on failure.
pub fn run(args: &RunArgs) -> Result<(), Failure> {
    exec(command(args)?)
}

/// The program of `args` with the shim preloaded and its settings in the environment.
pub fn command(args: &RunArgs) -> Result<std::process::Command, Failure> {
    let limit = args.mem_limit.as_deref().map(parse_limit).transpose()?;
    let shim = find_shim()?;
    let mut preload = shim.display().to_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|p| !p.is_empty()) {
        preload = format!("{preload}:{}", old.to_string_lossy());
    }
    let mut cmd = std::process::Command::new(&args.command[0]);
    cmd.args(&args.command[1..]).env("LD_PRELOAD", preload);
    framework_defaults(&mut cmd, args.tensor_allocs, |n| std::env::var_os(n).is_some());
    if let Some(l) = limit {
        cmd.env("GMUX_MEM_LIMIT", l.to_string());
    }
    let chosen = args.gpus.as_deref().map(chosen_gpus).transpose()?;
    if let Some(uuids) = &chosen {
        cmd.env("CUDA_VISIBLE_DEVICES", uuids.join(","));
    }
    if !args.standalone {
        let daemon = match gmuxd::pinned() {
            Some(socket) => {
                gmuxd::ctl::ensure_daemon(&socket, None)?;
                socket
            }
            // Each process starts its GPU's daemon when it first uses the GPU.
            None => {
                let exe = std::env::current_exe().map_err(|e| Failure::Runtime(format!("cannot locate the gmux executable: {e}")))?;
                cmd.env("GMUX_EXE", exe);
                gmuxd::ensure_run_dir()?
            }
        };
        cmd.env("GMUX_DAEMON", &daemon).env("GMUX_PRIORITY", args.priority.to_string());
        if let Some(t) = &args.tenant {
            cmd.env("GMUX_TENANT", t);
        }
    }
    Ok(cmd)
}

/// The UUIDs of the GPUs `--gpus` names, each by index or UUID (or its start).
fn chosen_gpus(which: &[String]) -> Result<Vec<String>, Failure> {
    let gpus = gmux_cuda::gpus::list().map_err(|why| Failure::Runtime(format!("--gpus: cannot list the GPUs ({why})")))?;
    let mut uuids: Vec<String> = Vec::new();
    for w in which.iter().map(|w| w.trim()) {
        let g = gmux_cuda::gpus::find(&gpus, w).map_err(|e| Failure::Usage(format!("--gpus {w}: {e}")))?;
        if uuids.contains(&g.uuid) {
            return Err(Failure::Usage(format!("--gpus names GPU {} twice; name each once", g.uuid)));
        }
        uuids.push(g.uuid.clone());
    }
    Ok(uuids)
}

/// Replaces this process with `cmd`. Returns only on failure.
pub fn exec(mut cmd: std::process::Command) -> Result<(), Failure> {
    let err = cmd.exec();
    Err(Failure::Runtime(format!("cannot run `{}`: {err}", cmd.get_program().to_string_lossy())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_parsed_and_checked() {
        assert_eq!(parse_limit("4G").unwrap(), 4 << 30);
        assert_eq!(parse_limit("2M").unwrap(), 2 << 20);
        let Failure::Usage(m) = parse_limit("1M").unwrap_err() else { panic!("usage error expected") };
        assert!(m.contains("below one 2 MiB chunk"), "{m}");
        assert!(matches!(parse_limit("lots"), Err(Failure::Usage(_))));
    }

    #[test]
    fn framework_defaults_never_override_the_user() {
        let env = |tensors: bool, is_set: bool| {
            let mut cmd = std::process::Command::new("true");
            framework_defaults(&mut cmd, tensors, |_| is_set);
            let mut v = cmd.get_envs().map(|(k, v)| (k.to_string_lossy().into_owned(), v.map(|v| v.to_string_lossy().into_owned()))).collect::<Vec<_>>();
            v.sort();
            v
        };
        let xla = ("XLA_PYTHON_CLIENT_PREALLOCATE".to_string(), Some("false".to_string()));
        let nccl = [("NCCL_NVLS_ENABLE".to_string(), Some("0".to_string())), ("NCCL_P2P_DISABLE".to_string(), Some("1".to_string()))];
        let torch = ("PYTORCH_CUDA_ALLOC_CONF".to_string(), Some("backend:cudaMallocAsync".to_string()));
        assert_eq!(env(false, false), [nccl[0].clone(), nccl[1].clone(), xla.clone()]);
        assert_eq!(env(true, false), [nccl[0].clone(), nccl[1].clone(), torch, xla], "--tensor-allocs");
        assert!(env(true, true).is_empty(), "a setting of the user's stays");
    }

    #[test]
    fn shim_is_searched_next_to_the_executable_then_in_deps() {
        std::env::remove_var("GMUX_SHIM");
        let c = shim_candidates(Path::new("/opt/x/bin/gmux"));
        assert_eq!(c[0], PathBuf::from("/opt/x/bin/libgmux.so"));
        assert_eq!(c[1], PathBuf::from("/opt/x/bin/deps/libgmux.so"));
    }
}
