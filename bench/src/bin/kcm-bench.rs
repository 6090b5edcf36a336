//! kcm-bench: every workload of issue #8 run twice, against upstream
//! kube-controller-manager and against kcm-rs, each on a fresh local control
//! plane with the same QPS and the same simulated kubelet; writes
//! `bench/results/<date>.{json,md,png}` and prints the Markdown table.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use kcm_bench::common::{Env, Impl, Requests, ServerCost, quantile, sibling_binary};
use kcm_bench::results::{Metric, Results, Workload};
use kcm_bench::{apiserver, eviction, fair, jobs, latency, memory, report, rounds, scaling};

#[derive(Debug, Parser)]
#[command(
    name = "kcm-bench",
    about = "kcm-rs against upstream kube-controller-manager"
)]
struct Flags {
    /// Size factor for W1, W2, W4 and W5 (1 = the sizes of issue #8:
    /// 1,000 Jobs; 10,000 completions; 20,000 pods; 5,000 + 500 pods).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Size factor for W4 only (default: --scale).
    #[arg(long)]
    w4_scale: Option<f64>,
    /// Size factor for W5 only (default: --scale).
    #[arg(long)]
    w5_scale: Option<f64>,
    /// W4's measurement window in seconds (steady RSS, idle CPU): idle CPU
    /// is counted in 10 ms ticks, so a longer window resolves it better.
    #[arg(long, default_value_t = 30)]
    w4_window_secs: u64,
    /// Workloads to run (comma-separated: w1,w2,w3,w4,w5,w6,w7,w8).
    #[arg(long, default_value = "w1,w2,w3,w4,w5,w6,w7,w8", value_delimiter = ',')]
    only: Vec<String>,
    /// W6's pod counts (the memory scaling curve; not scaled by --scale).
    #[arg(long, default_value = "1000,10000,50000,100000", value_delimiter = ',')]
    w6_sizes: Vec<usize>,
    /// W1's QPS/burst settings.
    #[arg(long, default_value = "20/30,200/400", value_delimiter = ',')]
    w1_qps: Vec<String>,
    /// Jobs in W3.
    #[arg(long, default_value_t = 50)]
    w3_runs: usize,
    /// W7's flood, JOBSxPODS (pods per Job); JOBS is scaled by --scale.
    #[arg(long, default_value = "2000x1")]
    w7_flood: fair::Flood,
    /// W7's QPS/burst (KCM's defaults).
    #[arg(long, default_value = "20/30")]
    w7_qps: String,
    /// W8's pod counts (the API server's cost at start-up; not scaled).
    #[arg(long, default_value = "20000,100000", value_delimiter = ',')]
    w8_pods: Vec<usize>,
    /// W8's relist storms: at which of `--w8-pods`.
    #[arg(long, default_value = "20000", value_delimiter = ',')]
    w8_storm: Vec<usize>,
    /// W8's rounds at each size (KCM and kcm-rs measured once each per
    /// round; rows report medians).
    #[arg(long, default_value_t = 3)]
    w8_repeat: usize,
    /// Rounds of W1 (each QPS setting) and W2: KCM and kcm-rs once each
    /// per round, the order alternating; rows report each side's medians
    /// and the notes every round.
    #[arg(long, default_value_t = 1)]
    jobs_repeat: usize,
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
    /// kcm-rs's binary: `make release-bin` builds it (static, with the PGO
    /// profile; `make print-release-bin` names it on other hosts).
    #[arg(
        long,
        default_value = "target/pgo/x86_64-unknown-linux-gnu/release/kcm-rs"
    )]
    kcm_rs: PathBuf,
    /// A flag passed to kcm-rs only (repeatable), e.g.
    /// `--kcm-rs-arg=--kube-api-content-type=application/json`.
    #[arg(long = "kcm-rs-arg", allow_hyphen_values = true)]
    kcm_rs_args: Vec<String>,
    /// A second kcm-rs binary run in upstream KCM's place: an A/B of two
    /// builds in the same rounds (the "upstream" column is this build).
    #[arg(long)]
    baseline: Option<PathBuf>,
}

fn metric(name: &str, unit: &str, up: f64, ours: f64, lower: bool, target: Option<f64>) -> Metric {
    Metric {
        name: name.into(),
        unit: unit.into(),
        upstream: up,
        kcm_rs: ours,
        lower_is_better: lower,
        target_ratio: target,
    }
}

fn requests_note(label: &str, r: &Requests, pods: f64) -> String {
    let parts: Vec<String> = r
        .iter()
        .map(|(k, v)| format!("{k} {:.2}", v / pods.max(1.0)))
        .collect();
    format!("{label} requests/pod by verb: {}", parts.join(", "))
}

/// Throughput, requests per pod, controller CPU and peak RSS, each as
/// `[pods/s, requests/pod, CPU-s, MiB]` for upstream and kcm-rs.
fn cost_metrics(up: [f64; 4], us: [f64; 4]) -> Vec<Metric> {
    let spec = [
        ("pods/s", "pods/s", false, 1.0),
        ("requests/pod", "req/pod", true, 1.0),
        ("controller CPU", "CPU-s", true, 0.35),
        ("peak RSS", "MiB", true, 0.35),
    ];
    spec.iter()
        .zip(up.iter().zip(us.iter()))
        .map(|((name, unit, lower, target), (u, o))| {
            metric(name, unit, *u, *o, *lower, Some(*target))
        })
        .collect()
}

/// The API server's (and its embedded etcd's) CPU during the workload and
/// its peak RSS, under upstream and under kcm-rs. Target: kcm-rs costs the
/// API server no more CPU than upstream does.
fn server_metrics(up: &ServerCost, us: &ServerCost) -> [Metric; 2] {
    [
        metric(
            "API server CPU",
            "CPU-s",
            up.cpu_s,
            us.cpu_s,
            true,
            Some(1.0),
        ),
        metric(
            "API server peak RSS",
            "MiB",
            up.peak_rss_mib,
            us.peak_rss_mib,
            true,
            None,
        ),
    ]
}

fn scaled(n: usize, scale: f64) -> usize {
    ((n as f64 * scale).round() as usize).max(1)
}

fn jobs_workload(
    id: &str,
    description: String,
    up: &jobs::JobsRun,
    us: &jobs::JobsRun,
) -> Workload {
    Workload {
        id: id.into(),
        description,
        metrics: std::iter::once(metric(
            "wall time",
            "s",
            up.wall_s,
            us.wall_s,
            true,
            Some(1.0),
        ))
        .chain(cost_metrics(
            [
                up.pods_created / up.wall_s,
                up.requests_per_pod(),
                up.cpu_s,
                up.peak_rss_mib,
            ],
            [
                us.pods_created / us.wall_s,
                us.requests_per_pod(),
                us.cpu_s,
                us.peak_rss_mib,
            ],
        ))
        .chain(server_metrics(&up.server, &us.server))
        .collect(),
        notes: vec![
            format!(
                "pods created: upstream {}, kcm-rs {}; Jobs: upstream {:?}, kcm-rs {:?}",
                up.pods_created, us.pods_created, up.outcomes, us.outcomes
            ),
            requests_note("upstream", &up.requests, up.pods_created),
            requests_note("kcm-rs", &us.requests, us.pods_created),
            format!(
                "simulator CPU: {:.1} CPU-s with upstream, {:.1} CPU-s with kcm-rs (one process watching all pods, binding and writing 2 statuses per pod)",
                up.sim_cpu_s, us.sim_cpu_s
            ),
        ],
    }
}

/// [`jobs_workload`] of each side's medians, every round in the notes.
fn rounds_workload(id: &str, description: String, r: &rounds::Rounds) -> Workload {
    let (up, us) = r.medians();
    let mut w = jobs_workload(id, description, &up, &us);
    w.notes.extend(r.note());
    w
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    anyhow::ensure!(flags.scale > 0.0, "--scale must be positive");
    let env = Env {
        kcm_rs: flags.kcm_rs.clone(),
        kcm_rs_args: flags.kcm_rs_args.clone(),
        baseline: flags.baseline.clone(),
        kcm_sim: sibling_binary("kcm-sim"),
        started: Instant::now(),
    };
    for (what, p) in [("kcm-rs", &env.kcm_rs), ("kcm-sim", &env.kcm_sim)] {
        anyhow::ensure!(
            p.exists(),
            "{what} not found at {} (make release-bin; cargo build --release -p kcm-sim -p kcm-bench --bins)",
            p.display()
        );
    }
    let run = |w: &str| flags.only.iter().any(|o| o.eq_ignore_ascii_case(w));
    let mut results = Results {
        started: jiff::Timestamp::now().to_string(),
        // Which kcm-rs ran, and how, when it is not the default build.
        machine: format!(
            "{}; kcm-rs {}{}",
            machine(),
            flags.kcm_rs.display(),
            flags
                .kcm_rs_args
                .iter()
                .fold(String::new(), |acc, a| acc + " " + a)
        ),
        scale: flags.scale,
        workloads: Vec::new(),
    };
    let s = flags.scale;

    if run("w1") {
        let n = scaled(1000, s);
        for q in &flags.w1_qps {
            let (qps, burst) = q
                .split_once('/')
                .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
                .with_context(|| format!("--w1-qps {q:?}: expected QPS/BURST"))?;
            let what = format!("W1 qps {q}");
            let w1 = jobs::w1_jobs(n)?;
            let r = rounds::rounds(flags.jobs_repeat, |imp, i| {
                env.progress(format!(
                    "{what} {} (round {}): {n} Jobs x 10 pods",
                    imp.label(),
                    i + 1
                ));
                jobs::run(
                    &env,
                    imp,
                    &what,
                    w1.clone(),
                    qps,
                    burst,
                    Duration::from_secs(3600),
                )
            })
            .await?;
            results.workloads.push(rounds_workload(
                &what,
                format!(
                    "{n} Jobs of 10 pods (parallelism 10), pods run 1-3 s, 30 % fail (FailJob exit code / Ignore by DisruptionTarget / Count exit code), --kube-api-qps/burst {q}"
                ),
                &r,
            ));
        }
    }
    if run("w2") {
        let (c, p) = (scaled(10_000, s) as i32, scaled(500, s) as i32);
        let w2 = jobs::w2_job(c, p)?;
        let r = rounds::rounds(flags.jobs_repeat, |imp, i| {
            env.progress(format!(
                "W2 {} (round {}): Indexed Job of {c} completions, parallelism {p}",
                imp.label(),
                i + 1
            ));
            jobs::run(
                &env,
                imp,
                "W2",
                w2.clone(),
                20,
                30,
                Duration::from_secs(5400),
            )
        })
        .await?;
        results.workloads.push(rounds_workload(
            "W2",
            format!(
                "one Indexed Job, {c} completions, parallelism {p}, backoffLimitPerIndex 1, 2 % of indexes fail every attempt, pods run 1-3 s, QPS 20/30"
            ),
            &r,
        ));
    }
    if run("w3") {
        let mut r = Vec::new();
        for imp in Impl::BOTH {
            env.progress(format!(
                "W3 {}: {} Jobs, one at a time",
                imp.label(),
                flags.w3_runs
            ));
            r.push(latency::run(&env, imp, flags.w3_runs).await?);
        }
        let (up, us) = (&r[0], &r[1]);
        results.workloads.push(Workload {
            id: "W3".into(),
            description: format!("{} Jobs, one at a time: pod status Failed with a FailJob exit code -> Job conditions", flags.w3_runs),
            metrics: vec![
                metric("FailureTarget median", "s", quantile(&up.failure_target, 0.5), quantile(&us.failure_target, 0.5), true, Some(0.5)),
                metric("FailureTarget p99", "s", quantile(&up.failure_target, 0.99), quantile(&us.failure_target, 0.99), true, None),
                metric("Failed median", "s", quantile(&up.failed, 0.5), quantile(&us.failed, 0.5), true, Some(0.5)),
                metric("Failed p99", "s", quantile(&up.failed, 0.99), quantile(&us.failed, 0.99), true, None),
                metric("controller CPU", "CPU-s", up.cpu_s, us.cpu_s, true, Some(0.5)),
            ]
            .into_iter()
            .chain(server_metrics(&up.server, &us.server))
            .collect(),
            notes: Vec::new(),
        });
    }
    if run("w4") {
        let pods = scaled(20_000, flags.w4_scale.unwrap_or(s));
        let mut r = Vec::new();
        for imp in Impl::BOTH {
            env.progress(format!("W4 {}: {pods} pods", imp.label()));
            r.push(
                memory::run(
                    &env,
                    imp,
                    pods,
                    Duration::from_secs(30),
                    Duration::from_secs(flags.w4_window_secs),
                )
                .await?,
            );
        }
        let (up, us) = (&r[0], &r[1]);
        results.workloads.push(Workload {
            id: "W4".into(),
            description: format!("{pods} pods in the informers (half owned by running Jobs, half unrelated, 10 PDBs), all four controllers, 30 s settle + {} s window", flags.w4_window_secs),
            metrics: vec![
                metric("steady RSS", "MiB", up.steady_rss_mib, us.steady_rss_mib, true, Some(0.25)),
                metric("peak RSS", "MiB", up.peak_rss_mib, us.peak_rss_mib, true, Some(0.35)),
                metric("startup CPU", "CPU-s", up.startup_cpu_s, us.startup_cpu_s, true, Some(0.5)),
                metric("idle CPU", "% core", up.idle_cpu_percent, us.idle_cpu_percent, true, Some(1.0)),
            ]
            .into_iter()
            .chain(server_metrics(&up.server, &us.server))
            .collect(),
            notes: vec!["upstream also runs the daemonset controller: its taint-eviction controller needs that controller's pod index".into()],
        });
    }
    if run("w5") {
        let s5 = flags.w5_scale.unwrap_or(s);
        let (over, threshold, node_pods) = (scaled(5000, s5), 500, scaled(500, s5));
        let mut gc = Vec::new();
        let mut taint = Vec::new();
        for imp in Impl::BOTH {
            env.progress(format!(
                "W5 pod GC {}: {threshold} + {over} terminated pods",
                imp.label()
            ));
            gc.push(eviction::pod_gc(&env, imp, over, threshold).await?);
            env.progress(format!(
                "W5 taint {}: {node_pods} pods on the tainted node",
                imp.label()
            ));
            taint.push(eviction::taint(&env, imp, node_pods).await?);
        }
        for (id, desc, up, us) in [
            (
                "W5 pod GC",
                format!(
                    "{over} terminated pods over --terminated-pod-gc-threshold={threshold}, from start to threshold"
                ),
                &gc[0],
                &gc[1],
            ),
            (
                "W5 taint",
                format!(
                    "a Ready node with {node_pods} running pods tainted NoExecute, until every pod is being deleted"
                ),
                &taint[0],
                &taint[1],
            ),
        ] {
            results.workloads.push(Workload {
                id: id.into(),
                description: desc,
                metrics: cost_metrics(
                    [
                        up.pods_per_second(),
                        up.requests_per_pod(),
                        up.cpu_s,
                        up.peak_rss_mib,
                    ],
                    [
                        us.pods_per_second(),
                        us.requests_per_pod(),
                        us.cpu_s,
                        us.peak_rss_mib,
                    ],
                )
                .into_iter()
                .chain(server_metrics(&up.server, &us.server))
                .collect(),
                notes: vec![
                    requests_note("upstream", &up.requests, up.pods as f64),
                    requests_note("kcm-rs", &us.requests, us.pods as f64),
                ],
            });
        }
    }
    if run("w7") {
        results.workloads.push(w7(&env, &flags).await?);
    }
    if run("w8") {
        let (up, us) =
            apiserver::run(&env, &flags.w8_pods, &flags.w8_storm, flags.w8_repeat).await?;
        results.workloads.extend(apiserver::workloads(&up, &us));
    }
    let mut scaling_points = None;
    if run("w6") {
        let points = scaling::run(&env, &flags.w6_sizes, Duration::from_secs(30)).await?;
        for p in &points {
            results.workloads.push(Workload {
                id: format!("W6 {} pods", p.pods),
                description: format!("{} pods in the informers (W4's mix), all four controllers, mean RSS over 30 s after settling", p.pods),
                metrics: vec![metric("steady RSS", "MiB", p.upstream_mib, p.kcm_rs_mib, true, Some(0.25))],
                notes: Vec::new(),
            });
        }
        let (up, us) = scaling::slopes_kib_per_pod(&points);
        results.workloads.push(Workload {
            id: "W6 slope".into(),
            description: format!(
                "least-squares slope of steady RSS against pods over {:?} pods",
                flags.w6_sizes
            ),
            metrics: vec![metric("RSS per pod", "KiB/pod", up, us, true, Some(0.25))],
            notes: Vec::new(),
        });
        scaling_points = Some(points);
    }
    let written = report::write_all(&results, &flags.out)?;
    if let Some(points) = scaling_points {
        let png = flags
            .out
            .join(format!("{}-scaling.png", report::date_stem(&results)));
        report::scaling_png(&points, &png)?;
        env.progress(format!("scaling chart: {}", png.display()));
    }
    println!("{}", report::markdown(&results));
    env.progress(format!("written: {written:?}"));
    Ok(())
}

/// W7: fair share between namespaces (see `kcm_bench::fair`).
async fn w7(env: &Env, flags: &Flags) -> anyhow::Result<Workload> {
    let flood = fair::Flood {
        jobs: scaled(flags.w7_flood.jobs, flags.scale),
        pods: flags.w7_flood.pods,
    };
    let q = &flags.w7_qps;
    let (qps, burst) = q
        .split_once('/')
        .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
        .with_context(|| format!("--w7-qps {q:?}: expected QPS/BURST"))?;
    let mut r = Vec::new();
    for imp in Impl::BOTH {
        env.progress(format!(
            "W7 {}: {} Jobs x {} pods in one namespace, then one Job in another",
            imp.label(),
            flood.jobs,
            flood.pods
        ));
        r.push(fair::run(env, imp, flood, qps, burst, Duration::from_secs(3600)).await?);
    }
    let (up, us) = (&r[0], &r[1]);
    Ok(Workload {
        id: "W7 fair share".into(),
        description: format!(
            "{} Jobs of {} pod(s) created at once in one namespace (pods run 1-3 s), then one 1-pod Job in another namespace; times of the quiet Job from its creation; QPS {q}",
            flood.jobs, flood.pods
        ),
        metrics: vec![
            metric(
                "quiet Job first pod",
                "s",
                up.first_pod_s,
                us.first_pod_s,
                true,
                None,
            ),
            metric(
                "quiet Job complete",
                "s",
                up.complete_s,
                us.complete_s,
                true,
                None,
            ),
            metric("flood done", "s", up.flood_s, us.flood_s, true, None),
            metric("controller CPU", "CPU-s", up.cpu_s, us.cpu_s, true, None),
            metric(
                "peak RSS",
                "MiB",
                up.peak_rss_mib,
                us.peak_rss_mib,
                true,
                None,
            ),
        ]
        .into_iter()
        .chain(server_metrics(&up.server, &us.server))
        .collect(),
        notes: vec![
            format!(
                "flood pods created before the quiet Job's first pod: upstream {}, kcm-rs {} (of {})",
                up.flood_pods_before_quiet,
                us.flood_pods_before_quiet,
                flood.jobs * usize::try_from(flood.pods).unwrap_or(0)
            ),
            format!(
                "outcomes: quiet Job upstream {}, kcm-rs {}; flood upstream {:?}, kcm-rs {:?}; pods created upstream {}, kcm-rs {}",
                up.quiet_outcome,
                us.quiet_outcome,
                up.flood_outcomes,
                us.flood_outcomes,
                up.pods_created,
                us.pods_created
            ),
        ],
    })
}

fn machine() -> String {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|k| k.parse::<f64>().ok())
        })
        .map(|k| k / 1024.0 / 1024.0)
        .unwrap_or(0.0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{cpus} CPUs, {mem:.0} GiB, Linux {}, kube-apiserver and kube-controller-manager v1.34.4 from e2e/harness",
        kernel.trim()
    )
}
