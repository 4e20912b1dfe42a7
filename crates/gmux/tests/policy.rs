//! `gmux policy check` on the policies of `policies/` and on a program the verifier
//! refuses: what it lists, the refusal's instruction and reason, and the exit status;
//! `gmux policy load|list|map|unload` against a daemon with stand-in tenants. Needs clang
//! (skipped without it unless GMUX_REQUIRE_CLANG=1, as in CI).

mod common;

use common::compile_policy as compile;
use common::daemon::*;
use common::summary::summary;
use common::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

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
    // Only the first tenant may run: a process that would start a second is refused; each
    // decision is written to a ring buffer.
    let only_one = dir.join("only_one.c");
    std::fs::write(
        &only_one,
        "#include \"gmux_bpf.h\"\nGMUX_MAP(seen, GMUX_MAP_RINGBUF, u32, u64, 8);\nSEC(\"gmux/task_init\") u64 one(struct gmux_task_ctx *c) { u64 no = c->new_tenant && c->processes > 0; ringbuf_output(&seen, &no, sizeof(no), 0); return no; }\n",
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
    let r = cli(&["policy", "load", &path(&lfu), "--hook", "timeslice"]);
    assert!(!r.status.success() && r.stderr.contains("lfu.o has no program for the timeslice hook; it has: access, evict_prepare"), "{}", r.describe());
    let r = cli(&["policy", "load", &path(&lfu), "--tenant", "nobody"]);
    assert!(r.stderr.contains("unknown tenant \"nobody\""), "{}", r.describe());

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
    // Each decision is a record in the policy's ring buffer: taken by a dump, once.
    let dump = cli(&["policy", "map", "1", "seen", "dump"]).stdout;
    assert!(dump.starts_with("map seen of policy 1: ring buffer of 8 records of at most 8 bytes; 2 taken, 0 dropped") && dump.contains("\n0\n1"), "{dump}");
    assert!(cli(&["policy", "map", "1", "seen", "dump"]).stdout.contains("0 taken"));
    let r = cli(&["policy", "map", "1", "seen", "update", "0", "1"]);
    assert!(!r.status.success() && r.stderr.contains("is a ring buffer"), "{}", r.describe());

    let r = cli(&["policy", "load", &path(&rt), "--hook", "timeslice"]);
    assert!(r.stdout.contains("loaded policy 2 (rt_boost.o): timeslice"), "{}", r.describe());
    assert!(cli(&["policy", "map", "2", "rt", "update", "0", "300000000"]).status.success());
    let dump = cli(&["policy", "map", "2", "rt", "dump"]).stdout;
    assert!(dump.starts_with("map rt of policy 2: array, 4-byte keys, 8-byte values") && dump.contains("\n0 300000000\n1 0\n"), "{dump}");
    let r = cli(&["policy", "map", "2", "rt", "update", "0", "0x0102"]);
    assert!(r.stderr.contains("the value is 8 bytes"), "{}", r.describe());
    let list = cli(&["policy", "list", "--json"]).stdout;
    let v: serde_json::Value = serde_json::from_str(&list).expect("JSON");
    assert_eq!(
        (v[0]["hooks"][0].as_str(), &v[1]["maps"], v[1]["tenant"].as_str()),
        (Some("task_init"), &serde_json::json!(["rt_names", "rt"]), Some("all")),
        "{list}"
    );
    let r = cli(&["policy", "load", &path(&rt)]);
    assert!(r.stderr.contains("the task_init hook has policy 1 (only_one.o) attached"), "{}", r.describe());

    assert!(cli(&["policy", "unload", "1"]).stdout.contains("unloaded policy 1"));
    let mut second = d.sb.gmux(None, ["info"]);
    second.env("GMUX_TENANT", "second");
    let r = run_within(&mut second, Duration::from_secs(20));
    assert!(r.status.success(), "admitted once the policy is gone: {}", r.describe());
    let _ = first.kill();
    let _ = first.wait();
}

/// Bytes tenant `t` brought in per command, by the daemon's counters.
fn h2d_per_command(d: &Daemon, t: &str) -> f64 {
    d.stat(t, "bytes_h2d ") as f64 / d.stat(t, "commands ") as f64
}

#[test]
fn a_memory_policy_runs_in_its_tenants_processes_and_orders_their_evictions() {
    let d = Daemon::start("policy-memory", &["--hbm", "256M"]);
    let dir = d.sb.dir.path();
    // Evicts the chunk needed soonest first (the opposite of OPT), and says which tenant
    // number its programs see.
    let soonest = dir.join("soonest.c");
    std::fs::write(
        &soonest,
        "#include \"gmux_bpf.h\"\n\
         SEC(\"gmux/evict_prepare\") u64 soonest(struct gmux_evict_ctx *c) { return c->next_use; }\n\
         SEC(\"gmux/access\") u64 seen(struct gmux_chunk_ctx *c) { char f[] = \"tenant\"; trace(f, sizeof(f), c->tenant); return 0; }\n",
    )
    .expect("write");
    let Some(soonest) = compile(&soonest, &dir.join("soonest.o")) else { return };
    let cli = |args: &[&str]| run_within(&mut d.sb.gmux_cli(args), Duration::from_secs(20));
    let loop_args = |rounds: &'static str| ["loop", "--buffers", "3", "--bytes", "4M", "--rounds", rounds];
    let spawn = |name: &str, rounds: &'static str| {
        let mut c = d.sb.gmux(Some("8M"), loop_args(rounds));
        c.env("GMUX_TENANT", name).env("GMUX_LOG", "info").stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
        Tenant(Some(c.spawn().expect("tenant")))
    };
    // A policy is loaded for a tenant that has run; a's first process gets it while it runs.
    let mut running = spawn("a", "1000000");
    d.wait_commands("a", 10);
    let r = cli(&["policy", "load", soonest.to_str().expect("utf-8"), "--tenant", "a"]);
    assert!(
        r.stdout.contains("loaded policy 1 (soonest.o): evict_prepare, access; its memory programs run in the processes of that tenant"),
        "{}",
        r.describe()
    );
    let ps: serde_json::Value = serde_json::from_str(&cli(&["ps", "--json"]).stdout).expect("JSON");
    let a_id = ps["tenants"].as_array().and_then(|ts| ts.iter().find(|t| t["name"] == "a")).and_then(|t| t["id"].as_u64()).expect("a's id");
    std::thread::sleep(Duration::from_millis(300));
    let _ = running.child().kill();
    let out = running.0.take().expect("running").wait_with_output().expect("a's output");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("policy 1 (soonest.o) attached"), "a running process attaches it:\n{text}");
    let (a0, c0) = (d.stat("a", "bytes_h2d "), d.stat("a", "commands "));

    // Its trace lines reach `gmux events` too.
    let mut events = d.sb.gmux_cli(&["events", "--json"]);
    events.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::null());
    let mut events = Tenant(Some(events.spawn().expect("gmux events")));
    let lines = std::io::BufRead::lines(std::io::BufReader::new(events.child().stdout.take().expect("stdout")));
    let (tx, seen) = std::sync::mpsc::channel();
    std::thread::spawn(move || lines.map_while(Result::ok).for_each(|l| _ = tx.send(l)));
    std::thread::sleep(Duration::from_millis(300));

    // The same cyclic loop, three 4 MiB buffers under an 8 MiB limit, in a and in b.
    let (a, b) = (spawn("a", "150"), spawn("b", "150"));
    let (a, b) = (a.finish("a"), b.finish("b"));
    let traced: Vec<String> = seen.try_iter().filter(|l| l.contains("policy_trace")).collect();
    assert!(
        !traced.is_empty()
            && traced.iter().all(|l| l.contains("\"tenant\":\"a\",") && l.contains("\"policy\":1") && l.contains(&format!("\"text\":\"tenant {a_id}\""))),
        "a's trace lines in gmux events: {traced:?}"
    );
    drop(events);
    assert!(a.contains("mismatches: 0") && b.contains("mismatches: 0"), "{a}\n{b}");
    assert!(a.contains("policy 1 (soonest.o) attached"), "{a}");
    assert!(a.contains(&format!("policy 1 (soonest.o): tenant {a_id}")), "a's programs see its number {a_id}:\n{a}");
    assert!(!b.contains("soonest.o"), "b runs no policy:\n{b}");
    let a_rate = (d.stat("a", "bytes_h2d ") - a0) as f64 / (d.stat("a", "commands ") - c0) as f64;
    let b_rate = h2d_per_command(&d, "b");
    assert!(a_rate >= 1.5 * b_rate, "evicting the soonest needed first moves more: a {a_rate:.0} vs b {b_rate:.0} bytes in per command");

    // Unloaded: a process of a runs gmux's own order again.
    assert!(cli(&["policy", "unload", "1"]).status.success());
    let (a1, c1) = (d.stat("a", "bytes_h2d "), d.stat("a", "commands "));
    let a = spawn("a", "150").finish("a");
    assert!(!a.contains("soonest.o"), "{a}");
    let again = (d.stat("a", "bytes_h2d ") - a1) as f64 / (d.stat("a", "commands ") - c1) as f64;
    assert!(again <= 1.2 * b_rate, "after the unload a moves as b did: {again:.0} vs {b_rate:.0}");
}

#[test]
fn the_ebpf_lru_and_opt_move_the_same_bytes_as_the_built_in_ones_in_a_tenant() {
    let d = Daemon::start("policy-same-bytes", &["--hbm", "256M"]);
    let dir = d.sb.dir.path();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let Some(lru) = compile(&root.join("policies/lru.c"), &dir.join("lru.o")) else { return };
    let opt = compile(&root.join("policies/opt.c"), &dir.join("opt.o")).expect("clang");
    let cli = |args: &[&str]| run_within(&mut d.sb.gmux_cli(args), Duration::from_secs(20));
    // Five 4 MiB buffers under a 12 MiB limit, the order reversed every third round:
    // LRU and OPT evict differently.
    let run = |tenant: &str, evict: &str, rounds: &str| {
        let mut c = d.sb.gmux(Some("12M"), ["loop", "--buffers", "5", "--bytes", "4M", "--rounds", rounds, "--reverse-every", "3"]);
        c.env("GMUX_TENANT", tenant).env("GMUX_EVICT", evict);
        let r = run_within(&mut c, Duration::from_secs(60));
        assert!(r.status.success() && r.stdout.contains("mismatches: 0"), "{}", r.describe());
    };
    let tenants = [("lru", "lru", None), ("lru-ebpf", "lru", Some(&lru)), ("opt", "opt", None), ("opt-ebpf", "opt", Some(&opt))];
    let mut moved = Vec::new();
    for (tenant, evict, policy) in tenants {
        // A policy is loaded for a tenant that has run.
        run(tenant, evict, "1");
        if let Some(p) = policy {
            let r = cli(&["policy", "load", p.to_str().expect("utf-8"), "--tenant", tenant]);
            assert!(r.status.success(), "{}", r.describe());
        }
        let before = (d.stat(tenant, "bytes_h2d "), d.stat(tenant, "bytes_d2h "));
        run(tenant, evict, "30");
        moved.push((d.stat(tenant, "bytes_h2d ") - before.0, d.stat(tenant, "bytes_d2h ") - before.1));
    }
    assert_eq!(moved[1], moved[0], "the eBPF LRU moves what the built-in LRU moves (bytes in, bytes out)");
    assert_eq!(moved[3], moved[2], "the eBPF OPT moves what the built-in OPT moves");
    assert!(moved[2].0 < moved[0].0, "OPT moves less than LRU here: {moved:?}");
}

#[test]
fn gmux_policy_gives_a_process_its_own_memory_policy_without_a_daemon() {
    let sb = Sandbox::new("policy-own", 1 << 30);
    let dir = sb.dir.path();
    let soonest = dir.join("soonest.c");
    std::fs::write(&soonest, "#include \"gmux_bpf.h\"\nSEC(\"gmux/evict_prepare\") u64 soonest(struct gmux_evict_ctx *c) { return c->next_use; }\n")
        .expect("write");
    let Some(soonest) = compile(&soonest, &dir.join("soonest.o")) else { return };
    let run = |policy: Option<&Path>| {
        let mut c = sb.gmux_sub(&["run", "--standalone"], Some("8M"), ["loop", "--buffers", "3", "--bytes", "4M", "--rounds", "60"]);
        if let Some(p) = policy {
            c.env("GMUX_POLICY", p);
        }
        run_within(&mut c, Duration::from_secs(60))
    };
    let (plain, own) = (run(None), run(Some(&soonest)));
    for r in [&plain, &own] {
        assert!(r.status.success() && r.stdout.contains("mismatches: 0"), "{}", r.describe());
    }
    assert!(own.stderr.contains(&format!("policy {} attached (GMUX_POLICY)", soonest.display())), "{}", own.describe());
    let (p, o) = (summary(&plain).populated, summary(&own).populated);
    assert!(o as f64 >= 1.5 * p as f64, "evicting the soonest needed first brings more in: {o} vs {p} chunks");

    let r = run(Some(&dir.join("missing.o")));
    assert!(!r.status.success() && r.stderr.contains("GMUX_POLICY=") && r.stderr.contains("missing.o: cannot read it"), "{}", r.describe());
}

/// A memory program's maps live in each process that runs it: the process sends what
/// they hold about once a second and at exit, and `gmux policy map dump` shows each
/// process's under the daemon's own copy, after the process exited too.
#[test]
fn a_memory_programs_maps_are_read_from_the_processes_that_run_it() {
    let d = Daemon::start("policy-snapshots", &["--hbm", "256M"]);
    let dir = d.sb.dir.path();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let Some(lfu) = compile(&root.join("policies/lfu.c"), &dir.join("lfu.o")) else { return };
    let cli = |args: &[&str]| run_within(&mut d.sb.gmux_cli(args), Duration::from_secs(20));
    let r = cli(&["policy", "load", lfu.to_str().expect("utf-8")]);
    assert!(r.status.success(), "{}", r.describe());
    // Three 4 MiB buffers (two chunks each): each command uses its buffer's two chunks,
    // and `uses` counts them from the policy's attachment, which comes while the process
    // runs (it loads the policy when it registers).
    // Long enough that a policy attached late on a loaded machine still sees commands.
    let mut c = d.sb.gmux(Some("16M"), ["loop", "--buffers", "3", "--bytes", "4M", "--rounds", "2000"]);
    c.env("GMUX_TENANT", "a").env("GMUX_LOG", "info");
    let r = run_within(&mut c, Duration::from_secs(60));
    assert!(r.status.success() && r.stdout.contains("mismatches: 0") && r.stderr.contains("policy 1 (lfu.o) attached"), "{}", r.describe());
    // The last snapshot, sent at exit, may reach the daemon after the process is gone.
    let mut text = String::new();
    for _ in 0..50 {
        text = cli(&["policy", "map", "1", "uses", "dump"]).stdout;
        if text.contains(", exited, as it said") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let (head, process) = text.split_once("\nin process ").unwrap_or_else(|| panic!("no process's copy:\n{text}"));
    assert_eq!(head.lines().count(), 1, "the daemon's own copy is empty (no program of the daemon writes it):\n{text}");
    let mut lines = process.lines();
    let said = lines.next().expect("a heading");
    assert!(said.contains("of tenant \"a\", exited, as it said") && said.ends_with(" s ago: 6 entries"), "{text}");
    let uses: Vec<u64> = lines.map(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{l:?}"))).collect();
    assert_eq!(uses.len(), 6, "{text}");
    let (least, most) = (uses.iter().min().copied().unwrap_or(0), uses.iter().max().copied().unwrap_or(0));
    assert!(least >= 1 && most <= 2002 && most - least <= 2, "each chunk's uses since the policy attached, alike: {uses:?}");
}

/// `gmux policy map … update|delete` on a policy with memory programs writes the copy
/// in each process that runs them as well as the daemon's: the process's next snapshot
/// shows it.
#[test]
fn a_map_write_reaches_the_processes_that_run_the_policy() {
    let d = Daemon::start("policy-writes", &["--hbm", "256M"]);
    let dir = d.sb.dir.path();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let Some(lfu) = compile(&root.join("policies/lfu.c"), &dir.join("lfu.o")) else { return };
    let cli = |args: &[&str]| run_within(&mut d.sb.gmux_cli(args), Duration::from_secs(20));
    assert!(cli(&["policy", "load", lfu.to_str().expect("utf-8")]).status.success());
    let mut c = d.sb.gmux(Some("8M"), ["loop", "--buffers", "3", "--bytes", "4M", "--rounds", "1000000"]);
    c.env("GMUX_TENANT", "a").env("GMUX_LOG", "info").stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let mut running = Tenant(Some(c.spawn().expect("tenant")));
    d.wait_commands("a", 10);
    // The copy in the process: its snapshot, once the write has reached it (or not).
    let shows = |line: &str| {
        (0..60).any(|_| {
            std::thread::sleep(Duration::from_millis(100));
            cli(&["policy", "map", "1", "uses", "dump"]).stdout.split_once("\nin process ").is_some_and(|(_, p)| p.lines().any(|l| l == line))
        })
    };
    let copied = (0..60).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        cli(&["policy", "map", "1", "uses", "dump"]).stdout.contains("\nin process ")
    });
    assert!(copied, "the process's first snapshot");
    let r = cli(&["policy", "map", "1", "uses", "update", "4000000", "77"]);
    assert!(r.status.success() && r.stdout.contains("written in the daemon's copy and sent to 1 process running its memory programs"), "{}", r.describe());
    assert!(shows("4000000 77"), "the process's copy holds the write");
    let r = cli(&["policy", "map", "1", "uses", "delete", "4000000"]);
    assert!(r.status.success(), "{}", r.describe());
    assert!((0..60).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        let dump = cli(&["policy", "map", "1", "uses", "dump"]).stdout;
        dump.contains("\nin process ") && !dump.contains("\n4000000 ")
    }));
    // A key only the process's copy holds (its programs wrote it) is deleted there.
    let r = cli(&["policy", "map", "1", "uses", "delete", "1"]);
    assert!(
        r.status.success() && r.stdout.contains("sent to 1 process running its memory programs; the daemon's copy: map uses has no key 1"),
        "{}",
        r.describe()
    );
    // The process takes writes at its agent's next step: about 20 ms, longer on a loaded
    // machine.
    std::thread::sleep(Duration::from_millis(1000));
    let _ = running.child().kill();
    let out = running.0.take().expect("running").wait_with_output().expect("a's output");
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(text.matches("map uses written by `gmux policy map`").count(), 3, "{text}");
}

/// `gmux bench priority --runs` names its runs; a wrong one, or the policy run without a
/// policy, is a usage error before anything starts; so is `gmux bench serving`'s
/// gmux-admit without its policy.
#[test]
fn bench_priority_refuses_an_unknown_run_and_ebpf_without_a_policy() {
    let run = |args: &[&str]| {
        let out = Command::new(gmux_bin()).args(["bench", "priority"]).args(args).output().expect("gmux runs");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = run(&["--runs", "alone,fast"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--runs: unknown run \"fast\"; use alone, rr, priority or ebpf"), "{err}");
    let (code, err) = run(&["--runs", "priority,ebpf", "--repeat", "3"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--runs ebpf needs --rt-policy FILE.o"), "{err}");
    let (code, err) = run(&["--repeat", "0"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--repeat"), "{err}");
    let out = Command::new(gmux_bin()).args(["bench", "serving", "--systems", "native,gmux-admit"]).output().expect("gmux runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("gmux-admit needs --admission FILE.o"), "{err}");
}
