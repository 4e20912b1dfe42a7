//! Where daemons listen: one per GPU, each on a socket named by the GPU's UUID in the
//! run directory (`/run/gmux/GPU-….sock` as root), so that `CUDA_VISIBLE_DEVICES`
//! reordering never sends a process to another GPU's daemon. `GMUX_SOCKET` names one
//! daemon's socket instead, whatever its GPU.

use crate::Failure;
use std::path::PathBuf;

/// The directory of the daemons' sockets, journals and logs: `$GMUX_RUN_DIR`, else
/// `/run/gmux` as root, `$XDG_RUNTIME_DIR/gmux`, or `$TMPDIR/gmux-UID`.
pub fn run_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("GMUX_RUN_DIR").filter(|p| !p.is_empty()) {
        return d.into();
    }
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if uid == 0 {
        PathBuf::from("/run/gmux")
    } else if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").filter(|p| !p.is_empty()) {
        PathBuf::from(x).join("gmux")
    } else {
        std::env::temp_dir().join(format!("gmux-{uid}"))
    }
}

/// The run directory, made if missing (mode 0700, as a daemon makes it).
pub fn ensure_run_dir() -> Result<PathBuf, Failure> {
    let dir = run_dir();
    crate::rundir::ensure_dir(&dir, None).map_err(Failure::Runtime)?;
    Ok(dir)
}

/// The socket of the daemon of the GPU with this UUID.
pub fn gpu_socket(uuid: &str) -> PathBuf {
    run_dir().join(format!("{uuid}.sock"))
}

/// `GMUX_SOCKET`, when set: the one daemon every command talks to.
pub fn pinned() -> Option<PathBuf> {
    std::env::var_os("GMUX_SOCKET").filter(|p| !p.is_empty()).map(PathBuf::from)
}

/// The daemons' sockets: `GMUX_SOCKET` alone when set, else every socket in the run
/// directory that a daemon answers on (one that ended may leave its socket), by name.
pub fn daemon_sockets() -> Vec<PathBuf> {
    if let Some(p) = pinned() {
        return vec![p];
    }
    use std::os::unix::fs::FileTypeExt;
    let Ok(entries) = std::fs::read_dir(run_dir()) else { return Vec::new() };
    let mut v: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_socket()) && e.path().extension().is_some_and(|x| x == "sock"))
        .map(|e| e.path())
        .filter(|p| std::os::unix::net::UnixStream::connect(p).is_ok())
        .collect();
    v.sort();
    v
}

/// The one daemon a command that speaks to one talks to: `GMUX_SOCKET`, else the only
/// daemon in the run directory. None, or several, is an error that says what to do.
pub fn socket_path() -> Result<PathBuf, Failure> {
    let all = daemon_sockets();
    match &all[..] {
        [one] => Ok(one.clone()),
        [] => Err(Failure::Runtime(format!(
            "gmuxd is not running (no socket in {}); start it with `gmux daemon` (or any `gmux run`), or point GMUX_SOCKET at its socket",
            run_dir().display()
        ))),
        many => Err(Failure::Usage(format!(
            "daemons of {} GPUs run in {} ({}); pick one with --gpu UUID (or GMUX_SOCKET={})",
            many.len(),
            run_dir().display(),
            many.iter().filter_map(|p| p.file_stem()).map(|s| s.to_string_lossy()).collect::<Vec<_>>().join(", "),
            many[0].display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test owns the process's environment for both cases (tests run as threads).
    #[test]
    fn commands_find_the_one_daemon_or_say_how_to_pick() {
        let dir = std::env::temp_dir().join(format!("gmux-sockets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::env::remove_var("GMUX_SOCKET");
        std::env::set_var("GMUX_RUN_DIR", &dir);
        assert!(socket_path().unwrap_err().message().contains("not running"));
        drop(std::os::unix::net::UnixListener::bind(dir.join("GPU-gone.sock")).unwrap());
        assert!(socket_path().unwrap_err().message().contains("not running"), "the socket of a daemon that ended is no daemon");
        let a = std::os::unix::net::UnixListener::bind(dir.join("GPU-aa.sock")).unwrap();
        std::fs::write(dir.join("GPU-aa.sock.journal"), "").unwrap();
        assert_eq!(socket_path().unwrap(), dir.join("GPU-aa.sock"), "journals and logs are not daemons");
        let b = std::os::unix::net::UnixListener::bind(dir.join("GPU-bb.sock")).unwrap();
        assert_eq!(daemon_sockets(), vec![dir.join("GPU-aa.sock"), dir.join("GPU-bb.sock")]);
        let e = socket_path().unwrap_err();
        assert!(e.message().contains("2 GPUs") && e.message().contains("GMUX_SOCKET="), "{}", e.message());
        std::env::set_var("GMUX_SOCKET", dir.join("x.sock"));
        assert_eq!(daemon_sockets(), vec![dir.join("x.sock")], "GMUX_SOCKET pins one daemon");
        std::env::remove_var("GMUX_SOCKET");
        std::env::remove_var("GMUX_RUN_DIR");
        drop((a, b));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
