//! The daemon's state fed any bytes as steps from peers (lines from tenants and control
//! clients of four users, hang-ups, stalls, deaths of a previous daemon's processes):
//! it must not panic, and must not grant past its budget.
//!
//!     cd fuzz && cargo +nightly fuzz run daemon corpus/daemon seeds/daemon -- -dict=daemon.dict -max_total_time=600
#![no_main]

use gmuxd::fuzzing;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let (mut d, steps) = fuzzing::from_bytes(bytes);
    for (i, step) in steps.into_iter().enumerate() {
        if let Err(e) = fuzzing::take(&mut d, step, i as u64 * 3_000_000) {
            panic!("{e}");
        }
    }
});
