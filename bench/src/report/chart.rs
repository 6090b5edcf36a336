//! The PNG chart of kcm-rs / upstream ratios, and the font it needs.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::*;

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

pub(super) struct Row {
    label: String,
    ratio: f64,
    target: Option<f64>,
    met: Option<bool>,
    /// Index of the workload, for grouping.
    group: usize,
}

pub(super) fn rows(r: &Results) -> Vec<Row> {
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
pub(super) fn domain(rows: &[Row]) -> (f64, f64) {
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
