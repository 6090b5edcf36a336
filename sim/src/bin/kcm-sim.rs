//! kcm-sim: simulated nodes that run pods as their annotations say (see the
//! `kcm_sim` crate docs). Runs until SIGINT or SIGTERM.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use kcm_e2e::control_plane::client_from_kubeconfig;
use kcm_sim::{self as sim, SimConfig, SimStats};

#[derive(Debug, Parser)]
#[command(
    name = "kcm-sim",
    about = "Simulated nodes that run pods as their annotations say"
)]
struct Flags {
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,
    /// How many simulated nodes to create.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Node name prefix.
    #[arg(long, default_value = "sim-node-")]
    node_prefix: String,
    /// Do not bind unscheduled pods (a real scheduler runs).
    #[arg(long)]
    no_schedule: bool,
    /// Print counters this often (seconds, 0 = never).
    #[arg(long, default_value_t = 10)]
    report_every: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let flags = Flags::parse();
    let client = client_from_kubeconfig(&flags.kubeconfig)
        .await
        .context("connecting")?;
    let stats = Arc::new(SimStats::default());
    let cfg = SimConfig {
        nodes: flags.nodes,
        node_prefix: flags.node_prefix,
        schedule: !flags.no_schedule,
    };
    if flags.report_every > 0 {
        let stats = Arc::clone(&stats);
        let every = Duration::from_secs(flags.report_every);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                eprintln!("kcm-sim: {}", stats.summary());
            }
        });
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = sim::run(client, cfg, Arc::clone(&stats)) => r.context("simulator")?,
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
    // One parseable line for benchmarks, which subtract the simulator's
    // own requests.
    eprintln!("kcm-sim final: {}", stats.summary());
    Ok(())
}
