//! W1 (many small Jobs with a mix of failures) and W2 (one large Indexed
//! Job): create the Jobs at once, let the simulator run their pods, and
//! measure until every Job is terminal.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kube::Api;
use kube::api::PostParams;
use kube::runtime::watcher;
use serde_json::json;

use super::common::{
    Env, Impl, Requests, ServerCost, controller_requests, create_many, delta, job,
    job_watch_after_list, request_counts, spawn_manager, spawn_sim, terminal,
};
use kcm_e2e::{ControlPlane, TestNamespace};

/// What one run of a Jobs workload measured.
#[derive(Debug, Clone, Default)]
pub struct JobsRun {
    pub wall_s: f64,
    pub pods_created: f64,
    /// Controller-side requests by "VERB resource".
    pub requests: Requests,
    pub cpu_s: f64,
    pub peak_rss_mib: f64,
    pub sim_cpu_s: f64,
    /// The API server's cost over the same window.
    pub server: ServerCost,
    /// Jobs by terminal condition.
    pub outcomes: BTreeMap<String, usize>,
}

impl JobsRun {
    pub fn requests_per_pod(&self) -> f64 {
        self.requests.values().sum::<f64>() / self.pods_created.max(1.0)
    }
}

/// The simulator annotations of W1's pods: 1–3 s of work; 30 % fail, a
/// third of them with the FailJob exit code, a third with a
/// `DisruptionTarget` condition (Ignore), a third with exit code 1 (Count).
pub fn w1_jobs(n: usize) -> anyhow::Result<Vec<Job>> {
    let spec = json!({
        "completions": 10, "parallelism": 10,
        "podFailurePolicy": { "rules": [
            { "action": "FailJob", "onExitCodes": { "containerName": "main", "operator": "In", "values": [42] } },
            { "action": "Ignore", "onPodConditions": [{ "type": "DisruptionTarget" }] },
            { "action": "Count", "onExitCodes": { "operator": "In", "values": [1] } }
        ]}
    });
    let ann = json!({
        "sim.kcm-rs.io/run": "1s..3s",
        "sim.kcm-rs.io/outcomes": "70=0,10=42,10=condition:DisruptionTarget:TerminationByKubelet,10=1"
    });
    (0..n)
        .map(|i| job(&format!("w1-{i}"), spec.clone(), ann.clone()))
        .collect()
}

/// W2: one Indexed Job; 2 % of indexes fail on every attempt (the
/// simulator draws an Indexed pod's outcome from its index), so each is
/// retried once and then marked failed.
pub fn w2_job(completions: i32, parallelism: i32) -> anyhow::Result<Vec<Job>> {
    let spec = json!({
        "completions": completions, "parallelism": parallelism,
        "completionMode": "Indexed", "backoffLimitPerIndex": 1,
    });
    let ann = json!({
        "sim.kcm-rs.io/run": "1s..3s",
        "sim.kcm-rs.io/outcomes": "98=0,2=1"
    });
    Ok(vec![job("w2", spec, ann)?])
}

/// Runs `jobs` on a fresh control plane against `imp`.
pub async fn run(
    env: &Env,
    imp: Impl,
    what: &str,
    jobs: Vec<Job>,
    qps: u32,
    burst: u32,
    timeout: Duration,
) -> anyhow::Result<JobsRun> {
    // `KCM_BENCH_PPROF` (W8's profiles) also serves the API server's
    // `/debug/pprof` here (off in the harness), to profile a run by hand.
    let cp = if std::env::var_os("KCM_BENCH_PPROF").is_some() {
        ControlPlane::start_version_with_args(&kcm_e2e::binaries::k8s_version(), "--profiling=true")
    } else {
        ControlPlane::start()
    }
    .context("control plane")?;
    let client = cp.client().await?;
    let ns = TestNamespace::create(&client, "bench").await?;
    let sim = spawn_sim(env, &cp, 20)?;
    let mgr = spawn_manager(env, &cp, imp, &["job-controller"], qps, burst, &[])?;
    // Both list empty caches within a second; give them three.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let api: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    let mut stream = job_watch_after_list(&api, watcher::Config::default()).await;
    let before = request_counts(&client).await?;
    let (cpu0, sim0, server0) = (mgr.cpu(), sim.cpu(), mgr.server_cpu());
    let t0 = Instant::now();
    let n = jobs.len();
    let jobs = std::sync::Arc::new(jobs);
    let failed = create_many(n, 16, |i| {
        let (api, jobs) = (api.clone(), jobs.clone());
        async move {
            if let Some(j) = jobs.get(i) {
                api.create(&PostParams::default(), j).await?;
            }
            Ok(())
        }
    })
    .await;
    anyhow::ensure!(failed == 0, "{failed} Jobs could not be created");
    env.progress(format!(
        "{what} {}: {n} Jobs created in {:.1} s",
        imp.label(),
        t0.elapsed().as_secs_f64()
    ));
    let mut done: BTreeMap<String, String> = BTreeMap::new();
    let mut last_report = Instant::now();
    while done.len() < n {
        anyhow::ensure!(
            t0.elapsed() < timeout,
            "{what} {}: only {} of {n} Jobs terminal after {timeout:?}",
            imp.label(),
            done.len()
        );
        let next = tokio::time::timeout(Duration::from_secs(5), stream.next()).await;
        if let Ok(Some(Ok(watcher::Event::Apply(j) | watcher::Event::InitApply(j)))) = next
            && let (Some(name), Some(t)) = (j.metadata.name.clone(), terminal(&j))
        {
            done.insert(name, t.to_string());
        }
        if last_report.elapsed() > Duration::from_secs(15) {
            last_report = Instant::now();
            env.progress(format!(
                "{what} {}: {}/{n} Jobs terminal, RSS {:.0} MiB",
                imp.label(),
                done.len(),
                mgr.rss()
            ));
        }
    }
    let wall_s = t0.elapsed().as_secs_f64();
    // Let the last finalizer removals and status writes land.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let sim_cpu_s = sim.cpu() - sim0;
    let sim_deletes = sim.finish().await?;
    let after = request_counts(&client).await?;
    let d = delta(&before, &after);
    let mut requests = controller_requests(&d, true);
    // The benchmark's own Job creations, and the simulated kubelet's final
    // grace-0 deletes.
    requests.remove("POST jobs");
    if let Some(v) = requests.get_mut("DELETE pods") {
        *v = (*v - sim_deletes).max(0.0);
    }
    let run = JobsRun {
        wall_s,
        pods_created: d.get("POST pods").copied().unwrap_or(0.0),
        requests,
        cpu_s: mgr.cpu() - cpu0,
        peak_rss_mib: mgr.peak_rss(),
        sim_cpu_s,
        server: mgr.server_cost(server0),
        outcomes: done.into_values().fold(BTreeMap::new(), |mut m, t| {
            *m.entry(t).or_insert(0) += 1;
            m
        }),
    };
    mgr.stop().await;
    env.progress(format!(
        "{what} {}: done in {wall_s:.1} s, {} pods, {:.2} requests/pod, {:.1} CPU-s, peak RSS {:.0} MiB, API server {:.1} CPU-s {:.0} MiB, Jobs {:?}",
        imp.label(),
        run.pods_created,
        run.requests_per_pod(),
        run.cpu_s,
        run.peak_rss_mib,
        run.server.cpu_s,
        run.server.peak_rss_mib,
        run.outcomes
    ));
    Ok(run)
}
