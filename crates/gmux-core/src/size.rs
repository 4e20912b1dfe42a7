//! Sizes, chunk granularity and time units.

use crate::error::CoreError;

/// Bytes in one chunk: the VMM mapping granularity of the lent H100/H200.
pub const CHUNK_BYTES: u64 = 2 << 20;

/// Nanoseconds. Time is always passed in; the core owns no clock.
pub type Nanos = u64;

/// Number of chunks needed to hold `bytes`.
pub fn chunks_for(bytes: u64) -> u64 {
    bytes.div_ceil(CHUNK_BYTES)
}

/// Parses a size such as `16G`, `512M`, `2MiB`, `4096` (bytes). Units are binary (K = 1024).
pub fn parse_size(text: &str) -> Result<u64, CoreError> {
    let bad = || CoreError::BadSize(text.to_string());
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(bad());
    }
    let value: f64 = num.parse().map_err(|_| bad())?;
    let shift = match unit.trim().to_ascii_uppercase().trim_end_matches("IB").trim_end_matches('B') {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(bad()),
    };
    let bytes = value * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 || bytes.fract() != 0.0 {
        return Err(bad());
    }
    Ok(bytes as u64)
}

/// Formats bytes with a binary unit, e.g. `1.5 GiB`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_size("16G").unwrap(), 16 << 30);
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("2MiB").unwrap(), 2 << 20);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("7kb").unwrap(), 7 << 10);
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "G", "12Q", "-1G", "1.3"] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn formats() {
        assert_eq!(format_size(3 << 29), "1.5 GiB");
        assert_eq!(format_size(10), "10 B");
        assert_eq!(chunks_for(CHUNK_BYTES + 1), 2);
    }
}
