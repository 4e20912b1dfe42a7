//! `gmux record` on the CPU stand-in of the CUDA driver: `standin_app loop` under the real
//! CLI, its trace read back with gmux-sim's own reader and replayed in the simulator.

mod common;

use common::{number, run_within, Ran, Sandbox};
use gmux_sim::trace::{load_tenant, Range, Record};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

const MIB: u64 = 1 << 20;
const DEVICE: u64 = 1 << 30;
const PATIENCE: Duration = Duration::from_secs(60);

/// The loop recorded: 4 buffers of 3,000,000 bytes (2 chunks each, not a whole number
/// of them), one `fill` each, 3 rounds of one `add` each, one read-back each, then freed.
const BUFFERS: usize = 4;
const BYTES: u64 = 3_000_000;
const ROUNDS: usize = 3;

fn loop_args() -> Vec<String> {
    format!("loop --buffers {BUFFERS} --bytes {BYTES} --rounds {ROUNDS} --free").split(' ').map(str::to_owned).collect()
}

/// `gmux record -o TRACE [--mem-limit LIMIT] -- standin_app loop ...`, required to succeed.
fn record(sb: &Sandbox, trace: &Path, limit: Option<&str>) -> Ran {
    let o = trace.to_str().expect("utf-8 path");
    let r = run_within(&mut sb.gmux_sub(&["record", "--standalone", "-o", o], limit, loop_args()), PATIENCE);
    assert!(r.status.success(), "expected success:\n{}", r.describe());
    assert!(r.stdout.contains(&format!("loop: {BUFFERS} buffers, {ROUNDS} rounds, mismatches: 0")), "{}", r.describe());
    r
}

fn records(trace: &Path) -> Vec<Record> {
    let text = std::fs::read_to_string(trace).unwrap_or_else(|e| panic!("cannot read {}: {e}", trace.display()));
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l:?}: {e}"))).collect()
}

#[test]
fn record_writes_every_alloc_command_and_free() {
    let sb = Sandbox::new("record", DEVICE);
    let trace = sb.dir.path().join("loop.jsonl");
    let ran = record(&sb, &trace, Some("8M"));
    let recs = records(&trace);
    assert_eq!(recs[0], Record::Header { version: 1, chunk_bytes: 2 * MIB }, "{}", ran.describe());
    assert!(!recs[1..].iter().any(|r| matches!(r, Record::Header { .. })), "one header");

    // Allocations: as many as the app made, of the bytes it asked for, distinct ids.
    let allocs: Vec<(u32, u64)> = recs
        .iter()
        .filter_map(|r| match r {
            Record::Alloc { tenant, id, bytes, on_disk } => {
                assert_eq!((tenant.as_str(), *on_disk), ("app", false));
                Some((*id, *bytes))
            }
            _ => None,
        })
        .collect();
    assert_eq!(allocs.len(), BUFFERS);
    assert!(allocs.iter().all(|&(_, b)| b == BYTES), "{allocs:?}");
    let bytes: HashMap<u32, u64> = allocs.iter().copied().collect();
    assert_eq!(bytes.len(), BUFFERS, "ids are distinct: {allocs:?}");

    // Commands: fill ×4, add ×12 (kernels, on the app's stream), read-back ×4 (copies
    // on the legacy default stream); each touches exactly its buffer, whole.
    struct Cmd<'a> {
        stream: u32,
        kind: &'a str,
        name: &'a str,
        dur_us: f64,
        ws: &'a [Range],
        task_end: bool,
    }
    let cmds: Vec<Cmd> = recs
        .iter()
        .filter_map(|r| match r {
            Record::Cmd { tenant, stream, kind, name, dur_us, ws, task_end, arrival_us } => {
                assert_eq!((tenant.as_str(), *arrival_us), ("app", None));
                Some(Cmd { stream: *stream, kind, name, dur_us: *dur_us, ws, task_end: *task_end })
            }
            _ => None,
        })
        .collect();
    let kernels = BUFFERS + BUFFERS * ROUNDS;
    assert_eq!(cmds.len(), kernels + BUFFERS);
    // The app synchronizes its stream once, after the last kernel: that ends a task.
    let ends: Vec<usize> = cmds.iter().enumerate().filter(|(_, c)| c.task_end).map(|(i, _)| i).collect();
    assert_eq!(ends, vec![kernels - 1]);
    let names: Vec<(&str, &str)> = cmds.iter().map(|c| (c.kind, c.name)).collect();
    let mut want = vec![("kernel", "fill"); BUFFERS];
    want.extend(vec![("kernel", "add"); BUFFERS * ROUNDS]);
    want.extend(vec![("memcpy", "cuMemcpyDtoH_v2"); BUFFERS]);
    assert_eq!(names, want);
    let (kstream, cstream) = (cmds[0].stream, cmds[kernels].stream);
    assert_ne!(kstream, cstream, "the kernels' stream and the legacy default stream are two streams");
    assert!(cmds[..kernels].iter().all(|c| c.stream == kstream) && cmds[kernels..].iter().all(|c| c.stream == cstream));
    for (i, c) in cmds.iter().enumerate() {
        assert_eq!(c.ws.len(), 1, "command {i} touches one buffer: {:?}", c.ws);
        let r = c.ws[0];
        assert_eq!((r.off, Some(r.len), r.w), (0, bytes.get(&r.alloc).copied(), false), "command {i}: {r:?} is a whole recorded allocation");
        assert_eq!(r.alloc, allocs[i % BUFFERS].0, "command {i} touches buffer {}", i % BUFFERS);
        assert!(c.dur_us.is_finite() && c.dur_us >= 0.0, "command {i}: dur_us {}", c.dur_us);
    }
    let busy: f64 = cmds[..kernels].iter().map(|c| c.dur_us).sum();
    assert!(busy > 0.0, "the stand-in's kernels take host time: {busy} µs in all");
    assert!(!ran.stderr.contains("no measured duration"), "every command was timed, the last ones at exit:\n{}", ran.describe());

    // Frees: every allocation, after the last command.
    let frees: Vec<(usize, u32)> = recs
        .iter()
        .enumerate()
        .filter_map(|(n, r)| match r {
            Record::Free { id, .. } => Some((n, *id)),
            _ => None,
        })
        .collect();
    let mut freed: Vec<u32> = frees.iter().map(|f| f.1).collect();
    freed.sort_unstable();
    let mut ids: Vec<u32> = allocs.iter().map(|a| a.0).collect();
    ids.sort_unstable();
    assert_eq!(freed, ids);
    let last_cmd = recs.iter().rposition(|r| matches!(r, Record::Cmd { .. })).expect("commands");
    assert!(frees.iter().all(|f| f.0 > last_cmd), "frees come after the last command");
    assert_eq!(recs.len(), 1 + BUFFERS + cmds.len() + BUFFERS);

    // gmux-sim's own loader takes it.
    let t = load_tenant(&trace, None).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(t.allocs.len(), BUFFERS);
    assert!(t.allocs.iter().all(|a| a.bytes == BYTES && !a.on_disk));
    assert_eq!(t.cmds.len(), kernels + BUFFERS);
    assert!(t.cmds.iter().all(|c| c.ws.len() == 1 && c.ws[0].len == BYTES));
}

/// `oversub` over three times the limit, on 4 streams and the legacy default stream,
/// with copies, memsets, kernels and frees: one `cmd` line per command the shim released
/// (its exit summary's count), one per stream it saw, every range inside an allocation
/// live at that point (so lines are in release order although durations arrive later).
#[test]
fn record_keeps_release_order_over_many_streams() {
    let sb = Sandbox::new("record-oversub", DEVICE);
    let trace = sb.dir.path().join("oversub.jsonl");
    let o = trace.to_str().unwrap();
    let args: Vec<String> = format!("oversub --total {} --buffers 40 --ops 800 --seed 1 --streams 4", 48 * MIB).split(' ').map(str::to_owned).collect();
    let r = run_within(&mut sb.gmux_sub(&["record", "--standalone", "-o", o], Some("16M"), args), PATIENCE);
    assert!(r.status.success(), "{}", r.describe());
    assert_eq!(number(&r.stdout, "checksum mismatches: "), 0, "{}", r.describe());
    let summary = r.stderr.lines().find(|l| l.starts_with("gmux: limit ")).unwrap_or_else(|| panic!("no summary:\n{}", r.describe()));
    let recs = records(&trace);
    let (mut live, mut ever) = (HashMap::new(), HashSet::new());
    let (mut cmds, mut frees, mut streams, mut kinds) = (0, 0, HashSet::new(), HashSet::new());
    for (n, rec) in recs.iter().enumerate().skip(1) {
        match rec {
            Record::Alloc { id, bytes, .. } => {
                assert!(ever.insert(*id), "line {n}: id {id} reused");
                live.insert(*id, *bytes);
            }
            Record::Free { id, .. } => {
                assert!(live.remove(id).is_some(), "line {n}: free of {id}, not live");
                frees += 1;
            }
            Record::Cmd { stream, kind, dur_us, ws, .. } => {
                cmds += 1;
                streams.insert(*stream);
                kinds.insert(kind.clone());
                assert!(dur_us.is_finite() && *dur_us >= 0.0, "line {n}: {dur_us}");
                for w in ws {
                    assert_eq!((w.off, Some(w.len)), (0, live.get(&w.alloc).copied()), "line {n}: {w:?} is not a live allocation, whole");
                }
            }
            Record::Header { .. } => panic!("line {n}: a second header"),
            Record::Mark { .. } => panic!("line {n}: a mark, but the program never called cuProfilerStart"),
        }
    }
    assert_eq!(cmds, number(summary, "commands "), "{summary}");
    assert_eq!(streams.len() as u64, number(summary, "streams "), "{summary}");
    assert!(cmds >= 800, "{cmds}");
    assert_eq!((frees, live.len()), (ever.len(), 0), "every allocation is freed by the end");
    assert_eq!(kinds, ["kernel", "memcpy", "memset"].map(String::from).into_iter().collect());
    assert!(!r.stderr.contains("no measured duration"), "{}", r.describe());
    let t = load_tenant(&trace, Some("app")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((t.allocs.len(), t.cmds.len() as u64), (ever.len(), cmds));
}

#[test]
fn record_refuses_an_existing_file_unless_forced() {
    let sb = Sandbox::new("record-exists", DEVICE);
    let trace = sb.dir.path().join("old.jsonl");
    std::fs::write(&trace, "keep me\n").unwrap();
    let o = trace.to_str().unwrap();
    let r = run_within(&mut sb.gmux_sub(&["record", "--standalone", "-o", o], None, loop_args()), PATIENCE);
    assert_eq!(r.status.code(), Some(2), "{}", r.describe());
    assert_eq!(r.stderr, format!("gmux: {o} already exists; pass --force to overwrite it or give another -o FILE\n"), "{}", r.describe());
    assert!(r.stdout.is_empty(), "the program did not run: {}", r.describe());
    assert_eq!(std::fs::read_to_string(&trace).unwrap(), "keep me\n");

    let r = run_within(&mut sb.gmux_sub(&["record", "--standalone", "--force", "-o", o], None, loop_args()), PATIENCE);
    assert!(r.status.success(), "{}", r.describe());
    let recs = records(&trace);
    assert_eq!(recs[0], Record::Header { version: 1, chunk_bytes: 2 * MIB });
    assert_eq!(recs.iter().filter(|r| matches!(r, Record::Cmd { .. })).count(), BUFFERS * (ROUNDS + 2));
}

#[test]
fn a_recorded_run_replays_in_the_simulator() {
    let sb = Sandbox::new("record-replay", DEVICE);
    let trace = sb.dir.path().join("loop.jsonl");
    record(&sb, &trace, None);
    // Sizes scale with the subscription: at 50% the 4 buffers take a chunk each (8 MiB,
    // under the 16 MiB budget); at 300%, 5 chunks each (40 MiB), so the replay migrates.
    let scenario = sb.dir.path().join("replay.toml");
    let toml = format!(
        "duration = \"200ms\"\ngpu = \"16M\"\nsubscriptions = [50, 300]\nsystems = [\"in-hbm\", \"gmux-exact\"]\n\n[[tenant]]\nname = \"app\"\nworkload = {{ kind = \"trace\", path = {:?}, tenant = \"app\", repeat = true }}\n",
        trace.to_str().unwrap()
    );
    std::fs::write(&scenario, toml).unwrap();
    let s = gmux_sim::load_scenario(&scenario).unwrap_or_else(|e| panic!("{e}"));
    let report = gmux_sim::run(&s, &mut |_| {}).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.results.len(), 4);
    for row in &report.results {
        assert_eq!(row.violations, 0, "{row:?}");
        assert!(row.sim_seconds > 0.0, "{row:?}");
    }
    let row =
        |sys: &str, sub: f64| report.results.iter().find(|r| r.system == sys && r.subscription == Some(sub)).unwrap_or_else(|| panic!("no row {sys} {sub}"));
    assert_eq!((row("gmux-exact", 50.0).bytes_h2d, row("gmux-exact", 50.0).bytes_d2h), (0, 0), "{:?}", row("gmux-exact", 50.0));
    let over = row("gmux-exact", 300.0);
    assert!(over.bytes_h2d > 0 && over.bytes_h2d % (2 * MIB) == 0, "{over:?}");
    assert!(over.bytes_d2h > 0, "{over:?}");
}
