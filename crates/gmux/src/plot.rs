//! Hand-written SVG charts of a report: throughput against subscription when the
//! scenario sweeps it, otherwise horizontal bars per row (p50 and p99 latency where the
//! report has them, throughput otherwise). Every chart carries its numbers: the bars
//! their values, the lines their last point in the legend.

use gmux_sim::{Report, Row};
use std::fmt::Write;

const PALETTE: [&str; 10] = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
/// Approximate width of one 12px character, to make room for labels.
const CHAR: f64 = 7.0;
const LEFT: f64 = 70.0;
const TOP: f64 = 50.0;

/// Renders the report as a standalone SVG document.
pub fn svg(report: &Report) -> String {
    let mut levels: Vec<f64> = report.results.iter().filter(|r| r.throughput_norm.is_some()).filter_map(|r| r.subscription).collect();
    levels.sort_by(f64::total_cmp);
    levels.dedup();
    if levels.len() >= 2 {
        line_chart(report)
    } else {
        bar_chart(report)
    }
}

/// One (system, variant) line.
struct Series {
    name: String,
    modelled: bool,
    points: Vec<(f64, f64)>,
}

fn series_name(r: &Row) -> String {
    if r.variant.is_empty() {
        r.system.clone()
    } else {
        format!("{}/{}", r.system, r.variant)
    }
}

fn legend_name(name: &str, modelled: bool) -> String {
    format!("{name}{}", if modelled { " (modelled)" } else { "" })
}

fn series(rows: &[Row]) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for r in rows {
        let (Some(x), Some(y)) = (r.subscription, r.throughput_norm) else {
            continue;
        };
        let name = series_name(r);
        match out.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push((x, y)),
            None => out.push(Series { name, modelled: r.modelled, points: vec![(x, y)] }),
        }
    }
    for s in &mut out {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

/// A map from data values to pixels, linear or logarithmic, with tick positions.
struct Axis {
    lo: f64,
    hi: f64,
    from: f64,
    to: f64,
    step: f64,
    log: bool,
}

impl Axis {
    /// An axis over `[lo, hi]`, widened to whole ticks when `round` is set.
    fn new(lo: f64, hi: f64, from: f64, to: f64, round: bool) -> Axis {
        let pad = (lo.abs() * 0.1).max(1.0);
        let (lo, hi) = if hi > lo { (lo, hi) } else { (lo - pad, hi + pad) };
        let step = nice_step(hi - lo);
        let (lo, hi) = match round {
            true => ((lo / step).floor() * step, (hi / step).ceil() * step),
            false => (lo, hi),
        };
        Axis { lo, hi, from, to, step, log: false }
    }

    /// A logarithmic axis over `[lo, hi]` (both above 0), widened to powers of ten.
    fn log(lo: f64, hi: f64, from: f64, to: f64) -> Axis {
        let (lo, hi) = (10f64.powf(lo.log10().floor()), 10f64.powf(hi.log10().ceil().max(lo.log10().floor() + 1.0)));
        Axis { lo, hi, from, to, step: 10.0, log: true }
    }

    fn px(&self, v: f64) -> f64 {
        let at = |v: f64| if self.log { v.max(self.lo).log10() } else { v };
        self.from + (at(v) - at(self.lo)) / (at(self.hi) - at(self.lo)) * (self.to - self.from)
    }

    fn ticks(&self) -> Vec<f64> {
        if self.log {
            let (first, last) = (self.lo.log10().round() as i32, self.hi.log10().round() as i32);
            return (first..=last).map(|e| 10f64.powi(e)).collect();
        }
        let first = (self.lo / self.step - 1e-9).ceil() as i64;
        let last = (self.hi / self.step + 1e-9).floor() as i64;
        (first..=last).map(|i| i as f64 * self.step).collect()
    }

    fn label(&self, v: f64) -> String {
        let decimals = if self.log { (-v.log10().round()).max(0.0) as usize } else { (-self.step.log10().floor()).max(0.0) as usize };
        format!("{v:.decimals$}")
    }
}

/// 1, 2 or 5 × a power of ten, giving about six ticks over `span`.
fn nice_step(span: f64) -> f64 {
    let raw = span / 6.0;
    let mag = 10f64.powf(raw.log10().floor());
    let m = [1.0, 2.0, 5.0].into_iter().find(|m| raw / mag <= m * 1.0001).unwrap_or(10.0);
    m * mag
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The document's start: a white page, the report's name as its title and its
/// description below.
fn open(width: f64, height: f64, report: &Report) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         viewBox=\"0 0 {width} {height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{:.1}\" y=\"22\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">{}</text>\n\
         <text x=\"{:.1}\" y=\"40\" text-anchor=\"middle\" font-size=\"11\" fill=\"#555\">{}</text>\n",
        width / 2.0,
        esc(&report.scenario),
        width / 2.0,
        esc(&report.description)
    )
}

fn dash(modelled: bool) -> &'static str {
    if modelled {
        " stroke-dasharray=\"6 4\""
    } else {
        ""
    }
}

/// Marker number `i` at `(x, y)`: a dot, then hollow shapes (square, triangle, diamond,
/// ring), so that series that coincide stay visible.
fn marker(i: usize, x: f64, y: f64, color: &str) -> String {
    match i % 5 {
        0 => format!("<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3.5\" fill=\"{color}\"/>\n"),
        1 => format!("<rect x=\"{:.1}\" y=\"{:.1}\" width=\"9\" height=\"9\" fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"/>\n", x - 4.5, y - 4.5),
        2 => format!("<path d=\"M{x:.1},{:.1} l5,9 h-10 z\" fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"/>\n", y - 6.0),
        3 => format!("<path d=\"M{x:.1},{:.1} l6,6 l-6,6 l-6,-6 z\" fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"/>\n", y - 6.0),
        _ => format!("<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"7\" fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"/>\n"),
    }
}

fn line_chart(report: &Report) -> String {
    let all = series(&report.results);
    let (bottom, right) = (380.0, 540.0);
    let legend: Vec<String> = all
        .iter()
        .map(|s| {
            let last = s.points.last().map_or(String::new(), |&(a, b)| format!(": {b:.3} at {}%", crate::table::percent(a)));
            format!("{}{last}", legend_name(&s.name, s.modelled))
        })
        .collect();
    let longest = legend.iter().map(String::len).max().unwrap_or(0);
    let width = right + (CHAR * longest as f64 + 60.0).max(220.0);
    let xs = all.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let (xlo, xhi) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| (a.min(x), b.max(x)));
    let ymax = all.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(1.05, f64::max);
    let x = Axis::new(xlo, xhi, LEFT, right, true);
    let y = Axis::new(0.0, ymax, bottom, TOP, false);

    let mut out = open(width, bottom + 60.0, report);
    for t in x.ticks() {
        let px = x.px(t);
        let _ = writeln!(
            out,
            "<line x1=\"{px:.1}\" y1=\"{TOP}\" x2=\"{px:.1}\" y2=\"{bottom}\" stroke=\"#e5e5e5\"/>\n\
             <text x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            bottom + 18.0,
            x.label(t)
        );
    }
    for t in y.ticks() {
        let py = y.px(t);
        let _ = writeln!(
            out,
            "<line x1=\"{LEFT}\" y1=\"{py:.1}\" x2=\"{right}\" y2=\"{py:.1}\" stroke=\"#e5e5e5\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            LEFT - 6.0,
            py + 4.0,
            y.label(t)
        );
    }
    let _ = writeln!(
        out,
        "<path d=\"M{LEFT},{TOP} V{bottom} H{right}\" fill=\"none\" stroke=\"black\"/>\n\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">subscription (% of GPU memory budget)</text>\n\
         <text transform=\"translate(18,{:.1}) rotate(-90)\" text-anchor=\"middle\">throughput (relative to in-hbm)</text>",
        (LEFT + right) / 2.0,
        bottom + 40.0,
        (TOP + bottom) / 2.0
    );
    for (i, s) in all.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let pts: Vec<String> = s.points.iter().map(|&(a, b)| format!("{:.1},{:.1}", x.px(a), y.px(b))).collect();
        let _ = writeln!(out, "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"{} points=\"{}\"/>", dash(s.modelled), pts.join(" "));
        // Each series has its own marker, so that series that coincide stay visible.
        for &(a, b) in &s.points {
            out += &marker(i, x.px(a), y.px(b), color);
        }
        let ly = TOP + 10.0 + 20.0 * i as f64;
        let lx = right + 20.0;
        let _ = writeln!(
            out,
            "<line x1=\"{lx}\" y1=\"{ly:.1}\" x2=\"{:.1}\" y2=\"{ly:.1}\" stroke=\"{color}\" stroke-width=\"2\"{}/>\n{}\
             <text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            lx + 24.0,
            dash(s.modelled),
            marker(i, lx + 12.0, ly, color),
            lx + 30.0,
            ly + 4.0,
            esc(&legend[i])
        );
    }
    out + "</svg>\n"
}

/// What a bar chart shows of each row: p50 and p99 latency where the report has latency,
/// else throughput; each with the prefix of its value's label.
type Metric = (&'static str, fn(&Row) -> Option<f64>);

fn bar_chart(report: &Report) -> String {
    let rows = &report.results;
    let latency = rows.iter().any(|r| r.p99_ms.is_some());
    let (metrics, title, digits): (Vec<Metric>, &str, usize) = if latency {
        (vec![("p50 ", |r| r.p50_ms), ("p99 ", |r| r.p99_ms)], "latency (ms): p50 and p99", 2)
    } else {
        (vec![("", |r| r.throughput_norm)], "throughput (relative to in-hbm)", 3)
    };
    let values: Vec<f64> = rows.iter().flat_map(|r| metrics.iter().filter_map(|(_, m)| m(r))).filter(|v| *v > 0.0).collect();
    let (lo, hi) = values.iter().fold((f64::INFINITY, 0.0f64), |(a, b), v| (a.min(*v), b.max(*v)));

    let mut names: Vec<String> = Vec::new();
    let labels: Vec<(String, usize)> = rows
        .iter()
        .map(|r| {
            let name = series_name(r);
            let k = names.iter().position(|n| *n == name).unwrap_or_else(|| {
                names.push(name.clone());
                names.len() - 1
            });
            let mut label = legend_name(&name, r.modelled);
            if let Some(s) = r.subscription {
                label += &format!(" @ {}%", crate::table::percent(s));
            }
            (label, k)
        })
        .collect();
    let longest = labels.iter().map(|l| l.0.len()).max().unwrap_or(0);
    let left = (CHAR * longest as f64 + 20.0).max(LEFT + 200.0);
    let bar = 18.0 / metrics.len() as f64;
    let (right, pitch) = (left + 430.0, 8.0 + 18.0 + 4.0 * (metrics.len() - 1) as f64);
    let bottom = TOP + pitch * rows.len() as f64 + 6.0;
    // Values over a decade or more apart get a logarithmic axis, so that the small ones
    // show; otherwise the axis ends just past the largest value, not at a fixed 1.
    let log = !values.is_empty() && hi / lo >= 10.0;
    let x = if log { Axis::log(lo, hi, left, right) } else { Axis::new(0.0, (hi * 1.15).max(1e-3), left, right, false) };
    let title = if log { format!("{title}, logarithmic") } else { title.to_string() };

    let mut out = open(right + 90.0, bottom + 60.0, report);
    for t in x.ticks() {
        let px = x.px(t);
        let _ = writeln!(
            out,
            "<line x1=\"{px:.1}\" y1=\"{TOP}\" x2=\"{px:.1}\" y2=\"{bottom:.1}\" stroke=\"#e5e5e5\"/>\n\
             <text x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            bottom + 18.0,
            x.label(t)
        );
    }
    let _ = writeln!(
        out,
        "<path d=\"M{left},{TOP} V{bottom:.1} H{right}\" fill=\"none\" stroke=\"black\"/>\n\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{title}</text>",
        (left + right) / 2.0,
        bottom + 40.0
    );
    for (i, (r, (label, k))) in rows.iter().zip(&labels).enumerate() {
        let top = TOP + 4.0 + pitch * i as f64;
        let _ = writeln!(out, "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>", left - 8.0, top + 13.0, esc(label));
        for (j, (prefix, metric)) in metrics.iter().enumerate() {
            let y = top + (bar + 4.0) * j as f64;
            let value = metric(r);
            let end = value.map_or(left, |v| x.px(v));
            if value.is_some() {
                let _ = writeln!(
                    out,
                    "<rect x=\"{left}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{bar:.1}\" fill=\"{}\"{}/>",
                    end - left,
                    PALETTE[k % PALETTE.len()],
                    if r.modelled || j + 1 < metrics.len() { " fill-opacity=\"0.5\"" } else { "" }
                );
            }
            let text = value.map_or("-".to_string(), |v| format!("{prefix}{v:.digits$}"));
            let _ = writeln!(
                out,
                "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"{}\">{text}</text>",
                end + 4.0,
                y + bar - 2.0,
                if metrics.len() > 1 { 10 } else { 12 }
            );
        }
    }
    out + "</svg>\n"
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::report;

    fn well_formed(svg: &str) {
        assert!(svg.starts_with("<svg "), "{svg}");
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<svg").count(), 1);
        assert_eq!(svg.matches('<').count(), svg.matches('>').count());
    }

    fn points(polyline: &str) -> usize {
        let start = polyline.find("points=\"").unwrap() + 8;
        let end = start + polyline[start..].find('"').unwrap();
        polyline[start..end].split_whitespace().count()
    }

    #[test]
    fn line_chart_per_series() {
        let doc = svg(&report());
        well_formed(&doc);
        let polylines: Vec<&str> = doc.lines().filter(|l| l.starts_with("<polyline")).collect();
        assert_eq!(polylines.len(), 2);
        assert!(polylines.iter().all(|p| points(p) == 3));
        assert!(!polylines[0].contains("dasharray") && polylines[1].contains("dasharray"));
        assert!(doc.contains(">gmux-exact/tier-order: 0.875 at 200%</text>"), "the legend carries each line's last value");
        assert!(doc.contains(">um (modelled): 0.250 at 200%</text>"));
        assert!(doc.contains("<circle") && doc.contains("<rect x=\"") && doc.contains("fill=\"none\""), "two kinds of marker");
        assert!(doc.contains(">oversub</text>"));
        for tick in [">100</text>", ">200</text>", ">0.0</text>", ">1.0</text>"] {
            assert!(doc.contains(tick), "{tick}");
        }
    }

    #[test]
    fn bar_chart_without_sweep() {
        let mut r = report();
        r.results.truncate(2);
        r.results.iter_mut().for_each(|row| row.subscription = None);
        r.scenario = "a<b".into();
        let doc = svg(&r);
        well_formed(&doc);
        assert!(!doc.contains("<polyline"));
        assert_eq!(doc.matches("<rect x=").count(), 2);
        assert!(doc.contains(">a&lt;b</text>") && doc.contains(">0.987</text>"));

        r.results.iter_mut().for_each(|row| row.throughput_norm = None);
        r.results[0].p99_ms = Some(42.0);
        let doc = svg(&r);
        well_formed(&doc);
        assert_eq!(doc.matches("<rect x=").count(), 1);
        assert!(doc.contains(">p99 42.00</text>") && doc.contains("latency (ms): p50 and p99</text>"), "{doc}");
    }

    #[test]
    fn one_level_gives_bars_and_latencies_a_decade_apart_a_log_axis() {
        let mut r = report();
        r.results.retain(|row| row.subscription == Some(100.0));
        for (row, (p50, p99)) in r.results.iter_mut().zip([(5.02, 11.73), (1201.25, 2925.02)]) {
            (row.p50_ms, row.p99_ms) = (Some(p50), Some(p99));
        }
        let doc = svg(&r);
        well_formed(&doc);
        assert!(!doc.contains("<polyline"), "one subscription level is no sweep");
        assert_eq!(doc.matches("<rect x=").count(), 4, "p50 and p99 of both rows");
        for label in [">p50 5.02</text>", ">p99 11.73</text>", ">p50 1201.25</text>", ">p99 2925.02</text>", "logarithmic</text>"] {
            assert!(doc.contains(label), "{label} in\n{doc}");
        }
        for tick in [">1</text>", ">10</text>", ">100</text>", ">1000</text>", ">10000</text>"] {
            assert!(doc.contains(tick), "tick {tick}");
        }
    }

    #[test]
    fn throughputs_apart_less_than_a_decade_fill_a_linear_axis() {
        let mut r = report();
        r.results.retain(|row| row.subscription == Some(100.0));
        r.results[0].throughput_norm = Some(0.008);
        r.results[1].throughput_norm = Some(0.023);
        let doc = svg(&r);
        let widths: Vec<f64> = doc
            .lines()
            .filter(|l| l.starts_with("<rect x="))
            .map(|l| l.split("width=\"").nth(1).unwrap().split('"').next().unwrap().parse().unwrap())
            .collect();
        assert!(!doc.contains("logarithmic"));
        assert!((widths[1] / widths[0] - 0.023 / 0.008).abs() < 0.01 && widths[1] > 300.0, "the larger bar nearly fills the axis: {widths:?}");
    }

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(100.0), 20.0);
        assert!((nice_step(1.05) - 0.2).abs() < 1e-12);
        assert_eq!(nice_step(300.0), 50.0);
        assert_eq!(Axis::new(100.0, 100.0, 0.0, 1.0, true).ticks(), [90.0, 95.0, 100.0, 105.0, 110.0]);
    }
}
