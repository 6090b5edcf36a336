//! Loading a kubeconfig and checking that its API server answers, shared by
//! the controllers' `--kubeconfig`, the delegated-auth kubeconfigs and the
//! tools. Errors are one line for the user.

use std::path::Path;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};

/// How long a start-up probe waits for the API server to answer.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(15);

/// The configuration in the kubeconfig file at `path`.
pub async fn load(path: &Path) -> Result<kube::Config, String> {
    let kc = Kubeconfig::read_from(path)
        .map_err(|e| format!("reading kubeconfig {}: {e}", path.display()))?;
    kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| format!("loading kubeconfig {}: {e}", path.display()))
}

/// `path`'s configuration, or in-cluster / `$KUBECONFIG` without one.
pub async fn load_or_infer(path: Option<&Path>) -> Result<kube::Config, String> {
    match path {
        Some(p) => load(p).await,
        None => kube::Config::infer().await.map_err(|e| {
            format!("no --kubeconfig given and no in-cluster or $KUBECONFIG configuration: {e}")
        }),
    }
}

/// Asks `client`'s API server for its version, retrying transient failures
/// (no connection, 429, 5xx) every [`PROBE_RETRY`] for up to [`PROBE_TIMEOUT`]
/// in all, as KCM waits for its API server at start. Anything else (401,
/// 403, a bad certificate) is reported at once.
pub async fn probe(client: &kube::Client, url: &str) -> Result<String, String> {
    let deadline = tokio::time::Instant::now() + PROBE_TIMEOUT;
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let last = match tokio::time::timeout_at(deadline, client.apiserver_version()).await {
            Ok(Ok(v)) => return Ok(v.git_version),
            Ok(Err(e)) if !transient(&e) => {
                return Err(format!(
                    "the API server at {url} answered with an error: {e}"
                ));
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => "no answer".to_string(),
        };
        if tokio::time::Instant::now() + PROBE_RETRY >= deadline {
            return Err(format!(
                "the API server at {url} did not answer within {PROBE_TIMEOUT:?} \
                 ({attempts} attempts; last: {last})"
            ));
        }
        tracing::warn!(server = url, error = %last, "API server not ready, retrying");
        tokio::time::sleep(PROBE_RETRY).await;
    }
}

/// Between two start-up probes.
const PROBE_RETRY: Duration = Duration::from_secs(1);

/// Worth another probe: the server may come up or recover.
fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}
