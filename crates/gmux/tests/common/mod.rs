//! Shared by the tests that run `examples/standin_app` on the CPU stand-in of the CUDA
//! driver, with or without `libgmux.so` preloaded.
#![allow(dead_code)]

pub mod daemon;
pub mod summary;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Cargo's output directory for this profile (`target/debug` or similar).
pub fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_gmux")).parent().expect("gmux binary has a parent directory").to_path_buf()
}

fn artifact(relative: &str, build: &str) -> PathBuf {
    let p = target_dir().join(relative);
    assert!(p.exists(), "{} is missing; build it with `{build}`", p.display());
    p
}

/// The CUDA driver stand-in (`libcuda_standin.so`).
pub fn standin_lib() -> PathBuf {
    artifact("deps/libcuda_standin.so", "cargo build -p cuda-standin")
}

/// The interposer (`libgmux.so`).
pub fn shim_lib() -> PathBuf {
    artifact("deps/libgmux.so", "cargo build -p gmux-shim")
}

/// The test application.
pub fn app_bin() -> PathBuf {
    artifact("examples/standin_app", "cargo build -p gmux --example standin_app")
}

/// The policy in C file `src` compiled by clang into `out`; `None` without clang (unless
/// GMUX_REQUIRE_CLANG is set, as in CI).
pub fn compile_policy(src: &Path, out: &Path) -> Option<PathBuf> {
    if Command::new("clang").arg("--version").output().is_err() {
        assert!(std::env::var_os("GMUX_REQUIRE_CLANG").is_none(), "clang is required (GMUX_REQUIRE_CLANG) but not found");
        return None;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let st =
        Command::new("clang").args(["-O2", "-target", "bpf", "-c", "-I"]).arg(root.join("include")).arg(src).arg("-o").arg(out).status().expect("clang runs");
    assert!(st.success(), "clang failed on {}", src.display());
    Some(out.to_path_buf())
}

/// A temporary directory, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let unique = format!("gmux-test-{}-{}-{name}", std::process::id(), N.fetch_add(1, Ordering::SeqCst));
        let p = std::env::temp_dir().join(unique);
        std::fs::create_dir_all(&p).unwrap_or_else(|e| panic!("cannot create {}: {e}", p.display()));
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A per-test directory holding the stand-in as `libcuda.so.1`, and the device memory size
/// the stand-in will have.
pub struct Sandbox {
    pub dir: TempDir,
    pub mem: u64,
}

impl Sandbox {
    /// A sandbox whose stand-in has `mem` bytes of device memory.
    pub fn new(name: &str, mem: u64) -> Sandbox {
        let dir = TempDir::new(name);
        let lib = standin_lib();
        let link = dir.path().join("libcuda.so.1");
        std::os::unix::fs::symlink(&lib, &link).unwrap_or_else(|e| panic!("cannot link {}: {e}", link.display()));
        Sandbox { dir, mem }
    }

    /// `standin_app ARGS` loading the stand-in through `LD_LIBRARY_PATH`.
    pub fn app<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let mut c = Command::new(app_bin());
        c.args(args)
            .env("LD_LIBRARY_PATH", self.dir.path())
            .env("GMUX_STANDIN_MEM", self.mem.to_string())
            .env_remove("LD_PRELOAD")
            .env_remove("GMUX_STANDIN_DELAY_US");
        c
    }
}

/// The `gmux` executable under test.
pub fn gmux_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_gmux"))
}

/// Variables of the shim and the stand-in that a test must not inherit from its caller.
const GMUX_VARS: [&str; 22] = [
    "GMUX_POLICY",
    "GMUX_DEBUG",
    "GMUX_RECYCLE",
    "GMUX_MEMINFO",
    "GMUX_OVERSIZE",
    "GMUX_DAEMON",
    "GMUX_PRIORITY",
    "GMUX_RECORD",
    "GMUX_TENANT",
    "GMUX_EXTENT",
    "GMUX_PREFETCH",
    "GMUX_EVICT",
    "LD_PRELOAD",
    "GMUX_MEM_LIMIT",
    "GMUX_MOVER",
    "GMUX_PREDICT",
    "GMUX_INFLIGHT",
    "GMUX_HOST_BLOCK",
    "GMUX_STANDIN_DELAY_US",
    "GMUX_STANDIN_MAP_US",
    "GMUX_SHIM",
    "GMUX_LOG",
];

impl Sandbox {
    /// `gmux run [--mem-limit LIMIT] -- standin_app ARGS`: the real CLI preloading
    /// `libgmux.so` (`GMUX_SHIM`), which loads this sandbox's stand-in (`GMUX_CUDA_LIB`),
    /// with `GMUX_LOG=info` so that the exit summary is printed.
    pub fn gmux<I, S>(&self, limit: Option<&str>, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.gmux_sub(&["run"], limit, args)
    }

    /// As [`Sandbox::gmux`], with `sub` in place of `run` (e.g. `record -o FILE`).
    pub fn gmux_sub<I, S>(&self, sub: &[&str], limit: Option<&str>, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let mut c = self.gmux_cli(sub);
        if let Some(l) = limit {
            c.args(["--mem-limit", l]);
        }
        c.arg("--").arg(app_bin()).args(args);
        c
    }

    /// `gmux ARGS` with this sandbox's shim (`GMUX_SHIM`), stand-in and socket, and
    /// `GMUX_LOG=info`.
    pub fn gmux_cli(&self, args: &[&str]) -> Command {
        let mut c = Command::new(gmux_bin());
        c.args(args);
        for v in GMUX_VARS {
            c.env_remove(v);
        }
        c.env("GMUX_SHIM", shim_lib())
            .env("GMUX_CUDA_LIB", self.dir.path().join("libcuda.so.1"))
            .env("LD_LIBRARY_PATH", self.dir.path())
            .env("GMUX_STANDIN_MEM", self.mem.to_string())
            .env("GMUX_SOCKET", self.socket())
            .env("GMUX_LOG", "info");
        c
    }

    /// The socket of this sandbox's daemon (`gmux run` starts one there on demand).
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("gmux.sock")
    }
}

/// A finished process.
#[derive(Debug)]
pub struct Ran {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub command: String,
}

impl Ran {
    /// Everything about the run, for assertion messages.
    pub fn describe(&self) -> String {
        format!("`{}` exited with {}\n--- stdout\n{}--- stderr\n{}", self.command, self.status, self.stdout, self.stderr)
    }

    /// The signal that ended the process, if one did.
    pub fn signal(&self) -> Option<i32> {
        std::os::unix::process::ExitStatusExt::signal(&self.status)
    }
}

/// Runs `cmd` to completion.
pub fn run(cmd: &mut Command) -> Ran {
    let command = format!("{cmd:?}");
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {command}: {e}"));
    Ran { status: out.status, stdout: String::from_utf8_lossy(&out.stdout).into_owned(), stderr: String::from_utf8_lossy(&out.stderr).into_owned(), command }
}

/// Runs `cmd` to completion, killing it (and failing the test with its output so far)
/// if it takes longer than `limit`: a hang must fail a test, not stall the suite.
pub fn run_within(cmd: &mut Command, limit: std::time::Duration) -> Ran {
    use std::io::Read;
    use std::process::Stdio;
    let command = format!("{cmd:?}");
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap_or_else(|e| panic!("cannot run {command}: {e}"));
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            String::from_utf8_lossy(&v).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("piped")));
    let err = drain(Box::new(child.stderr.take().expect("piped")));
    let start = std::time::Instant::now();
    let (status, timed_out) = loop {
        if let Some(st) = child.try_wait().unwrap_or_else(|e| panic!("cannot wait for {command}: {e}")) {
            break (st, false);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            break (child.wait().unwrap_or_else(|e| panic!("cannot wait for {command}: {e}")), true);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let ran = Ran { status, stdout: out.join().unwrap_or_default(), stderr: err.join().unwrap_or_default(), command };
    assert!(!timed_out, "killed after {limit:?} (hung?):\n{}", ran.describe());
    ran
}

/// Runs `cmd`, panicking with its output unless it exits 0.
pub fn run_ok(cmd: &mut Command) -> Ran {
    let r = run(cmd);
    assert!(r.status.success(), "expected success:\n{}", r.describe());
    r
}

/// Runs `cmd`, panicking with its output if it exits 0.
pub fn run_fail(cmd: &mut Command) -> Ran {
    let r = run(cmd);
    assert!(!r.status.success(), "expected failure:\n{}", r.describe());
    r
}

/// The number after `label` in `text` (e.g. `number(out, "mismatches: ")`).
pub fn number(text: &str, label: &str) -> u64 {
    let at = text.find(label).unwrap_or_else(|| panic!("no {label:?} in {text:?}")) + label.len();
    let digits: String = text[at..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or_else(|_| panic!("no number after {label:?} in {text:?}"))
}
