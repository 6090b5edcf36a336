//! W7, fair share between namespaces (issue 36): a flood of Jobs in one
//! namespace, then one Job in another; how long that quiet Job waits for
//! its first pod and for completion while the flood is worked off, and
//! how long the flood takes (fairness must not slow it down).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use kube::runtime::watcher;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::common::{
    Env, Impl, ServerCost, create_many, delta, job, request_counts, spawn_manager, spawn_sim,
    terminal,
};
use kcm_e2e::{ControlPlane, TestNamespace};

/// The flood: `jobs` Jobs of `pods` pods each (parallelism = completions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flood {
    pub jobs: usize,
    pub pods: i32,
}

impl std::str::FromStr for Flood {
    type Err = String;

    /// `JOBSxPODS`, e.g. `2000x1`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (j, p) = s
            .split_once('x')
            .ok_or_else(|| format!("{s:?}: expected JOBSxPODS, e.g. 2000x1"))?;
        let jobs: usize = j.parse().map_err(|e| format!("{s:?}: {e}"))?;
        let pods: i32 = p.parse().map_err(|e| format!("{s:?}: {e}"))?;
        if jobs == 0 || pods <= 0 {
            return Err(format!("{s:?}: both numbers must be positive"));
        }
        Ok(Flood { jobs, pods })
    }
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct FairRun {
    /// From the quiet Job's creation to its first pod (seen on a watch).
    pub first_pod_s: f64,
    /// From the quiet Job's creation to its terminal condition.
    pub complete_s: f64,
    pub quiet_outcome: String,
    /// From the first flood Job's creation until every flood Job is terminal.
    pub flood_s: f64,
    pub flood_outcomes: BTreeMap<String, usize>,
    /// Flood pods seen before the quiet Job's first pod (how far the quiet
    /// Job overtook the flood: a FIFO queue creates all of them first).
    pub flood_pods_before_quiet: usize,
    pub pods_created: f64,
    pub cpu_s: f64,
    pub peak_rss_mib: f64,
    pub server: ServerCost,
}

/// A watch positioned after its initial list.
async fn watch_after_list<K>(api: &Api<K>) -> BoxStream<'static, watcher::Result<watcher::Event<K>>>
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let mut stream = watcher::watcher(api.clone(), watcher::Config::default()).boxed();
    while let Some(ev) = stream.next().await {
        if matches!(ev, Ok(watcher::Event::InitDone)) {
            break;
        }
    }
    stream
}

enum Seen {
    Flood(Job),
    FloodPod(String),
    Quiet(Job),
    QuietPod,
}

fn applied<K>(ev: watcher::Result<watcher::Event<K>>) -> Option<K> {
    match ev {
        Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => Some(o),
        _ => None,
    }
}

/// Runs the flood and the quiet Job on a fresh control plane against `imp`.
pub async fn run(
    env: &Env,
    imp: Impl,
    flood: Flood,
    qps: u32,
    burst: u32,
    timeout: Duration,
) -> anyhow::Result<FairRun> {
    let label = imp.label();
    let cp = ControlPlane::start().context("control plane")?;
    let client = cp.client().await?;
    let flood_ns = TestNamespace::create(&client, "flood").await?;
    let quiet_ns = TestNamespace::create(&client, "quiet").await?;
    let sim = spawn_sim(env, &cp, 20)?;
    let mgr = spawn_manager(env, &cp, imp, &["job-controller"], qps, burst, &[])?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let flood_api: Api<Job> = Api::namespaced(client.clone(), &flood_ns.name);
    let quiet_api: Api<Job> = Api::namespaced(client.clone(), &quiet_ns.name);
    let quiet_pods: Api<Pod> = Api::namespaced(client.clone(), &quiet_ns.name);
    let flood_pods: Api<Pod> = Api::namespaced(client.clone(), &flood_ns.name);
    let seen = futures::stream::select_all([
        watch_after_list(&flood_pods)
            .await
            .filter_map(|e| async move {
                applied(e).map(|p| Seen::FloodPod(p.metadata.name.unwrap_or_default()))
            })
            .boxed(),
        watch_after_list(&flood_api)
            .await
            .filter_map(|e| async move { applied(e).map(Seen::Flood) })
            .boxed(),
        watch_after_list(&quiet_api)
            .await
            .filter_map(|e| async move { applied(e).map(Seen::Quiet) })
            .boxed(),
        watch_after_list(&quiet_pods)
            .await
            .filter_map(|e| async move { applied(e).map(|_| Seen::QuietPod) })
            .boxed(),
    ]);
    tokio::pin!(seen);
    let before = request_counts(&client).await?;
    let (cpu0, server0) = (mgr.cpu(), mgr.server_cpu());

    let n = flood.jobs;
    let spec = json!({ "completions": flood.pods, "parallelism": flood.pods });
    let ann = json!({ "sim.kcm-rs.io/run": "1s..3s" });
    let t_flood = Instant::now();
    let failed = create_many(n, 16, |i| {
        let (api, spec, ann) = (flood_api.clone(), spec.clone(), ann.clone());
        async move {
            api.create(&PostParams::default(), &job(&format!("f{i}"), spec, ann)?)
                .await?;
            Ok(())
        }
    })
    .await;
    anyhow::ensure!(failed == 0, "{failed} flood Jobs could not be created");
    let quiet = job(
        "quiet",
        json!({ "completions": 1, "parallelism": 1 }),
        json!({ "sim.kcm-rs.io/run": "1s" }),
    )?;
    quiet_api.create(&PostParams::default(), &quiet).await?;
    let t_quiet = Instant::now();
    env.progress(format!(
        "W7 {label}: {n} flood Jobs created in {:.1} s, then the quiet Job",
        t_quiet.duration_since(t_flood).as_secs_f64()
    ));

    let mut flood_done: BTreeMap<String, String> = BTreeMap::new();
    let (mut first_pod, mut complete, mut flood_s) = (None, None, None);
    let mut quiet_outcome = String::new();
    let mut flood_pod_names = std::collections::HashSet::new();
    let mut flood_pods_before_quiet = 0;
    let mut last_report = Instant::now();
    while first_pod.is_none() || complete.is_none() || flood_s.is_none() {
        anyhow::ensure!(
            t_flood.elapsed() < timeout,
            "W7 {label}: not done after {timeout:?} (quiet pod {first_pod:?}, quiet done {complete:?}, flood {}/{n} terminal)",
            flood_done.len()
        );
        match tokio::time::timeout(Duration::from_secs(5), seen.next()).await {
            Ok(Some(Seen::QuietPod)) if first_pod.is_none() => {
                first_pod = Some(t_quiet.elapsed().as_secs_f64());
                flood_pods_before_quiet = flood_pod_names.len();
            }
            Ok(Some(Seen::FloodPod(name))) => {
                flood_pod_names.insert(name);
            }
            Ok(Some(Seen::Quiet(j))) if complete.is_none() => {
                if let Some(t) = terminal(&j) {
                    complete = Some(t_quiet.elapsed().as_secs_f64());
                    quiet_outcome = t.to_string();
                }
            }
            Ok(Some(Seen::Flood(j))) => {
                if let (Some(name), Some(t)) = (j.metadata.name.clone(), terminal(&j)) {
                    flood_done.insert(name, t.to_string());
                    if flood_done.len() == n && flood_s.is_none() {
                        flood_s = Some(t_flood.elapsed().as_secs_f64());
                    }
                }
            }
            Ok(Some(_)) => {}
            Ok(None) => anyhow::bail!("W7 {label}: a watch ended"),
            Err(_) => {}
        }
        if last_report.elapsed() > Duration::from_secs(15) {
            last_report = Instant::now();
            env.progress(format!(
                "W7 {label}: flood {}/{n} terminal; quiet first pod {first_pod:?} s, complete {complete:?} s",
                flood_done.len()
            ));
        }
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = request_counts(&client).await?;
    let d = delta(&before, &after);
    let run = FairRun {
        first_pod_s: first_pod.unwrap_or(f64::NAN),
        complete_s: complete.unwrap_or(f64::NAN),
        quiet_outcome,
        flood_s: flood_s.unwrap_or(f64::NAN),
        flood_outcomes: flood_done.into_values().fold(BTreeMap::new(), |mut m, t| {
            *m.entry(t).or_insert(0) += 1;
            m
        }),
        flood_pods_before_quiet,
        pods_created: d.get("POST pods").copied().unwrap_or(0.0),
        cpu_s: mgr.cpu() - cpu0,
        peak_rss_mib: mgr.peak_rss(),
        server: mgr.server_cost(server0),
    };
    mgr.stop().await;
    let _ = sim.finish().await;
    env.progress(format!(
        "W7 {label}: quiet Job first pod {:.2} s, complete {:.2} s ({}), {} flood pods before it; flood done in {:.1} s {:?}; {} pods; {:.1} CPU-s, peak RSS {:.0} MiB",
        run.first_pod_s,
        run.complete_s,
        run.quiet_outcome,
        run.flood_pods_before_quiet,
        run.flood_s,
        run.flood_outcomes,
        run.pods_created,
        run.cpu_s,
        run.peak_rss_mib
    ));
    Ok(run)
}
