//! W3: time from a pod's phase turning `Failed` with a FailJob exit code to
//! the `FailureTarget` condition on its Job, and to `Failed`, one Job at a
//! time so each sample is unloaded.

use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;

use super::common::{Env, Impl, ServerCost, job, job_watch_after_list, spawn_manager};
use kcm_e2e::{ControlPlane, TestNamespace, kubelet};

/// Seconds from the pod's `Failed` status write to each condition.
#[derive(Debug, Clone, Default)]
pub struct Latencies {
    pub failure_target: Vec<f64>,
    pub failed: Vec<f64>,
    pub cpu_s: f64,
    /// The API server's cost over the same window.
    pub server: ServerCost,
}

fn has(j: &Job, type_: &str) -> bool {
    j.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

pub async fn run(env: &Env, imp: Impl, runs: usize) -> anyhow::Result<Latencies> {
    let cp = ControlPlane::start().context("control plane")?;
    let client = cp.client().await?;
    let ns = TestNamespace::create(&client, "bench-lat").await?;
    kubelet::create_node(&client, "lat-node", true, vec![]).await?;
    let mgr = spawn_manager(env, &cp, imp, &["job-controller"], 20, 30, &[])?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let mut out = Latencies::default();
    let (cpu0, server0) = (mgr.cpu(), mgr.server_cpu());
    for run in 0..runs {
        let name = format!("j{run}");
        let spec = json!({ "completions": 1, "parallelism": 1, "backoffLimit": 6,
            "podFailurePolicy": { "rules": [{ "action": "FailJob", "onExitCodes": { "operator": "In", "values": [42] } }] } });
        jobs.create(&PostParams::default(), &job(&name, spec, json!({}))?)
            .await?;
        let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={name}"));
        let t = Instant::now();
        let pod = loop {
            if let Some(p) = pods.list(&lp).await?.items.into_iter().next() {
                break p;
            }
            anyhow::ensure!(t.elapsed() < Duration::from_secs(30), "no pod for {name}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        kubelet::bind_pod(&pods, &pod_name, "lat-node").await?;
        kubelet::run_pod(&pods, &pod_name, true).await?;
        // Let the controller settle after the pod's creation and start
        // (both batch pod events for a second).
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let wc = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let mut stream = job_watch_after_list(&jobs, wc).await;
        kubelet::finish_pod(&pods, &pod_name, 42).await?;
        let t0 = Instant::now();
        let deadline = Duration::from_secs(30);
        let mut target = None;
        loop {
            let next =
                tokio::time::timeout(deadline.saturating_sub(t0.elapsed()), stream.next()).await;
            match next {
                Ok(Some(Ok(watcher::Event::Apply(j)))) => {
                    if target.is_none() && has(&j, "FailureTarget") {
                        target = Some(t0.elapsed().as_secs_f64());
                    }
                    if has(&j, "Failed") {
                        let failed = t0.elapsed().as_secs_f64();
                        out.failure_target.push(target.unwrap_or(failed));
                        out.failed.push(failed);
                        break;
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => {
                    anyhow::bail!("{}: {name} not Failed within {deadline:?}", imp.label())
                }
            }
        }
        if (run + 1) % 10 == 0 {
            env.progress(format!("W3 {}: {}/{runs} Jobs", imp.label(), run + 1));
        }
    }
    out.cpu_s = mgr.cpu() - cpu0;
    out.server = mgr.server_cost(server0);
    mgr.stop().await;
    Ok(out)
}
