//! The results table printed by `gmux sim`.

use gmux_sim::{Report, Row};

const GIB: f64 = (1u64 << 30) as f64;
const MODELLED: &str = " (modelled)";

/// Footnote printed under a table that has modelled rows.
pub const MODELLED_NOTE: &str = "(modelled): a model of that system, not an implementation";

struct Column {
    title: &'static str,
    right: bool,
    cells: Vec<String>,
}

fn column(title: &'static str, right: bool, rows: &[Row], cell: impl Fn(&Row) -> String) -> Column {
    Column { title, right, cells: rows.iter().map(cell).collect() }
}

fn or_dash<T>(value: Option<T>, show: impl Fn(T) -> String) -> String {
    value.map_or_else(|| "-".to_string(), show)
}

fn gib(bytes: u64) -> String {
    format!("{:.2}", bytes as f64 / GIB)
}

/// `150` for whole percentages, `137.5` otherwise.
pub fn percent(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn columns(rows: &[Row]) -> Vec<Column> {
    let any = |f: fn(&Row) -> bool| rows.iter().any(f);
    let mut cols = vec![
        column("system", false, rows, |r| format!("{}{}", r.system, if r.modelled { MODELLED } else { "" })),
        column("variant", false, rows, |r| if r.variant.is_empty() { "-".into() } else { r.variant.clone() }),
        column("subscription %", true, rows, |r| or_dash(r.subscription, percent)),
        column("throughput", true, rows, |r| or_dash(r.throughput_norm, |v| format!("{v:.3}"))),
        column("H2D GiB", true, rows, |r| gib(r.bytes_h2d)),
        column("D2H GiB", true, rows, |r| gib(r.bytes_d2h)),
    ];
    if any(|r| r.bytes_disk_read + r.bytes_disk_write > 0) {
        cols.push(column("disk r/w GiB", true, rows, |r| format!("{}/{}", gib(r.bytes_disk_read), gib(r.bytes_disk_write))));
    }
    if any(|r| r.faults.is_some()) {
        cols.push(column("faults", true, rows, |r| or_dash(r.faults, |v| v.to_string())));
    }
    if any(|r| r.p50_ms.is_some() || r.p99_ms.is_some()) {
        cols.push(column("p50 ms", true, rows, |r| or_dash(r.p50_ms, |v| format!("{v:.2}"))));
        cols.push(column("p99 ms", true, rows, |r| or_dash(r.p99_ms, |v| format!("{v:.2}"))));
    }
    if any(|r| r.be_tasks_per_s.is_some()) {
        cols.push(column("BE tasks/s", true, rows, |r| or_dash(r.be_tasks_per_s, |v| format!("{v:.1}"))));
    }
    if any(|r| r.violations > 0) {
        cols.push(column("violations", true, rows, |r| r.violations.to_string()));
    }
    cols
}

/// Renders the report as a header line, an aligned table and footnotes.
pub fn render(report: &Report) -> String {
    let mut out = report.scenario.clone();
    if !report.description.is_empty() {
        out += &format!(": {}", report.description);
    }
    out += "\n\n";
    if report.results.is_empty() {
        return out + "(no rows)\n";
    }
    let cols = columns(&report.results);
    let widths: Vec<usize> = cols.iter().map(|c| c.cells.iter().map(|s| s.chars().count()).fold(c.title.len(), usize::max)).collect();
    let line = |cell: &dyn Fn(&Column, usize) -> String| {
        let cells: Vec<String> = cols
            .iter()
            .zip(&widths)
            .map(|(c, &w)| match c.right {
                true => format!("{:>w$}", cell(c, w)),
                false => format!("{:<w$}", cell(c, w)),
            })
            .collect();
        cells.join("  ").trim_end().to_string() + "\n"
    };
    out += &line(&|c, _| c.title.to_string());
    out += &line(&|_, w| "-".repeat(w));
    for i in 0..report.results.len() {
        out += &line(&|c, _| c.cells[i].clone());
    }
    let mut notes = Vec::new();
    if report.results.iter().any(|r| r.throughput_norm.is_some()) {
        notes.push("throughput: relative to in-hbm (everything in GPU memory)");
    }
    if report.results.iter().any(|r| r.modelled) {
        notes.push(MODELLED_NOTE);
    }
    if !notes.is_empty() {
        out += &format!("\n{}\n", notes.join("\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::report;

    fn data_lines(text: &str) -> Vec<&str> {
        text.lines().skip(4).take_while(|l| !l.is_empty()).collect()
    }

    #[test]
    fn header_numbers_and_modelled_marker() {
        let text = render(&report());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "oversub: throughput as GPU memory is oversubscribed");
        assert!(lines[2].starts_with("system"));
        assert!(lines[3].starts_with("------"));
        let rows = data_lines(&text);
        assert_eq!(rows.len(), 6);
        let cells = |i: usize| rows[i].split_whitespace().collect::<Vec<_>>();
        assert_eq!(cells(0), ["gmux-exact", "tier-order", "100", "1.000", "0.50", "0.00"]);
        assert_eq!(cells(1), ["um", "(modelled)", "-", "100", "0.987", "0.00", "0.00"]);
        assert_eq!(cells(4), ["gmux-exact", "tier-order", "200", "0.875", "6.50", "2.00"]);
        for line in &rows {
            assert_eq!(line.contains("(modelled)"), line.starts_with("um "), "{line}");
        }
        assert_eq!(text.matches(MODELLED_NOTE).count(), 1);
    }

    #[test]
    fn optional_columns_only_with_data() {
        let optional = ["disk r/w GiB", "faults", "p50 ms", "p99 ms", "BE tasks/s", "violations"];
        let mut r = report();
        let header = |r: &Report| render(r).lines().nth(2).unwrap().to_string();
        for title in optional {
            assert!(!header(&r).contains(title), "{title}");
        }
        r.results[1].bytes_disk_write = 1 << 29;
        r.results[1].faults = Some(1234);
        r.results[3].p99_ms = Some(12.345);
        r.results[0].be_tasks_per_s = Some(99.94);
        r.results[5].violations = 2;
        let text = render(&r);
        for title in optional {
            assert!(header(&r).contains(title), "{title}");
        }
        let rows = data_lines(&text);
        assert!(rows[1].contains("0.00/0.50") && rows[1].contains("1234"), "{}", rows[1]);
        assert!(rows[3].contains("12.35"), "{}", rows[3]);
        assert!(rows[0].contains("99.9"), "{}", rows[0]);
        assert!(rows[5].trim_end().ends_with(" 2"), "{}", rows[5]);
        assert!(rows[2].trim_end().ends_with(" 0"), "{}", rows[2]);
    }

    #[test]
    fn no_modelled_note_without_modelled_rows() {
        let mut r = report();
        r.results.retain(|row| !row.modelled);
        assert!(!render(&r).contains("(modelled)"));
        assert_eq!(percent(137.5), "137.5");
    }
}
