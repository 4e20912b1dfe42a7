//! Which GPU a daemon serves, and on which socket: `--gpu`, `--socket` and
//! `GMUX_SOCKET` decide; `--gpu all` on a host of several GPUs starts one daemon process
//! per GPU.

use crate::sockets::{gpu_socket, pinned, run_dir};
use crate::{DaemonArgs, Failure};
use std::path::PathBuf;

/// What `gmux daemon` serves.
pub enum Serves {
    /// One GPU (`None`: the first process's) on one socket.
    One { socket: PathBuf, gpu: Option<String> },
    /// Each of these GPUs, with a daemon process of its own.
    Each(Vec<gmux_cuda::gpus::Gpu>),
}

/// Decides what `gmux daemon` serves from `--gpu`, `--socket` and `GMUX_SOCKET`.
pub fn serves(args: &DaemonArgs) -> Result<Serves, Failure> {
    let socket = args.socket.clone().or_else(pinned);
    let which = args.gpu.as_deref();
    if let (Some("all"), Some(s)) = (which, &socket) {
        return Err(Failure::Usage(format!(
            "--gpu all starts a daemon per GPU, each on its GPU's socket in {}; drop --socket {} (and GMUX_SOCKET), or give one GPU",
            run_dir().display(),
            s.display()
        )));
    }
    // A whole UUID is taken as given (the daemons of `--gpu all` and `gmux run` start
    // so), without asking the driver.
    if let Some(uuid) = which.filter(|w| gmux_core::arbiter::is_gpu_uuid(w) && w.len() >= 40) {
        return Ok(Serves::One { socket: socket.unwrap_or_else(|| gpu_socket(uuid)), gpu: Some(uuid.to_string()) });
    }
    if let (None, Some(socket)) = (which, &socket) {
        return Ok(Serves::One { socket: socket.clone(), gpu: None });
    }
    let gpus = gmux_cuda::gpus::list()
        .map_err(|why| Failure::Runtime(format!("cannot list the GPUs ({why}); give --gpu UUID, or --socket PATH to serve the GPU of the first process")))?;
    if gpus.is_empty() {
        return Err(Failure::Runtime("the driver shows no GPU (is CUDA_VISIBLE_DEVICES empty?); give --gpu UUID".into()));
    }
    match which {
        Some(w) if w != "all" => {
            let g = gmux_cuda::gpus::find(&gpus, w).map_err(|e| Failure::Usage(format!("--gpu {w}: {e}")))?;
            Ok(Serves::One { socket: socket.unwrap_or_else(|| gpu_socket(&g.uuid)), gpu: Some(g.uuid.clone()) })
        }
        _ if gpus.len() == 1 => Ok(Serves::One { socket: gpu_socket(&gpus[0].uuid), gpu: Some(gpus[0].uuid.clone()) }),
        _ => Ok(Serves::Each(gpus)),
    }
}

/// `gmux daemon` with `--gpu all` (or no GPU named) on a host of several GPUs: this
/// command again for each GPU, in a process of its own, so that a daemon that ends
/// (a panic aborts its process) ends for its GPU alone. Returns when all have ended.
pub fn each_gpu(gpus: &[gmux_cuda::gpus::Gpu]) -> Result<(), Failure> {
    let exe = std::env::current_exe().map_err(|e| Failure::Runtime(format!("cannot locate the gmux executable: {e}")))?;
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--gpu") {
        args.drain(i..(i + 2).min(args.len()));
    }
    args.retain(|a| !a.to_string_lossy().starts_with("--gpu="));
    let mut children = Vec::new();
    for g in gpus {
        eprintln!("gmuxd: starting the daemon of GPU {} ({}, {})", g.ordinal, g.uuid, g.name);
        let child = std::process::Command::new(&exe)
            .args(&args)
            .arg(format!("--gpu={}", g.uuid))
            .spawn()
            .map_err(|e| Failure::Runtime(format!("cannot start the daemon of GPU {}: {e}", g.uuid)))?;
        children.push((g.uuid.clone(), child));
    }
    let mut failed = Vec::new();
    for (uuid, mut child) in children {
        match child.wait() {
            Ok(s) if s.success() => {}
            Ok(s) => failed.push(format!("{uuid} ({s})")),
            Err(e) => failed.push(format!("{uuid} ({e})")),
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Failure::Runtime(format!("the daemons of {} ended in failure; their messages are above", failed.join(", "))))
    }
}
