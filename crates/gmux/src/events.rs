//! `gmux events`: the daemon's events as they happen, one line each.

use crate::Failure;
use gmuxd::ctl::StreamLine;
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

/// Prints the events of the daemon at `socket` as they come.
pub fn events(args: &EventsArgs, socket: &Path) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    let mut seen = 0;
    for line in gmuxd::ctl::events(socket, args.tenant.clone())? {
        let line = line?;
        let text = if args.json { line } else { human(&line) };
        // A closed stdout (`| head`) ends the stream quietly.
        if writeln!(out, "{text}").and_then(|()| out.flush()).is_err() {
            return Ok(());
        }
        seen += 1;
        if args.count > 0 && seen >= args.count {
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
