//! Loading a kubeconfig, shared by the controllers' `--kubeconfig`, the
//! delegated-auth kubeconfigs and the tools. Errors are one line for the
//! user; `startup` checks that its API server answers.

use kube::config::{KubeConfigOptions, Kubeconfig};
use std::path::Path;

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
