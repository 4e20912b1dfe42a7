//! The daemon's files: its socket's directory, the socket, its lock and its log. Each is
//! made without following links and checked for its owner; gmux never changes the mode
//! of, or removes, a path it did not make.

use std::fs::{DirBuilder, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

fn me() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Makes `dir` with mode 0700 (and its missing parents; 0710 and group `group` for the
/// directory itself when given, so that the group's members reach the socket), or checks
/// the one there: a directory, not a link, owned by this user or root, that others cannot
/// write into unless it is sticky (as `/tmp`).
pub fn ensure_dir(dir: &Path, group: Option<u32>) -> Result<(), String> {
    let mut made = false;
    if std::fs::symlink_metadata(dir).is_err() {
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            DirBuilder::new().recursive(true).mode(0o700).create(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        // Not recursive: whatever appears at `dir` meanwhile (a link) makes this fail, and
        // is then checked below instead of followed.
        made = DirBuilder::new().mode(0o700).create(dir).is_ok();
    }
    let m = std::fs::symlink_metadata(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let fix = "remove it, or choose another place with --socket or GMUX_SOCKET";
    if !m.file_type().is_dir() {
        return Err(format!("{} is not a directory (a link or a file is there); {fix}", dir.display()));
    }
    if m.uid() != me() && m.uid() != 0 {
        return Err(format!("{} belongs to uid {}, not to you: someone else made it; {fix}", dir.display(), m.uid()));
    }
    if m.mode() & 0o002 != 0 && m.mode() & 0o1000 == 0 {
        return Err(format!("{} is writable by everyone and not sticky, so anyone could replace the socket; {fix}", dir.display()));
    }
    if let (true, Some(gid)) = (made, group) {
        share(dir, gid, 0o710)?;
    }
    Ok(())
}

/// Gives `path`, which gmux made, to group `gid` with `mode`.
pub fn share(path: &Path, gid: u32, mode: u32) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::os::unix::fs::chown(path, None, Some(gid)).map_err(|e| format!("cannot give {} to group {gid}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|e| format!("cannot set the mode of {}: {e}", path.display()))
}

/// The id of group `name`.
pub fn group_id(name: &str) -> Result<u32, String> {
    let c = std::ffi::CString::new(name).map_err(|_| format!("--group {name:?}: not a group name"))?;
    // SAFETY: getgrnam takes a NUL-terminated name; the entry is read before any other call.
    let g = unsafe { libc::getgrnam(c.as_ptr()) };
    if g.is_null() {
        return Err(format!("--group {name}: no such group (see /etc/group)"));
    }
    // SAFETY: `g` is a valid entry returned just above.
    Ok(unsafe { (*g).gr_gid })
}

/// Opens `path` for appending (a log), made 0600 if new, never through a link.
pub fn open_log(path: &Path) -> Result<File, String> {
    let f = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    owned(&f, path)?;
    Ok(f)
}

fn owned(f: &File, path: &Path) -> Result<(), String> {
    let m = f.metadata().map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if m.uid() != me() {
        return Err(format!("{} belongs to uid {}, not to you; remove it, or choose another --socket", path.display(), m.uid()));
    }
    Ok(())
}

/// The lock of the daemon serving `socket`, held while this lives: one daemon per socket.
#[derive(Debug)]
pub struct Lock {
    _file: File,
}

/// Takes `<socket>.lock` (made 0600, never through a link), or says which daemon holds it.
pub fn lock(socket: &Path) -> Result<Lock, String> {
    let path = with_suffix(socket, ".lock");
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    owned(&f, &path)?;
    // SAFETY: flock on a descriptor this owns.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(format!("a gmuxd already serves {} (it holds {}); stop it with `gmux stop`, or pick another --socket", socket.display(), path.display()));
    }
    Ok(Lock { _file: f })
}

/// Clears the way to bind `socket`, with its lock held: a stale socket of this user's is
/// removed; anything else there is refused.
pub fn clear_stale(socket: &Path, _held: &Lock) -> Result<(), String> {
    match std::fs::symlink_metadata(socket) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("cannot read {}: {e}", socket.display())),
        Ok(m) if m.file_type().is_socket() && m.uid() == me() => {
            std::fs::remove_file(socket).map_err(|e| format!("cannot remove the stale socket {}: {e}", socket.display()))
        }
        Ok(_) => Err(format!("{} exists and is not a gmux socket of yours; remove it, or pick another --socket", socket.display())),
    }
}

fn with_suffix(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("gmux-rundir-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_directory_is_made_private_and_a_planted_one_is_refused() {
        let d = scratch("dir");
        let fresh = d.join("a/b");
        ensure_dir(&fresh, None).unwrap();
        assert_eq!(std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777, 0o700);
        std::os::unix::fs::symlink(&fresh, d.join("link")).unwrap();
        assert!(ensure_dir(&d.join("link"), None).unwrap_err().contains("not a directory"), "a link is not followed");
        let open = d.join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(ensure_dir(&open, None).unwrap_err().contains("writable by everyone"));
        assert_eq!(std::fs::metadata(&open).unwrap().permissions().mode() & 0o777, 0o777, "gmux changed the mode of a directory it did not make");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        ensure_dir(&open, None).unwrap();
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn one_daemon_holds_the_lock_and_only_a_stale_socket_of_ours_is_removed() {
        let d = scratch("lock");
        let sock = d.join("gpu0.sock");
        let held = lock(&sock).unwrap();
        assert!(lock(&sock).unwrap_err().contains("already serves"), "a second daemon took the lock");
        std::fs::write(&sock, b"precious").unwrap();
        assert!(clear_stale(&sock, &held).unwrap_err().contains("not a gmux socket"));
        assert_eq!(std::fs::read(&sock).unwrap(), b"precious", "a file gmux did not make was removed");
        std::fs::remove_file(&sock).unwrap();
        let l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        drop(l);
        clear_stale(&sock, &held).unwrap();
        assert!(std::fs::symlink_metadata(&sock).is_err(), "the stale socket stayed");
        drop(held);
        let _again = lock(&sock).unwrap();
        let target = d.join("target");
        std::fs::write(&target, b"").unwrap();
        std::os::unix::fs::symlink(&target, d.join("log")).unwrap();
        assert!(open_log(&d.join("log")).is_err(), "a log opened through a link");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
