//! kcm-dev: what `make run` runs. Starts the local control plane (a real
//! kube-apiserver over embedded etcd), the pod simulator and kcm-rs, creates
//! the sample Job, prints how to watch it, and tears everything down on Ctrl-C.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use kcm_e2e::sim::{self, SimConfig, SimStats};
use kcm_e2e::{ControlPlane, UpstreamKcm, apply, binaries};

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
    #[arg(long, default_value = "manifests/examples/job.yaml")]
    example: Vec<PathBuf>,
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
