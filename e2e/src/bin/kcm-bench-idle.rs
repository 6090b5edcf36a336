//! kcm-bench-idle: steady-state cost of holding N pods in the informers.
//! Creates N running pods on a local control plane, then runs kcm-rs and
//! upstream kube-controller-manager in turn with the same controller
//! (pod GC, which watches pods and nodes) and reports each one's RSS and
//! CPU use while idle.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kcm_e2e::procstat::{cpu_seconds, rss_mib};
use kcm_e2e::{ControlPlane, TestNamespace, binaries, kubelet};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

#[derive(Debug, Parser)]
struct Flags {
    #[arg(long, default_value_t = 5000)]
    pods: usize,
    /// Seconds to let each controller manager settle after its caches sync.
    #[arg(long, default_value_t = 15)]
    settle: u64,
    /// Seconds of idle measurement.
    #[arg(long, default_value_t = 60)]
    measure: u64,
    #[arg(long, default_value = "target/release/kcm-rs")]
    kcm_rs: PathBuf,
}

struct Reading {
    rss_mib: f64,
    cpu_percent: f64,
    startup_cpu_s: f64,
}

async fn measure(pid: u32, settle: u64, secs: u64) -> anyhow::Result<Reading> {
    tokio::time::sleep(Duration::from_secs(settle)).await;
    let startup = cpu_seconds(pid).context("process gone")?;
    let t0 = Instant::now();
    let mut peak: f64 = 0.0;
    while t0.elapsed() < Duration::from_secs(secs) {
        peak = peak.max(rss_mib(pid).unwrap_or(0.0));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let cpu = cpu_seconds(pid).context("process gone")? - startup;
    Ok(Reading {
        rss_mib: peak,
        cpu_percent: 100.0 * cpu / t0.elapsed().as_secs_f64(),
        startup_cpu_s: startup,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    let cp = ControlPlane::start().context("control plane")?;
    let client = cp.client().await?;
    let ns = TestNamespace::create(&client, "bench-idle").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let nodes = 20;
    for i in 0..nodes {
        kubelet::create_node(&client, &format!("idle-node-{i}"), true, vec![]).await?;
    }
    let t = Instant::now();
    futures::stream::iter(0..flags.pods)
        .for_each_concurrent(32, |i| {
            let pods = pods.clone();
            async move {
                let name = format!("p{i}");
                let pod: Pod = match serde_json::from_value(json!({
                    "metadata": { "name": name, "labels": { "app": "bench", "shard": (i % 7).to_string() } },
                    "spec": { "restartPolicy": "Never", "containers": [{
                        "name": "main", "image": "registry.example/bench:1",
                        "command": ["sleep", "3600"], "env": [{ "name": "INDEX", "value": i.to_string() }]
                    }]}
                })) {
                    Ok(p) => p,
                    Err(e) => return eprintln!("pod {i}: {e}"),
                };
                let res = async {
                    pods.create(&PostParams::default(), &pod).await?;
                    kubelet::bind_pod(&pods, &name, &format!("idle-node-{}", i % nodes)).await?;
                    kubelet::run_pod(&pods, &name, true).await?;
                    Ok::<_, kcm_e2e::HarnessError>(())
                }
                .await;
                if let Err(e) = res {
                    eprintln!("pod {i}: {e}");
                }
            }
        })
        .await;
    println!("created {} running pods in {:.1?}", flags.pods, t.elapsed());

    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut ours = tokio::process::Command::new(&flags.kcm_rs)
        .arg(format!("--kubeconfig={}", cp.kubeconfig().display()))
        .arg("--controllers=pod-garbage-collector-controller")
        .arg("--leader-elect=false")
        .arg("--bind-address=127.0.0.1")
        .arg(format!("--secure-port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| {
            format!(
                "starting {} (cargo build --release -p kcm-rs)",
                flags.kcm_rs.display()
            )
        })?;
    let ours_pid = ours.id().context("pid")?;
    let r = measure(ours_pid, flags.settle, flags.measure).await?;
    let _ = ours.kill().await;
    println!(
        "kcm-rs:   RSS {:.1} MiB, idle CPU {:.2}% of one core, CPU to list and settle {:.2} s",
        r.rss_mib, r.cpu_percent, r.startup_cpu_s
    );

    let bin = binaries::ensure_built()?.join("kcm-e2e-controller-manager");
    let mut theirs = tokio::process::Command::new(bin)
        .arg(format!("--kubeconfig={}", cp.kubeconfig().display()))
        .arg("--controllers=pod-garbage-collector-controller")
        .arg("--leader-elect=false")
        .arg("--secure-port=0")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let theirs_pid = theirs.id().context("pid")?;
    let u = measure(theirs_pid, flags.settle, flags.measure).await?;
    let _ = theirs.kill().await;
    println!(
        "upstream: RSS {:.1} MiB, idle CPU {:.2}% of one core, CPU to list and settle {:.2} s",
        u.rss_mib, u.cpu_percent, u.startup_cpu_s
    );
    println!(
        "ratio kcm-rs/upstream: RSS {:.2}, idle CPU {:.2}, start-up CPU {:.2}",
        r.rss_mib / u.rss_mib,
        r.cpu_percent / u.cpu_percent.max(f64::MIN_POSITIVE),
        r.startup_cpu_s / u.startup_cpu_s
    );
    Ok(())
}
