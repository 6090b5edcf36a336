//! W6: the memory scaling curve. One control plane grows through the
//! given pod counts (W4's mix: half Job pods, half unrelated pods, 10
//! PDBs); at each size upstream and then kcm-rs start with all four
//! controllers, settle, and their mean RSS over a window is the point. The
//! per-pod slope is the least-squares line through the points.

use std::time::{Duration, Instant};

use anyhow::Context;

use super::common::{Env, Impl, spawn_manager};
use super::memory::{CONTROLLERS, grow, mean_rss};
use kcm_e2e::{ControlPlane, TestNamespace};

/// Steady RSS of both at one size.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct Point {
    pub pods: usize,
    pub upstream_mib: f64,
    pub kcm_rs_mib: f64,
}

/// Settling time before the window: 30 s, plus 1 s per 5,000 pods for the
/// initial lists and first syncs.
fn settle(pods: usize) -> Duration {
    Duration::from_secs(30 + (pods / 5000) as u64)
}

pub async fn run(env: &Env, sizes: &[usize], window: Duration) -> anyhow::Result<Vec<Point>> {
    let cp = ControlPlane::start().context("control plane")?;
    let client = cp.client().await?;
    let ns = TestNamespace::create(&client, "bench-scale").await?;
    let mut sizes = sizes.to_vec();
    sizes.sort_unstable();
    sizes.dedup();
    let (mut have, mut points) = (0, Vec::new());
    for pods in sizes {
        let t = Instant::now();
        grow(&client, &ns.name, have, pods).await?;
        have = pods;
        env.progress(format!(
            "W6: {pods} pods in the API server ({:.0} s to grow)",
            t.elapsed().as_secs_f64()
        ));
        let mut rss = [0.0; 2];
        for (i, imp) in Impl::BOTH.into_iter().enumerate() {
            let mgr = spawn_manager(env, &cp, imp, &CONTROLLERS, 20, 30, &[])?;
            tokio::time::sleep(settle(pods)).await;
            rss[i] = mean_rss(&mgr, window).await;
            mgr.stop().await;
            env.progress(format!(
                "W6 {} at {pods} pods: steady RSS {:.0} MiB",
                imp.label(),
                rss[i]
            ));
        }
        points.push(Point {
            pods,
            upstream_mib: rss[0],
            kcm_rs_mib: rss[1],
        });
    }
    Ok(points)
}

/// The least-squares slope of `(x, y)`, in y per x; NaN with fewer than
/// two distinct x.
pub fn slope(xy: &[(f64, f64)]) -> f64 {
    let n = xy.len() as f64;
    let (mx, my) = (
        xy.iter().map(|p| p.0).sum::<f64>() / n,
        xy.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let sxx: f64 = xy.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = xy.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    if sxx == 0.0 { f64::NAN } else { sxy / sxx }
}

/// Each implementation's slope in KiB per pod: (upstream, kcm-rs).
pub fn slopes_kib_per_pod(points: &[Point]) -> (f64, f64) {
    let line = |f: fn(&Point) -> f64| {
        let xy: Vec<(f64, f64)> = points.iter().map(|p| (p.pods as f64, f(p))).collect();
        slope(&xy) * 1024.0
    };
    (line(|p| p.upstream_mib), line(|p| p.kcm_rs_mib))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slope_of_a_line_and_of_too_few_points() {
        let pts = [(1000.0, 12.0), (10_000.0, 30.0), (50_000.0, 110.0)];
        assert!((slope(&pts) - 0.002).abs() < 1e-9);
        assert!(slope(&[(5.0, 1.0)]).is_nan());
        assert!(slope(&[(5.0, 1.0), (5.0, 2.0)]).is_nan());
    }

    #[test]
    fn slopes_in_kib_per_pod() {
        let pts = [
            Point {
                pods: 1000,
                upstream_mib: 40.0,
                kcm_rs_mib: 10.0,
            },
            Point {
                pods: 11_000,
                upstream_mib: 80.0,
                kcm_rs_mib: 20.0,
            },
        ];
        let (u, k) = slopes_kib_per_pod(&pts);
        assert!((u - 4.096).abs() < 1e-9, "{u}");
        assert!((k - 1.024).abs() < 1e-9, "{k}");
    }
}
