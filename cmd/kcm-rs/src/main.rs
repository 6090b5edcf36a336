//! kcm-rs: the Job, pod GC, taint-eviction and disruption controllers of
//! kube-controller-manager, in Rust.
//!
//! Layout: `main.rs` is the order of start-up (flags and gates, logging,
//! kubeconfig, the server's version and the minor to behave as, serving,
//! controller identities, leader election, then the controllers through
//! `kcm_runtime::controller`) and the exit codes; `flags.rs` the command
//! line; `startup.rs` the API calls before the Lease is sought (version
//! probe, tokens and their checks) with their retry bound; `registry.rs`
//! the controllers by KCM name; `serve.rs` the `/healthz`, `/readyz` and
//! `/metrics` routes; `logging.rs` text and klog-style JSON logs;
//! `kubeconfig.rs` loading and in-cluster inference; `runtime.rs` the
//! async runtime's threads; `tools/` the `explain` and `lint` subcommands.

mod flags;
mod kubeconfig;
mod logging;
mod registry;
mod runtime;
mod serve;
mod startup;
mod tools;

use kcm_runtime::metrics::Metrics;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use kcm_features::{Emulation, FeatureGates};
use kcm_runtime::client::{ClientOptions, Fence, build_client, identity};
use kcm_runtime::controller::{self, ControllerContext, ControllerSpec};
use kcm_runtime::leader::{LeaderElectionConfig, LeaderElector};
use tokio_util::sync::CancellationToken;

use crate::flags::Flags;
use crate::startup::StartError;

/// Why the process stopped: user errors exit 2, lost leadership or runtime
/// failures exit 1.
enum Failure {
    User(String),
    Runtime(String),
}

impl From<StartError> for Failure {
    fn from(e: StartError) -> Self {
        match e {
            StartError::Permanent(msg) => Failure::User(msg),
            StartError::GaveUp(msg) => Failure::Runtime(msg),
        }
    }
}

async fn kube_config(flags: &Flags) -> Result<kube::Config, Failure> {
    let mut config = kubeconfig::load_or_infer(flags.kubeconfig.as_deref())
        .await
        .map_err(Failure::User)?;
    if let Some(master) = &flags.master {
        config.cluster_url = master
            .parse()
            .map_err(|e| Failure::User(format!("--master {master:?}: {e}")))?;
    }
    Ok(config)
}

/// The KCM kcm-rs behaves as (the API server's minor) and the version its
/// gates are evaluated at (`--emulated-version`, down to that KCM's floor);
/// see `Emulation::choose` for kcm-rs's override beyond that.
fn behave_as(flag: Option<&str>, server: &str, metrics: &Metrics) -> Result<Emulation, Failure> {
    let chosen = Emulation::choose(flag, server).map_err(|e| Failure::User(e.to_string()))?;
    if let Some(w) = chosen.warning {
        tracing::warn!(server, emulated = %chosen.emulation, "{w}");
    }
    let binary = chosen.emulation.binary();
    let server_minor = chosen
        .newer_server
        .or_else(|| {
            kcm_features::KubeVersion::from_git_version(server)
                .ok()
                .map(|v| v.minor())
        })
        .unwrap_or(binary.minor());
    kcm_runtime::metrics::register_version_skew(
        metrics.registry(),
        &format!("1.{server_minor}"),
        &binary.to_string(),
        i64::from(server_minor.saturating_sub(binary.minor())),
    );
    Ok(chosen.emulation)
}

fn identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "kcm-rs".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("{host}_{:08x}{:08x}", std::process::id(), nanos)
}

async fn wait_for_signal() {
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate());
    match term {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {},
                _ = term.recv() => {},
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

fn tls_options(flags: &Flags) -> kcm_serving::TlsOptions {
    kcm_serving::TlsOptions {
        cert_file: flags.tls_cert_file.clone(),
        key_file: flags.tls_private_key_file.clone(),
        cert_dir: flags.cert_dir.clone().filter(|d| !d.as_os_str().is_empty()),
        client_ca_file: flags.client_ca_file.clone(),
        min_version: flags.tls_min_version,
        cipher_suites: flags.tls_cipher_suites.clone(),
    }
}

/// A client for TokenReview or SubjectAccessReview calls: from `path`, else
/// in-cluster, else none (with a warning). One that cannot reach its server
/// is a start-up error.
async fn review_client(
    metrics: &Metrics,
    path: Option<&std::path::Path>,
    flag: &str,
) -> Result<Option<kube::Client>, Failure> {
    let config = match path {
        Some(p) => kubeconfig::load(p)
            .await
            .map_err(|e| Failure::User(format!("{flag}: {e}")))?,
        None => match kube::Config::incluster() {
            Ok(c) => c,
            Err(_) => {
                tracing::warn!("no {flag} and not in a cluster: delegated checks are off");
                return Ok(None);
            }
        },
    };
    let url = config.cluster_url.to_string();
    // Its own token bucket, at KCM's delegated-client rate (200 QPS, 400
    // burst): reviews never take the controllers' budget.
    let opts = ClientOptions {
        qps: 200.0,
        burst: 400,
        ..ClientOptions::for_component("delegated-auth", metrics)
    };
    let client = build_client(config, &opts).map_err(|e| Failure::User(format!("{flag}: {e}")))?;
    let (never, clock) = (
        CancellationToken::new(),
        kcm_runtime::clock::Clock::system(),
    );
    startup::server_version(&client, &url, startup::Bound::start_up(&never, &clock))
        .await
        .map_err(|e| match Failure::from(e) {
            Failure::User(m) => Failure::User(format!("{flag}: {m}")),
            Failure::Runtime(m) => Failure::Runtime(format!("{flag}: {m}")),
        })?;
    Ok(Some(client))
}

/// What the delegated authentication and authorization are built from.
struct AuthFlags {
    authn: Option<std::path::PathBuf>,
    authz: Option<std::path::PathBuf>,
    always_allow: Vec<String>,
}

impl AuthFlags {
    fn of(flags: &Flags) -> Self {
        AuthFlags {
            authn: flags.authentication_kubeconfig.clone(),
            authz: flags.authorization_kubeconfig.clone(),
            always_allow: flags.authorization_always_allow_paths.clone(),
        }
    }
}

async fn delegated_auth(
    flags: AuthFlags,
    metrics: &Metrics,
) -> Result<kcm_serving::Delegate, Failure> {
    let authn = review_client(
        metrics,
        flags.authn.as_deref(),
        "--authentication-kubeconfig",
    )
    .await?;
    let authz = review_client(
        metrics,
        flags.authz.as_deref(),
        "--authorization-kubeconfig",
    )
    .await?;
    let serving = kcm_serving::Metrics::register(metrics.registry());
    Ok(kcm_serving::Delegate::new(
        authn,
        authz,
        flags.always_allow,
        serving,
    ))
}

/// The secure port, on a thread and runtime of its own where its review
/// clients are built too: their connection to the API server and its tasks
/// live there, apart from the controllers' (a flood of the port cannot slow
/// their traffic, nor a review reconnect their connection onto its thread).
/// Start-up errors come back as from the main thread.
async fn secure_port(
    flags: &Flags,
    metrics: &Metrics,
    status: &Arc<serve::Status>,
    stop: &CancellationToken,
) -> Result<std::thread::JoinHandle<()>, Failure> {
    let addr = SocketAddr::new(flags.bind_address, flags.port);
    let (auth, tls) = (AuthFlags::of(flags), tls_options(flags));
    let (metrics, status, stop) = (metrics.clone(), Arc::clone(status), stop.clone());
    let (ready, started) = tokio::sync::oneshot::channel();
    let thread = kcm_serving::on_own_thread("kcm-rs-serving", move || async move {
        let built = async {
            let delegate = delegated_auth(auth, &metrics).await?;
            serve::secure(addr, &status, &tls, delegate)
                .await
                .map_err(|e| Failure::User(e.to_string()))
        };
        match built.await {
            Ok(server) => {
                let _ = ready.send(Ok(()));
                server.run(serve::router(status), stop).await;
            }
            Err(e) => {
                let _ = ready.send(Err(e));
            }
        }
    })
    .map_err(|e| Failure::Runtime(format!("starting the secure port's thread: {e}")))?;
    match started.await {
        Ok(Ok(())) => Ok(thread),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(Failure::Runtime("the secure port's thread ended".into())),
    }
}

/// Where the controllers' ServiceAccounts are, and the pod kcm-rs runs in.
struct ControllerAccounts {
    namespace: String,
    pod: identity::InPod,
}

/// The accounts' namespace, logged with where it came from; an empty
/// prefix in kube-system (KCM's own accounts, which kube-apiserver binds to
/// its broad bootstrap roles on every start) is refused without
/// --allow-kcm-service-accounts: an empty Helm value or shell variable would
/// otherwise widen every controller's rights without a word.
fn controller_accounts(flags: &Flags) -> Result<ControllerAccounts, String> {
    let pod = identity::InPod::from_env();
    let flag = flags.controller_service_account_namespace.as_deref();
    let (namespace, from) = identity::accounts_namespace(flag, &pod);
    if !flags.use_service_account_credentials {
        return Ok(ControllerAccounts { namespace, pod });
    }
    let kcm_names =
        flags.controller_service_account_prefix.is_empty() && namespace == identity::KCM_NAMESPACE;
    if kcm_names && !flags.allow_kcm_service_accounts {
        return Err(format!(
            "--controller-service-account-prefix is empty: the controllers would act as \
             kube-controller-manager's own ServiceAccounts in {namespace} (job-controller, ...), \
             which kube-apiserver binds to the broad system:controller:* roles; set a prefix \
             (default kcm-rs-, the accounts of manifests/base/rbac.yaml), or pass \
             --allow-kcm-service-accounts to mean it"
        ));
    }
    if kcm_names {
        tracing::warn!(
            %namespace,
            "the controllers act as kube-controller-manager's own ServiceAccounts, with the rights \
             of upstream's system:controller:* roles (--allow-kcm-service-accounts)"
        );
    }
    tracing::info!(%namespace, from, prefix = %flags.controller_service_account_prefix, "controller ServiceAccounts");
    Ok(ControllerAccounts { namespace, pod })
}

async fn run(
    flags: Flags,
    gates: FeatureGates,
    selected: Vec<&'static ControllerSpec>,
    accounts: ControllerAccounts,
) -> Result<(), Failure> {
    let config = kube_config(&flags).await?;
    let url = config.cluster_url.to_string();
    let probe = kube::Client::try_from(config.clone())
        .map_err(|e| Failure::User(format!("building a client for {url}: {e}")))?;
    let stop = CancellationToken::new();
    // The one clock of the process: start-up, leader election, controllers.
    let clock = kcm_runtime::clock::Clock::system();
    // The process's registry, the one `/metrics` serves; the runtime's
    // families on it, built once and passed to whatever registers more.
    let metrics = Metrics::new(&prometheus::Registry::new());
    kcm_runtime::metrics::build_info(
        metrics.registry(),
        env!("CARGO_PKG_VERSION"),
        env!("KCM_RS_GIT_COMMIT"),
    );
    let retry = startup::Bound::start_up(&stop, &clock);
    let version = startup::server_version(&probe, &url, retry).await?;
    // Its kube HTTP/1.1 connection would stay pooled beside the one HTTP/2
    // connection every other client shares (client::transport).
    drop(probe);
    let emulation = behave_as(flags.emulated_version.as_deref(), &version, &metrics)?;
    let behaves_as = emulation.binary();
    tracing::info!(server = %url, %version, kcm_version = %behaves_as, emulated_version = %emulation, "connected");
    let gates = gates
        .resolve_at(emulation)
        .map_err(|e| Failure::User(format!("--feature-gates: {e}")))?;
    for (gate, value) in gates.emulation_deviations() {
        tracing::warn!(
            %gate, value,
            "kcm-rs implements {gate} only as {value}; kube-controller-manager {behaves_as} emulating {emulation} defaults it to {}",
            !value
        );
    }
    let ignored = gates.ignored();
    if !ignored.is_empty() {
        tracing::info!(
            ?ignored,
            "feature gates accepted as kube-controller-manager {behaves_as} does; no kcm-rs controller reads them"
        );
    }
    tracing::info!(
        feature_gates = %gates,
        controllers = ?selected.iter().map(|c| c.name).collect::<Vec<_>>(),
        mode = match &flags.job.job_managed_by {
            Some(name) => format!("beside kube-controller-manager: Jobs with spec.managedBy={name}"),
            None => "replacing kube-controller-manager's controllers".to_string(),
        },
        "starting"
    );

    // process_* families (CPU, RSS, open fds), as every Go component exports.
    if let Err(e) = metrics.registry().register(Box::new(
        prometheus::process_collector::ProcessCollector::for_self(),
    )) {
        tracing::warn!("process metrics unavailable: {e}");
    }
    let status = Arc::new(serve::Status::new(metrics.clone()));
    *status.standby.write() = flags.leader_elect;
    // The controllers' runtime turns, or /healthz and /livez say it does not.
    status.checks.write().push((
        "runtime".to_string(),
        serve::runtime_heartbeat(stop.clone()),
    ));
    let health = (flags.health_port != 0).then(|| {
        let ip = flags.health_bind_address.unwrap_or(flags.bind_address);
        SocketAddr::new(ip, flags.health_port)
    });
    let mut servers = Vec::new();
    if flags.port != 0 {
        servers.push(secure_port(&flags, &metrics, &status, &stop).await?);
    }
    if let Some(addr) = health {
        let health = serve::serve_health(addr, Arc::clone(&status), stop.clone());
        servers.push(health.map_err(|e| Failure::User(e.to_string()))?);
    }
    {
        let stop = stop.clone();
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("signal received; shutting down");
            stop.cancel();
        });
    }

    // Identities first: a process whose tokens do not work must never hold
    // the Lease (a standby keeps renewing its tokens while it waits).
    let identities = if flags.use_service_account_credentials {
        let accounts = startup::Accounts {
            prefix: &flags.controller_service_account_prefix,
            namespace: &accounts.namespace,
            pod: &accounts.pod,
        };
        startup::controller_identities(
            &config,
            &accounts,
            &selected,
            flags.service_account_token_renewal,
            retry,
            &metrics,
        )
        .await?
    } else {
        Arc::default()
    };

    // Without leader election the process always writes; with it, from
    // acquiring until a renewal is overdue (see `kcm_runtime::leader`).
    let fence = if flags.leader_elect {
        Fence::closed()
    } else {
        Fence::open()
    };
    let mut elector = if flags.leader_elect {
        let cfg = LeaderElectionConfig {
            name: flags.leader_elect_resource_name.clone(),
            namespace: flags.leader_elect_resource_namespace.clone(),
            identity: identity(),
            lease_duration: flags.leader_elect_lease_duration,
            renew_deadline: flags.leader_elect_renew_deadline,
            retry_period: flags.leader_elect_retry_period,
        };
        let lease_client = build_client(
            config.clone(),
            &ClientOptions::for_component("leader-election", &metrics),
        )
        .map_err(|e| Failure::User(e.to_string()))?;
        // The Lease says which mode runs (kcm_job::mode; `kcm-rs lint` reads it).
        let jobs = selected.iter().any(|c| c.name == kcm_job::SPEC.name);
        let marks = kcm_job::mode::annotations(flags.job.job_managed_by.as_deref(), jobs);
        let mut e = LeaderElector::new(lease_client, cfg, fence.clone(), &metrics)
            .map_err(|e| Failure::User(e.to_string()))?
            .with_annotations(marks)
            .with_clock(clock.clone());
        tracing::info!(identity = %e.identity(), lease = %flags.leader_elect_resource_name, "waiting for the lease");
        if !e.acquire(&stop).await {
            return Ok(());
        }
        Some(e)
    } else {
        None
    };
    *status.standby.write() = false;
    let options = controller::Options {
        qps: flags.kube_api_qps,
        burst: flags.kube_api_burst,
        content_type: flags.kube_api_content_type,
        features: gates,
        version: behaves_as,
        settings: controller::Settings::default()
            .with(flags.job.clone())
            .with(flags.disruption.clone())
            .with(flags.podgc.clone()),
        identities,
        host_settings: flags.host_settings(),
        fence: fence.clone(),
        clock,
        metrics,
    };
    // A process that cannot start its controllers gives the Lease back
    // first, so a healthy standby need not wait out a lease duration.
    let started = ControllerContext::new(config, options, stop.child_token())
        .and_then(|ctx| controller::start(&ctx, &selected).map(|r| (ctx, r)));
    let (ctx, running) = match started {
        Ok(s) => s,
        Err(e) => {
            if let Some(el) = elector.as_mut() {
                el.release().await;
            }
            return Err(Failure::Runtime(e.to_string()));
        }
    };
    *status.informers.write() = Some(ctx.informers.clone());
    let mut tasks = Vec::new();
    for r in running {
        status.checks.write().push((r.name.to_string(), r.health));
        tasks.push(r.task);
    }

    if let Some(e) = elector.as_mut() {
        if let Err(lost) = e.hold(&stop).await {
            // As KCM: never keep working without the lease.
            tracing::error!("leaderelection lost: {lost}");
            return Err(Failure::Runtime(lost.to_string()));
        }
    } else {
        stop.cancelled().await;
    }

    // The drain ends at the grace period, or earlier when the fence passes
    // (no renewals after the signal): past it no write could land anyway.
    let bound = flags
        .controller_shutdown_timeout
        .unwrap_or(flags.shutdown_grace_period);
    let grace = fence.remaining().map_or(bound, |left| left.min(bound));
    let aborts: Vec<_> = tasks.iter().map(|t| t.abort_handle()).collect();
    let drain = futures::future::join_all(tasks);
    if tokio::time::timeout(grace, drain).await.is_err() {
        tracing::warn!(
            ?grace,
            "in-flight syncs did not finish in time; cancelling them"
        );
        aborts.iter().for_each(|a| a.abort());
    }
    if let Some(e) = elector.as_mut() {
        e.release().await;
    }
    // The servers stop with `stop`; their threads finish in-flight answers.
    for t in servers {
        let _ = tokio::task::spawn_blocking(move || t.join()).await;
    }
    tracing::info!("stopped");
    Ok(())
}

fn main() -> ExitCode {
    // `kcm-rs explain|lint ...` are tools; anything else is KCM's command line.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if tools::is_tool(args.get(1).and_then(|a| a.to_str())) {
        return tools::main(args);
    }
    let flags = Flags::parse();
    logging::init(flags.logging_format, flags.verbosity);
    let user_error = |msg: String| {
        eprintln!("error: {msg}");
        ExitCode::from(2)
    };
    let gates = match FeatureGates::parse(&flags.feature_gates) {
        Ok(g) => g,
        Err(e) => return user_error(format!("--feature-gates: {e}")),
    };
    // Beside KCM (--job-managed-by), KCM runs pod GC, taint eviction and
    // disruption: the default `*` means the Job controller alone.
    let controllers = match flags.job.job_managed_by {
        Some(_) if flags.controllers == ["*"] => vec!["job-controller".to_string()],
        _ => flags.controllers.clone(),
    };
    let selected = match controller::select(registry::REGISTRY, &controllers) {
        Ok(s) => s,
        Err(e) => return user_error(e.to_string()),
    };
    if flags.leader_elect_resource_lock != "leases" {
        return user_error(format!(
            "--leader-elect-resource-lock={:?} is not supported; use \"leases\"",
            flags.leader_elect_resource_lock
        ));
    }
    let accounts = match controller_accounts(&flags) {
        Ok(a) => a,
        Err(e) => return user_error(e),
    };
    let workers = match runtime::worker_threads(std::env::var(runtime::WORKERS_ENV).ok().as_deref())
    {
        Ok(n) => n,
        Err(msg) => return user_error(msg),
    };
    let runtime = match runtime::build(workers) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(run(flags, gates, selected, accounts));
    // Do not wait for detached tasks (watches, the signal handler).
    runtime.shutdown_timeout(Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::User(msg)) => user_error(msg),
        Err(Failure::Runtime(msg)) => {
            eprintln!("error: {msg}");
            ExitCode::from(1)
        }
    }
}
