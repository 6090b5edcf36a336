//! kcm-dev: what `make run` runs. Starts the local control plane (a real
//! kube-apiserver over embedded etcd), the pod simulator and kcm-rs, creates
//! the example Jobs, prints how to watch them, and tears everything down on
//! Ctrl-C. `--exit-when-done` instead waits for every Job to finish, prints
//! one line per Job and exits (0 when all finished in time).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use kcm_e2e::{ControlPlane, UpstreamKcm, apply, binaries};
use kcm_sim::{self as sim, SimConfig, SimStats};

#[derive(Debug, Parser)]
#[command(
    name = "kcm-dev",
    about = "Run kcm-rs against a local control plane with simulated nodes"
)]
struct Flags {
    /// Where state, logs and the kubeconfig go.
    #[arg(long, default_value = ".run")]
    state_dir: PathBuf,
    /// The kcm-rs binary to run.
    #[arg(long, default_value = "target/debug/kcm-rs")]
    kcm_rs: PathBuf,
    /// Manifests to create once the control plane is up.
    #[arg(long, default_values = ["manifests/examples/job.yaml", "manifests/examples/pod-failure-policy.yaml"])]
    example: Vec<PathBuf>,
    /// Exit once every Job has finished (Complete or Failed), printing one
    /// summary line per Job; exit 1 if that takes longer than `--timeout`.
    #[arg(long)]
    exit_when_done: bool,
    /// How long `--exit-when-done` waits, e.g. `300s` or `5m`.
    #[arg(long, default_value = "300s", value_parser = parse_timeout)]
    timeout: std::time::Duration,
    /// Simulated nodes.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Also run these upstream KCM controllers (comma separated), e.g. to
    /// compare with upstream's job-controller.
    #[arg(long)]
    upstream_controllers: Option<String>,
    /// Extra flags for kcm-rs.
    #[arg(last = true)]
    kcm_rs_args: Vec<String>,
}

fn parse_timeout(s: &str) -> Result<std::time::Duration, String> {
    match sim::parse_duration(s)? {
        Some(d) => Ok(d),
        None => Err("a timeout cannot be `never`".into()),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let flags = Flags::parse();
    let bin = binaries::ensure_built_with_kubectl().context("building the control plane")?;
    std::fs::create_dir_all(&flags.state_dir)?;
    let state = std::fs::canonicalize(&flags.state_dir)?;
    let kubeconfig = state.join("kubeconfig");
    let dir = tempfile::Builder::new().prefix("cp-").tempdir_in(&state)?;
    eprintln!("starting kube-apiserver + etcd ...");
    let cp =
        ControlPlane::start_in(dir, kubeconfig.clone(), 0).context("starting the control plane")?;
    eprintln!(
        "API server {} ready in {:.1?}",
        cp.server(),
        cp.started_in()
    );
    let client = cp.client().await?;

    let stats = Arc::new(SimStats::default());
    let sim_cfg = SimConfig {
        nodes: flags.nodes,
        ..SimConfig::default()
    };
    sim::create_nodes(&client, &sim_cfg).await?;
    let sim_task = tokio::spawn(sim::run(client.clone(), sim_cfg, Arc::clone(&stats)));

    let kcm_log = state.join("kcm-rs.log");
    let mut kcm = tokio::process::Command::new(&flags.kcm_rs)
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(&flags.kcm_rs_args)
        .stdout(Stdio::from(std::fs::File::create(&kcm_log)?))
        .stderr(Stdio::from(
            std::fs::File::options().append(true).open(&kcm_log)?,
        ))
        .kill_on_drop(true)
        .spawn()
        .with_context(|| {
            format!(
                "starting {} (run `cargo build -p kcm-rs`)",
                flags.kcm_rs.display()
            )
        })?;
    let _upstream = match &flags.upstream_controllers {
        Some(list) => {
            let names: Vec<&str> = list.split(',').collect();
            Some(UpstreamKcm::start(&cp, &names, &[]).context("starting upstream KCM")?)
        }
        None => None,
    };
    for path in &flags.example {
        let made = apply::create_from_file(&client, path, "default")
            .await
            .with_context(|| format!("creating {}", path.display()))?;
        eprintln!("created {} from {}", made.join(", "), path.display());
    }
    let kubectl = bin.join("kcm-e2e-kubectl");
    if flags.exit_when_done {
        let done = tokio::select! {
            r = wait_for_jobs(&client, flags.timeout) => r,
            status = kcm.wait() => Err(anyhow::anyhow!(
                "kcm-rs exited: {status:?}; see {}", kcm_log.display())),
        };
        let _ = kcm.kill().await;
        sim_task.abort();
        drop(cp);
        let _ = std::fs::remove_file(&kubeconfig);
        return done;
    }
    println!();
    println!("kubeconfig: {}", kubeconfig.display());
    println!("kcm-rs log: {}", kcm_log.display());
    println!("watch the Job:");
    println!("  export KUBECONFIG={}", kubeconfig.display());
    println!("  {} get jobs,pods -o wide -w", kubectl.display());
    println!("Ctrl-C stops everything.");

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
        status = kcm.wait() => eprintln!("kcm-rs exited: {status:?}; see {}", kcm_log.display()),
        r = sim_task => eprintln!("simulator stopped: {r:?}"),
    }
    let _ = kcm.kill().await;
    drop(cp);
    let _ = std::fs::remove_file(&kubeconfig);
    eprintln!("stopped");
    Ok(())
}

/// Waits until every Job has a `Complete` or `Failed` condition, then prints
/// one line per Job: its end, the counts in its status and how its pods
/// ended (`ignored`: failed pods with a `DisruptionTarget` condition, which a
/// pod failure policy's Ignore rule leaves out of `failed`).
async fn wait_for_jobs(client: &kube::Client, timeout: std::time::Duration) -> anyhow::Result<()> {
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::ListParams;
    let jobs: kube::Api<Job> = kube::Api::all(client.clone());
    let deadline = std::time::Instant::now() + timeout;
    let began = std::time::Instant::now();
    let finished = |j: &Job| {
        let conds = j.status.as_ref().and_then(|s| s.conditions.as_ref());
        conds
            .into_iter()
            .flatten()
            .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
            .cloned()
    };
    let list = loop {
        let list = jobs.list(&ListParams::default()).await?.items;
        if !list.is_empty() && list.iter().all(|j| finished(j).is_some()) {
            break list;
        }
        if std::time::Instant::now() > deadline {
            let open: Vec<String> = list
                .iter()
                .filter(|j| finished(j).is_none())
                .map(|j| {
                    format!(
                        "{}/{}",
                        j.metadata.namespace.as_deref().unwrap_or(""),
                        j.metadata.name.as_deref().unwrap_or("")
                    )
                })
                .collect();
            anyhow::bail!("Jobs not finished after {timeout:?}: {}", open.join(", "));
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    };
    eprintln!("every Job finished in {:.1?}", began.elapsed());
    for job in &list {
        let ns = job.metadata.namespace.as_deref().unwrap_or("default");
        let name = job.metadata.name.as_deref().unwrap_or("");
        let pods: kube::Api<Pod> = kube::Api::namespaced(client.clone(), ns);
        let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={name}"));
        let pods = pods.list(&lp).await?.items;
        let phase = |p: &Pod| {
            p.status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default()
        };
        let disrupted = |p: &Pod| {
            let conds = p.status.as_ref().and_then(|s| s.conditions.as_ref());
            conds
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "DisruptionTarget" && c.status == "True")
        };
        let failed: Vec<&Pod> = pods.iter().filter(|p| phase(p) == "Failed").collect();
        let ignored = failed.iter().filter(|p| disrupted(p)).count();
        let status = job.status.clone().unwrap_or_default();
        let end = finished(job).map(|c| format!("{} ({})", c.type_, c.reason.unwrap_or_default()));
        println!(
            "job {ns}/{name}: {} succeeded={} failed={} pods={} pods-succeeded={} pods-failed={} ignored={}",
            end.unwrap_or_default(),
            status.succeeded.unwrap_or(0),
            status.failed.unwrap_or(0),
            pods.len(),
            pods.iter().filter(|p| phase(p) == "Succeeded").count(),
            failed.len(),
            ignored,
        );
    }
    Ok(())
}
