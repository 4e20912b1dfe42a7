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

/// Parses a size such as `16G`, `512M`, `2MiB`, `1.5G`, `4096` (bytes). Units are binary
/// (K = 1024). The arithmetic is exact: a size that is not a whole number of bytes or
/// does not fit in 64 bits is refused.
pub fn parse_size(text: &str) -> Result<u64, CoreError> {
    let bad = || CoreError::BadSize(text.to_string());
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let shift = match unit.trim().to_ascii_uppercase().trim_end_matches("IB").trim_end_matches('B') {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(bad()),
    };
    let (whole, frac) = num.split_once('.').unwrap_or((num, ""));
    let digits = |d: &str| d.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && frac.is_empty()) || !digits(frac) || frac.len() > 18 {
        return Err(bad());
    }
    // whole · 2^shift + frac / 10^len · 2^shift, in 128 bits: at most 20 + 12 digits.
    let whole: u128 = if whole.is_empty() { 0 } else { whole.parse::<u64>().map_err(|_| bad())?.into() };
    let scale = 10u128.pow(frac.len() as u32);
    let frac: u128 = if frac.is_empty() { 0 } else { frac.parse::<u64>().map_err(|_| bad())?.into() };
    let part = frac << shift;
    if !part.is_multiple_of(scale) {
        return Err(bad());
    }
    u64::try_from((whole << shift) + part / scale).map_err(|_| bad())
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
        for bad in ["", "G", "12Q", "-1G", "1.3", ".", "1.2.3M", "1e9", "NaN", "inf"] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn sizes_past_64_bits_are_refused_not_rounded() {
        assert_eq!(parse_size("18446744073709551615").unwrap(), u64::MAX);
        for over in ["18446744073709551616", "16777216T", "99999999999999999999999G"] {
            assert!(parse_size(over).is_err(), "{over:?} accepted");
        }
        assert_eq!(parse_size("16777215T").unwrap(), 16_777_215 << 40);
        assert_eq!(parse_size("9007199254740993").unwrap(), 9_007_199_254_740_993, "exact past 2^53");
        assert_eq!(parse_size(".5K").unwrap(), 512);
        assert_eq!(parse_size("0.25M").unwrap(), 256 << 10);
    }

    #[test]
    fn formats() {
        assert_eq!(format_size(3 << 29), "1.5 GiB");
        assert_eq!(format_size(10), "10 B");
        assert_eq!(chunks_for(CHUNK_BYTES + 1), 2);
    }

    proptest::proptest! {
        #[test]
        fn whole_sizes_parse_exactly_or_are_refused(n: u64, unit in 0usize..5) {
            let (suffix, shift) = [("", 0u32), ("K", 10), ("M", 20), ("G", 30), ("T", 40)][unit];
            let want = (u128::from(n) << shift).try_into().ok();
            proptest::prop_assert_eq!(parse_size(&format!("{n}{suffix}")).ok(), want);
        }
    }
}
