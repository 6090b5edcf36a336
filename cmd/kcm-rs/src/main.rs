//! kcm-rs: the Job, pod GC, taint-eviction and disruption controllers of
//! kube-controller-manager, in Rust.
//!
//! This first cut connects to the cluster and waits for a signal; the
//! controllers and the full KCM flag set arrive with their issues.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use kube::config::{KubeConfigOptions, Kubeconfig};

#[derive(Debug, Parser)]
#[command(name = "kcm-rs", version, about)]
struct Flags {
    /// Path to a kubeconfig file; in-cluster or $KUBECONFIG config when unset.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The address of the API server (overrides any value in kubeconfig).
    #[arg(long)]
    master: Option<String>,
    /// Log verbosity, as klog's -v.
    #[arg(short = 'v', long = "v", default_value_t = 0)]
    verbosity: u8,
}

async fn client(flags: &Flags) -> anyhow::Result<kube::Client> {
    let mut config = match &flags.kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("loading kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("no --kubeconfig given and no in-cluster or $KUBECONFIG configuration")?,
    };
    if let Some(master) = &flags.master {
        config.cluster_url = master.parse().context("parsing --master")?;
    }
    kube::Client::try_from(config).context("building the API client")
}

async fn run(flags: Flags) -> anyhow::Result<()> {
    let client = client(&flags).await?;
    let version = client
        .apiserver_version()
        .await
        .context("the API server did not answer")?;
    tracing::info!(
        server = %format!("{}.{}", version.major, version.minor),
        "connected; no controllers are implemented in this build yet"
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
    tracing::info!("shutting down");
    Ok(())
}

fn main() -> ExitCode {
    let flags = Flags::parse();
    let level = match flags.verbosity {
        0..=1 => "info",
        2..=3 => "debug",
        _ => "trace",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level)),
        )
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(flags)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
