//! `gmux sim`: run a scenario on the simulator; print, save and plot its results.

use crate::{plot, table, Failure};
use gmux_sim::{Progress, Report, SimError};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Arguments of `gmux sim`.
#[derive(Debug, clap::Args)]
pub struct SimArgs {
    /// Scenario file (see scenarios/).
    pub scenario: PathBuf,
    /// Also write the results as JSON to OUT.
    #[arg(long, value_name = "OUT")]
    pub json: Option<PathBuf>,
    /// Also draw the results as an SVG chart to OUT.svg.
    #[arg(long, value_name = "OUT.svg")]
    pub plot: Option<PathBuf>,
    /// Hide the progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Runs `gmux sim`.
pub fn sim(args: &SimArgs) -> Result<(), Failure> {
    for out in args.json.iter().chain(&args.plot) {
        check_output_dir(out)?;
    }
    if let Some(p) = args.plot.as_ref().filter(|p| p.extension().is_none_or(|e| !e.eq_ignore_ascii_case("svg"))) {
        return Err(Failure::Usage(format!(
            "--plot {}: gmux draws SVG; name the file .svg (for a PNG, convert it: rsvg-convert -o out.png out.svg)",
            p.display()
        )));
    }
    let scenario = gmux_sim::load_scenario(&args.scenario).map_err(|e| Failure::Usage(e.to_string()))?;

    let bar = if args.quiet { ProgressBar::hidden() } else { ProgressBar::new(0) };
    bar.set_style(ProgressStyle::with_template("{elapsed:>4} [{bar:30}] {pos}/{len} {wide_msg}").expect("valid progress template").progress_chars("=> "));
    let started = Instant::now();
    let result = gmux_sim::run(&scenario, &mut |p: &Progress| {
        bar.set_length(p.total as u64);
        bar.set_position(p.done as u64);
        bar.set_message(p.label.clone());
    });
    bar.finish_and_clear();
    let report = result.map_err(run_failure)?;
    eprintln!("ran {} rows in {:.1} s", report.results.len(), started.elapsed().as_secs_f64());

    // The files first: a reader of the table that stops early (`| head`) ends the
    // command.
    if let Some(path) = &args.json {
        write_json(&report, path)?;
    }
    if let Some(path) = &args.plot {
        write_file(path, "plot", &plot::svg(&report))?;
    }
    print_stdout(&table::render(&report))
}

fn run_failure(e: SimError) -> Failure {
    if matches!(e, SimError::Read { .. } | SimError::Invalid { .. }) {
        Failure::Usage(e.to_string())
    } else {
        Failure::Runtime(e.to_string())
    }
}

/// Refuses, before a long run, an output path whose directory does not exist.
fn check_output_dir(path: &Path) -> Result<(), Failure> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() && !dir.is_dir() => {
            Err(Failure::Usage(format!("cannot write {}: directory {} does not exist; create it or choose another path", path.display(), dir.display())))
        }
        _ => Ok(()),
    }
}

fn print_stdout(text: &str) -> Result<(), Failure> {
    match io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(Failure::Runtime(format!("cannot write to stdout: {e}"))),
        _ => Ok(()),
    }
}

/// Writes the report as pretty-printed JSON (`{"scenario", "description", "results"}`).
pub fn write_json(report: &Report, path: &Path) -> Result<(), Failure> {
    let json = serde_json::to_string_pretty(report).map_err(|e| Failure::Runtime(format!("cannot encode results as JSON: {e}")))?;
    write_file(path, "JSON", &(json + "\n"))
}

fn write_file(path: &Path, what: &str, contents: &str) -> Result<(), Failure> {
    std::fs::write(path, contents).map_err(|e| Failure::Runtime(format!("cannot write {what} to {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::report;

    fn temp_path(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("gmux-test-{}-{name}", std::process::id()))
    }

    #[test]
    fn json_round_trips() {
        let original = report();
        let path = temp_path("report.json");
        write_json(&original, &path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(text.starts_with("{\n  \"scenario\": "));
        let back: Report = serde_json::from_str(&text).unwrap();
        assert_eq!(back, original);
    }

    #[test]
    fn json_write_error_names_path() {
        let path = temp_path("no-such-dir").join("out.json");
        let err = write_json(&report(), &path).unwrap_err();
        let Failure::Runtime(msg) = err else { panic!("expected a runtime failure, got {err:?}") };
        assert!(msg.contains(&path.display().to_string()), "{msg}");
        assert!(check_output_dir(&path).is_err());
        assert!(check_output_dir(Path::new("out.json")).is_ok());
    }

    #[test]
    fn a_plot_named_other_than_svg_is_refused_before_the_run() {
        let args = SimArgs { scenario: PathBuf::from("no-such-scenario.toml"), json: None, plot: Some(PathBuf::from("out.png")), quiet: true };
        let Err(Failure::Usage(msg)) = sim(&args) else { panic!("a .png plot was accepted") };
        assert!(msg.contains("--plot out.png") && msg.contains(".svg"), "{msg}");
    }
}
