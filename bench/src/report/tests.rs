use super::chart::{domain, rows};
use super::*;
use crate::results::Workload;

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
    // Two digits would show 1.00× for a missed "at most 1×" target.
    let close = metric("requests/pod", 2.6310, 2.6318, true, Some(1.0));
    assert_eq!(close.meets_target(), Some(false));
    assert_eq!(fmt_metric_ratio(&close), "1.0003×");
    let equal = metric("requests/pod", 2.63, 2.63, true, Some(1.0));
    assert_eq!(fmt_metric_ratio(&equal), "1.00×");
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

#[test]
fn scaling_png_writes_a_png() -> TestResult {
    if !font_or_skip() {
        return Ok(());
    }
    let point = |pods, upstream_mib, kcm_rs_mib| crate::scaling::Point {
        pods,
        upstream_mib,
        kcm_rs_mib,
    };
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("scaling.png");
    scaling_png(
        &[
            point(1000, 60.0, 15.0),
            point(10_000, 120.0, 35.0),
            point(50_000, 400.0, 120.0),
        ],
        &path,
    )?;
    let bytes = std::fs::read(&path)?;
    assert!(bytes.len() > 1000, "{} bytes", bytes.len());
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    Ok(())
}
