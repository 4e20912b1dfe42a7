//! Memory the program reaches other than through `cuMemAlloc`, and operations larger
//! than the limit, under `libgmux.so` on the CPU stand-in: the program's own VMM
//! allocations are counted and evicted like gmux's, and copies and memsets larger than the
//! limit stream through it. Every byte is checked by the program.

mod common;

use common::summary::{assert_no_shim_complaints, size_at, summary};
use common::{number, run_within, Ran, Sandbox};
use std::time::Duration;

const MIB: u64 = 1 << 20;
const DEVICE: u64 = 1 << 30;
const PATIENCE: Duration = Duration::from_secs(60);

fn under_gmux(limit: &str, args: &[&str]) -> Ran {
    let sb = Sandbox::new("memory", DEVICE);
    run_within(&mut sb.gmux(Some(limit), args), PATIENCE)
}

/// `peak allocated` of the shim's summary, in bytes.
fn peak_allocated(r: &Ran) -> f64 {
    let line = r.stderr.lines().find(|l| l.starts_with("gmux: limit ")).unwrap_or_else(|| panic!("{}", r.describe()));
    size_at(line, "peak allocated ")
}

#[test]
fn the_programs_own_vmm_allocations_are_counted_and_evicted() {
    // Four 4 MiB handles under an 8 MiB limit: two fit at once.
    let r = under_gmux("8M", &["app-vmm", "--handles", "4", "--bytes", "4M"]);
    assert!(r.status.success() && r.stdout.contains("app-vmm: 4 handles checked"), "{}", r.describe());
    assert_eq!(peak_allocated(&r), (16 * MIB) as f64, "every mapped handle counts:\n{}", r.describe());
    let s = summary(&r);
    assert!(s.peak_resident <= (8 * MIB) as f64, "{s:?}");
    assert!(s.evicted >= 4, "two handles must have been evicted (2 chunks each): {s:?}");
    assert!(s.populated >= 4, "and brought back for the read-back: {s:?}");
    assert_no_shim_complaints(&r);
}

#[test]
fn the_programs_own_vmm_allocations_work_natively() {
    let sb = Sandbox::new("memory", DEVICE);
    let r = run_within(&mut sb.app(["app-vmm", "--handles", "4", "--bytes", "4M"]), PATIENCE);
    assert!(r.status.success() && r.stdout.contains("4 handles checked"), "{}", r.describe());
}

#[test]
fn a_physical_allocation_mapped_twice_shows_one_memory_at_both_addresses() {
    // Three 2 MiB handles mapped twice, and a 6 MiB ballast under an 8 MiB limit: the
    // ballast's kernel pushes the handles out, and they come back at both addresses.
    // Either mapping may go first; the memory lives on at the other.
    for (unmap, drop) in [("deferred", "first"), ("strict", "first"), ("deferred", "second")] {
        let sb = Sandbox::new("memory", DEVICE);
        let mut cmd = sb.gmux(Some("8M"), ["app-alias", "--handles", "3", "--bytes", "2M", "--ballast", "6M", "--drop", drop]);
        let r = run_within(cmd.env("GMUX_UNMAP", unmap), PATIENCE);
        assert!(r.status.success() && r.stdout.contains("app-alias: 3 handles checked"), "GMUX_UNMAP={unmap}, dropping the {drop} mapping: {}", r.describe());
        assert_eq!(peak_allocated(&r), (12 * MIB) as f64, "the handles count once, not once per address:\n{}", r.describe());
        let s = summary(&r);
        assert!(s.peak_resident <= (8 * MIB) as f64, "{s:?}");
        assert!(s.evicted >= 3 && s.populated >= 3, "the ballast pushed the handles out and they came back: {s:?}");
        assert_no_shim_complaints(&r);
    }
}

#[test]
fn a_physical_allocation_mapped_twice_works_natively() {
    let sb = Sandbox::new("memory", DEVICE);
    for drop in ["first", "second"] {
        let r = run_within(&mut sb.app(["app-alias", "--handles", "3", "--bytes", "2M", "--ballast", "6M", "--drop", drop]), PATIENCE);
        assert!(r.status.success() && r.stdout.contains("3 handles checked"), "{}", r.describe());
    }
}

#[test]
fn copies_and_memsets_larger_than_the_limit_stream_through_it() {
    // Two 20 MiB buffers under 8 MiB: an upload, a memset, a device copy and a download,
    // each over a whole buffer.
    let r = under_gmux("8M", &["big-copy", "--bytes", "20M"]);
    assert!(r.status.success(), "{}", r.describe());
    assert_eq!(number(&r.stdout, "big-copy: "), 20 * MIB, "{}", r.describe());
    let s = summary(&r);
    assert!(s.peak_resident <= (8 * MIB) as f64, "{s:?}");
    // Pieces of 2 MiB (a quarter of the limit): 10 for the upload, 5 for the memset of
    // half the buffer, 10 for the device copy and 10 for the download.
    assert_eq!(s.commands, 35, "{s:?}");
    assert_no_shim_complaints(&r);
}

#[test]
fn a_box_copy_larger_than_the_limit_streams_through_it() {
    // A 3D copy between two 32 MiB volumes under 8 MiB: pieces of whole slices (256 KiB
    // each), at most 2 MiB a side. The stand-in, as the driver, refuses a copy whose
    // address (before its offsets) is not mapped, so each piece names its own first byte.
    let r = under_gmux("8M", &["big-box", "--bytes", "32M"]);
    assert!(r.status.success(), "{}", r.describe());
    assert_eq!(number(&r.stdout, "big-box: "), 32 * MIB, "{}", r.describe());
    let s = summary(&r);
    assert!(s.peak_resident <= (8 * MIB) as f64, "{s:?}");
    // Upload 16 pieces, memset 16, box 16, download 16.
    assert_eq!(s.commands, 64, "{s:?}\n{}", r.describe());
    assert_no_shim_complaints(&r);
    let sb = Sandbox::new("memory", DEVICE);
    let r = run_within(&mut sb.app(["big-box", "--bytes", "16M"]), PATIENCE);
    assert!(r.status.success() && r.stdout.contains("16777216 bytes checked"), "natively:\n{}", r.describe());
}

#[test]
fn pointers_a_kernel_reads_from_a_module_global_are_brought_in() {
    // Two 2 MiB buffers reached only through a module global, and two 4 MiB ballasts used
    // before each gather: together they fill the 8 MiB limit, so unless the buffers count
    // in every working set they are evicted and the gather touches unmapped memory.
    let r = under_gmux("8M", &["global-refs", "--buffers", "2", "--bytes", "2M", "--ballast", "4M", "--rounds", "3"]);
    assert!(r.status.success() && r.stdout.contains("2 buffers checked after 3 rounds"), "{}", r.describe());
    let s = summary(&r);
    assert!(s.peak_resident <= (8 * MIB) as f64, "{s:?}");
    assert!(s.evicted >= 2 * 3, "the ballasts replace each other every round: {s:?}");
    assert_no_shim_complaints(&r);
    let sb = Sandbox::new("memory", DEVICE);
    let r = run_within(&mut sb.app(["global-refs"]), PATIENCE);
    assert!(r.status.success(), "natively:\n{}", r.describe());
}

#[test]
fn a_kernel_that_finds_its_memory_outside_its_parameters_gets_all_of_it() {
    // Four 4 MiB buffers under an 8 MiB limit, and a kernel named like NCCL's that reaches
    // them only through a table in host memory: it runs with every buffer resident or
    // mapped from the host, never with one evicted.
    let r = under_gmux("8M", &["opaque", "--buffers", "4", "--bytes", "4M", "--rounds", "4"]);
    assert!(r.status.success() && r.stdout.contains("4 buffers checked after 4 rounds"), "{}", r.describe());
    let s = summary(&r);
    assert!(s.peak_resident <= (8 * MIB) as f64, "{s:?}");
    assert!(s.evicted >= 4, "the buffers replace each other: {s:?}");
    let sb = Sandbox::new("memory", DEVICE);
    let r = run_within(&mut sb.app(["opaque"]), PATIENCE);
    assert!(r.status.success(), "natively:\n{}", r.describe());
}

#[test]
fn small_allocations_share_chunks_and_come_back_intact() {
    // 192 buffers of 1 MiB (cuBLAS's batched matrices, say) under a 32 MiB limit: two to a
    // chunk, so the limit counts 192 MiB, not a 2 MiB chunk each; every buffer is evicted
    // and brought back, and every byte checked.
    let r = under_gmux("32M", &["loop", "--buffers", "192", "--bytes", "1M", "--rounds", "2"]);
    assert!(r.status.success() && r.stdout.contains("mismatches: 0"), "{}", r.describe());
    let allocated = peak_allocated(&r);
    assert!(allocated <= 1.05 * (192 * MIB) as f64, "192 MiB counted as {} MiB:\n{}", allocated / MIB as f64, r.describe());
    let s = summary(&r);
    assert!(s.peak_resident <= (32 * MIB) as f64, "{s:?}");
    assert!(s.evicted >= 80 && s.populated >= 80, "the packs must have been evicted and brought back: {s:?}");
    // Odd sizes share chunks too, and free their slots (the packs then go back).
    let r = under_gmux("8M", &["loop", "--buffers", "40", "--bytes", "300K", "--rounds", "3", "--free"]);
    assert!(r.status.success() && r.stdout.contains("mismatches: 0"), "{}", r.describe());
    let allocated = peak_allocated(&r);
    assert!(allocated <= 1.2 * (40 * 300 * 1024) as f64, "40 x 300 KiB counted as {} MiB", allocated / MIB as f64);
    assert_no_shim_complaints(&r);
}

#[test]
fn pointers_in_a_slot_bring_in_only_what_that_slot_names() {
    // Two pointer tables share a pack; each names two of four 4 MiB buffers. A gather
    // through one table needs its two buffers and the pack, 10 MiB, which a 12 MiB limit
    // holds; were the tables' pointers counted for the whole pack, every gather would need
    // all four buffers (18 MiB) and end the process as oversized.
    let r = under_gmux("12M", &["packed-tables", "--buffers", "4", "--bytes", "4M", "--rounds", "3"]);
    assert!(r.status.success() && r.stdout.contains("packed-tables: 4 buffers checked"), "{}", r.describe());
    let s = summary(&r);
    assert!(s.peak_resident <= (12 * MIB) as f64, "{s:?}");
    assert!(s.evicted >= 2 * 2, "the halves replace each other: {s:?}");
    assert_no_shim_complaints(&r);
    let sb = Sandbox::new("memory", DEVICE);
    let r = run_within(&mut sb.app(["packed-tables"]), PATIENCE);
    assert!(r.status.success(), "natively:\n{}", r.describe());
}

#[test]
fn pointers_in_a_large_upload_that_starts_with_pointers_are_followed() {
    // A table of 8200 pointers (65,600 bytes, over the 64 KiB scanned in every upload) to
    // two 4 MiB buffers; an 8 MiB ballast pushes them out of the 12 MiB limit before each
    // gather. Unmapped at once (`GMUX_UNMAP=strict`), a buffer the gather's working set
    // missed would fault on the stand-in.
    let sb = Sandbox::new("memory", DEVICE);
    let args = ["large-table", "--buffers", "2", "--bytes", "4M", "--entries", "8200", "--ballast", "8M", "--rounds", "2"];
    let r = run_within(sb.gmux(Some("12M"), args).env("GMUX_UNMAP", "strict"), PATIENCE);
    assert!(r.status.success() && r.stdout.contains("large-table: 2 buffers checked"), "{}", r.describe());
    let s = summary(&r);
    assert!(s.peak_resident <= (12 * MIB) as f64 && s.evicted >= 2 * 2, "the buffers leave and come back: {s:?}");
    assert_no_shim_complaints(&r);
    let r = run_within(&mut sb.app(args), PATIENCE);
    assert!(r.status.success(), "natively:\n{}", r.describe());
}

/// `created` (chunks backed for the first time) and `freed ranges reused` of the summary.
fn created_and_reused(r: &Ran) -> (u64, u64) {
    let line = r.stderr.lines().find(|l| l.starts_with("gmux: limit ")).unwrap_or_else(|| panic!("{}", r.describe()));
    let reused = if line.contains("freed ranges reused ") { number(line, "freed ranges reused ") } else { 0 };
    (summary(r).created, reused)
}

#[test]
fn a_buffer_freed_in_stream_order_is_not_handed_out_while_a_kernel_uses_it() {
    let r = under_gmux("64M", &["free-async", "--bytes", "4M", "--ms", "300"]);
    assert!(r.status.success(), "{}", r.describe());
    assert!(r.stdout.contains("pattern intact, during the kernel: new, after: reused"), "{}", r.describe());
    assert_no_shim_complaints(&r);
}

#[test]
fn tensors_allocated_and_freed_in_stream_order_reuse_their_ranges_and_keep_their_data() {
    // Eight persistent buffers (23 MiB with the pack of the three small ones) and, every
    // round, a fresh buffer of each size, five of them ranges of their own; under 64M
    // nothing is evicted, under 16M the persistent buffers go out and come back.
    let (mut created, mut evicted) = (Vec::new(), Vec::new());
    for (limit, recycle) in [("64M", None), ("64M", Some("0")), ("16M", None), ("16M", Some("0"))] {
        let sb = Sandbox::new("memory", DEVICE);
        let mut cmd = sb.gmux(Some(limit), ["churn", "--rounds", "20"]);
        if let Some(v) = recycle {
            cmd.env("GMUX_RECYCLE", v);
        }
        let r = run_within(&mut cmd, PATIENCE);
        let what = format!("--mem-limit {limit}, GMUX_RECYCLE={recycle:?}");
        assert!(r.status.success() && r.stdout.contains("churn: 8 buffers checked"), "{what}: {}", r.describe());
        let line = r.stderr.lines().find(|l| l.starts_with("gmux: limit ")).expect("summary");
        assert_eq!(size_at(line, "allocated "), (23 * MIB) as f64, "{what}: freed buffers no longer count, kept or not: {line}");
        assert!(summary(&r).peak_resident <= size_at(line, "gmux: limit "), "{what}: {line}");
        created.push(created_and_reused(&r));
        evicted.push(summary(&r).evicted);
        assert_no_shim_complaints(&r);
    }
    // Kernels given the addresses of freed buffers, under pressure: freed ranges go to make
    // room while such a kernel's working set names them.
    let sb = Sandbox::new("memory", DEVICE);
    let r = run_within(&mut sb.gmux(Some("32M"), ["churn", "--rounds", "20", "--stale"]), PATIENCE);
    assert!(r.status.success() && r.stdout.contains("churn: 8 buffers checked"), "--stale: {}", r.describe());
    assert_no_shim_complaints(&r);
    let [(kept, reused), (fresh, none), ..] = created[..] else { unreachable!() };
    assert_eq!(none, 0, "GMUX_RECYCLE=0 keeps nothing");
    assert!(reused >= 19 * 5, "after the first round, the five ranges of every round are freed ones: {reused}");
    assert!(kept * 5 < fresh, "reused ranges need no new memory: {kept} chunks created against {fresh}");
    assert!(evicted[2] > 0, "under 16M the persistent buffers go out: {evicted:?}");
    assert!(evicted[2] <= evicted[3], "kept ranges go before a plan evicts, so they add no evictions: {evicted:?}");
}
