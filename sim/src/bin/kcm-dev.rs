//! kcm-dev: what `make run` runs. Starts the local control plane (a real
//! kube-apiserver over embedded etcd), the pod simulator and kcm-rs, creates
//! the example Jobs, prints how to watch them, and tears everything down on
//! Ctrl-C. `--exit-when-done` instead waits for every Job to finish, prints
//! one line per Job and exits (0 when all finished in time).
//!
//! `--kubeconfig` runs against a cluster that is already up instead (the
//! real node of e2e/realnode, `make run-real`): no control plane, no
//! simulated nodes, the pods are real; `--evict-requests` then evicts the
//! pods that ask for it (see e2e/realnode/examples).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use k8s_openapi::api::core::v1::Pod;
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
    /// Run against the cluster of this kubeconfig (left as it is) instead of
    /// starting a local control plane with simulated nodes.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Evict, through the Eviction API, each pod named by a file
    /// `<namespace>_<pod>` that appears in this directory (the file is
    /// removed). Real pods ask for it this way to get a real DisruptionTarget.
    #[arg(long)]
    evict_requests: Option<PathBuf>,
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
    let (cp, kubeconfig) = match &flags.kubeconfig {
        Some(path) => {
            if flags.upstream_controllers.is_some() {
                anyhow::bail!(
                    "--upstream-controllers needs the local control plane, not --kubeconfig"
                );
            }
            (None, path.clone())
        }
        None => {
            let kubeconfig = state.join("kubeconfig");
            let dir = tempfile::Builder::new().prefix("cp-").tempdir_in(&state)?;
            eprintln!("starting kube-apiserver + etcd ...");
            let cp = ControlPlane::start_in(dir, kubeconfig.clone(), 0)
                .context("starting the control plane")?;
            eprintln!(
                "API server {} ready in {:.1?}",
                cp.server(),
                cp.started_in()
            );
            (Some(cp), kubeconfig)
        }
    };
    let client = kcm_e2e::control_plane::client_from_kubeconfig(&kubeconfig).await?;

    // Simulated nodes only on the local control plane: a given cluster has
    // real ones.
    let sim_task = match &cp {
        Some(_) => {
            let stats = Arc::new(SimStats::default());
            let sim_cfg = SimConfig {
                nodes: flags.nodes,
                ..SimConfig::default()
            };
            sim::create_nodes(&client, &sim_cfg).await?;
            tokio::spawn(sim::run(client.clone(), sim_cfg, Arc::clone(&stats)))
        }
        None => tokio::spawn(std::future::pending()),
    };
    // Every pod's last state, deleted ones included: a real eviction deletes
    // the pod, and the summary still reports how it ended.
    let seen = SeenPods::default();
    tokio::spawn(remember_pods(client.clone(), seen.clone()));
    if let Some(dir) = &flags.evict_requests {
        tokio::spawn(evict_requested(client.clone(), dir.clone()));
    }

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
    let _upstream = match (&flags.upstream_controllers, &cp) {
        (Some(list), Some(cp)) => {
            let names: Vec<&str> = list.split(',').collect();
            Some(UpstreamKcm::start(cp, &names, &[]).context("starting upstream KCM")?)
        }
        _ => None,
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
            r = wait_for_jobs(&client, &seen, flags.timeout) => r,
            status = kcm.wait() => Err(anyhow::anyhow!(
                "kcm-rs exited: {status:?}; see {}", kcm_log.display())),
        };
        let _ = kcm.kill().await;
        sim_task.abort();
        if cp.is_some() {
            drop(cp);
            let _ = std::fs::remove_file(&kubeconfig);
        }
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
    if cp.is_some() {
        drop(cp);
        let _ = std::fs::remove_file(&kubeconfig);
    }
    eprintln!("stopped");
    Ok(())
}

/// Evicts each pod named by a file `<namespace>_<pod>` in `dir` through the
/// Eviction API (the API server adds the DisruptionTarget condition, reason
/// EvictionByEvictionAPI, then deletes the pod gracefully), and removes the
/// file. A failed eviction is retried on the next pass (a PDB may refuse it
/// for a while).
async fn evict_requested(client: kube::Client, dir: PathBuf) {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::EvictParams;
    loop {
        let names: Vec<String> = match std::fs::read_dir(&dir) {
            Ok(entries) => entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect(),
            Err(_) => Vec::new(), // not made yet: no pod asked
        };
        for name in names {
            let Some((ns, pod)) = name.split_once('_') else {
                continue;
            };
            let pods: kube::Api<Pod> = kube::Api::namespaced(client.clone(), ns);
            match pods.evict(pod, &EvictParams::default()).await {
                Ok(_) => {
                    eprintln!("evicted {ns}/{pod} (it asked to be)");
                    let _ = std::fs::remove_file(dir.join(&name));
                }
                Err(kube::Error::Api(e)) if e.code == 404 => {
                    let _ = std::fs::remove_file(dir.join(&name));
                }
                Err(e) => tracing::warn!(%ns, %pod, error = %e, "eviction failed, retrying"),
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// The last state of every pod seen since start, by UID.
type SeenPods = Arc<parking_lot::Mutex<std::collections::HashMap<String, Pod>>>;

/// Keeps `seen` current from a watch of every pod; a deleted pod keeps the
/// state its deletion event carried.
async fn remember_pods(client: kube::Client, seen: SeenPods) {
    use futures::TryStreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let mut stream = std::pin::pin!(
        watcher(kube::Api::<Pod>::all(client), watcher::Config::default()).default_backoff()
    );
    while let Ok(Some(event)) = stream.try_next().await {
        if let watcher::Event::Apply(pod)
        | watcher::Event::InitApply(pod)
        | watcher::Event::Delete(pod) = event
            && let Some(uid) = pod.metadata.uid.clone()
        {
            seen.lock().insert(uid, pod);
        }
    }
}

/// Waits until every Job has a `Complete` or `Failed` condition, then prints
/// one line per Job: its end, the counts in its status and how its pods
/// ended (`ignored`: failed pods with a `DisruptionTarget` condition, which a
/// pod failure policy's Ignore rule leaves out of `failed`). The pods are
/// those that exist at the end plus those deleted on the way (`seen`).
async fn wait_for_jobs(
    client: &kube::Client,
    seen: &SeenPods,
    timeout: std::time::Duration,
) -> anyhow::Result<()> {
    use k8s_openapi::api::batch::v1::Job;
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
        let mut pods = pods.list(&lp).await?.items;
        let listed: std::collections::HashSet<Option<String>> =
            pods.iter().map(|p| p.metadata.uid.clone()).collect();
        let labels = |p: &Pod| p.metadata.labels.clone().unwrap_or_default();
        pods.extend(
            seen.lock()
                .values()
                .filter(|p| !listed.contains(&p.metadata.uid))
                .filter(|p| p.metadata.namespace.as_deref() == Some(ns))
                .filter(|p| {
                    labels(p)
                        .get("batch.kubernetes.io/job-name")
                        .map(String::as_str)
                        == Some(name)
                })
                .cloned(),
        );
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
        // What the pods really ended with (exit codes, DisruptionTarget
        // reasons) and every condition the Job went through, in order.
        let mut codes: Vec<i32> = pods
            .iter()
            .filter_map(|p| p.status.as_ref()?.container_statuses.as_ref())
            .flatten()
            .filter_map(|c| Some(c.state.as_ref()?.terminated.as_ref()?.exit_code))
            .collect();
        codes.sort_unstable();
        let reasons: Vec<String> = pods
            .iter()
            .filter_map(|p| p.status.as_ref()?.conditions.as_ref())
            .flatten()
            .filter(|c| c.type_ == "DisruptionTarget" && c.status == "True")
            .map(|c| c.reason.clone().unwrap_or_default())
            .collect();
        let conditions: Vec<String> = status
            .conditions
            .iter()
            .flatten()
            .filter(|c| c.status == "True")
            .map(|c| c.type_.clone())
            .collect();
        let join = |v: Vec<String>| {
            if v.is_empty() {
                "-".to_string()
            } else {
                v.join(",")
            }
        };
        println!(
            "detail {ns}/{name}: conditions={} exit-codes={} disruption-reasons={}",
            join(conditions),
            join(codes.iter().map(i32::to_string).collect()),
            join(reasons),
        );
    }
    Ok(())
}
