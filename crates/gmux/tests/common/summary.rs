//! The shim's exit summary (`GMUX_LOG=info`) and its other lines, read by the tests.

use super::{number, Ran};

/// A size as the shim's summary prints it (`0 B`, `4.0 KiB`, `16.0 MiB`), in bytes.
pub fn size_at(text: &str, label: &str) -> f64 {
    let at = text.find(label).unwrap_or_else(|| panic!("no {label:?} in {text:?}")) + label.len();
    let mut words = text[at..].split_whitespace();
    let (num, unit) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
    let v: f64 = num.parse().unwrap_or_else(|_| panic!("no size after {label:?} in {text:?}"));
    let shift = match unit.trim_end_matches(',') {
        "B" => 0,
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        u => panic!("unit {u:?} after {label:?} in {text:?}"),
    };
    v * (1u64 << shift) as f64
}

/// The shim's exit summary: `gmux: limit …, allocated …, peak resident …, commands N (W
/// waited for memory), evicted E (…), populated P (…), created C, pinned host …`.
#[derive(Debug)]
pub struct Summary {
    pub limit: f64,
    pub peak_resident: f64,
    pub commands: u64,
    pub evicted: u64,
    pub populated: u64,
    pub created: u64,
}

/// Parses the summary line of `r`.
pub fn summary(r: &Ran) -> Summary {
    let line = r
        .stderr
        .lines()
        .find(|l| l.starts_with("gmux: limit ") && l.contains("peak resident"))
        .unwrap_or_else(|| panic!("no gmux summary line:\n{}", r.describe()));
    Summary {
        limit: size_at(line, "gmux: limit "),
        peak_resident: size_at(line, "peak resident "),
        commands: number(line, "commands "),
        evicted: number(line, "evicted "),
        populated: number(line, "populated "),
        created: number(line, "created "),
    }
}

/// No line of the shim's that reports a refusal or an error.
pub fn assert_no_shim_complaints(r: &Ran) {
    let bad: Vec<&str> =
        r.stderr.lines().filter(|l| l.starts_with("gmux: ") && !l.starts_with("gmux: limit ") && !l.starts_with("gmux: virtualizing device memory")).collect();
    assert!(bad.is_empty(), "unexpected gmux messages {bad:?}:\n{}", r.describe());
}
