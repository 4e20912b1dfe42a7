//! What the kernel says of a tenant's process (`/proc/PID/stat`): when it started, which
//! tells it from a later process of the same pid, and whether it is stopped.

/// The fields of `/proc/PID/stat` after the process's name, which may hold spaces and
/// parentheses: the state is the first (field 3 of the file).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(stat.rsplit_once(')')?.1.split_whitespace().map(str::to_string).collect())
}

/// When process `pid` started (clock ticks after boot), if it runs.
pub fn start_time(pid: u32) -> Option<u64> {
    stat_fields(pid)?.get(19)?.parse().ok()
}

/// Whether process `pid` started at `start` still runs; with `start` 0 (unknown: its
/// `/proc` entry could not be read), whether any process of that pid does.
pub fn runs(pid: u32, start: u64) -> bool {
    if start != 0 {
        return start_time(pid) == Some(start);
    }
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    pid != 0 && (unsafe { libc::kill(pid as libc::pid_t, 0) } == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}

/// Whether process `pid` is stopped (by a signal, or a debugger).
pub fn is_stopped(pid: u32) -> bool {
    stat_fields(pid).is_some_and(|f| matches!(f.first().map(String::as_str), Some("T" | "t")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn a_process_is_known_by_its_start_time_and_seen_stopped() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        let t = start_time(pid).expect("the child runs");
        assert!(t > 0 && start_time(std::process::id()).is_some_and(|me| me <= t));
        assert!(!is_stopped(pid) && runs(pid, t) && runs(pid, 0) && !runs(pid, t + 1));
        // SAFETY: kill with a valid pid and signal.
        unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
        let t0 = std::time::Instant::now();
        while !is_stopped(pid) {
            assert!(t0.elapsed().as_secs() < 5, "never seen stopped");
            std::thread::yield_now();
        }
        // SAFETY: as above.
        unsafe { libc::kill(pid as i32, libc::SIGCONT) };
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(start_time(pid), None, "a reaped process has no start time");
        assert!(!runs(pid, t) && !runs(0, 0));
        assert!(!is_stopped(u32::MAX));
    }
}
