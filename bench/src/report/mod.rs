//! The report of one benchmark run: a Markdown table, a PNG chart of the
//! kcm-rs / upstream ratios and the raw JSON, written side by side as
//! `<date>.json`, `<date>.md` and `<date>.png`.
//!
//! The chart is drawn with `plotters` and its pure-Rust `ab_glyph` text
//! renderer, so no system font library is needed; the TrueType font itself
//! is read at run time from one of [`FONT_PATHS`] (or `$KCM_BENCH_FONT`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::results::{Metric, Results};

mod chart;
mod scaling;
pub use chart::{chart_png, ensure_font};
pub use scaling::scaling_png;

/// Environment variable naming a TTF/OTF font to use instead of [`FONT_PATHS`].
pub const FONT_ENV: &str = "KCM_BENCH_FONT";

/// Fonts tried, in order, for the chart's text (Debian/Ubuntu, Arch, Fedora,
/// then other common sans-serif fonts).
pub const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
];

/// Name the font is registered under with plotters.
const FAMILY: &str = "sans-serif";

/// What can go wrong while writing a report.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("results JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("drawing the chart: {0}")]
    Chart(String),
    #[error(
        "no font for the chart: tried {}; install fonts-dejavu-core or set {FONT_ENV} to a .ttf file",
        .tried.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    NoFont { tried: Vec<PathBuf> },
    #[error("{0} is not a usable TrueType/OpenType font")]
    BadFont(PathBuf),
}

fn chart_err(e: impl std::fmt::Display) -> ReportError {
    ReportError::Chart(e.to_string())
}

/// The files a report was written to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub json: PathBuf,
    pub markdown: PathBuf,
    pub png: PathBuf,
}

// ---------------------------------------------------------------------------
// Number formatting

/// About three significant digits, without exponent for everyday magnitudes.
fn fmt_num(v: f64) -> String {
    if v.is_nan() {
        return "—".to_owned();
    }
    if v.is_infinite() {
        return if v > 0.0 { "∞" } else { "-∞" }.to_owned();
    }
    let a = v.abs();
    if a == 0.0 {
        "0".to_owned()
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else if a >= 1e-4 {
        // Three significant digits: 0.123, 0.0123, 0.00123.
        let decimals = (2 - a.log10().floor() as i32).clamp(3, 6) as usize;
        format!("{v:.decimals$}")
    } else {
        format!("{v:.2e}")
    }
}

/// A ratio with two significant digits (0.42, 0.053, 1.4, 12), no unit.
fn fmt_ratio_num(r: f64) -> String {
    if r.is_nan() {
        return "—".to_owned();
    }
    let a = r.abs();
    if a == 0.0 {
        "0".to_owned()
    } else if a >= 10.0 {
        format!("{r:.0}")
    } else if a >= 1.0 {
        format!("{r:.2}")
    } else if a >= 1e-3 {
        let decimals = (1 - a.log10().floor() as i32).clamp(2, 4) as usize;
        format!("{r:.decimals$}")
    } else {
        format!("{r:.1e}")
    }
}

/// `0.42×`, or `—` when there is no ratio.
fn fmt_ratio(r: f64) -> String {
    if r.is_nan() {
        "—".to_owned()
    } else {
        format!("{}×", fmt_ratio_num(r))
    }
}

/// The metric's ratio, with more digits when two would hide which side of
/// the target it is on (`1.0003×` against `≤ 1×`, not a bare `1.00×`).
fn fmt_metric_ratio(m: &Metric) -> String {
    let short = fmt_ratio(m.ratio());
    let (Some(t), Some(met)) = (m.target_ratio, m.meets_target()) else {
        return short;
    };
    let shown: f64 = fmt_ratio_num(m.ratio()).parse().unwrap_or(f64::NAN);
    let shown_met = if m.lower_is_better {
        shown <= t
    } else {
        shown >= t
    };
    if shown_met == met {
        short
    } else {
        format!("{:.4}×", m.ratio())
    }
}

/// A target as written by people: `0.5`, `1`, `0.25` (no trailing zeros).
fn fmt_plain(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() || s == "-" {
        "0".to_owned()
    } else {
        s.to_owned()
    }
}

/// `≤ 0.5×` for lower-is-better metrics, `≥ 1×` otherwise; `—` without one.
fn fmt_target(m: &Metric) -> String {
    match m.target_ratio {
        None => "—".to_owned(),
        Some(t) => {
            let op = if m.lower_is_better { "≤" } else { "≥" };
            format!("{op} {}×", fmt_plain(t))
        }
    }
}

fn fmt_met(m: &Metric) -> &'static str {
    match m.meets_target() {
        Some(true) => "yes",
        Some(false) => "no",
        None => "—",
    }
}

/// The metric's name, marked ` ↑` when higher is better.
fn metric_label(m: &Metric) -> String {
    if m.lower_is_better {
        m.name.clone()
    } else {
        format!("{} ↑", m.name)
    }
}

/// Makes text safe inside a Markdown table cell.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// The file stem of a report: the date part of `started` (`2026-11-30`),
/// reduced to characters safe in a file name.
pub fn date_stem(r: &Results) -> String {
    let stem: String = r
        .started
        .chars()
        .take(10)
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect();
    if stem.is_empty() {
        "results".to_owned()
    } else {
        stem
    }
}

// ---------------------------------------------------------------------------
// Markdown

/// The report as a Markdown document: a heading with the date, machine and
/// scale, one table of every metric with its ratio and target, then each
/// workload's description and notes.
pub fn markdown(r: &Results) -> String {
    markdown_with_chart(r, None)
}

/// [`markdown`], with an image link to the chart (a path relative to the
/// Markdown file) under the heading.
pub fn markdown_with_chart(r: &Results, chart: Option<&str>) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail; the results are ignored with `let _`.
    let date = r.started.get(..10).unwrap_or(&r.started);
    let _ = writeln!(
        out,
        "# kcm-rs vs upstream kube-controller-manager — {date}\n"
    );
    let _ = writeln!(out, "- started: {}", r.started);
    let _ = writeln!(out, "- machine: {}", r.machine.replace('\n', " "));
    let _ = writeln!(out, "- scale: {}", fmt_plain(r.scale));
    let _ = writeln!(
        out,
        "\nRatios are kcm-rs / upstream: below 1× kcm-rs uses less, so lower is \
         better unless the metric is marked ↑ (throughput, where higher is better). \
         A target is met when the ratio is on its side of it.\n"
    );
    if let Some(chart) = chart {
        let _ = writeln!(out, "![kcm-rs / upstream ratios]({chart})\n");
    }

    let _ = writeln!(
        out,
        "| workload | metric | unit | upstream | kcm-rs | kcm-rs / upstream | target | met |"
    );
    let _ = writeln!(out, "|---|---|---|--:|--:|--:|:-:|:-:|");
    for w in &r.workloads {
        for m in &w.metrics {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                cell(&w.id),
                cell(&metric_label(m)),
                cell(&m.unit),
                fmt_num(m.upstream),
                fmt_num(m.kcm_rs),
                fmt_metric_ratio(m),
                fmt_target(m),
                fmt_met(m),
            );
        }
    }

    if !r.workloads.is_empty() {
        let _ = writeln!(out, "\n## Workloads");
    }
    for w in &r.workloads {
        let _ = writeln!(out, "\n### {}", w.id);
        if !w.description.trim().is_empty() {
            let _ = writeln!(out, "\n{}", w.description.trim());
        }
        if !w.notes.is_empty() {
            let _ = writeln!(out);
        }
        for n in &w.notes {
            let _ = writeln!(out, "- {}", n.trim().replace('\n', " "));
        }
    }
    // Exactly one trailing newline.
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    out.push('\n');
    out
}

fn write_file(path: &Path, contents: &[u8]) -> Result<(), ReportError> {
    std::fs::write(path, contents).map_err(|source| ReportError::Io {
        action: "writing",
        path: path.to_owned(),
        source,
    })
}

/// Writes `<stem>.md` and `<stem>.png` next to `json` (which is not touched),
/// the Markdown linking to the chart.
pub fn render_beside(r: &Results, json: &Path) -> Result<Written, ReportError> {
    let md = json.with_extension("md");
    let png = json.with_extension("png");
    let link = png
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    write_file(&md, markdown_with_chart(r, Some(&link)).as_bytes())?;
    chart_png(r, &png)?;
    Ok(Written {
        json: json.to_owned(),
        markdown: md,
        png,
    })
}

/// Creates `dir` and writes `<date>.json` (pretty), `<date>.md` and
/// `<date>.png` in it, replacing any from the same day.
pub fn write_all(r: &Results, dir: &Path) -> Result<Written, ReportError> {
    std::fs::create_dir_all(dir).map_err(|source| ReportError::Io {
        action: "creating",
        path: dir.to_owned(),
        source,
    })?;
    let json = dir.join(format!("{}.json", date_stem(r)));
    let mut text = serde_json::to_string_pretty(r)?;
    text.push('\n');
    write_file(&json, text.as_bytes())?;
    render_beside(r, &json)
}

#[cfg(test)]
mod tests;
