//! kcm-bench-job: Job controller figures, kcm-rs vs upstream
//! kube-controller-manager, each on a fresh local control plane with the
//! same QPS and the same simulated kubelet:
//!
//! - requests: API requests (deltas of the API server's
//!   `apiserver_request_total`, by verb and resource) to run one Job of N
//!   pods to completion, per pod;
//! - latency: time from a pod's status turning `Failed` with a FailJob exit
//!   code to `FailureTarget` on its Job, median and p90 over R runs.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kcm_e2e::sim::{self, SimConfig, SimStats};
use kcm_e2e::{ControlPlane, TestNamespace, binaries, kubelet};
use kube::Api;
use kube::api::{ListParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;

#[derive(Debug, Parser)]
struct Flags {
    /// Pods in the Job of the requests figure.
    #[arg(long, default_value_t = 100)]
    pods: i32,
    /// Runs of the latency figure.
    #[arg(long, default_value_t = 20)]
    runs: usize,
    #[arg(long, default_value = "target/release/kcm-rs")]
    kcm_rs: PathBuf,
}

fn spawn(
    cp: &ControlPlane,
    upstream: bool,
    kcm_rs: &std::path::Path,
) -> anyhow::Result<tokio::process::Child> {
    let bin = if upstream {
        binaries::ensure_built()?.join("kcm-e2e-controller-manager")
    } else {
        kcm_rs.to_path_buf()
    };
    tokio::process::Command::new(bin)
        .arg(format!("--kubeconfig={}", cp.kubeconfig().display()))
        .args([
            "--controllers=job-controller",
            "--leader-elect=false",
            "--secure-port=0",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("starting the controller manager")
}

/// `apiserver_request_total` summed by (verb, resource).
async fn request_counts(client: &kube::Client) -> anyhow::Result<BTreeMap<(String, String), f64>> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(req).await?;
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let label = |k: &str| {
            line.split(&format!("{k}=\""))
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or("")
                .to_string()
        };
        let value: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        *out.entry((label("verb"), label("resource"))).or_insert(0.0) += value;
    }
    Ok(out)
}

fn job(name: &str, spec: serde_json::Value, ann: serde_json::Value) -> anyhow::Result<Job> {
    let mut j = json!({
        "metadata": { "name": name },
        "spec": { "template": {
            "metadata": { "annotations": ann },
            "spec": { "restartPolicy": "Never", "containers": [{ "name": "main", "image": "x" }] }
        }}
    });
    if let (Some(dst), Some(src)) = (j["spec"].as_object_mut(), spec.as_object()) {
        for (k, v) in src {
            dst.insert(k.clone(), v.clone());
        }
    }
    Ok(serde_json::from_value(j)?)
}

fn finished(j: &Job) -> bool {
    j.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        })
}

async fn requests(flags: &Flags, upstream: bool) -> anyhow::Result<(BTreeMap<String, f64>, f64)> {
    let cp = ControlPlane::start()?;
    let client = cp.client().await?;
    let ns = TestNamespace::create(&client, "bench-job").await?;
    let sim_task = tokio::spawn(sim::run(
        client.clone(),
        SimConfig::default(),
        Arc::new(SimStats::default()),
    ));
    let mut child = spawn(&cp, upstream, &flags.kcm_rs)?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = request_counts(&client).await?;
    let t0 = Instant::now();
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    let spec = json!({ "completions": flags.pods, "parallelism": flags.pods });
    jobs.create(
        &PostParams::default(),
        &job("j", spec, json!({"sim.kcm-rs.io/run": "1s"}))?,
    )
    .await?;
    loop {
        if finished(&jobs.get("j").await?) {
            break;
        }
        anyhow::ensure!(
            t0.elapsed() < Duration::from_secs(300),
            "Job did not finish"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Let the last finalizer removals land.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = request_counts(&client).await?;
    let _ = child.kill().await;
    sim_task.abort();
    let mut by_verb = BTreeMap::new();
    for ((verb, resource), v) in &after {
        if resource != "pods" && resource != "jobs" && resource != "events" {
            continue;
        }
        let d = v - before
            .get(&(verb.clone(), resource.clone()))
            .copied()
            .unwrap_or(0.0);
        if d > 0.0 {
            *by_verb.entry(format!("{verb} {resource}")).or_insert(0.0) += d;
        }
    }
    Ok((by_verb, t0.elapsed().as_secs_f64()))
}

async fn latency(flags: &Flags, upstream: bool) -> anyhow::Result<Vec<f64>> {
    let cp = ControlPlane::start()?;
    let client = cp.client().await?;
    let ns = TestNamespace::create(&client, "bench-lat").await?;
    let mut child = spawn(&cp, upstream, &flags.kcm_rs)?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let mut samples = Vec::new();
    for run in 0..flags.runs {
        let name = format!("j{run}");
        let spec = json!({ "completions": 1, "parallelism": 1, "backoffLimit": 6,
            "podFailurePolicy": { "rules": [{ "action": "FailJob", "onExitCodes": { "operator": "In", "values": [42] } }] } });
        jobs.create(&PostParams::default(), &job(&name, spec, json!({}))?)
            .await?;
        let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={name}"));
        let pod = loop {
            if let Some(p) = pods.list(&lp).await?.items.into_iter().next() {
                break p;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        // Let the controller settle after creating the pod (its own 1 s batch).
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let wc = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let mut stream = watcher::watcher(jobs.clone(), wc).boxed();
        // Drain the initial list.
        while let Some(ev) = stream.next().await {
            if matches!(ev, Ok(watcher::Event::InitDone)) {
                break;
            }
        }
        kubelet::finish_pod(&pods, &pod_name, 42).await?;
        let t0 = Instant::now();
        let deadline = Duration::from_secs(30);
        loop {
            let next =
                tokio::time::timeout(deadline.saturating_sub(t0.elapsed()), stream.next()).await;
            match next {
                Ok(Some(Ok(watcher::Event::Apply(j)))) => {
                    let has_target = j
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "FailureTarget"));
                    if has_target {
                        samples.push(t0.elapsed().as_secs_f64());
                        break;
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => {
                    anyhow::bail!("no FailureTarget on {name} within {deadline:?}")
                }
            }
        }
    }
    let _ = child.kill().await;
    Ok(samples)
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v.get(i).copied().unwrap_or(f64::NAN)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    eprintln!("requests: one Job of {} pods, upstream ...", flags.pods);
    let (theirs, t_up) = requests(&flags, true).await?;
    eprintln!("requests: kcm-rs ...");
    let (ours, t_ours) = requests(&flags, false).await?;
    let n = f64::from(flags.pods);
    println!(
        "API requests per pod for a {}-pod Job (pods, jobs, events; includes the simulated kubelet's 3 writes per pod):",
        flags.pods
    );
    println!("| verb resource | kcm-rs | upstream |");
    println!("|---|---|---|");
    let keys: std::collections::BTreeSet<&String> = theirs.keys().chain(ours.keys()).collect();
    let (mut so, mut su) = (0.0, 0.0);
    for k in keys {
        let (o, u) = (
            ours.get(k).copied().unwrap_or(0.0),
            theirs.get(k).copied().unwrap_or(0.0),
        );
        so += o;
        su += u;
        println!("| {k} | {:.2} | {:.2} |", o / n, u / n);
    }
    println!(
        "| total | {:.2} | {:.2} |  (ratio {:.2})",
        so / n,
        su / n,
        so / su
    );
    println!("wall time to Complete: kcm-rs {t_ours:.1} s, upstream {t_up:.1} s");
    eprintln!("latency: {} runs each ...", flags.runs);
    let mut up = latency(&flags, true).await?;
    let mut us = latency(&flags, false).await?;
    println!(
        "pod Failed (FailJob exit code) -> FailureTarget: kcm-rs median {:.3} s p90 {:.3} s; upstream median {:.3} s p90 {:.3} s; median ratio {:.2}",
        quantile(&mut us, 0.5),
        quantile(&mut us, 0.9),
        quantile(&mut up, 0.5),
        quantile(&mut up, 0.9),
        quantile(&mut us, 0.5) / quantile(&mut up, 0.5)
    );
    Ok(())
}
