//! W5: pod GC removing terminated pods over the threshold, and taint
//! eviction emptying a node tainted NoExecute.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;

use super::common::{
    Env, Impl, Manager, Requests, ServerCost, controller_requests, create_many, delta,
    request_counts, spawn_manager,
};

/// Where a measurement starts: the time, the manager's and the API
/// server's CPU seconds then, and the request counts then.
struct Start {
    t0: Instant,
    cpu0: f64,
    server0: f64,
    before: Requests,
}
use kcm_e2e::{ControlPlane, TestNamespace, kubelet};

#[derive(Debug, Clone)]
pub struct EvictionRun {
    pub pods: usize,
    /// From the controller manager's start (pod GC) or the taint (taint
    /// eviction) until the last pod is gone or being deleted.
    pub seconds: f64,
    pub cpu_s: f64,
    pub peak_rss_mib: f64,
    pub requests: Requests,
    /// The API server's cost over the same window.
    pub server: ServerCost,
}

impl EvictionRun {
    pub fn pods_per_second(&self) -> f64 {
        self.pods as f64 / self.seconds.max(f64::MIN_POSITIVE)
    }
    pub fn requests_per_pod(&self) -> f64 {
        self.requests.values().sum::<f64>() / (self.pods.max(1) as f64)
    }
}

/// Watches the namespace's pods until at most `remaining` are left that are
/// not being deleted.
async fn wait_until_left(
    env: &Env,
    what: &str,
    pods: &Api<Pod>,
    remaining: usize,
    t0: Instant,
    timeout: Duration,
) -> anyhow::Result<()> {
    let mut live: HashSet<String> = HashSet::new();
    let mut stream = watcher::watcher(pods.clone(), watcher::Config::default()).boxed();
    let mut synced = false;
    let mut last = Instant::now();
    loop {
        anyhow::ensure!(
            t0.elapsed() < timeout,
            "{what}: {} pods left after {timeout:?}",
            live.len()
        );
        let next = tokio::time::timeout(Duration::from_secs(2), stream.next()).await;
        match next {
            Ok(Some(Ok(ev))) => match ev {
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                    let name = p.metadata.name.clone().unwrap_or_default();
                    if p.metadata.deletion_timestamp.is_some() {
                        live.remove(&name);
                    } else {
                        live.insert(name);
                    }
                }
                watcher::Event::Delete(p) => {
                    live.remove(&p.metadata.name.clone().unwrap_or_default());
                }
                watcher::Event::Init => live.clear(),
                watcher::Event::InitDone => synced = true,
            },
            Ok(Some(Err(e))) => anyhow::bail!("{what}: watching pods: {e}"),
            Ok(None) => anyhow::bail!("{what}: pod watch ended"),
            Err(_) => {}
        }
        if synced && live.len() <= remaining {
            return Ok(());
        }
        if last.elapsed() > Duration::from_secs(15) {
            last = Instant::now();
            env.progress(format!("{what}: {} pods left", live.len()));
        }
    }
}

/// Terminated pods on an existing node: `threshold + over` of them, oldest
/// first; the figure runs from the controller manager's start until only
/// `threshold` are left.
pub async fn pod_gc(
    env: &Env,
    imp: Impl,
    over: usize,
    threshold: usize,
) -> anyhow::Result<EvictionRun> {
    let cp = ControlPlane::start().context("control plane")?;
    let client = cp.client().await?;
    let ns = TestNamespace::create(&client, "bench-gc").await?;
    kubelet::create_node(&client, "gc-node", true, vec![]).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let total = threshold + over;
    let failed = create_many(total, 32, |i| {
        let pods = pods.clone();
        async move {
            let name = format!("done-{i}");
            let pod: Pod = serde_json::from_value(json!({
                "metadata": { "name": name },
                "spec": { "nodeName": "gc-node", "restartPolicy": "Never",
                          "containers": [{ "name": "main", "image": "x" }] }
            }))?;
            pods.create(&PostParams::default(), &pod).await?;
            kubelet::finish_pod(&pods, &name, (i % 2) as i32).await?;
            Ok(())
        }
    })
    .await;
    anyhow::ensure!(failed == 0, "{failed} pods could not be created");
    let before = request_counts(&client).await?;
    let t0 = Instant::now();
    let mgr = spawn_manager(
        env,
        &cp,
        imp,
        &["pod-garbage-collector-controller"],
        20,
        30,
        &[format!("--terminated-pod-gc-threshold={threshold}")],
    )?;
    let what = format!("W5 pod GC {}", imp.label());
    let start = Start {
        t0,
        cpu0: 0.0,
        server0: mgr.server_cpu_at_start,
        before,
    };
    finish(env, &what, &client, &pods, threshold, start, mgr, over).await
}

/// A Ready node with `n` running pods without tolerations is tainted
/// NoExecute; the figure runs from the taint until every pod is being
/// deleted.
pub async fn taint(env: &Env, imp: Impl, n: usize) -> anyhow::Result<EvictionRun> {
    let cp = ControlPlane::start().context("control plane")?;
    let client = cp.client().await?;
    let ns = TestNamespace::create(&client, "bench-taint").await?;
    kubelet::create_node(&client, "full", true, vec![]).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let failed = create_many(n, 32, |i| {
        let pods = pods.clone();
        async move {
            let name = format!("p{i}");
            let pod: Pod = serde_json::from_value(json!({
                "metadata": { "name": name },
                "spec": { "nodeName": "full", "containers": [{ "name": "main", "image": "x" }] }
            }))?;
            pods.create(&PostParams::default(), &pod).await?;
            kubelet::run_pod(&pods, &name, true).await?;
            Ok(())
        }
    })
    .await;
    anyhow::ensure!(failed == 0, "{failed} pods could not be created");
    let mgr = spawn_manager(env, &cp, imp, &["taint-eviction-controller"], 20, 30, &[])?;
    // Let it list and settle.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (cpu0, server0) = (mgr.cpu(), mgr.server_cpu());
    let before = request_counts(&client).await?;
    let t0 = Instant::now();
    Api::<Node>::all(client.clone())
        .patch(
            "full",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "taints": [{ "key": "bench", "value": "now", "effect": "NoExecute" }] } })),
        )
        .await?;
    let what = format!("W5 taint {}", imp.label());
    let start = Start {
        t0,
        cpu0,
        server0,
        before,
    };
    finish(env, &what, &client, &pods, 0, start, mgr, n).await
}

/// Waits until `remaining` pods are left, then reads the figures of `n`
/// pods removed since `start` (time, the manager's CPU then, request
/// counts then) and stops the manager.
#[allow(clippy::too_many_arguments)]
async fn finish(
    env: &Env,
    what: &str,
    client: &kube::Client,
    pods: &Api<Pod>,
    remaining: usize,
    start: Start,
    mgr: Manager,
    n: usize,
) -> anyhow::Result<EvictionRun> {
    let Start {
        t0,
        cpu0,
        server0,
        before,
    } = start;
    wait_until_left(env, what, pods, remaining, t0, Duration::from_secs(1800)).await?;
    let seconds = t0.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let d = delta(&before, &request_counts(client).await?);
    let run = EvictionRun {
        pods: n,
        seconds,
        cpu_s: mgr.cpu() - cpu0,
        peak_rss_mib: mgr.peak_rss(),
        requests: controller_requests(&d, false),
        server: mgr.server_cost(server0),
    };
    mgr.stop().await;
    Ok(run)
}
