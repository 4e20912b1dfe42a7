//! CUDA graphs under `libgmux.so` on the CPU stand-in of the driver: captured and
//! composed graphs, updates of executable graphs, and a launch in the middle of a capture.
//! The stand-in aborts on any access to a chunk that is not mapped, and refuses (as the
//! driver does) the synchronizing calls that would break a capture in global mode.

mod common;

use common::summary::{assert_no_shim_complaints, summary};
use common::{number, run_within, Ran, Sandbox};
use std::time::Duration;

const MIB: u64 = 1 << 20;
const DEVICE: u64 = 1 << 30;
const PATIENCE: Duration = Duration::from_secs(60);

fn graph_run(limit: &str, args: &[&str]) -> Ran {
    let sb = Sandbox::new("graph", DEVICE);
    run_within(&mut sb.gmux(Some(limit), args), PATIENCE)
}

/// [`graph_run`] with `GMUX_OVERSIZE=exit`: a command over the limit ends the process.
fn graph_run_strict(limit: &str, args: &[&str]) -> Ran {
    let sb = Sandbox::new("graph", DEVICE);
    run_within(sb.gmux(Some(limit), args).env("GMUX_OVERSIZE", "exit"), PATIENCE)
}

#[test]
fn graph_launches_bring_in_exactly_what_their_nodes_touch() {
    // Six 4 MiB buffers under 8 MiB: each graph's working set is two buffers, so every
    // launch evicts the other graph's and a launch that missed a buffer would abort.
    let r = graph_run("8M", &["graph", "--bytes", "4M", "--rounds", "3"]);
    assert!(r.status.success(), "{}", r.describe());
    assert_eq!(number(&r.stdout, "after "), 12, "{}", r.describe());
    let s = summary(&r);
    assert!(s.peak_resident <= (8 * MIB) as f64, "{s:?}");
    // Each of the 12 launches after the first brings in two 4 MiB buffers (two chunks each).
    assert!(s.populated >= 11 * 4, "launches did not alternate residency: {s:?}\n{}", r.describe());
    assert!(s.evicted >= 11 * 4, "{s:?}");
    assert_no_shim_complaints(&r);
}

#[test]
fn a_graph_larger_than_the_limit_runs_in_parts() {
    // Four 4 MiB buffers chained by copies under 8 MiB: parts of at most two buffers.
    let r = graph_run("8M", &["graph-split", "--buffers", "4", "--bytes", "4M"]);
    assert!(r.status.success() && r.stdout.contains("4 buffers checked after 2 launches"), "{}", r.describe());
    let s = summary(&r);
    assert!(s.peak_resident <= (8 * MIB) as f64, "{s:?}");
    // Each launch runs at least two parts, each a command of its own.
    assert!(s.commands >= 4 + 4, "{s:?}\n{}", r.describe());
    assert_no_shim_complaints(&r);
}

#[test]
fn a_graph_node_larger_than_the_limit_runs_from_host_memory_or_is_refused_by_name() {
    // One node copies 12 MiB under an 8 MiB limit: the graph cannot be cut, and runs
    // whole with what the limit cannot hold mapped on the host.
    let r = graph_run("8M", &["graph-split", "--buffers", "2", "--bytes", "12M"]);
    assert!(r.status.success() && r.stdout.contains("2 buffers checked after 2 launches"), "{}", r.describe());
    assert!(r.stderr.contains("cannot run in parts") && r.stderr.contains("runs from host memory"), "{}", r.describe());
    let s = summary(&r);
    assert!(s.peak_resident <= (8 * MIB) as f64, "{s:?}");

    let r = graph_run_strict("8M", &["graph-split", "--buffers", "2", "--bytes", "12M"]);
    assert_eq!(r.status.code(), Some(86), "{}", r.describe());
    let line = r.stderr.lines().find(|l| l.contains("raise --mem-limit")).unwrap_or_else(|| panic!("{}", r.describe()));
    assert!(line.contains("cuGraphLaunch") && line.contains("8.0 MiB"), "{line}");
    assert!(r.stderr.contains("cannot run in parts"), "the reason it was not split:\n{}", r.describe());

    let sb = Sandbox::new("graph", DEVICE);
    let r = run_within(sb.gmux(Some("8M"), ["graph-split", "--buffers", "2", "--bytes", "12M"]).env("GMUX_OVERSIZE", "error"), PATIENCE);
    assert_eq!(number(&r.stdout, "launch result: "), 2, "CUDA_ERROR_OUT_OF_MEMORY expected:\n{}", r.describe());
}

#[test]
fn graphs_run_natively_on_the_standin() {
    let sb = Sandbox::new("graph", DEVICE);
    let r = run_within(&mut sb.app(["graph", "--bytes", "4M", "--rounds", "3"]), PATIENCE);
    assert!(r.status.success() && r.stdout.contains("6 buffers checked"), "{}", r.describe());
    let r = run_within(&mut sb.app(["graph-split", "--buffers", "4", "--bytes", "4M"]), PATIENCE);
    assert!(r.status.success() && r.stdout.contains("4 buffers checked"), "{}", r.describe());
}

#[test]
fn memory_allocated_during_a_capture_is_mapped_for_the_copies_captured_into_it() {
    let r = graph_run("16M", &["graph-temp", "--bytes", "4M"]);
    assert!(r.status.success(), "{}", r.describe());
    assert_eq!(number(&r.stdout, "graph-temp: "), 4 * MIB, "{}", r.describe());
    assert_no_shim_complaints(&r);
    let sb = Sandbox::new("graph", DEVICE);
    let r = run_within(&mut sb.app(["graph-temp", "--bytes", "4M"]), PATIENCE);
    assert!(r.status.success(), "natively:\n{}", r.describe());
}

#[test]
fn memory_allocated_in_stream_order_inside_a_capture_stays_the_graphs() {
    // cuMemAllocAsync on the capturing stream is served by gmux at capture time, the
    // captured cuMemFreeAsync leaves it to the graph, and 4 MiB under 16 MiB: no pressure;
    // under 8 MiB the temporary and the buffer do not fit beside the new allocation.
    for limit in ["16M", "8M"] {
        let r = graph_run(limit, &["graph-temp", "--bytes", "4M", "--ordered"]);
        assert!(r.status.success(), "--mem-limit {limit}: {}", r.describe());
        assert_eq!(number(&r.stdout, "graph-temp: "), 4 * MIB, "{}", r.describe());
        assert!(!r.stderr.contains("not supported"), "{}", r.describe());
    }
}

#[test]
fn graph_nodes_are_mapped_as_they_are_added() {
    // Two 8 MiB buffers: the whole graph fits 24 MiB.
    let r = graph_run("24M", &["graph-nodes", "--bytes", "8M", "--copy", "2M"]);
    assert!(r.status.success(), "{}", r.describe());
    assert!(r.stdout.contains("4194304 bytes checked"), "{}", r.describe());
    assert_no_shim_complaints(&r);

    // Under 12 MiB both buffers do not fit, but what each node touches does (the copy 2 MiB
    // a side, the memset 2 MiB): the nodes are added; the launch, which needs both buffers
    // whole, runs with 4 MiB of them mapped on the host, or is refused by name.
    let r = graph_run("12M", &["graph-nodes", "--bytes", "8M", "--copy", "2M"]);
    assert!(r.status.success() && r.stdout.contains("4194304 bytes checked"), "{}", r.describe());
    assert!(summary(&r).peak_resident <= (12 * MIB) as f64, "{}", r.describe());
    let r = graph_run_strict("12M", &["graph-nodes", "--bytes", "8M", "--copy", "2M"]);
    assert!(r.stdout.contains("nodes added"), "{}", r.describe());
    assert_eq!(r.status.code(), Some(86), "{}", r.describe());
    assert!(r.stderr.contains("cuGraphLaunch"), "{}", r.describe());

    // A copy at an offset: the driver also checks each side's address before its offset,
    // which the copied bytes do not cover.
    let r = graph_run("12M", &["graph-nodes", "--bytes", "16M", "--copy", "2M", "--offset", "8M"]);
    assert!(r.status.success() && r.stdout.contains("4194304 bytes checked"), "{}", r.describe());
    let r = graph_run_strict("12M", &["graph-nodes", "--bytes", "16M", "--copy", "2M", "--offset", "8M"]);
    assert!(r.stdout.contains("nodes added"), "{}", r.describe());
    assert_eq!(r.status.code(), Some(86), "{}", r.describe());
    let sb = Sandbox::new("graph", DEVICE);
    let r = run_within(&mut sb.app(["graph-nodes", "--bytes", "16M", "--copy", "2M", "--offset", "8M"]), PATIENCE);
    assert!(r.status.success() && r.stdout.contains("4194304 bytes checked"), "natively:\n{}", r.describe());

    // A node whose own bytes do not fit: refused by name as it is added, not with the
    // driver's bare invalid-value error (the driver wants a node's memory on the device,
    // so it is never mapped on the host).
    let r = graph_run("12M", &["graph-nodes", "--bytes", "16M", "--copy", "8M"]);
    assert!(!r.stdout.contains("nodes added"), "{}", r.describe());
    assert_eq!(r.status.code(), Some(86), "{}", r.describe());
    let line = r.stderr.lines().find(|l| l.contains("raise --mem-limit")).unwrap_or_else(|| panic!("{}", r.describe()));
    assert!(line.contains("cuGraphAddMemcpyNode") && line.contains("16.0 MiB") && line.contains("12.0 MiB"), "{line}");

    let sb = Sandbox::new("graph", DEVICE);
    let r = run_within(&mut sb.app(["graph-nodes", "--bytes", "16M", "--copy", "8M"]), PATIENCE);
    assert!(r.status.success() && r.stdout.contains("16777216 bytes checked"), "natively:\n{}", r.describe());
}
