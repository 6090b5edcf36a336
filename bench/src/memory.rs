//! W4: steady-state memory with many pods in the informers: Job pods (owned
//! by running Jobs, with the tracking finalizer) and unrelated pods, all
//! bound to nodes, with all four controllers running.

use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::common::{Env, Impl, ServerCost, create_many, job, spawn_manager};
use kcm_e2e::{ControlPlane, TestNamespace, kubelet};

pub const CONTROLLERS: [&str; 4] = [
    "job-controller",
    "pod-garbage-collector-controller",
    "taint-eviction-controller",
    "disruption-controller",
];
const NODES: usize = 20;
const PODS_PER_JOB: usize = 100;

#[derive(Debug, Clone, Default)]
pub struct MemoryRun {
    pub pods: usize,
    /// Mean RSS over the measurement window after settling, MiB.
    pub steady_rss_mib: f64,
    pub peak_rss_mib: f64,
    /// CPU seconds from start until settled (listing and first syncs).
    pub startup_cpu_s: f64,
    /// CPU use while idle, percent of one core.
    pub idle_cpu_percent: f64,
    /// The API server's cost from the manager's start (its lists) to the
    /// end of the window.
    pub server: ServerCost,
}

/// A pod the size of a typical workload pod: a few environment variables,
/// resources, a mounted volume, probes.
fn pod_body(name: &str, node: &str, labels: serde_json::Value) -> serde_json::Value {
    json!({
        "metadata": { "name": name, "labels": labels,
            "annotations": { "example.com/owner": "team-bench", "example.com/revision": "7" } },
        "spec": {
            "nodeName": node, "restartPolicy": "Never",
            "containers": [{
                "name": "main", "image": "registry.example/team/worker:1.4.2",
                "command": ["/bin/worker", "--mode=batch", "--verbose"],
                "env": [
                    { "name": "POD_NAME", "value": name },
                    { "name": "LOG_LEVEL", "value": "info" },
                    { "name": "QUEUE_URL", "value": "https://queue.example/jobs/bench" },
                    { "name": "WORKERS", "value": "4" }
                ],
                "resources": { "requests": { "cpu": "100m", "memory": "128Mi" },
                               "limits": { "cpu": "1", "memory": "512Mi" } },
                "volumeMounts": [{ "name": "scratch", "mountPath": "/scratch" }],
                "readinessProbe": { "exec": { "command": ["/bin/true"] }, "periodSeconds": 10 }
            }],
            "volumes": [{ "name": "scratch", "emptyDir": {} }]
        }
    })
}

/// Grows the namespace from `have` pods to `want` (from nothing when `have`
/// is 0: the nodes and 10 PDBs first): half the pods owned by running Jobs
/// of 100 pods, half unrelated `web-*` pods matched by the PDBs.
pub async fn grow(client: &kube::Client, ns: &str, have: usize, want: usize) -> anyhow::Result<()> {
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), ns);
    if have == 0 {
        for i in 0..NODES {
            kubelet::create_node(client, &format!("mem-node-{i}"), true, vec![]).await?;
        }
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
        for a in 0..10 {
            let pdb: PodDisruptionBudget = serde_json::from_value(json!({
                "metadata": { "name": format!("web-{a}") },
                "spec": { "minAvailable": 1, "selector": { "matchLabels": { "app": format!("web-{a}") } } }
            }))?;
            pdbs.create(&PostParams::default(), &pdb).await?;
        }
    }
    let jobs_of = |pods: usize| pods / 2 / PODS_PER_JOB;
    for j in jobs_of(have)..jobs_of(want) {
        create_job_pods(client, &pod_api, ns, j).await?;
    }
    let others = |pods: usize| pods - jobs_of(pods) * PODS_PER_JOB;
    let (from, to) = (others(have), others(want));
    let failed = create_many(to.saturating_sub(from), 32, |k| {
        let pod_api = pod_api.clone();
        let k = from + k;
        async move {
            let body = pod_body(
                &format!("web-{k}"),
                &format!("mem-node-{}", k % NODES),
                json!({ "app": format!("web-{}", k % 10), "tier": "frontend" }),
            );
            pod_api
                .create(&PostParams::default(), &serde_json::from_value(body)?)
                .await?;
            Ok(())
        }
    })
    .await;
    anyhow::ensure!(failed == 0, "{failed} pods could not be created");
    Ok(())
}

/// Job `mem-{j}` (running, 100 completions and parallelism) and its 100
/// pods with the tracking finalizer.
async fn create_job_pods(
    client: &kube::Client,
    pod_api: &Api<Pod>,
    ns: &str,
    j: usize,
) -> anyhow::Result<()> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let spec = json!({ "completions": PODS_PER_JOB, "parallelism": PODS_PER_JOB });
    let created = jobs
        .create(
            &PostParams::default(),
            &job(&format!("mem-{j}"), spec, json!({}))?,
        )
        .await?;
    let uid = created.uid().context("Job without uid")?;
    let jname = created.name_any();
    let failed = create_many(PODS_PER_JOB, 32, |k| {
        let (pod_api, uid, jname) = (pod_api.clone(), uid.clone(), jname.clone());
        async move {
            let name = format!("{jname}-{k}");
            let mut body = pod_body(
                &name,
                &format!("mem-node-{}", k % NODES),
                json!({ "batch.kubernetes.io/controller-uid": uid, "controller-uid": uid,
                        "batch.kubernetes.io/job-name": jname, "job-name": jname }),
            );
            body["metadata"]["finalizers"] = json!(["batch.kubernetes.io/job-tracking"]);
            body["metadata"]["ownerReferences"] = json!([{ "apiVersion": "batch/v1",
                "kind": "Job", "name": jname, "uid": uid, "controller": true,
                "blockOwnerDeletion": true }]);
            pod_api
                .create(&PostParams::default(), &serde_json::from_value(body)?)
                .await?;
            Ok(())
        }
    })
    .await;
    anyhow::ensure!(failed == 0, "{failed} Job pods could not be created");
    Ok(())
}

/// Mean RSS of `mgr` over `window`, sampled every 500 ms, MiB.
pub async fn mean_rss(mgr: &super::common::Manager, window: Duration) -> f64 {
    let t0 = Instant::now();
    let (mut sum, mut n) = (0.0_f64, 0.0_f64);
    while t0.elapsed() < window {
        sum += mgr.rss();
        n += 1.0;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    sum / n.max(1.0)
}

pub async fn run(
    env: &Env,
    imp: Impl,
    pods: usize,
    settle: Duration,
    window: Duration,
) -> anyhow::Result<MemoryRun> {
    let cp = ControlPlane::start().context("control plane")?;
    let client = cp.client().await?;
    let ns = TestNamespace::create(&client, "bench-mem").await?;
    let t = Instant::now();
    grow(&client, &ns.name, 0, pods).await?;
    env.progress(format!(
        "W4 {}: {pods} pods created in {:.0} s",
        imp.label(),
        t.elapsed().as_secs_f64()
    ));
    let mgr = spawn_manager(env, &cp, imp, &CONTROLLERS, 20, 30, &[])?;
    tokio::time::sleep(settle).await;
    let startup_cpu_s = mgr.cpu();
    let t0 = Instant::now();
    let steady_rss_mib = mean_rss(&mgr, window).await;
    let run = MemoryRun {
        pods,
        steady_rss_mib,
        peak_rss_mib: mgr.peak_rss(),
        startup_cpu_s,
        idle_cpu_percent: 100.0 * (mgr.cpu() - startup_cpu_s) / t0.elapsed().as_secs_f64(),
        server: mgr.server_cost(mgr.server_cpu_at_start),
    };
    mgr.stop().await;
    env.progress(format!(
        "W4 {}: steady RSS {:.0} MiB, peak {:.0} MiB, startup {:.1} CPU-s, idle {:.2} % CPU",
        imp.label(),
        run.steady_rss_mib,
        run.peak_rss_mib,
        run.startup_cpu_s,
        run.idle_cpu_percent
    ));
    Ok(run)
}
