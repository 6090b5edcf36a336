//! What happens when an eviction fires (upstream `deletePodHandler` and
//! `addConditionAndDeletePod`): one "Marking for deletion" event, then up to
//! five attempts of live GET → `DisruptionTarget` status patch (only when it
//! would change something) → DELETE with empty options.

use kcm_runtime::client::LeanApi;
use kcm_runtime::clock::Clock;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kcm_conditions::disruption::{MESSAGE_TAINT_MANAGER, REASON_DELETION_BY_TAINT_MANAGER};
use kcm_conditions::{disruption_target, pod_status_patch, update_pod_condition};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use tokio::time::Instant;
use tracing::Instrument;

use crate::events::EvictionEvents;
use crate::metrics::Metrics;
use crate::timed_queue::WorkArgs;

/// Attempts per eviction (upstream constant `retries`). After the last
/// failure the eviction is dropped; it is only re-evaluated on a later pod
/// or node event, as upstream.
pub const ATTEMPTS: u32 = 5;
/// Pause between attempts (upstream sleeps 10 ms).
pub const RETRY_PAUSE: Duration = Duration::from_millis(10);

/// One failed attempt.
#[derive(Debug, thiserror::Error)]
pub enum EvictError {
    #[error("getting pod {key}: {source}")]
    Get {
        key: String,
        #[source]
        source: kube::Error,
    },
    #[error("adding the DisruptionTarget condition to pod {key}: {source}")]
    Patch {
        key: String,
        #[source]
        source: kube::Error,
    },
    #[error("deleting pod {key}: {source}")]
    Delete {
        key: String,
        #[source]
        source: kube::Error,
    },
}

/// How an eviction ended when it did not fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The DELETE was accepted.
    Deleted,
    /// The pod of that name now has another UID: the pod this eviction was
    /// for is gone, and its namesake is left alone (it is evaluated on its
    /// own). Upstream, which does not track UIDs, would delete it.
    Replaced,
}

/// Performs evictions through the controller's client.
#[derive(Clone)]
pub struct Evictor {
    client: kube::Client,
    events: Arc<dyn EvictionEvents>,
    /// `PodDisruptionConditions`: append `DisruptionTarget` before deleting.
    conditions: bool,
    /// The condition's transition time and the deletion latency (the
    /// runtime's one clock).
    clock: Clock,
    metrics: Metrics,
}

impl Evictor {
    pub fn new(
        client: kube::Client,
        events: Arc<dyn EvictionEvents>,
        conditions: bool,
        clock: Clock,
        metrics: Metrics,
    ) -> Self {
        Evictor {
            client,
            events,
            conditions,
            clock,
            metrics,
        }
    }

    /// Runs one fired eviction that was due at `fire_at`.
    pub async fn evict(&self, args: WorkArgs, fire_at: Instant) -> Result<Outcome, EvictError> {
        let span = tracing::info_span!("evict", pod = %args.key(), node = %args.node);
        self.evict_inner(&args, fire_at).instrument(span).await
    }

    async fn evict_inner(&self, args: &WorkArgs, fire_at: Instant) -> Result<Outcome, EvictError> {
        tracing::info!("deleting pod");
        self.events.marking(&args.namespace, &args.name);
        let mut attempt = 1;
        loop {
            match self.add_condition_and_delete(args).await {
                Ok(Outcome::Deleted) => {
                    self.metrics
                        .deleted(self.clock.instant().saturating_duration_since(fire_at));
                    return Ok(Outcome::Deleted);
                }
                Ok(Outcome::Replaced) => {
                    tracing::info!("pod was replaced by a namesake; not deleting it");
                    return Ok(Outcome::Replaced);
                }
                Err(e) if attempt >= ATTEMPTS => {
                    tracing::error!(attempts = attempt, "eviction failed, giving up: {e}");
                    return Err(e);
                }
                Err(e) => tracing::debug!(attempt, "eviction attempt failed: {e}"),
            }
            attempt += 1;
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    /// One attempt. Any error, NotFound included, is a failed attempt.
    async fn add_condition_and_delete(&self, args: &WorkArgs) -> Result<Outcome, EvictError> {
        let key = || args.key();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &args.namespace);
        let lean: LeanApi<Pod> = LeanApi::namespaced(self.client.clone(), &args.namespace);
        let pod = api
            .get(&args.name)
            .await
            .map_err(|source| EvictError::Get { key: key(), source })?;
        if args.uid.is_some() && pod.metadata.uid != args.uid {
            return Ok(Outcome::Replaced);
        }
        if self.conditions
            && let Some(body) = condition_patch(&pod, self.clock.now())
        {
            lean.patch_status(&args.name, &PatchParams::default(), &Patch::Strategic(body))
                .await
                .map_err(|source| EvictError::Patch { key: key(), source })?;
        }
        lean.delete(&args.name, &DeleteParams::default())
            .await
            .map_err(|source| EvictError::Delete { key: key(), source })?;
        Ok(Outcome::Deleted)
    }
}

/// The status patch appending `DisruptionTarget=True` (reason
/// `DeletionByTaintManager`), or `None` when the pod already carries exactly
/// that condition.
pub fn condition_patch(pod: &Pod, now: Timestamp) -> Option<serde_json::Value> {
    let mut status = pod.status.clone().unwrap_or_default();
    let mut condition =
        disruption_target(REASON_DELETION_BY_TAINT_MANAGER, MESSAGE_TAINT_MANAGER, now);
    // Upstream (1.34, PodObservedGenerationTracking on by default) stamps the
    // pod's generation on the condition.
    condition.observed_generation = pod.metadata.generation.filter(|g| *g != 0);
    if !update_pod_condition(&mut status, condition, now) {
        return None;
    }
    pod_status_patch(pod, &status)
}

#[cfg(test)]
mod tests;
