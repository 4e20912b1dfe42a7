//! `gmux events` (the daemon's events as they happen) and `gmux watch` (a trigger on one
//! tenant), one line each.

use crate::Failure;
use gmux_core::pressure::StallKind;
use gmuxd::ctl::{Request, StreamLine, Trigger};
use std::io::Write;
use std::path::Path;

/// Arguments of `gmux events`.
#[derive(Debug, clap::Args)]
pub struct EventsArgs {
    /// Only this tenant's events.
    #[arg(long, value_name = "NAME")]
    pub tenant: Option<String>,
    /// One JSON object per line (schema: docs/observability.md).
    #[arg(long)]
    pub json: bool,
    /// Stop after this many events (0: run until the daemon ends or Ctrl-C).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub count: u64,
}

/// Arguments of `gmux watch`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("when").required(true).args(["pressure_above", "limit_below_held"])))]
pub struct WatchArgs {
    /// The tenant to watch.
    pub tenant: String,
    /// Tell when its gmem.pressure rises above this percentage (above 0, below 100).
    #[arg(long, value_name = "PERCENT")]
    pub pressure_above: Option<f64>,
    /// Which pressure: some (a process waits for memory) or full (all of them do).
    #[arg(long, default_value = "some", value_parser = StallKind::parse)]
    pub kind: StallKind,
    /// The window of the average, in seconds: 10, 60 or 300.
    #[arg(long, default_value_t = 10, value_name = "SECONDS")]
    pub window: u32,
    /// Tell when its gmem.limit.high falls below what it holds.
    #[arg(long)]
    pub limit_below_held: bool,
    /// One JSON object per line.
    #[arg(long)]
    pub json: bool,
    /// Stop after this many (0: run until the daemon ends or Ctrl-C).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub count: u64,
}

/// Prints the events of the daemon at `socket` as they come.
pub fn events(args: &EventsArgs, socket: &Path) -> Result<(), Failure> {
    print(socket, &Request::Events { tenant: args.tenant.clone() }, args.json, args.count)
}

/// Prints each time the trigger of `args` fires.
pub fn watch(args: &WatchArgs, socket: &Path) -> Result<(), Failure> {
    let trigger = match args.pressure_above {
        Some(percent) => Trigger::PressureAbove { kind: args.kind, window: args.window, percent },
        None => Trigger::LimitBelowHeld,
    };
    trigger.check().map_err(Failure::Usage)?;
    print(socket, &Request::Watch { tenant: args.tenant.clone(), trigger }, args.json, args.count)
}

fn print(socket: &Path, req: &Request, json: bool, count: u64) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    let mut seen = 0;
    for line in gmuxd::ctl::stream(socket, req)? {
        let line = line?;
        let text = if json { line } else { human(&line) };
        // A closed stdout (`| head`) ends the stream quietly.
        if writeln!(out, "{text}").and_then(|()| out.flush()).is_err() {
            return Ok(());
        }
        seen += 1;
        if count > 0 && seen >= count {
            break;
        }
    }
    Ok(())
}

/// The line as a person reads it: the time, then what happened.
fn human(line: &str) -> String {
    match serde_json::from_str::<StreamLine>(line) {
        Ok(StreamLine::Event(e)) => format!("{} {}", e.at, e.event),
        Ok(StreamLine::Lost(l)) => {
            let n = l.count.map_or("some".into(), |n| n.to_string());
            format!("{} {n} events lost: this client did not read them in time", l.at)
        }
        Err(_) => format!("(unreadable: {line}; is gmuxd the same version as this gmux?)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_line_reads_as_its_time_and_what_happened() {
        let e = r#"{"at":"2026-11-27T10:50:01.123Z","event":"knob_set","tenant":"a","knob":"compute.freeze","value":"1"}"#;
        assert_eq!(human(e), "2026-11-27T10:50:01.123Z a: compute.freeze set to 1");
        assert_eq!(human(r#"{"at":"T","lost":true,"count":5}"#), "T 5 events lost: this client did not read them in time");
        assert_eq!(human(r#"{"at":"T","lost":true}"#), "T some events lost: this client did not read them in time");
        assert!(human("{}").starts_with("(unreadable"));
    }
}
