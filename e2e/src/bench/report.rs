//! The report of one benchmark run: a Markdown table, a PNG chart of the
//! kcm-rs / upstream ratios and the raw JSON, written side by side as
//! `<date>.json`, `<date>.md` and `<date>.png`.
//!
//! The chart is drawn with `plotters` and its pure-Rust `ab_glyph` text
//! renderer, so no system font library is needed; the TrueType font itself
//! is read at run time from one of [`FONT_PATHS`] (or `$KCM_BENCH_FONT`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::results::{Metric, Results};

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
                fmt_ratio(m.ratio()),
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

// ---------------------------------------------------------------------------
// Font

/// The font registered with plotters in this process, if any.
static FONT: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Registers a TrueType font with plotters once per process: the file named
/// by `$KCM_BENCH_FONT`, else the first of [`FONT_PATHS`] that exists.
pub fn ensure_font() -> Result<PathBuf, ReportError> {
    let mut registered = FONT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(path) = registered.as_ref() {
        return Ok(path.clone());
    }
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = std::env::var_os(FONT_ENV).filter(|p| !p.is_empty()) {
        candidates.push(PathBuf::from(p));
    }
    candidates.extend(FONT_PATHS.iter().map(PathBuf::from));
    let Some(path) = candidates.iter().find(|p| p.is_file()).cloned() else {
        return Err(ReportError::NoFont { tried: candidates });
    };
    let bytes = std::fs::read(&path).map_err(|source| ReportError::Io {
        action: "reading font",
        path: path.clone(),
        source,
    })?;
    // plotters keeps fonts for the life of the process; this is done once.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font(FAMILY, FontStyle::Normal, bytes)
        .map_err(|_| ReportError::BadFont(path.clone()))?;
    // A bold face next to the regular one, if there is one (DejaVu's is).
    if let Some(bold) = bold_sibling(&path).filter(|p| p.is_file())
        && let Ok(b) = std::fs::read(&bold)
    {
        let b: &'static [u8] = Box::leak(b.into_boxed_slice());
        // Without it, bold text falls back to the regular face.
        let _ = plotters::style::register_font(FAMILY, FontStyle::Bold, b);
    }
    *registered = Some(path.clone());
    Ok(path)
}

fn bold_sibling(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?.to_str()?;
    let bold = match name {
        "DejaVuSans.ttf" => "DejaVuSans-Bold.ttf",
        "LiberationSans-Regular.ttf" => "LiberationSans-Bold.ttf",
        "FreeSans.ttf" => "FreeSansBold.ttf",
        "Arial.ttf" => "Arial Bold.ttf",
        _ => return None,
    };
    Some(path.with_file_name(bold))
}

// ---------------------------------------------------------------------------
// Chart

const WIDTH: u32 = 1400;
// Even pixel sizes only: plotters' ab_glyph renderer places each glyph at
// `size / 2 + top` truncated, which with odd sizes lifts some glyphs (the
// dot in "0.5") a pixel off the baseline.
const TITLE_PX: i32 = 26;
const LABEL_PX: i32 = 18;
const SMALL_PX: i32 = 16;
const TOP: i32 = 118;
const ROW_H: i32 = 32;
const BAR_H: i32 = 18;
const GROUP_GAP: i32 = 10;
const BOTTOM: i32 = 66;
const RIGHT_MARGIN: i32 = 110;

const MET: RGBColor = RGBColor(46, 160, 67);
const MISSED: RGBColor = RGBColor(207, 34, 46);
const NO_TARGET: RGBColor = RGBColor(150, 150, 150);
const INK: RGBColor = RGBColor(33, 33, 33);
const SOFT_INK: RGBColor = RGBColor(90, 90, 90);
const GRID: RGBColor = RGBColor(222, 222, 222);
const BAND: RGBColor = RGBColor(246, 247, 249);

struct Row {
    label: String,
    ratio: f64,
    target: Option<f64>,
    met: Option<bool>,
    /// Index of the workload, for grouping.
    group: usize,
}

fn rows(r: &Results) -> Vec<Row> {
    let mut rows = Vec::new();
    for (group, w) in r.workloads.iter().enumerate() {
        for m in &w.metrics {
            rows.push(Row {
                label: format!("{} · {}", w.id, metric_label(m)),
                ratio: m.ratio(),
                target: m.target_ratio,
                met: m.meets_target(),
                group,
            });
        }
    }
    rows
}

/// 1-2-5 steps from 0.001 to 1000: the ends and grid lines of the log axis.
fn ticks() -> Vec<f64> {
    let mut t = Vec::new();
    for k in -3..=3 {
        for m in [1.0, 2.0, 5.0] {
            let v: f64 = m * 10f64.powi(k);
            if v <= 1000.0 {
                t.push(v);
            }
        }
    }
    t
}

/// The axis range: every finite positive ratio and target with some room,
/// never narrower than 0.5–2, snapped outward to 1-2-5 steps.
fn domain(rows: &[Row]) -> (f64, f64) {
    let (mut lo, mut hi) = (0.5f64, 2.0f64);
    for v in rows
        .iter()
        .flat_map(|r| [Some(r.ratio), r.target])
        .flatten()
        .filter(|v| v.is_finite() && *v > 0.0)
    {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    let (lo, hi) = ((lo / 1.7).max(1e-3), (hi * 1.7).min(1e3));
    let t = ticks();
    let lo = t.iter().rev().find(|v| **v <= lo).copied().unwrap_or(1e-3);
    let hi = t.iter().find(|v| **v >= hi).copied().unwrap_or(1e3);
    (lo, hi)
}

/// Draws the ratio kcm-rs / upstream of every metric as a horizontal bar on
/// a log axis, from parity (1×) to the ratio, coloured by whether the
/// metric's target is met (green), missed (red) or absent (grey), with a
/// black tick at each target. Writes a PNG to `path`.
pub fn chart_png(r: &Results, path: &Path) -> Result<(), ReportError> {
    ensure_font()?;
    let rows = rows(r);
    let groups = rows.last().map_or(0, |row| row.group + 1);
    let n = i32::try_from(rows.len().clamp(1, 1000)).unwrap_or(1000);
    let gaps = i32::try_from(groups.saturating_sub(1)).unwrap_or(0);
    let height = TOP + n * ROW_H + gaps * GROUP_GAP + BOTTOM;
    let height = u32::try_from(height).unwrap_or(2000);

    let root = BitMapBackend::new(path, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE).map_err(chart_err)?;

    let label_style = TextStyle::from((FAMILY, LABEL_PX).into_font())
        .color(&INK)
        .pos(Pos::new(HPos::Right, VPos::Center));
    let value_style = TextStyle::from((FAMILY, SMALL_PX).into_font()).color(&INK);
    let small = TextStyle::from((FAMILY, SMALL_PX).into_font()).color(&SOFT_INK);

    // Title and subtitle.
    let title = TextStyle::from((FAMILY, TITLE_PX, FontStyle::Bold).into_font())
        .color(&INK)
        .pos(Pos::new(HPos::Center, VPos::Top));
    let w = i32::try_from(WIDTH).unwrap_or(1400);
    root.draw(&Text::new(
        "kcm-rs / upstream kube-controller-manager (lower is better unless marked ↑)",
        (w / 2, 14),
        title,
    ))
    .map_err(chart_err)?;
    let machine: String = r.machine.replace('\n', " ").chars().take(110).collect();
    root.draw(&Text::new(
        format!(
            "{} · scale {} · {}",
            r.started.get(..10).unwrap_or(&r.started),
            fmt_plain(r.scale),
            machine
        ),
        (w / 2, 50),
        small.pos(Pos::new(HPos::Center, VPos::Top)),
    ))
    .map_err(chart_err)?;

    // Left column as wide as the longest label.
    let mut label_w = 160i32;
    for row in &rows {
        let (tw, _) = root
            .estimate_text_size(&row.label, &label_style)
            .map_err(chart_err)?;
        label_w = label_w.max(i32::try_from(tw).unwrap_or(600));
    }
    let plot_l = (label_w + 30).min(w / 2);
    let plot_r = w - RIGHT_MARGIN;
    let plot_t = TOP;
    let plot_b = i32::try_from(height).unwrap_or(2000) - BOTTOM;

    let (lo, hi) = domain(&rows);
    let (llo, lhi) = (lo.ln(), hi.ln());
    let x_of = |v: f64| -> i32 {
        let v = if v.is_finite() && v > 0.0 { v } else { lo };
        let f = ((v.ln() - llo) / (lhi - llo)).clamp(0.0, 1.0);
        plot_l + (f * f64::from(plot_r - plot_l)).round() as i32
    };

    // Legend.
    let legend_y = 86;
    let mut lx = plot_l;
    for (colour, text) in [
        (MET, "target met"),
        (MISSED, "target missed"),
        (NO_TARGET, "no target"),
    ] {
        root.draw(&Rectangle::new(
            [(lx, legend_y - 7), (lx + 22, legend_y + 7)],
            colour.filled(),
        ))
        .map_err(chart_err)?;
        let style = small.pos(Pos::new(HPos::Left, VPos::Center));
        root.draw(&Text::new(text, (lx + 30, legend_y), style.clone()))
            .map_err(chart_err)?;
        let (tw, _) = root.estimate_text_size(text, &style).map_err(chart_err)?;
        lx += 30 + i32::try_from(tw).unwrap_or(100) + 28;
    }
    root.draw(&Rectangle::new(
        [(lx + 9, legend_y - 11), (lx + 12, legend_y + 11)],
        INK.filled(),
    ))
    .map_err(chart_err)?;
    let style = small.pos(Pos::new(HPos::Left, VPos::Center));
    root.draw(&Text::new("target", (lx + 24, legend_y), style.clone()))
        .map_err(chart_err)?;
    let (tw, _) = root
        .estimate_text_size("target", &style)
        .map_err(chart_err)?;
    lx += 24 + i32::try_from(tw).unwrap_or(60) + 28;
    root.draw(&PathElement::new(
        vec![(lx + 10, legend_y - 11), (lx + 10, legend_y + 11)],
        SOFT_INK.stroke_width(2),
    ))
    .map_err(chart_err)?;
    root.draw(&Text::new(
        "parity (1×); bars run from parity to the ratio",
        (lx + 22, legend_y),
        style,
    ))
    .map_err(chart_err)?;

    // Row positions: rows, with a gap between workloads.
    let row_top = |i: usize, group: usize| -> i32 {
        plot_t
            + i32::try_from(i).unwrap_or(0) * ROW_H
            + i32::try_from(group).unwrap_or(0) * GROUP_GAP
    };

    // Shade every other workload.
    let mut i = 0;
    while i < rows.len() {
        let g = rows[i].group;
        let j = rows[i..]
            .iter()
            .position(|row| row.group != g)
            .map_or(rows.len(), |k| i + k);
        if g.is_multiple_of(2) {
            root.draw(&Rectangle::new(
                [
                    (8, row_top(i, g) - GROUP_GAP / 2 + 1),
                    (w - 8, row_top(j, g) + GROUP_GAP / 2 - 1),
                ],
                BAND.filled(),
            ))
            .map_err(chart_err)?;
        }
        i = j;
    }

    // Grid and axis labels.
    let axis_style = small.pos(Pos::new(HPos::Center, VPos::Top));
    for t in ticks().into_iter().filter(|t| *t >= lo && *t <= hi) {
        let x = x_of(t);
        root.draw(&PathElement::new(
            vec![(x, plot_t - 4), (x, plot_b + 4)],
            GRID.stroke_width(1),
        ))
        .map_err(chart_err)?;
        root.draw(&Text::new(
            format!("{}×", fmt_plain(t)),
            (x, plot_b + 10),
            axis_style.clone(),
        ))
        .map_err(chart_err)?;
    }
    root.draw(&PathElement::new(
        vec![(plot_l, plot_b + 4), (plot_r, plot_b + 4)],
        SOFT_INK.stroke_width(1),
    ))
    .map_err(chart_err)?;
    root.draw(&Text::new(
        "kcm-rs / upstream (log scale)",
        ((plot_l + plot_r) / 2, plot_b + 38),
        axis_style,
    ))
    .map_err(chart_err)?;

    // Bars.
    let parity = x_of(1.0);
    for (i, row) in rows.iter().enumerate() {
        let top = row_top(i, row.group);
        let mid = top + ROW_H / 2;
        root.draw(&Text::new(
            row.label.clone(),
            (plot_l - 14, mid),
            label_style.clone(),
        ))
        .map_err(chart_err)?;

        let colour = match row.met {
            Some(true) => MET,
            Some(false) => MISSED,
            None => NO_TARGET,
        };
        if row.ratio.is_nan() {
            root.draw(&Text::new(
                "n/a (upstream is 0)",
                (parity + 10, mid),
                value_style.pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(chart_err)?;
        } else {
            let end = x_of(row.ratio);
            let (x0, x1) = if end < parity {
                (end, parity)
            } else {
                (parity, end.max(parity + 2))
            };
            root.draw(&Rectangle::new(
                [(x0, mid - BAR_H / 2), (x1, mid + BAR_H / 2)],
                colour.filled(),
            ))
            .map_err(chart_err)?;
            // The value goes just past the bar's end, or past the target
            // tick when that would be under the text.
            let text = fmt_ratio(row.ratio);
            let (tw, _) = root
                .estimate_text_size(&text, &value_style)
                .map_err(chart_err)?;
            let reach = i32::try_from(tw).unwrap_or(60) + 8;
            let tick = row.target.filter(|t| t.is_finite() && *t > 0.0).map(&x_of);
            let (anchor, x) = if end < parity {
                let x = match tick {
                    Some(t) if t <= x0 + 2 && t > x0 - reach => t - 5,
                    _ => x0 - 6,
                };
                (HPos::Right, x)
            } else {
                let x = match tick {
                    Some(t) if t >= x1 - 2 && t < x1 + reach => t + 6,
                    _ => x1 + 6,
                };
                (HPos::Left, x)
            };
            root.draw(&Text::new(
                text,
                (x, mid),
                value_style.pos(Pos::new(anchor, VPos::Center)),
            ))
            .map_err(chart_err)?;
        }
    }

    // Parity on top of the bars, target ticks on top of everything (a 1×
    // target still shows on the parity line).
    root.draw(&PathElement::new(
        vec![(parity, plot_t - 8), (parity, plot_b + 4)],
        SOFT_INK.stroke_width(2),
    ))
    .map_err(chart_err)?;
    for (i, row) in rows.iter().enumerate() {
        if let Some(t) = row.target.filter(|t| t.is_finite() && *t > 0.0) {
            let x = x_of(t);
            let mid = row_top(i, row.group) + ROW_H / 2;
            root.draw(&Rectangle::new(
                [(x - 1, mid - BAR_H / 2 - 5), (x + 2, mid + BAR_H / 2 + 5)],
                INK.filled(),
            ))
            .map_err(chart_err)?;
        }
    }

    root.present().map_err(chart_err)?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Files

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
mod tests {
    use super::*;
    use crate::bench::results::Workload;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn metric(name: &str, upstream: f64, kcm_rs: f64, lower: bool, target: Option<f64>) -> Metric {
        Metric {
            name: name.to_owned(),
            unit: "s".to_owned(),
            upstream,
            kcm_rs,
            lower_is_better: lower,
            target_ratio: target,
        }
    }

    pub(super) fn sample() -> Results {
        Results {
            started: "2026-11-30T08:00:00Z".to_owned(),
            machine: "2 CPUs, 24 GiB, Linux 6.1, Kubernetes v1.34.1".to_owned(),
            scale: 0.25,
            workloads: vec![
                Workload {
                    id: "W1 qps 20/30".to_owned(),
                    description: "Deployment of 1000 replicas, scaled to 0".to_owned(),
                    metrics: vec![
                        metric("controller CPU", 10.0, 4.2, true, Some(0.5)),
                        metric("peak RSS", 100.0, 80.0, true, Some(0.5)),
                        metric("wall time", 60.0, 59.0, true, None),
                        metric("throughput", 30.0, 36.0, false, Some(1.0)),
                    ],
                    notes: vec!["simulator CPU 3.1 CPU-s".to_owned()],
                },
                Workload {
                    id: "W2 idle".to_owned(),
                    description: "5000 pods held idle".to_owned(),
                    metrics: vec![
                        metric("requests/pod", 0.0, 1.0, true, Some(1.0)),
                        metric("idle CPU", 2.0, 0.1, true, Some(0.2)),
                        metric("peak RSS", 200.0, 500.0, true, Some(0.5)),
                    ],
                    notes: vec![],
                },
            ],
        }
    }

    /// The table row of a metric, by its name.
    fn row<'a>(md: &'a str, name: &str) -> &'a str {
        md.lines()
            .find(|l| l.starts_with('|') && l.contains(&format!("| {name} |")))
            .unwrap_or("")
    }

    #[test]
    fn markdown_shows_ratio_target_and_met() {
        let md = markdown(&sample());
        assert!(md.starts_with("# kcm-rs vs upstream kube-controller-manager — 2026-11-30"));
        assert!(md.contains("- scale: 0.25"), "{md}");
        assert!(md.contains(
            "| workload | metric | unit | upstream | kcm-rs | kcm-rs / upstream | target | met |"
        ));

        let met = row(&md, "controller CPU");
        assert_eq!(
            met,
            "| W1 qps 20/30 | controller CPU | s | 10.0 | 4.20 | 0.42× | ≤ 0.5× | yes |"
        );
        let no_target = row(&md, "wall time");
        assert_eq!(
            no_target,
            "| W1 qps 20/30 | wall time | s | 60.0 | 59.0 | 0.98× | — | — |"
        );
        let missed = md
            .lines()
            .find(|l| l.starts_with("| W2 idle | peak RSS"))
            .unwrap_or("");
        assert_eq!(
            missed,
            "| W2 idle | peak RSS | s | 200 | 500 | 2.50× | ≤ 0.5× | no |"
        );
        let up = row(&md, "throughput ↑");
        assert!(up.contains("| 1.20× | ≥ 1× | yes |"), "{up}");
    }

    #[test]
    fn markdown_handles_zero_upstream() {
        let md = markdown(&sample());
        let nan = row(&md, "requests/pod");
        assert_eq!(
            nan,
            "| W2 idle | requests/pod | s | 0 | 1.00 | — | ≤ 1× | — |"
        );
    }

    #[test]
    fn markdown_lists_descriptions_and_notes() {
        let md = markdown(&sample());
        assert!(md.contains("### W1 qps 20/30\n\nDeployment of 1000 replicas, scaled to 0\n"));
        assert!(md.contains("- simulator CPU 3.1 CPU-s\n"));
        assert!(md.ends_with("5000 pods held idle\n"), "{md}");
    }

    #[test]
    fn numbers_have_about_three_significant_digits() {
        assert_eq!(fmt_num(1234.4), "1234");
        assert_eq!(fmt_num(12.345), "12.3");
        assert_eq!(fmt_num(1.2345), "1.23");
        assert_eq!(fmt_num(0.12345), "0.123");
        assert_eq!(fmt_num(0.012345), "0.0123");
        assert_eq!(fmt_num(f64::NAN), "—");
        assert_eq!(fmt_ratio(0.053), "0.053×");
        assert_eq!(fmt_ratio(0.42), "0.42×");
        assert_eq!(fmt_ratio(12.4), "12×");
        assert_eq!(fmt_plain(1.0), "1");
        assert_eq!(fmt_plain(0.5), "0.5");
    }

    #[test]
    fn domain_covers_ratios_and_targets() {
        let rows = rows(&sample());
        let (lo, hi) = domain(&rows);
        assert!(lo <= 0.05 / 1.7 && hi >= 2.5 * 1.7, "{lo}..{hi}");
        let empty = domain(&[]);
        assert_eq!(empty, (0.2, 5.0));
    }

    #[test]
    fn no_font_error_names_the_paths() {
        let e = ReportError::NoFont {
            tried: vec![PathBuf::from("/a/x.ttf"), PathBuf::from("/b/y.ttf")],
        };
        let msg = e.to_string();
        assert!(msg.contains("/a/x.ttf, /b/y.ttf"), "{msg}");
        assert!(msg.contains(FONT_ENV), "{msg}");
    }

    fn font_or_skip() -> bool {
        match ensure_font() {
            Ok(_) => true,
            Err(e) => {
                eprintln!("skipping chart test: {e}");
                false
            }
        }
    }

    #[test]
    fn chart_png_writes_a_png() -> TestResult {
        if !font_or_skip() {
            return Ok(());
        }
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("chart.png");
        chart_png(&sample(), &path)?;
        let bytes = std::fs::read(&path)?;
        assert!(bytes.len() > 1000, "{} bytes", bytes.len());
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        Ok(())
    }

    #[test]
    fn chart_png_handles_no_workloads() -> TestResult {
        if !font_or_skip() {
            return Ok(());
        }
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("empty.png");
        chart_png(&Results::default(), &path)?;
        assert!(std::fs::metadata(&path)?.len() > 0);
        Ok(())
    }

    #[test]
    fn write_all_writes_three_files() -> TestResult {
        if !font_or_skip() {
            return Ok(());
        }
        let dir = tempfile::tempdir()?;
        let out = dir.path().join("results");
        let w = write_all(&sample(), &out)?;
        assert_eq!(w.json, out.join("2026-11-30.json"));
        assert_eq!(w.markdown, out.join("2026-11-30.md"));
        assert_eq!(w.png, out.join("2026-11-30.png"));
        let back: Results = serde_json::from_str(&std::fs::read_to_string(&w.json)?)?;
        assert_eq!(back.workloads.len(), 2);
        assert!(
            std::fs::read_to_string(&w.markdown)?
                .contains("![kcm-rs / upstream ratios](2026-11-30.png)")
        );
        assert!(std::fs::metadata(&w.png)?.len() > 0);
        Ok(())
    }
}
