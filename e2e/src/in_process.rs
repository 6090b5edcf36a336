//! Runs kcm-rs controllers inside a test process against a control plane,
//! through the binary's own wiring: `ControllerContext::new` (shared
//! informers on their own client, one rate-limited client per controller)
//! and `kcm_runtime::controller::start` (init each registry entry, spawn
//! its workers, start the informers), with settings a test may shorten. It
//! has no leader election, serving or flags; tests of those run the real
//! binary.
//! [`start`] runs them on the caller's runtime; [`start_detached`] on a
//! runtime of their own, for controllers shared by every test of a binary.

use std::path::Path;
use std::time::Duration;

use kcm_features::FeatureGates;
use kcm_runtime::controller::{ControllerContext, ControllerSpec, Options, Settings};
use kcm_runtime::informer::InformerFactory;
use kcm_runtime::metrics::Metrics;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio_util::sync::CancellationToken;

use crate::{ControlPlane, HarnessError};

/// Controllers running in this process; dropping it stops them.
pub struct InProcess {
    pub informers: InformerFactory,
    /// Their metrics, on a registry of their own: a test reads its
    /// controllers' counters here, untouched by any other test's.
    pub metrics: Metrics,
    stop: CancellationToken,
}

impl Drop for InProcess {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Starts `specs` against `cp` and waits until every informer synced.
pub async fn start(
    cp: &ControlPlane,
    specs: &[ControllerSpec],
    settings: Settings,
    features: FeatureGates,
) -> Result<InProcess, HarnessError> {
    start_at(cp.kubeconfig(), specs, settings, features).await
}

/// [`start`] against the cluster of a kubeconfig file (for example a
/// fault proxy's, [`crate::faults::FaultProxy::kubeconfig`]).
pub async fn start_at(
    kubeconfig: &Path,
    specs: &[ControllerSpec],
    settings: Settings,
    features: FeatureGates,
) -> Result<InProcess, HarnessError> {
    let kc = Kubeconfig::read_from(kubeconfig).map_err(|e| HarnessError::Kubeconfig {
        path: kubeconfig.to_path_buf(),
        message: e.to_string(),
    })?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| HarnessError::Kubeconfig {
            path: kubeconfig.to_path_buf(),
            message: e.to_string(),
        })?;
    let client = kube::Client::try_from(config.clone())?;
    // As the binary: behave as the server's minor.
    let server = client.apiserver_version().await?.git_version;
    let version = kcm_features::KubeVersion::from_git_version(&server).map_err(|e| {
        HarnessError::NotHealthy {
            reason: e.to_string(),
            log_tail: String::new(),
        }
    })?;
    // As the binary's default (protobuf pods); KCM_E2E_CONTENT_TYPE=
    // application/json runs a suite over the JSON pod watch instead.
    let content_type = match std::env::var("KCM_E2E_CONTENT_TYPE") {
        Ok(v) => v.parse().map_err(|reason| HarnessError::NotHealthy {
            reason,
            log_tail: String::new(),
        })?,
        Err(_) => Default::default(),
    };
    let stop = CancellationToken::new();
    let options = Options {
        qps: 20.0,
        burst: 30,
        content_type,
        features: features.at_version(version),
        version,
        settings,
        identities: Default::default(),
        host_settings: Default::default(),
        fence: kcm_runtime::client::Fence::open(),
        clock: kcm_runtime::clock::Clock::system(),
        metrics: Metrics::detached(),
    };
    let not_started = |e: kcm_runtime::controller::InitError| HarnessError::NotHealthy {
        reason: e.to_string(),
        log_tail: String::new(),
    };
    let ctx = ControllerContext::new(config, options, stop.child_token()).map_err(not_started)?;
    let specs: Vec<&ControllerSpec> = specs.iter().collect();
    kcm_runtime::controller::start(&ctx, &specs).map_err(not_started)?;
    let informers = ctx.informers.clone();
    informers.wait_for_sync().await;
    Ok(InProcess {
        informers,
        metrics: ctx.metrics.clone(),
        stop,
    })
}

/// How long [`start_detached`] waits for the controllers' informers to sync.
const DETACHED_START_TIMEOUT: Duration = Duration::from_secs(60);

/// Controllers started by [`start_detached`]: they run on a multi-threaded
/// runtime of their own thread, so they outlive the runtime of the test
/// that started them (every `#[tokio::test]` has its own), and can be kept
/// in a `static` and shared by all tests of a binary. Dropping it stops
/// them and joins the thread.
pub struct Detached {
    /// The controllers' metrics ([`InProcess::metrics`]).
    pub metrics: Metrics,
    stop: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Detached {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// [`start`] on a runtime of its own (see [`Detached`]). Blocks the calling
/// thread until every informer synced, for at most a minute; callable from
/// inside an async test.
pub fn start_detached(
    cp: &ControlPlane,
    specs: &[ControllerSpec],
    settings: Settings,
    features: FeatureGates,
) -> Result<Detached, HarnessError> {
    let kubeconfig = cp.kubeconfig().to_path_buf();
    let specs = specs.to_vec();
    let stop = CancellationToken::new();
    let token = stop.clone();
    let (tx, rx) = std::sync::mpsc::channel::<Result<Metrics, HarnessError>>();
    let thread = std::thread::Builder::new()
        .name("kcm-in-process".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = tx.send(Err(e.into()));
                    return;
                }
            };
            rt.block_on(async move {
                // Dropped before it is up (it timed out): give up starting.
                let started = tokio::select! {
                    started = start_at(&kubeconfig, &specs, settings, features) => started,
                    () = token.cancelled() => return,
                };
                match started {
                    Ok(running) => {
                        let _ = tx.send(Ok(running.metrics.clone()));
                        token.cancelled().await;
                        drop(running);
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            });
            rt.shutdown_timeout(Duration::from_secs(5));
        })?;
    let mut detached = Detached {
        metrics: Metrics::detached(),
        stop,
        thread: Some(thread),
    };
    match rx.recv_timeout(DETACHED_START_TIMEOUT) {
        Ok(Ok(metrics)) => {
            detached.metrics = metrics;
            Ok(detached)
        }
        Ok(Err(e)) => Err(e),
        Err(e) => Err(HarnessError::NotHealthy {
            reason: format!(
                "in-process controllers not synced within {DETACHED_START_TIMEOUT:?}: {e}"
            ),
            log_tail: String::new(),
        }),
    }
}

/// Sends `tracing` output of in-process controllers to the test's captured
/// output, filtered by `RUST_LOG` (errors only when it is unset). Call it once
/// per test binary, before starting controllers; later calls do nothing.
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}
