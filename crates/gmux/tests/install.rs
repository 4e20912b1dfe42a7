//! `scripts/install.sh` puts a working gmux in a prefix: the command names its build,
//! finds libgmux.so beside it, and its completions, man page and systemd unit are there.

mod common;

use common::*;
use std::process::Command;

#[test]
fn install_sh_puts_a_working_gmux_under_its_prefix() {
    let tmp = TempDir::new("install");
    let prefix = tmp.path().join("prefix");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let r = run(Command::new("bash").arg(root.join("scripts/install.sh")).args(["--from"]).arg(target_dir()).env("PREFIX", &prefix).env("GROUP", "gpu-users"));
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    let gmux = prefix.join("bin/gmux");
    let version = run(Command::new(&gmux).arg("--version"));
    assert!(version.stdout.starts_with("gmux ") && (version.stdout.contains("(commit ") || version.stdout.contains("(unknown build)")), "{}", version.stdout);
    // The installed gmux finds the installed shim: a program runs under it.
    let ran = run(Command::new(&gmux).args(["run", "--standalone", "--", "true"]).env_remove("GMUX_SHIM"));
    assert!(ran.status.success(), "{}", ran.stderr);
    let read = |p: &str| std::fs::read_to_string(prefix.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
    assert!(read("share/bash-completion/completions/gmux").contains("_gmux()"));
    assert!(read("share/zsh/site-functions/_gmux").starts_with("#compdef gmux"));
    assert!(read("share/fish/vendor_completions.d/gmux.fish").contains("complete -c gmux"));
    let man = read("share/man/man1/gmux.1");
    assert!(man.contains(".TH gmux 1") && man.contains("daemon"), "{man}");
    let unit = read("lib/systemd/system/gmuxd.service");
    let exec = format!("ExecStart={}/bin/gmux daemon --resume --gpu all --group gpu-users", prefix.display());
    assert!(unit.lines().any(|l| l == exec), "{unit}");
    let missing = run(Command::new("bash").arg(root.join("scripts/install.sh")).args(["--from", "/nonexistent"]).env("PREFIX", &prefix));
    assert!(!missing.status.success() && missing.stderr.contains("cargo build --release -p gmux"), "{}", missing.stderr);
}
