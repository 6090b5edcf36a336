//! Runs kcm-rs controllers inside a test process against a control plane,
//! wired exactly as the kcm-rs binary wires them (shared informers, one
//! rate-limited client per controller), with settings a test may shorten.

use kcm_features::FeatureGates;
use kcm_runtime::controller::{ControllerContext, ControllerSpec, Settings};
use kcm_runtime::informer::InformerFactory;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio_util::sync::CancellationToken;

use crate::{ControlPlane, HarnessError};

/// Controllers running in this process; dropping it stops them.
pub struct InProcess {
    pub informers: InformerFactory,
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
    let kc = Kubeconfig::read_from(cp.kubeconfig()).map_err(|e| HarnessError::Kubeconfig {
        path: cp.kubeconfig().to_path_buf(),
        message: e.to_string(),
    })?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| HarnessError::Kubeconfig {
            path: cp.kubeconfig().to_path_buf(),
            message: e.to_string(),
        })?;
    let informers = InformerFactory::new(kube::Client::try_from(config.clone())?);
    let stop = CancellationToken::new();
    let ctx = ControllerContext {
        informers: informers.clone(),
        kube_config: config,
        qps: 20.0,
        burst: 30,
        features,
        settings,
        stop: stop.child_token(),
    };
    for spec in specs {
        let started = (spec.init)(&ctx).map_err(|e| HarnessError::NotHealthy {
            reason: e.to_string(),
            log_tail: String::new(),
        })?;
        tokio::spawn(started.run);
    }
    informers.start(stop.child_token());
    informers.wait_for_sync().await;
    Ok(InProcess { informers, stop })
}
