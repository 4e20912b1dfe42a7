//! `gmux policy check` on the policies of `policies/` and on a program the verifier
//! refuses: what it lists, the refusal's instruction and reason, and the exit status;
//! `gmux policy load|list|map|unload` against a daemon with stand-in tenants. Needs clang
//! (skipped without it unless GMUX_REQUIRE_CLANG=1, as in CI).

mod common;

use common::daemon::*;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// C file `src` compiled into `out`; `None` without clang.
fn compile(src: &Path, out: &Path) -> Option<PathBuf> {
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

fn check(args: &[&str], file: &Path) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gmux")).args(["policy", "check"]).args(args).arg(file).output().expect("gmux runs");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn check_lists_a_verified_policy_and_names_a_refused_programs_instruction() {
    let dir = std::env::temp_dir().join(format!("gmux-policy-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let Some(lfu) = compile(&root.join("policies/lfu.c"), &dir.join("lfu.o")) else { return };
    let (code, out, _) = check(&[], &lfu);
    assert_eq!(code, 0);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].ends_with("lfu.o: 2 programs, 1 map, verified"), "{out}");
    assert!(lines[1].split_whitespace().eq(["access", "count", "24", "instructions"]), "{out}");
    assert!(lines[3].contains("map uses: hash, 8-byte keys, 8-byte values, 65536 entries"), "{out}");
    let (code, out, _) = check(&["--json"], &lfu);
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!((code, v["verified"].as_bool(), v["programs"][1]["hook"].as_str()), (0, Some(true), Some("evict_prepare")));

    let bad = dir.join("bad.c");
    std::fs::write(&bad, "#include \"gmux_bpf.h\"\nGMUX_MAP(uses, GMUX_MAP_HASH, u64, u64, 16);\nSEC(\"gmux/evict_prepare\") u64 f(struct gmux_evict_ctx *c) { u64 k = c->chunk; u64 *n = map_lookup_elem(&uses, &k); return *n; }\n").expect("write");
    let bad = compile(&bad, &dir.join("bad.o")).expect("clang");
    let (code, out, err) = check(&[], &bad);
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(err.contains("bad.o: f: refused: instruction 7: dereferences r0, a map value that may be null (check it first)"), "{err}");
    let (code, _, err) = check(&[], &dir.join("missing.o"));
    assert!(code == 2 && err.contains("cannot read"), "{err}");
}

#[test]
fn a_loaded_policy_decides_admission_in_the_daemon_and_its_maps_are_read_and_written() {
    let d = Daemon::start("policy-daemon", &["--hbm", "64M"]);
    let dir = d.sb.dir.path();
    // Only the first tenant may run: a process that would start a second is refused.
    let only_one = dir.join("only_one.c");
    std::fs::write(
        &only_one,
        "#include \"gmux_bpf.h\"\nSEC(\"gmux/task_init\") u64 one(struct gmux_task_ctx *c) { return c->new_tenant && c->processes > 0; }\n",
    )
    .expect("write");
    let Some(only_one) = compile(&only_one, &dir.join("only_one.o")) else { return };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let rt = compile(&root.join("policies/rt_boost.c"), &dir.join("rt_boost.o")).expect("clang");
    let lfu = compile(&root.join("policies/lfu.c"), &dir.join("lfu.o")).expect("clang");
    let cli = |args: &[&str]| run_within(&mut d.sb.gmux_cli(args), Duration::from_secs(20));
    let path = |p: &Path| p.to_str().expect("utf-8").to_string();

    assert!(cli(&["policy", "list"]).stdout.contains("no policies loaded"));
    let r = cli(&["policy", "load", &path(&only_one)]);
    assert!(r.status.success() && r.stdout.contains("loaded policy 1 (only_one.o): task_init"), "{}", r.describe());
    let r = cli(&["policy", "load", &path(&lfu)]);
    assert!(!r.status.success() && r.stderr.contains("lfu.o: access is a memory hook"), "{}", r.describe());

    let mut first = d.sb.gmux(None, ["loop", "--buffers", "2", "--bytes", "1M", "--rounds", "1000000"]);
    first.env("GMUX_TENANT", "first").stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    let mut first = first.spawn().expect("first tenant");
    let t0 = std::time::Instant::now();
    while !cli(&["ps"]).stdout.contains("first") {
        assert!(t0.elapsed() < Duration::from_secs(20), "the first tenant never joined");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut second = d.sb.gmux(None, ["info"]);
    second.env("GMUX_TENANT", "second");
    let r = run_within(&mut second, Duration::from_secs(20));
    assert!(!r.status.success() && r.stderr.contains("the daemon's policy (task_init) refused a process of tenant \"second\""), "{}", r.describe());

    let r = cli(&["policy", "load", &path(&rt)]);
    assert!(r.stdout.contains("loaded policy 2 (rt_boost.o): timeslice"), "{}", r.describe());
    assert!(cli(&["policy", "map", "2", "rt", "update", "0", "300000000"]).status.success());
    let dump = cli(&["policy", "map", "2", "rt", "dump"]).stdout;
    assert!(dump.starts_with("map rt of policy 2: array, 4-byte keys, 8-byte values") && dump.contains("\n0 300000000\n1 0\n"), "{dump}");
    let r = cli(&["policy", "map", "2", "rt", "update", "0", "0x0102"]);
    assert!(r.stderr.contains("the value is 8 bytes"), "{}", r.describe());
    let list = cli(&["policy", "list", "--json"]).stdout;
    let v: serde_json::Value = serde_json::from_str(&list).expect("JSON");
    assert_eq!((v[0]["hooks"][0].as_str(), v[1]["maps"][0].as_str()), (Some("task_init"), Some("rt")), "{list}");
    let r = cli(&["policy", "load", &path(&rt)]);
    assert!(r.stderr.contains("the timeslice hook has policy 2 (rt_boost.o) attached"), "{}", r.describe());

    assert!(cli(&["policy", "unload", "1"]).stdout.contains("unloaded policy 1"));
    let mut second = d.sb.gmux(None, ["info"]);
    second.env("GMUX_TENANT", "second");
    let r = run_within(&mut second, Duration::from_secs(20));
    assert!(r.status.success(), "admitted once the policy is gone: {}", r.describe());
    let _ = first.kill();
    let _ = first.wait();
}
