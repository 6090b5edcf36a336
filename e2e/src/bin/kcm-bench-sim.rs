//! kcm-bench-sim: is the simulator a bottleneck? Starts a control plane and
//! kcm-sim (as its own process), creates N pods that run for a while, and
//! reports the simulator's CPU use and RSS while they run, beside the API
//! server's for scale.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use k8s_openapi::api::core::v1::Pod;
use kcm_e2e::procstat::{cpu_seconds, rss_mib};
use kcm_e2e::{ControlPlane, TestNamespace};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;

#[derive(Debug, Parser)]
struct Flags {
    #[arg(long, default_value_t = 1000)]
    pods: usize,
    /// How long each pod runs once started.
    #[arg(long, default_value = "30s")]
    run: String,
    #[arg(long, default_value_t = 10)]
    nodes: usize,
    #[arg(long, default_value = "target/release/kcm-sim")]
    sim: PathBuf,
}

fn phase_counts(pods: &[Pod]) -> (usize, usize) {
    let phase = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default()
    };
    let running = pods.iter().filter(|p| phase(p) == "Running").count();
    let done = pods.iter().filter(|p| phase(p) == "Succeeded").count();
    (running, done)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    let cp = ControlPlane::start().context("control plane")?;
    let client = cp.client().await?;
    let mut sim = tokio::process::Command::new(&flags.sim)
        .arg(format!("--kubeconfig={}", cp.kubeconfig().display()))
        .arg(format!("--nodes={}", flags.nodes))
        .arg("--report-every=0")
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", flags.sim.display()))?;
    let sim_pid = sim.id().context("sim pid")?;
    let ns = TestNamespace::create(&client, "bench-sim").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (sim0, api0, t0) = (cpu_seconds(sim_pid), cpu_seconds(cp.pid()), Instant::now());
    for i in 0..flags.pods {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": format!("p{i}"), "annotations": { "sim.kcm-rs.io/run": flags.run } },
            "spec": { "restartPolicy": "Never", "containers": [{ "name": "main", "image": "x" }] }
        }))?;
        pods.create(&PostParams::default(), &pod).await?;
    }
    let created = t0.elapsed();
    let mut peak_running = 0;
    let mut peak_rss: f64 = 0.0;
    loop {
        let list = pods.list(&ListParams::default()).await?.items;
        let (running, done) = phase_counts(&list);
        peak_running = peak_running.max(running);
        peak_rss = peak_rss.max(rss_mib(sim_pid).unwrap_or(0.0));
        if done == flags.pods {
            break;
        }
        if t0.elapsed() > Duration::from_secs(600) {
            anyhow::bail!("only {done} of {} pods finished", flags.pods);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let wall = t0.elapsed().as_secs_f64();
    let sim_cpu = cpu_seconds(sim_pid)
        .zip(sim0)
        .map(|(a, b)| a - b)
        .unwrap_or(f64::NAN);
    let api_cpu = cpu_seconds(cp.pid())
        .zip(api0)
        .map(|(a, b)| a - b)
        .unwrap_or(f64::NAN);
    println!(
        "pods: {} created in {:.1?}, peak running together: {peak_running}",
        flags.pods, created
    );
    println!("wall time until all Succeeded: {wall:.1}s");
    println!(
        "kcm-sim: {sim_cpu:.2} CPU-s ({:.1}% of one core), peak RSS {peak_rss:.0} MiB",
        100.0 * sim_cpu / wall
    );
    println!(
        "kube-apiserver+etcd: {api_cpu:.2} CPU-s ({:.1}% of one core)",
        100.0 * api_cpu / wall
    );
    println!(
        "simulator share of control-plane CPU: {:.2}",
        sim_cpu / api_cpu
    );
    let _ = sim.kill().await;
    Ok(())
}
