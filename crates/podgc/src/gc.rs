//! The executor: every period, take the caches, decide, and carry out the
//! plan in upstream's order; the orphan pass goes through the quarantine
//! queue and a live node GET before anything is deleted.

use kcm_runtime::client::LeanApi;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kcm_pod::CachedPod;
use kcm_runtime::host::{Host, Progress};
use kcm_runtime::informer::Informer;
use kcm_runtime::workqueue::WorkQueue;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};

use crate::decide::{self, Collect, Config};
use crate::metrics::Metrics;

#[derive(Debug, thiserror::Error)]
pub enum GcError {
    #[error("patching status of {namespace}/{name}: {source}")]
    Patch {
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error("deleting {namespace}/{name}: {source}")]
    Delete {
        namespace: String,
        name: String,
        source: kube::Error,
    },
}

pub struct PodGc {
    pub client: kube::Client,
    pub pods: Arc<Informer<CachedPod>>,
    pub nodes: Arc<Informer<Node>>,
    pub queue: WorkQueue<String>,
    pub config: Config,
    pub quarantine: Duration,
    /// The runtime's one clock (the context's).
    pub clock: kcm_runtime::clock::Clock,
    pub metrics: Metrics,
}

/// Puts node names under quarantine: a name already waiting keeps its
/// earlier time, so the quarantine counts from the first sighting.
pub fn quarantine(queue: &WorkQueue<String>, missing: &BTreeSet<String>, period: Duration) {
    for node in missing {
        queue.add_after(node.clone(), period);
    }
}

/// Takes every name whose quarantine is over (upstream drains the delaying
/// queue while it has ready items). None when the queue shut down.
pub async fn take_due(queue: &WorkQueue<String>) -> Option<Vec<String>> {
    let mut due = Vec::new();
    while !queue.is_empty() {
        let name = queue.get().await?;
        queue.done(&name);
        due.push(name);
    }
    Some(due)
}

impl PodGc {
    /// Status patch (if any) then force delete; a failed patch means no delete.
    async fn mark_failed_and_delete(&self, c: &Collect) -> Result<(), GcError> {
        tracing::info!(pod = %kcm_pod::meta::key_of(&c.namespace, &c.name), reason = c.reason.label(), "PodGC is force deleting Pod");
        let api: LeanApi<Pod> = LeanApi::namespaced(self.client.clone(), &c.namespace);
        if let Some(body) = &c.status_patch {
            api.patch_status(&c.name, &PatchParams::default(), &Patch::Strategic(body))
                .await
                .map_err(|source| GcError::Patch {
                    namespace: c.namespace.clone(),
                    name: c.name.clone(),
                    source,
                })?;
        }
        api.delete(&c.name, &DeleteParams::default().grace_period(0))
            .await
            .map_err(|source| GcError::Delete {
                namespace: c.namespace.clone(),
                name: c.name.clone(),
                source,
            })?;
        Ok(())
    }

    async fn collect_one(&self, c: &Collect, progress: &Progress) {
        let result = self.mark_failed_and_delete(c).await;
        progress.tick();
        let labels = [c.namespace.as_str(), c.reason.label()];
        if let Err(e) = result {
            tracing::warn!("{e}");
            self.metrics.errors.with_label_values(&labels).inc();
        }
        self.metrics.deleting.with_label_values(&labels).inc();
    }

    async fn collect_concurrently(&self, list: &[Collect], progress: &Progress) {
        futures::stream::iter(list)
            .for_each_concurrent(None, |c| self.collect_one(c, progress))
            .await;
    }

    /// Node names whose quarantine is over and that a live GET confirms
    /// gone. None when the queue shut down.
    async fn discover_deleted_nodes(
        &self,
        existing: &BTreeSet<String>,
        progress: &Progress,
    ) -> Option<BTreeSet<String>> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let mut deleted = BTreeSet::new();
        for name in take_due(&self.queue).await? {
            if existing.contains(&name) {
                continue;
            }
            let found = nodes.get_opt(&name).await;
            progress.tick();
            match found {
                Ok(None) => {
                    deleted.insert(name);
                }
                Ok(Some(_)) => {}
                Err(e) => tracing::warn!(node = %name, "checking whether the node exists: {e}"),
            }
        }
        Some(deleted)
    }

    /// One GC run over a consistent snapshot of the caches; `progress`
    /// ticks after each API call.
    pub async fn gc(&self, progress: &Progress) {
        let pods = self.pods.store().list();
        let nodes = self.nodes.store().list();
        let now = self.clock.now();
        let plan = decide::decide(&pods, &nodes, now, self.config);
        if !plan.terminated.is_empty() {
            tracing::info!(count = plan.terminated.len(), "Garbage collecting pods");
        }
        self.collect_concurrently(&plan.terminated, progress).await;
        self.collect_concurrently(&plan.out_of_service, progress)
            .await;
        quarantine(&self.queue, &plan.missing_nodes, self.quarantine);
        let existing: BTreeSet<String> = nodes
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        let Some(deleted) = self.discover_deleted_nodes(&existing, progress).await else {
            return;
        };
        for c in decide::decide_orphans(&pods, &deleted, now, self.config) {
            self.collect_one(&c, progress).await;
        }
        for c in &plan.unscheduled {
            self.collect_one(c, progress).await;
        }
    }

    /// Waits for both caches, then runs `gc` on the host at once and
    /// `period` after each run finishes (upstream's sliding wait.Until),
    /// until `stop`.
    pub async fn run(
        self,
        host: Host,
        period: Duration,
        stop: tokio_util::sync::CancellationToken,
    ) {
        host.track(&self.pods);
        host.track(&self.nodes);
        if !host.wait_for_sync(&stop).await {
            return;
        }
        let span = || tracing::info_span!("podgc");
        let this = &self;
        let pass = |p: Progress| async move { this.gc(&p).await };
        host.run_periodic("pod GC", period, span, pass, &stop).await;
        self.queue.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use kcm_runtime::workqueue::RetryRateLimit;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn quarantine_counts_from_the_first_sighting() {
        let q = WorkQueue::new(
            "orphaned_pods_nodes_test",
            RetryRateLimit::default(),
            &Default::default(),
        );
        let gone = BTreeSet::from(["n1".to_string()]);
        let period = Duration::from_secs(40);
        quarantine(&q, &gone, period);
        assert_eq!(take_due(&q).await, Some(vec![]));
        tokio::time::advance(Duration::from_secs(20)).await;
        // Seen again 20 s later: still due at 40 s after the first sighting.
        quarantine(&q, &gone, period);
        assert_eq!(take_due(&q).await, Some(vec![]));
        tokio::time::advance(Duration::from_secs(19)).await;
        assert_eq!(take_due(&q).await, Some(vec![]));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(take_due(&q).await, Some(vec!["n1".to_string()]));
        assert_eq!(take_due(&q).await, Some(vec![]), "taken once");
        q.shutdown();
        assert_eq!(take_due(&q).await, Some(vec![]));
    }
}
