//! Rounds of a Jobs workload (`kcm-bench --jobs-repeat N`, W1 and W2): KCM
//! and kcm-rs run once each per round, the order alternating by round
//! (upstream first in round 1), and each side's row is the median of its
//! rounds, figure by figure. A single run of W1 moves ±15 % (controller
//! CPU); the note lists every round so the spread stays visible.

use std::future::Future;

use super::common::{Impl, quantile};
use super::jobs::JobsRun;

/// Every round's run of each side.
#[derive(Debug, Default)]
pub struct Rounds {
    pub upstream: Vec<JobsRun>,
    pub kcm_rs: Vec<JobsRun>,
}

/// Which side runs first in round `i` (0-based).
pub fn order(i: usize) -> [Impl; 2] {
    if i.is_multiple_of(2) {
        Impl::BOTH
    } else {
        [Impl::KcmRs, Impl::Upstream]
    }
}

/// Runs `repeat` rounds (at least one) of `run`.
pub async fn rounds<F, Fut>(repeat: usize, mut run: F) -> anyhow::Result<Rounds>
where
    F: FnMut(Impl, usize) -> Fut,
    Fut: Future<Output = anyhow::Result<JobsRun>>,
{
    let mut out = Rounds::default();
    for i in 0..repeat.max(1) {
        for imp in order(i) {
            let r = run(imp, i).await?;
            match imp {
                Impl::Upstream => out.upstream.push(r),
                Impl::KcmRs => out.kcm_rs.push(r),
            }
        }
    }
    Ok(out)
}

impl Rounds {
    /// Each side's median run.
    pub fn medians(&self) -> (JobsRun, JobsRun) {
        (median_run(&self.upstream), median_run(&self.kcm_rs))
    }

    /// Every round's controller and API server CPU, KCM / kcm-rs (ratio);
    /// `None` for one round (the row is that round).
    pub fn note(&self) -> Option<String> {
        if self.upstream.len() < 2 {
            return None;
        }
        let rounds: Vec<String> = self
            .upstream
            .iter()
            .zip(&self.kcm_rs)
            .enumerate()
            .map(|(i, (u, o))| {
                format!(
                    "{}: controller {:.2} / {:.2} ({:.2}x), API server {:.1} / {:.1} ({:.2}x)",
                    i + 1,
                    u.cpu_s,
                    o.cpu_s,
                    o.cpu_s / u.cpu_s,
                    u.server.cpu_s,
                    o.server.cpu_s,
                    o.server.cpu_s / u.server.cpu_s
                )
            })
            .collect();
        Some(format!(
            "{} rounds (order alternating, upstream first in round 1), rows are each side's medians; CPU-s upstream / kcm-rs by round: {}",
            self.upstream.len(),
            rounds.join("; ")
        ))
    }
}

/// The median of each figure; the request counts and outcomes are those
/// of the run whose controller CPU is nearest the median.
fn median_run(runs: &[JobsRun]) -> JobsRun {
    let med = |f: fn(&JobsRun) -> f64| quantile(&runs.iter().map(f).collect::<Vec<_>>(), 0.5);
    let cpu = med(|r| r.cpu_s);
    let Some(mid) = runs
        .iter()
        .min_by(|a, b| (a.cpu_s - cpu).abs().total_cmp(&(b.cpu_s - cpu).abs()))
    else {
        return JobsRun::default();
    };
    let mut out = mid.clone();
    out.wall_s = med(|r| r.wall_s);
    out.pods_created = med(|r| r.pods_created);
    out.cpu_s = cpu;
    out.peak_rss_mib = med(|r| r.peak_rss_mib);
    out.sim_cpu_s = med(|r| r.sim_cpu_s);
    out.server.cpu_s = med(|r| r.server.cpu_s);
    out.server.peak_rss_mib = med(|r| r.server.peak_rss_mib);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(cpu: f64, server: f64, wall: f64) -> JobsRun {
        let mut r = JobsRun {
            cpu_s: cpu,
            wall_s: wall,
            ..JobsRun::default()
        };
        r.server.cpu_s = server;
        r.requests.insert(format!("cpu {cpu}"), 1.0);
        r
    }

    #[test]
    fn order_alternates_from_upstream_first() {
        assert_eq!(order(0), [Impl::Upstream, Impl::KcmRs]);
        assert_eq!(order(1), [Impl::KcmRs, Impl::Upstream]);
        assert_eq!(order(2), [Impl::Upstream, Impl::KcmRs]);
    }

    #[test]
    fn medians_are_per_figure_and_counts_follow_the_median_cpu_run() {
        let runs = [
            run(2.0, 30.0, 10.0),
            run(1.0, 20.0, 30.0),
            run(3.0, 25.0, 20.0),
        ];
        let m = median_run(&runs);
        assert_eq!((m.cpu_s, m.server.cpu_s, m.wall_s), (2.0, 25.0, 20.0));
        assert!(m.requests.contains_key("cpu 2"));
        assert_eq!(median_run(&[]).cpu_s, 0.0);
    }

    #[tokio::test]
    async fn rounds_run_both_sides_each_round_and_note_every_round() -> anyhow::Result<()> {
        let mut seen = Vec::new();
        let r = rounds(3, |imp, i| {
            seen.push((imp, i));
            let cpu = match imp {
                Impl::Upstream => 4.0,
                Impl::KcmRs => 1.0 + i as f64,
            };
            async move { Ok(run(cpu, 10.0, 1.0)) }
        })
        .await?;
        assert_eq!(seen.len(), 6);
        assert_eq!(seen[2], (Impl::KcmRs, 1));
        assert_eq!(r.medians().1.cpu_s, 2.0);
        let note = r.note().unwrap_or_default();
        assert!(note.contains("3: controller 4.00 / 3.00 (0.75x)"), "{note}");
        let one = rounds(1, |_, _| async { Ok(run(1.0, 1.0, 1.0)) }).await?;
        assert!(one.note().is_none());
        Ok(())
    }
}
