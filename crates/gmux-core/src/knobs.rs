//! Ghost's per-tenant knobs (cgroup-like), by their names.

use crate::error::CoreError;
use crate::size::{parse_size, Nanos, CHUNK_BYTES};
use serde::{Deserialize, Serialize};

/// A knob, named as in Ghost's `ggroup/` directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Knob {
    /// `gmem.limit.high`: GPU-memory cap; over it the tenant evicts its own chunks.
    LimitHigh,
    /// `gmem.limit.low`: protection; at or below it, others' pressure does not evict this tenant.
    LimitLow,
    /// `gmem.current`: GPU bytes held (read-only).
    Current,
    /// `gmem.swap.current`: host and disk bytes held (read-only).
    SwapCurrent,
    /// `compute.timeslice`: slice per scheduling round, stretched up to the daemon's
    /// `--max-timeslice` while a switch costs more than a fifth of it.
    Timeslice,
    /// `compute.freeze`: 1 stops dispatch, 0 resumes.
    Freeze,
    /// `compute.weight`: under `--policy share`, time in proportion to it (1 to 10000).
    Weight,
    /// `ggroup.stat`: command, byte and switch counters (read-only).
    Stat,
    /// `gmem.pressure`: the share of time its commands waited for GPU memory, as PSI
    /// reports it (read-only; [`crate::pressure`]).
    Pressure,
    /// `gmem.events`: how often it met each memory boundary (read-only;
    /// [`crate::arbiter::mem_events`]).
    Events,
}

impl Knob {
    /// All knobs in display order.
    pub const ALL: [Knob; 10] = [
        Knob::LimitHigh,
        Knob::LimitLow,
        Knob::Current,
        Knob::SwapCurrent,
        Knob::Timeslice,
        Knob::Freeze,
        Knob::Weight,
        Knob::Stat,
        Knob::Pressure,
        Knob::Events,
    ];

    /// The Ghost name.
    pub fn name(self) -> &'static str {
        match self {
            Knob::LimitHigh => "gmem.limit.high",
            Knob::LimitLow => "gmem.limit.low",
            Knob::Current => "gmem.current",
            Knob::SwapCurrent => "gmem.swap.current",
            Knob::Timeslice => "compute.timeslice",
            Knob::Freeze => "compute.freeze",
            Knob::Weight => "compute.weight",
            Knob::Stat => "ggroup.stat",
            Knob::Pressure => "gmem.pressure",
            Knob::Events => "gmem.events",
        }
    }

    /// Looks a knob up by its Ghost name.
    pub fn parse(name: &str) -> Result<Knob, CoreError> {
        Knob::ALL.into_iter().find(|k| k.name() == name).ok_or_else(|| CoreError::UnknownKnob(name.to_string()))
    }
}

/// Longest accepted `compute.timeslice`.
pub const MAX_TIMESLICE: Nanos = 10_000_000_000;
/// Default `compute.timeslice`.
pub const DEFAULT_TIMESLICE: Nanos = 20_000_000;
/// Default longest a slice is stretched to so that its switch is amortized (`--max-timeslice`).
pub const DEFAULT_MAX_TIMESLICE: Nanos = 1_000_000_000;

/// The writable knobs of one tenant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// `gmem.limit.high` in bytes; `None` is `max`.
    pub high: Option<u64>,
    /// `gmem.limit.low` in bytes.
    pub low: u64,
    /// `compute.timeslice`.
    pub timeslice: Nanos,
    /// `compute.freeze`.
    pub frozen: bool,
    /// `compute.weight`: its share of the time under `--policy share`.
    #[serde(default = "one")]
    pub weight: u32,
}

fn one() -> u32 {
    1
}

/// Largest `compute.weight`.
pub const MAX_WEIGHT: u32 = 10_000;

impl Default for Limits {
    fn default() -> Self {
        Limits { high: None, low: 0, timeslice: DEFAULT_TIMESLICE, frozen: false, weight: 1 }
    }
}

/// `ggroup.stat`: counters of one tenant.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupStat {
    /// Commands the application submitted.
    pub submitted: u64,
    /// Commands that finished on the device.
    pub finished: u64,
    /// Bytes copied host → device for this tenant.
    pub bytes_h2d: u64,
    /// Bytes copied device → host for this tenant.
    pub bytes_d2h: u64,
    /// Times the tenant was switched in.
    pub switches: u64,
}

impl GroupStat {
    /// Commands submitted but not finished.
    pub fn pending(&self) -> u64 {
        self.submitted - self.finished
    }
}

impl Limits {
    /// Sets a writable knob from its text form, validating it.
    pub fn set(&mut self, knob: Knob, value: &str) -> Result<(), CoreError> {
        let v = value.trim();
        match knob {
            Knob::LimitHigh => {
                let high = if v == "max" { None } else { Some(parse_limit(knob, v)?) };
                if let Some(h) = high {
                    if h < CHUNK_BYTES {
                        return Err(bad(knob, v, "below one chunk (2M), the least a tenant holds to run anything; write at least 2M"));
                    }
                    if h < self.low {
                        return Err(bad(knob, v, "below gmem.limit.low; lower gmem.limit.low first"));
                    }
                }
                self.high = high;
            }
            Knob::LimitLow => {
                let low = parse_limit(knob, v)?;
                if self.high.is_some_and(|h| low > h) {
                    return Err(bad(knob, v, "above gmem.limit.high; raise gmem.limit.high first"));
                }
                self.low = low;
            }
            Knob::Timeslice => self.timeslice = parse_duration(v).ok_or_else(|| bad(knob, v, "write a duration between 1us and 10s, e.g. 20ms, 500us"))?,
            Knob::Freeze => {
                self.frozen = match v {
                    "1" => true,
                    "0" => false,
                    _ => return Err(bad(knob, v, "write 1 to freeze or 0 to thaw")),
                }
            }
            Knob::Weight => {
                self.weight = v.parse().ok().filter(|w| (1..=MAX_WEIGHT).contains(w)).ok_or_else(|| bad(knob, v, "write a whole number from 1 to 10000"))?
            }
            Knob::Current | Knob::SwapCurrent | Knob::Stat | Knob::Pressure | Knob::Events => return Err(CoreError::ReadOnlyKnob(knob.name())),
        }
        Ok(())
    }

    /// The text form of a writable knob.
    pub fn get(&self, knob: Knob) -> Option<String> {
        Some(match knob {
            Knob::LimitHigh => self.high.map_or("max".to_string(), |h| h.to_string()),
            Knob::LimitLow => self.low.to_string(),
            Knob::Timeslice => format!("{}us", self.timeslice / 1000),
            Knob::Freeze => u8::from(self.frozen).to_string(),
            Knob::Weight => self.weight.to_string(),
            _ => return None,
        })
    }
}

fn bad(knob: Knob, value: &str, hint: &'static str) -> CoreError {
    CoreError::BadKnobValue { knob: knob.name(), value: value.to_string(), hint }
}

fn parse_limit(knob: Knob, v: &str) -> Result<u64, CoreError> {
    parse_size(v).map_err(|_| bad(knob, v, "write a size such as 8G or 512M (or max for gmem.limit.high)"))
}

/// Parses `20ms`, `500us`, `1s`, `2000ns`; a bare number is milliseconds (Ghost's unit).
pub fn parse_duration(v: &str) -> Option<Nanos> {
    let split = v.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let x: f64 = num.parse().ok()?;
    let scale = match unit {
        "" | "ms" => 1e6,
        "us" => 1e3,
        "ns" => 1.0,
        "s" => 1e9,
        _ => return None,
    };
    let ns = (x * scale).round();
    (ns >= 1000.0 && ns <= MAX_TIMESLICE as f64).then_some(ns as Nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for k in Knob::ALL {
            assert_eq!(Knob::parse(k.name()).unwrap(), k);
        }
        assert!(matches!(Knob::parse("gmem.limit"), Err(CoreError::UnknownKnob(_))));
    }

    #[test]
    fn weight_takes_a_whole_number_from_1_to_10000_and_old_records_read_as_1() {
        let mut l = Limits::default();
        assert_eq!(l.get(Knob::Weight).unwrap(), "1");
        l.set(Knob::Weight, "3").unwrap();
        assert_eq!(l.weight, 3);
        for bad in ["0", "10001", "-1", "1.5", "x"] {
            let e = l.set(Knob::Weight, bad).unwrap_err().to_string();
            assert!(e.contains("1 to 10000"), "{bad}: {e}");
        }
        assert_eq!(l.weight, 3, "a refused value changes nothing");
        let old: Limits = serde_json::from_str(r#"{"high":null,"low":0,"timeslice":20000000,"frozen":false}"#).unwrap();
        assert_eq!(old.weight, 1);
    }

    #[test]
    fn sets_and_validates() {
        let mut l = Limits::default();
        l.set(Knob::LimitHigh, "8G").unwrap();
        assert_eq!(l.high, Some(8 << 30));
        l.set(Knob::LimitLow, "1G").unwrap();
        assert_eq!(l.low, 1 << 30);
        assert!(l.set(Knob::LimitLow, "9G").is_err(), "low above high accepted");
        assert!(l.set(Knob::LimitHigh, "512M").is_err(), "high below low accepted");
        l.set(Knob::LimitLow, "0").unwrap();
        for tiny in ["0", "1", "2097151", "1M"] {
            assert!(l.set(Knob::LimitHigh, tiny).is_err(), "gmem.limit.high {tiny} accepted: below one chunk");
        }
        assert!(l.set(Knob::LimitHigh, "16777216T").is_err(), "a size past 64 bits accepted");
        l.set(Knob::LimitHigh, "2M").unwrap();
        l.set(Knob::LimitLow, "1G").unwrap_err();
        l.set(Knob::LimitHigh, "8G").unwrap();
        l.set(Knob::LimitLow, "1G").unwrap();
        l.set(Knob::Timeslice, "5ms").unwrap();
        assert_eq!(l.timeslice, 5_000_000);
        l.set(Knob::Timeslice, "250us").unwrap();
        assert_eq!(l.get(Knob::Timeslice).unwrap(), "250us");
        assert!(l.set(Knob::Timeslice, "11s").is_err());
        assert!(l.set(Knob::Timeslice, "0").is_err());
        l.set(Knob::Freeze, "1").unwrap();
        assert!(l.frozen);
        assert!(l.set(Knob::Freeze, "yes").is_err());
        assert_eq!(l.set(Knob::Current, "1"), Err(CoreError::ReadOnlyKnob("gmem.current")));
        l.set(Knob::LimitHigh, "max").unwrap();
        assert_eq!(l.high, None);
    }

    #[test]
    fn error_messages_name_the_fix() {
        let mut l = Limits::default();
        let msg = l.set(Knob::LimitHigh, "lots").unwrap_err().to_string();
        assert!(msg.contains("gmem.limit.high") && msg.contains("8G"), "{msg}");
    }
}
