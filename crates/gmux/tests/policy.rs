//! `gmux policy check` on the policies of `policies/` and on a program the verifier
//! refuses: what it lists, the refusal's instruction and reason, and the exit status.
//! Needs clang (skipped without it unless GMUX_REQUIRE_CLANG=1, as in CI).

use std::path::{Path, PathBuf};
use std::process::Command;

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
