//! The daemon's journal, `<socket>.journal`: what a daemon started after it on the same
//! socket must know, one JSON line per change ([`Entry`]). Its settings, its tenants with
//! their knobs and owners, and the processes registered with it: after a crash, those
//! still alive hold GPU memory under the old daemon's grants, and the next daemon grants
//! nothing ahead until each has registered again or died.
//!
//! The journal is appended to before the grants that depend on it are sent, and
//! rewritten whole (write, then rename) when it has grown to several times its content.

pub use gmux_core::arbiter::record::{Entry, Settings, TenantRecord};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Largest journal read back; a larger one is not a journal gmuxd wrote.
const MAX_BYTES: u64 = 64 << 20;

/// The journal of the daemon serving `socket`.
pub fn path_for(socket: &Path) -> PathBuf {
    let mut s = socket.as_os_str().to_owned();
    s.push(".journal");
    PathBuf::from(s)
}

/// This boot's id (empty when unknown: then no process is taken over).
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").map(|s| s.trim().to_string()).unwrap_or_default()
}

/// Reads the journal at `path` (none: nothing kept). Processes of another boot than
/// `boot` are dropped.
pub fn load(path: &Path, boot: &str) -> Result<Kept, String> {
    let f = match OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Kept::default()),
        Err(e) => return Err(format!("cannot open the journal {} ({e}); remove it if it is not a file of yours", path.display())),
    };
    let m = f.metadata().map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    // SAFETY: geteuid has no preconditions.
    if m.uid() != unsafe { libc::geteuid() } || !m.is_file() {
        return Err(format!(
            "{} is not a journal gmuxd of yours wrote (not a file, or uid {}'s); remove it, or pick another --socket",
            path.display(),
            m.uid()
        ));
    }
    if m.len() > MAX_BYTES {
        return Err(format!(
            "the journal {} is {} bytes, more than gmuxd ever writes ({MAX_BYTES}); remove it (its tenants' knobs are then lost), or pick another --socket",
            path.display(),
            m.len()
        ));
    }
    let text = std::io::read_to_string(f).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(replay(&text, boot))
}

/// What a previous daemon's journal holds.
#[derive(Debug, Default, PartialEq)]
pub struct Kept {
    /// Its settings.
    pub settings: Option<Settings>,
    /// The GPU it bound to at its first process, when no `--gpu` named one.
    pub gpu: Option<String>,
    /// Its tenants, in order of creation.
    pub tenants: Vec<TenantRecord>,
    /// Processes registered with it in this boot, by pid: start time and tenant.
    pub procs: BTreeMap<u32, (u64, String)>,
    /// Lines that could not be read, with why.
    pub skipped: Vec<String>,
}

/// What the lines of `text` leave behind; processes of another boot than `boot` (or of an
/// unknown one) are dropped.
pub fn replay(text: &str, boot: &str) -> Kept {
    let mut k = Kept::default();
    let mut this_boot = false;
    let mut order: Vec<String> = Vec::new();
    let mut tenants: BTreeMap<String, TenantRecord> = BTreeMap::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        match serde_json::from_str::<Entry>(line) {
            Ok(Entry::Start { boot: b, settings }) => {
                this_boot = !b.is_empty() && b == boot;
                k.settings = Some(settings);
            }
            Ok(Entry::Tenant(t)) => {
                if !tenants.contains_key(&t.name) {
                    order.push(t.name.clone());
                }
                tenants.insert(t.name.clone(), t);
            }
            Ok(Entry::Join { pid, start, tenant }) => {
                k.procs.insert(pid, (start, tenant));
            }
            Ok(Entry::Leave { pid }) => {
                k.procs.remove(&pid);
            }
            Ok(Entry::Gpu { gpu }) => k.gpu = Some(gpu),
            Err(e) => k.skipped.push(format!("line {}: {e}", n + 1)),
        }
    }
    if !this_boot {
        k.procs.clear();
    }
    k.tenants = order.into_iter().filter_map(|n| tenants.remove(&n)).collect();
    k
}

/// An open journal, appended to.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
    lines: usize,
    /// Lines it was written whole with.
    whole: usize,
}

impl Journal {
    /// Replaces the journal at `path` with `entries` (written aside, then renamed over it)
    /// and opens it for appending.
    pub fn create(path: &Path, entries: &[Entry]) -> Result<Journal, String> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".new");
        let tmp = PathBuf::from(tmp);
        let _ = std::fs::remove_file(&tmp);
        let fail = |p: &Path, e: std::io::Error| format!("cannot write the journal {} ({e}); remove what is there, or pick another --socket", p.display());
        let mut file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
            .map_err(|e| fail(&tmp, e))?;
        file.write_all(&lines(entries)).map_err(|e| fail(&tmp, e))?;
        std::fs::rename(&tmp, path).map_err(|e| fail(path, e))?;
        Ok(Journal { path: path.to_path_buf(), file, lines: entries.len(), whole: entries.len() })
    }

    /// Whether it has grown to several times what it was written whole with: time to
    /// write it whole again.
    pub fn grown(&self) -> bool {
        self.lines > 1024 + 2 * self.whole
    }

    /// Appends `entries`.
    pub fn append(&mut self, entries: &[Entry]) -> std::io::Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        self.file.write_all(&lines(entries))?;
        self.lines += entries.len();
        Ok(())
    }

    /// Lines written since the last rewrite.
    pub fn lines(&self) -> usize {
        self.lines
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn lines(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in entries {
        serde_json::to_writer(&mut out, e).expect("serializable");
        out.push(b'\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gmux_core::arbiter::Switch;
    use gmux_core::knobs::Limits;
    use gmux_core::sched::Policy;

    fn settings() -> Settings {
        Settings {
            hbm: Some(16 << 30),
            host: None,
            policy: Policy::RoundRobin,
            switch: Switch::Whole,
            timeslice: 50_000_000,
            max_timeslice: 1_000_000_000,
            max_priority: 2,
            always_slice: false,
            gpu: None,
        }
    }

    fn tenant(name: &str, high: Option<u64>) -> Entry {
        Entry::Tenant(TenantRecord {
            name: name.into(),
            owner: Some(1000),
            priority: 1,
            high_set_by_admin: high.is_some(),
            limits: Limits { high, ..Limits::default() },
        })
    }

    fn join(pid: u32, tenant: &str) -> Entry {
        Entry::Join { pid, start: 1000 + u64::from(pid), tenant: tenant.into() }
    }

    #[test]
    fn the_gpu_a_daemon_bound_to_is_kept() {
        let start = Entry::Start { boot: "b1".into(), settings: settings() };
        let text: String = [start, Entry::Gpu { gpu: "GPU-aa".into() }].iter().map(|e| serde_json::to_string(e).unwrap() + "\n").collect();
        assert_eq!(replay(&text, "b1").gpu.as_deref(), Some("GPU-aa"));
    }

    #[test]
    fn a_journal_replays_to_its_last_state_and_survives_a_rewrite() {
        let dir = std::env::temp_dir().join(format!("gmux-journal-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = path_for(&dir.join("gpu0.sock"));
        let start = Entry::Start { boot: "b1".into(), settings: settings() };
        let mut j = Journal::create(&path, &[start.clone(), tenant("a", None)]).unwrap();
        j.append(&[join(10, "a"), tenant("b", Some(4 << 30)), join(20, "b"), join(21, "b"), Entry::Leave { pid: 10 }, tenant("a", Some(2 << 30))]).unwrap();
        assert_eq!(j.lines(), 8);
        assert!(!j.grown());
        // Per-run tenant names: joins and leaves pile up until it is written whole again.
        for pid in 0..520 {
            j.append(&[join(1000 + pid, "x"), Entry::Leave { pid: 1000 + pid }]).unwrap();
        }
        assert!(j.grown(), "{} lines on a journal written whole with 2", j.lines());
        let k = load(&path, "b1").unwrap();
        assert_eq!(k.settings, Some(settings()));
        assert_eq!(
            k.tenants.iter().map(|t| (t.name.as_str(), t.limits.high)).collect::<Vec<_>>(),
            vec![("a", Some(2 << 30)), ("b", Some(4 << 30))],
            "the newest record of each, in order of creation"
        );
        assert_eq!(k.procs.keys().copied().collect::<Vec<_>>(), vec![20, 21]);
        assert_eq!(k.procs[&20], (1020, "b".to_string()));
        assert!(load(&path, "b2").unwrap().procs.is_empty(), "processes of another boot are gone");
        // A rewrite keeps what the replay gives; a torn last line is skipped, not fatal.
        let entries = vec![start, tenant("a", Some(2 << 30)), tenant("b", Some(4 << 30)), join(20, "b"), join(21, "b")];
        drop(Journal::create(&path, &entries).unwrap());
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"{\"entry\":\"jo").unwrap();
        let again = load(&path, "b1").unwrap();
        assert_eq!((again.tenants, again.procs), (k.tenants, k.procs));
        assert_eq!(again.skipped.len(), 1, "{:?}", again.skipped);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_journal_that_is_not_ours_or_is_a_link_is_refused() {
        let dir = std::env::temp_dir().join(format!("gmux-journal-link-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("elsewhere");
        std::fs::write(&target, b"").unwrap();
        let path = dir.join("gpu0.sock.journal");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        assert!(load(&path, "b").unwrap_err().contains("cannot open"));
        assert_eq!(load(&dir.join("none"), "b").unwrap(), Kept::default());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
