//! An "unmodified CUDA program" for gmux's tests on the CPU stand-in of the driver.
//!
//! It links no CUDA symbol: it `dlopen`s `libcuda.so.1` (found through
//! `LD_LIBRARY_PATH`), gets `cuGetProcAddress_v2` with `dlsym` and resolves every other
//! driver function through it, as the CUDA runtime does (`dlsym-direct` resolves with
//! `dlsym(RTLD_DEFAULT, ...)` instead, as a program linked against libcuda would). Its
//! "kernels" are host functions registered with the stand-in, which reach device memory
//! through `gmuxStandinRead` / `gmuxStandinWrite`.
//!
//! Subcommands print one summary line and exit 0, or exit 1 with a message:
//! `oversub --total BYTES --buffers N --ops K --seed S [--streams M] [--counters]`
//! (`--counters` adds a line with the stand-in's VMM call counters after the ops, before
//! the final read-backs and frees), `sync`,
//! `info [--total BYTES]`, `dlsym-direct`, `procaddr-ptsz`,
//! `extra-params [--ballast BYTES]` (a buffer filled before each launch, to push the
//! others out under a memory limit), `too-big --bytes N [--check 1]` (one `add` over N bytes;
//! exits 0 if the launch returns CUDA_ERROR_OUT_OF_MEMORY or succeeds, with `--check`
//! after a pattern was copied in and every word came back right),
//! `fault-unmapped [--mode launch|noaccess|copy|stale]` (expected to be aborted),
//! `second-device` (an allocation with device 1's context current; see `probes.rs`),
//! `devices --devices N --buffers B --bytes S --rounds R` (one process on several devices,
//! with copies and a kernel across them; see `devices.rs`),
//! `loop --buffers N --bytes B --rounds R [--reverse-every K] [--free]` (a training-like loop:
//! every round adds 1 to each buffer in the same order, reversed every K rounds if K is
//! given, so that a forecast from history is sometimes wrong; then every buffer is
//! checked, and freed with `--free`), `graph --bytes B --rounds R`, `graph-split
//! --buffers N --bytes B`, `graph-temp --bytes B`, `graph-nodes --bytes B --copy C` (CUDA graphs: see `graphs.rs`), `app-vmm --handles N --bytes B` and
//! `big-copy --bytes B`, `global-refs --buffers N --bytes B --rounds R`, `opaque --buffers N --bytes B --rounds R` (see `memory.rs`),
//! `packed-tables` and `large-table` (see `tables.rs`), `free-async` and `churn` (see
//! `churn.rs`), `jobs --count N [--pings P]` (see `jobs.rs`).
//!
//! The driver binding is in `app.rs` and the kernels in `kernels.rs`; each scenario is
//! documented in its file: `oversub.rs` (`oversub`, `shared-read`, `loop`), `sync.rs`
//! (`sync`), `probes.rs` (`info`, `dlsym-direct`, `procaddr-ptsz`, `extra-params`,
//! `too-big`, `fault-unmapped`), `graphs.rs`, `memory.rs`, `tables.rs` and `churn.rs`.

use std::collections::HashMap;
use std::ffi::c_void;
use std::ptr::null_mut;

use cuda_abi::*;

mod app;
mod churn;
mod devices;
mod graphs;
mod jobs;
mod kernels;
mod memory;
mod oversub;
mod probes;
mod sync;
mod tables;

use app::*;
use kernels::*;

// ---------------------------------------------------------------------------------------
// Command line

struct Opts(HashMap<String, String>);

impl Opts {
    fn parse(args: &[String]) -> Opts {
        let mut m = HashMap::new();
        let mut it = args.iter().peekable();
        while let Some(k) = it.next() {
            let Some(key) = k.strip_prefix("--") else { fail(format!("unexpected argument {k:?}")) };
            // A key followed by another key (or nothing) is a flag, with an empty value.
            let v = it.next_if(|v| !v.starts_with("--")).cloned().unwrap_or_default();
            m.insert(key.to_owned(), v);
        }
        Opts(m)
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    fn bytes(&self, key: &str, default: u64) -> u64 {
        let Some(v) = self.get(key) else { return default };
        let (num, shift) = match v.as_bytes().last() {
            Some(b'K' | b'k') => (&v[..v.len() - 1], 10),
            Some(b'M' | b'm') => (&v[..v.len() - 1], 20),
            Some(b'G' | b'g') => (&v[..v.len() - 1], 30),
            _ => (v, 0),
        };
        num.parse::<u64>().map(|n| n << shift).unwrap_or_else(|_| fail(format!("--{key}: bad size {v:?}")))
    }

    fn num(&self, key: &str, default: u64) -> u64 {
        self.get(key).map_or(default, |v| v.parse().unwrap_or_else(|_| fail(format!("--{key}: bad number {v:?}"))))
    }
}

fn main() {
    // As a C or C++ program: SIGPIPE ends it (Rust's runtime ignores it), so that nothing
    // gmux writes to a socket whose peer is gone may do so unnoticed.
    // SAFETY: setting a signal's disposition to the default, before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else { fail("usage: standin_app SUBCOMMAND [--option value]...") };
    let opts = Opts::parse(&args[1..]);
    let app = App::start(cmd == "dlsym-direct");
    let ok = match cmd.as_str() {
        "oversub" => oversub::oversub(&app, &opts),
        "sync" => sync::checks(&app),
        "info" => probes::info(&app, &opts),
        "second-device" => probes::second_device(&app),
        "devices" => devices::devices(&app, &opts),
        "dlsym-direct" => probes::dlsym_direct(&app),
        "procaddr-ptsz" => probes::procaddr_ptsz(&app),
        "extra-params" => probes::extra_params(&app, &opts),
        "too-big" => probes::too_big(&app, &opts),
        "fault-unmapped" => probes::fault_unmapped(&app, &opts),
        "shared-read" => oversub::shared_read(&app, &opts),
        "loop" => oversub::loop_rounds(&app, &opts),
        "graph" => graphs::rounds(&app, &opts),
        "graph-split" => graphs::split(&app, &opts),
        "graph-temp" => graphs::temporary(&app, &opts),
        "graph-nodes" => graphs::nodes(&app, &opts),
        "app-vmm" => memory::app_vmm(&app, &opts),
        "app-alias" => memory::app_alias(&app, &opts),
        "big-copy" => memory::big_copy(&app, &opts),
        "big-box" => memory::big_box(&app, &opts),
        "global-refs" => memory::global_refs(&app, &opts),
        "opaque" => memory::opaque(&app, &opts),
        "packed-tables" => tables::packed_tables(&app, &opts),
        "large-table" => tables::large_table(&app, &opts),
        "free-async" => churn::free_async(&app, &opts),
        "churn" => churn::churn(&app, &opts),
        "jobs" => jobs::jobs(&app, &opts),
        other => fail(format!("unknown subcommand {other:?}")),
    };
    std::process::exit(if ok { 0 } else { 1 })
}

/// Reports the first word where `got` and `want` differ (or their lengths do), under
/// `what`; true if there is one.
fn mismatch(what: &str, got: &[u32], want: &[u32]) -> bool {
    match got.iter().zip(want).position(|(g, w)| g != w) {
        None if got.len() == want.len() => false,
        at => {
            let i = at.unwrap_or(got.len().min(want.len()));
            eprintln!("standin_app: {what}: word {i} is {:?}, expected {:?}", got.get(i), want.get(i));
            true
        }
    }
}
