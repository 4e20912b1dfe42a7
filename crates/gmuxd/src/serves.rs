//! Which GPU a daemon serves, and on which socket: `--gpu`, `--socket` and
//! `GMUX_SOCKET` decide; `--gpu all` on a host of several GPUs starts one daemon process
//! per GPU.

use crate::sockets::{gpu_socket, pinned, run_dir};
use crate::{DaemonArgs, Failure};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

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
    if let Some(uuid) = which.and_then(gmux_cuda::gpus::canonical) {
        return Ok(Serves::One { socket: socket.unwrap_or_else(|| gpu_socket(&uuid)), gpu: Some(uuid) });
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

/// Drops `flag` from `args`, in each form: `--flag=V`, `--flag V`, and (when
/// `optional`, as `--metrics` may be) a bare `--flag`.
fn drop_flag(args: &mut Vec<std::ffi::OsString>, flag: &str, optional: bool) {
    let eq = format!("{flag}=");
    args.retain(|a| !a.to_string_lossy().starts_with(&eq));
    if let Some(i) = args.iter().position(|a| a == flag) {
        let valued = args.get(i + 1).is_some_and(|v| !optional || !v.to_string_lossy().starts_with('-'));
        args.drain(i..if valued { i + 2 } else { i + 1 });
    }
}

/// A daemon ending in failure this soon after it started is not started again.
const FAILS_AT_START: Duration = Duration::from_secs(5);

/// One GPU's daemon under `gmux daemon --gpu all`.
struct GpuDaemon {
    uuid: String,
    cmd: Command,
    child: Option<(Child, Instant)>,
}

impl GpuDaemon {
    fn start(&mut self) -> Result<(), Failure> {
        let child = self.cmd.spawn().map_err(|e| Failure::Runtime(format!("cannot start the daemon of GPU {}: {e}", self.uuid)))?;
        self.child = Some((child, Instant::now()));
        Ok(())
    }
}

/// `gmux daemon` with `--gpu all` (or no GPU named) on a host of several GPUs: this
/// command again for each GPU, in a process of its own, so that a daemon that ends
/// (a panic aborts its process) ends for its GPU alone, and is started again (its
/// tenants register with the new one); with `--metrics ADDR`, GPU i's daemon serves
/// ADDR's port + i. Returns when all have ended of themselves (`gmux stop`, idle exit).
pub fn each_gpu(gpus: &[gmux_cuda::gpus::Gpu], metrics: Option<std::net::SocketAddr>) -> Result<(), Failure> {
    let exe = std::env::current_exe().map_err(|e| Failure::Runtime(format!("cannot locate the gmux executable: {e}")))?;
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    drop_flag(&mut args, "--gpu", false);
    drop_flag(&mut args, "--metrics", true);
    let mut daemons = Vec::new();
    for (i, g) in gpus.iter().enumerate() {
        let mut cmd = Command::new(&exe);
        cmd.args(&args).arg(format!("--gpu={}", g.uuid));
        let mut serves = String::new();
        if let Some(mut at) = metrics {
            let port = u16::try_from(usize::from(at.port()) + i)
                .map_err(|_| Failure::Usage(format!("--metrics {at}: GPU {i} would serve past port 65535; pick a lower port")))?;
            at.set_port(port);
            cmd.arg(format!("--metrics={at}"));
            serves = format!(", metrics at http://{at}/metrics");
        }
        eprintln!("gmuxd: starting the daemon of GPU {} ({}, {}){serves}", g.ordinal, g.uuid, g.name);
        daemons.push(GpuDaemon { uuid: g.uuid.clone(), cmd, child: None });
    }
    let mut failed = Vec::new();
    for d in &mut daemons {
        if let Err(e) = d.start() {
            eprintln!("gmuxd: {}", e.message());
            failed.push(d.uuid.clone());
        }
    }
    while daemons.iter().any(|d| d.child.is_some()) {
        std::thread::sleep(Duration::from_millis(200));
        for d in &mut daemons {
            let Some((child, since)) = &mut d.child else { continue };
            let ended = match child.try_wait() {
                Ok(None) => continue,
                Ok(Some(s)) => s,
                Err(e) => {
                    eprintln!("gmuxd: cannot tell whether the daemon of GPU {} runs ({e}); no longer watching it", d.uuid);
                    d.child = None;
                    continue;
                }
            };
            let young = since.elapsed() < FAILS_AT_START;
            d.child = None;
            if ended.success() {
                continue;
            }
            if young {
                eprintln!("gmuxd: the daemon of GPU {} ended ({ended}) within {} s of its start; not starting it again", d.uuid, FAILS_AT_START.as_secs());
                failed.push(d.uuid.clone());
            } else {
                eprintln!("gmuxd: the daemon of GPU {} ended ({ended}); starting it again (its tenants register with the new one)", d.uuid);
                if let Err(e) = d.start() {
                    eprintln!("gmuxd: {}", e.message());
                    failed.push(d.uuid.clone());
                }
            }
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Failure::Runtime(format!("the daemons of {} ended in failure; their messages are above", failed.join(", "))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<std::ffi::OsString> {
        v.iter().map(|s| s.into()).collect()
    }

    #[test]
    fn the_daemons_of_each_gpu_get_every_flag_but_the_gpu_and_metrics() {
        let mut a = args(&["daemon", "--gpu", "all", "--hbm", "16G", "--metrics", "--verbose"]);
        drop_flag(&mut a, "--gpu", false);
        drop_flag(&mut a, "--metrics", true);
        assert_eq!(a, args(&["daemon", "--hbm", "16G", "--verbose"]));
        let mut b = args(&["daemon", "--metrics", "0.0.0.0:9500", "--gpu=all", "--resume"]);
        drop_flag(&mut b, "--gpu", false);
        drop_flag(&mut b, "--metrics", true);
        assert_eq!(b, args(&["daemon", "--resume"]));
        let mut c = args(&["daemon", "--metrics=127.0.0.1:9400"]);
        drop_flag(&mut c, "--metrics", true);
        assert_eq!(c, args(&["daemon"]));
    }
}
