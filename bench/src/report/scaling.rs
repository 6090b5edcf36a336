//! The memory scaling chart (W6): steady RSS in MiB against pods in the
//! informers, one line per implementation, with each one's slope in the
//! legend.

use std::path::Path;

use plotters::prelude::*;

use super::chart::ensure_font;
use super::{FAMILY, ReportError, chart_err};
use crate::scaling::{Point, slopes_kib_per_pod};

const UPSTREAM: RGBColor = RGBColor(90, 90, 90);
const KCM_RS: RGBColor = RGBColor(46, 110, 200);

/// Draws `points` to a PNG at `path`.
pub fn scaling_png(points: &[Point], path: &Path) -> Result<(), ReportError> {
    ensure_font()?;
    let (up_slope, us_slope) = slopes_kib_per_pod(points);
    let max_x = points.iter().map(|p| p.pods).max().unwrap_or(1) as f64 / 1000.0;
    let max_y = points
        .iter()
        .map(|p| p.upstream_mib.max(p.kcm_rs_mib))
        .fold(1.0, f64::max);
    let root = BitMapBackend::new(path, (1000, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(chart_err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "steady RSS against pods in the informers (W6)",
            (FAMILY, 24),
        )
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..max_x * 1.05, 0.0..max_y * 1.1)
        .map_err(chart_err)?;
    chart
        .configure_mesh()
        .x_desc("pods (thousands)")
        .y_desc("MiB")
        .label_style((FAMILY, 16))
        .draw()
        .map_err(chart_err)?;
    let lines = [
        (
            format!("upstream KCM ({up_slope:.2} KiB/pod)"),
            UPSTREAM,
            points
                .iter()
                .map(|p| (p.pods as f64 / 1000.0, p.upstream_mib))
                .collect::<Vec<_>>(),
        ),
        (
            format!("kcm-rs ({us_slope:.2} KiB/pod)"),
            KCM_RS,
            points
                .iter()
                .map(|p| (p.pods as f64 / 1000.0, p.kcm_rs_mib))
                .collect(),
        ),
    ];
    for (label, color, xy) in lines {
        chart
            .draw_series(LineSeries::new(xy.clone(), color.stroke_width(3)))
            .map_err(chart_err)?
            .label(label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 24, y)], color.stroke_width(3)));
        chart
            .draw_series(xy.into_iter().map(|p| Circle::new(p, 5, color.filled())))
            .map_err(chart_err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FAMILY, 18))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(chart_err)?;
    root.present().map_err(chart_err)
}
