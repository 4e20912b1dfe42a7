//! Names the build for `gmux --version`: the commit it was built from (`git describe`),
//! or "unknown build" outside a git checkout.

fn main() {
    let described = std::process::Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=12"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    let build = described.map_or("unknown build".to_string(), |d| format!("commit {d}"));
    println!("cargo:rustc-env=GMUX_BUILD={build}");
    // A new commit, or a change to the index (what --dirty reads), names a new build.
    for f in ["../../.git/HEAD", "../../.git/index", "../../.git/refs/heads"] {
        println!("cargo:rerun-if-changed={f}");
    }
}
