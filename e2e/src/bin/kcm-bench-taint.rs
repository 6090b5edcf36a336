//! kcm-bench-taint: how fast a NoExecute taint empties a node. A node with N
//! running pods (no tolerations) is tainted; the figure is pods evicted per
//! second until every pod is being deleted, for kcm-rs and for upstream
//! kube-controller-manager's taint-eviction-controller, each on a fresh
//! control plane, at the same client QPS.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kcm_e2e::procstat::cpu_seconds;
use kcm_e2e::{ControlPlane, TestNamespace, binaries, kubelet};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

#[derive(Debug, Parser)]
struct Flags {
    #[arg(long, default_value_t = 500)]
    pods: usize,
    #[arg(long, default_value = "target/release/kcm-rs")]
    kcm_rs: PathBuf,
    /// --kube-api-qps for both (KCM default 20).
    #[arg(long, default_value_t = 20)]
    qps: u32,
    /// --kube-api-burst for both (KCM default 30).
    #[arg(long, default_value_t = 30)]
    burst: u32,
}

struct Run {
    seconds: f64,
    cpu_seconds: f64,
}

async fn run(flags: &Flags, upstream: bool) -> anyhow::Result<Run> {
    let cp = ControlPlane::start().context("control plane")?;
    let client = cp.client().await?;
    let ns = TestNamespace::create(&client, "bench-taint").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    kubelet::create_node(&client, "full", true, vec![]).await?;
    futures::stream::iter(0..flags.pods)
        .for_each_concurrent(32, |i| {
            let pods = pods.clone();
            async move {
                let name = format!("p{i}");
                let made = async {
                    let pod: Pod = serde_json::from_value(json!({
                        "metadata": { "name": name },
                        "spec": { "containers": [{ "name": "main", "image": "x" }] }
                    }))
                    .map_err(|e| kcm_e2e::HarnessError::Kube(kube::Error::SerdeError(e)))?;
                    pods.create(&PostParams::default(), &pod).await?;
                    kubelet::bind_pod(&pods, &name, "full").await?;
                    kubelet::run_pod(&pods, &name, true).await?;
                    Ok::<_, kcm_e2e::HarnessError>(())
                }
                .await;
                if let Err(e) = made {
                    eprintln!("pod {i}: {e}");
                }
            }
        })
        .await;
    let qps = format!("--kube-api-qps={}", flags.qps);
    let burst = format!("--kube-api-burst={}", flags.burst);
    let mut child = if upstream {
        // Upstream's taint-eviction-controller relies on a spec.nodeName pod
        // index that only the daemonset (or node-lifecycle) controller
        // installs; with no DaemonSets the daemonset controller does nothing
        // else.
        tokio::process::Command::new(binaries::ensure_built()?.join("kcm-e2e-controller-manager"))
            .arg(format!("--kubeconfig={}", cp.kubeconfig().display()))
            .args([
                "--controllers=taint-eviction-controller,daemonset-controller",
                "--leader-elect=false",
                "--secure-port=0",
            ])
            .args([&qps, &burst])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?
    } else {
        tokio::process::Command::new(&flags.kcm_rs)
            .arg(format!("--kubeconfig={}", cp.kubeconfig().display()))
            .args([
                "--controllers=taint-eviction-controller",
                "--leader-elect=false",
                "--secure-port=0",
            ])
            .args([&qps, &burst])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| {
                format!(
                    "{} (cargo build --release -p kcm-rs)",
                    flags.kcm_rs.display()
                )
            })?
    };
    let pid = child.id().context("pid")?;
    // Let it list and settle.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let cpu0 = cpu_seconds(pid).unwrap_or(0.0);
    let t0 = Instant::now();
    Api::<Node>::all(client.clone())
        .patch(
            "full",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "taints": [{ "key": "bench", "value": "now", "effect": "NoExecute" }] } })),
        )
        .await?;
    loop {
        let list = pods.list(&ListParams::default()).await?.items;
        let evicted = list
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_some())
            .count()
            + flags.pods.saturating_sub(list.len());
        if evicted >= flags.pods {
            break;
        }
        anyhow::ensure!(
            t0.elapsed() < Duration::from_secs(600),
            "only {evicted} evicted after 600 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let seconds = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds(pid).unwrap_or(cpu0) - cpu0;
    let _ = child.kill().await;
    Ok(Run {
        seconds,
        cpu_seconds: cpu,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    let ours = run(&flags, false).await?;
    println!(
        "kcm-rs:   {} pods evicted in {:.1} s = {:.1} pods/s, {:.2} CPU-s",
        flags.pods,
        ours.seconds,
        flags.pods as f64 / ours.seconds,
        ours.cpu_seconds
    );
    let theirs = run(&flags, true).await?;
    println!(
        "upstream: {} pods evicted in {:.1} s = {:.1} pods/s, {:.2} CPU-s",
        flags.pods,
        theirs.seconds,
        flags.pods as f64 / theirs.seconds,
        theirs.cpu_seconds
    );
    println!(
        "ratio kcm-rs/upstream: throughput {:.2}, CPU {:.2}",
        theirs.seconds / ours.seconds,
        ours.cpu_seconds / theirs.cpu_seconds.max(f64::MIN_POSITIVE)
    );
    Ok(())
}
