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

/// Asks `client`'s API server for its version within [`PROBE_TIMEOUT`].
pub async fn probe(client: &kube::Client, url: &str) -> Result<String, String> {
    match tokio::time::timeout(PROBE_TIMEOUT, client.apiserver_version()).await {
        Ok(Ok(v)) => Ok(v.git_version),
        Ok(Err(e)) => Err(format!(
            "the API server at {url} answered with an error: {e}"
        )),
        Err(_) => Err(format!(
            "the API server at {url} did not answer within {PROBE_TIMEOUT:?}"
        )),
    }
}
