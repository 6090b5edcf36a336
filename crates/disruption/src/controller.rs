//! The executor: informer handlers that turn changes into keys, the three
//! workers, and the API calls of a PDB sync and of a stale-condition reset.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kcm_pod::CachedPod;
use kcm_runtime::events::{EventType, Recorder};
use kcm_runtime::host::Host;
use kcm_runtime::informer::{BY_NAMESPACE, Change, Informer, key_of};
use kcm_runtime::workqueue::WorkQueue;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::events::{self as ev};
use crate::expected::{
    ControllerScale, ExpectedError, Finder, Scales, expected_pod_count, needs_scale,
};
use crate::owners::{OwnerCache, builtin_scale};
use crate::scale::ScaleClient;
use crate::selector::{Selector, SelectorError};
use crate::stale::{self, StaleAction};
use crate::status::{self, Counts};
use kcm_runtime::clock::Clock;

/// Why a PDB sync failed.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Selector(#[from] SelectorError),
    #[error(transparent)]
    Expected(#[from] ExpectedError),
    #[error("{}", api_message(.0))]
    Api(#[from] kube::Error),
}

fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

impl SyncError {
    /// A 409 from the status write: retried with backoff, no fail-safe.
    pub fn is_conflict(&self) -> bool {
        matches!(self, SyncError::Api(kube::Error::Api(s)) if s.code == 409)
    }
}

/// The owners' informers.
pub struct Owners {
    pub rcs: Arc<Informer<ReplicationController>>,
    pub rss: Arc<Informer<ReplicaSet>>,
    pub deployments: Arc<Informer<Deployment>>,
    pub statefulsets: Arc<Informer<StatefulSet>>,
}

impl OwnerCache for Owners {
    fn replication_controller(&self, ns: &str, name: &str) -> Option<Arc<ReplicationController>> {
        self.rcs.store().get(&key_of(ns, name))
    }
    fn replica_set(&self, ns: &str, name: &str) -> Option<Arc<ReplicaSet>> {
        self.rss.store().get(&key_of(ns, name))
    }
    fn deployment(&self, ns: &str, name: &str) -> Option<Arc<Deployment>> {
        self.deployments.store().get(&key_of(ns, name))
    }
    fn stateful_set(&self, ns: &str, name: &str) -> Option<Arc<StatefulSet>> {
        self.statefulsets.store().get(&key_of(ns, name))
    }
}

/// Built-in finders from the caches, then the generic scale subresource.
struct LiveFinder<'a> {
    owners: &'a Owners,
    scale: &'a ScaleClient,
}

impl Finder for LiveFinder<'_> {
    async fn find(
        &self,
        owner: &OwnerReference,
        namespace: &str,
    ) -> Result<Option<ControllerScale>, ExpectedError> {
        if let Some(s) = builtin_scale(owner, namespace, self.owners)? {
            return Ok(Some(s));
        }
        self.scale.find(owner, namespace).await
    }
}

/// Everything the workers share.
pub struct Controller {
    pub client: kube::Client,
    pub pods: Arc<Informer<CachedPod>>,
    pub pdbs: Arc<Informer<PodDisruptionBudget>>,
    pub owners: Owners,
    pub scale: ScaleClient,
    pub recorder: Recorder,
    /// `disruption`: PDB keys.
    pub queue: WorkQueue<String>,
    /// `disruption_recheck`: PDB keys whose `disruptedPods` window ends.
    pub recheck: WorkQueue<String>,
    /// `stale_pod_disruption`: pod keys.
    pub stale: WorkQueue<String>,
    /// None when `PodDisruptionConditions` is off: no stale-condition work.
    pub stale_timeout: Option<Duration>,
    pub clock: Clock,
    /// PDB workers (`--concurrent-disruption-syncs`, KCM 1.37; 1 before).
    pub pdb_workers: usize,
}

impl Controller {
    /// PDBs in the pod's namespace selecting it, by name (upstream's order
    /// is the cache's, i.e. arbitrary); unparsable selectors are skipped.
    fn pdbs_for_pod(&self, pod: &CachedPod) -> Vec<Arc<PodDisruptionBudget>> {
        let mut found: Vec<_> = self
            .pdbs
            .store()
            .by_index(BY_NAMESPACE, pod.namespace())
            .into_iter()
            .filter(|pdb| {
                Selector::parse(pdb.spec.as_ref().and_then(|s| s.selector.as_ref()))
                    .is_ok_and(|s| s.matches(pod.labels()))
            })
            .collect();
        found.sort_by_key(|p| p.name_any());
        found
    }

    /// `getPdbForPod` + enqueue: the first match, with a Warning on the pod
    /// when several match.
    fn enqueue_pdb_for_pod(&self, pod: &CachedPod) {
        let pdbs = self.pdbs_for_pod(pod);
        let Some(first) = pdbs.first() else {
            return;
        };
        if pdbs.len() > 1 {
            let msg = ev::multiple_pdbs_message(pod.namespace(), pod.name(), &first.name_any());
            tracing::info!(pod = %pod.key(), "{msg}");
            self.recorder.event(
                &pod.object_reference(),
                EventType::Warning,
                ev::MULTIPLE_PDBS,
                msg,
            );
        }
        self.queue
            .add(kcm_runtime::informer::Informable::key(first.as_ref()));
    }

    fn check_stale(&self, pod: &CachedPod) {
        let Some(timeout) = self.stale_timeout else {
            return;
        };
        if let Some(wait) = stale::stale_wait(pod, self.clock.now(), timeout) {
            self.stale.add_after(pod.key(), wait);
        }
    }

    /// Registers the PDB and pod handlers.
    pub fn register(self: &Arc<Self>) {
        let me = Arc::clone(self);
        self.pdbs
            .add_handler(Arc::new(move |c: &Change<PodDisruptionBudget>| {
                me.queue.add(c.key());
            }));
        let me = Arc::clone(self);
        self.pods
            .add_handler(Arc::new(move |c: &Change<CachedPod>| match c {
                Change::Added(p) | Change::Updated { new: p, .. } => {
                    me.enqueue_pdb_for_pod(p);
                    me.check_stale(p);
                }
                Change::Deleted(p) => me.enqueue_pdb_for_pod(p),
            }));
    }

    /// Selected pods, sorted by name.
    fn pods_for(&self, pdb: &PodDisruptionBudget) -> Result<Vec<Arc<CachedPod>>, SelectorError> {
        let sel = Selector::parse(pdb.spec.as_ref().and_then(|s| s.selector.as_ref()))?;
        let ns = pdb.namespace().unwrap_or_default();
        let mut pods: Vec<_> = self
            .pods
            .store()
            .by_index(BY_NAMESPACE, &ns)
            .into_iter()
            .filter(|p| sel.matches(p.labels()))
            .collect();
        pods.sort_by(|a, b| a.name().cmp(b.name()));
        Ok(pods)
    }

    fn event(&self, pdb: &PodDisruptionBudget, t: EventType, reason: &str, msg: String) {
        self.recorder.event(&pdb.object_ref(&()), t, reason, msg);
    }

    /// PUT of the status subresource with the cached resourceVersion.
    async fn write(&self, pdb: &PodDisruptionBudget) -> Result<(), kube::Error> {
        let api: Api<PodDisruptionBudget> =
            Api::namespaced(self.client.clone(), &pdb.namespace().unwrap_or_default());
        api.replace_status(&pdb.name_any(), &PostParams::default(), pdb)
            .await
            .map(|_| ())
    }

    /// `trySync`.
    async fn try_sync(&self, pdb: &PodDisruptionBudget, key: &str) -> Result<(), SyncError> {
        let pods = match self.pods_for(pdb) {
            Ok(p) => p,
            Err(e) => {
                self.event(
                    pdb,
                    EventType::Warning,
                    ev::NO_PODS,
                    format!("Failed to get pods: {e}"),
                );
                return Err(e.into());
            }
        };
        if pods.is_empty() {
            self.event(
                pdb,
                EventType::Normal,
                ev::NO_PODS,
                ev::MSG_NO_MATCHING_PODS.into(),
            );
        }
        let refs: Vec<&CachedPod> = pods.iter().map(AsRef::as_ref).collect();
        let spec = pdb.spec.clone().unwrap_or_default();
        let finder = LiveFinder {
            owners: &self.owners,
            scale: &self.scale,
        };
        // I/O first (owner caches, scale GETs), then the arithmetic.
        let scales = if needs_scale(&spec) {
            Scales::fetch(&refs, &finder).await
        } else {
            Scales::default()
        };
        let expected = match expected_pod_count(&spec, &refs, &scales) {
            Ok(e) => e,
            Err(e) => {
                self.event(
                    pdb,
                    EventType::Warning,
                    ev::CALCULATE_EXPECTED_FAILED,
                    format!("Failed to calculate the number of expected pods: {e}"),
                );
                return Err(e.into());
            }
        };
        if !expected.unmanaged.is_empty() {
            tracing::debug!(pods = ?expected.unmanaged, "found unmanaged pods selected by this PDB");
            self.event(
                pdb,
                EventType::Warning,
                ev::UNMANAGED_PODS,
                ev::unmanaged_pods_message(spec.selector.as_ref()),
            );
        }
        let now = self.clock.now();
        let disrupted = status::build_disrupted_pod_map(&refs, pdb, now);
        for name in &disrupted.not_deleted {
            if let Some(pod) = pods.iter().find(|p| p.name() == name) {
                tracing::info!(pod = %name, "pod was expected to be deleted but it wasn't, updating PDB");
                self.recorder.event(
                    &pod.object_reference(),
                    EventType::Warning,
                    ev::NOT_DELETED,
                    ev::not_deleted_message(&pdb.namespace().unwrap_or_default()),
                );
            }
        }
        let counts = Counts {
            current_healthy: status::count_healthy(&refs, &disrupted.pods, now),
            desired_healthy: expected.desired_healthy,
            expected_count: expected.expected_count,
        };
        if let Some(next) = status::new_status(pdb, counts, disrupted.pods, now) {
            self.write(&next).await?;
            tracing::debug!(?counts, "PDB status written");
        }
        if let Some(at) = disrupted.recheck_at {
            let delay = Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO);
            self.recheck.add_after(key.to_string(), delay);
        }
        Ok(())
    }

    /// `sync`: conflicts are returned for a retry; other errors run the
    /// fail-safe, whose own result decides the retry.
    pub async fn sync(&self, key: &str) -> Result<(), SyncError> {
        let Some(pdb) = self.pdbs.store().get(key) else {
            return Ok(());
        };
        match self.try_sync(&pdb, key).await {
            Ok(()) => Ok(()),
            Err(e) if e.is_conflict() => Err(e),
            Err(e) => {
                tracing::error!(error = %e, "failed to sync PDB");
                let next = status::fail_safe(&pdb, &e.to_string(), self.clock.now());
                self.write(&next).await.map_err(SyncError::from)
            }
        }
    }

    /// `syncStalePodDisruption`.
    pub async fn sync_stale(&self, key: &str) -> Result<(), kube::Error> {
        let (Some(pod), Some(timeout)) = (self.pods.store().get(key), self.stale_timeout) else {
            return Ok(());
        };
        match stale::decide(&pod, self.clock.now(), timeout) {
            StaleAction::Skip => Ok(()),
            StaleAction::RequeueAfter(d) => {
                self.stale.add_after(key.to_string(), d);
                Ok(())
            }
            StaleAction::Reset => {
                let api: Api<Pod> = Api::namespaced(self.client.clone(), pod.namespace());
                let patch = stale::reset_patch(&pod, self.clock.now());
                api.patch_status(
                    pod.name(),
                    &PatchParams::default(),
                    &Patch::Strategic(patch),
                )
                .await?;
                tracing::info!("Reset stale DisruptionTarget condition to False");
                Ok(())
            }
        }
    }

    /// Waits for the six caches, then runs `pdb_workers` PDB workers and one
    /// recheck and one stale-condition worker on the host
    /// until `stop`, when the queues shut down and in-flight syncs finish.
    /// The recheck worker moves due keys to the main queue through its rate
    /// limiter, as upstream.
    pub async fn run(self: Arc<Self>, host: Host, stop: CancellationToken) {
        tracing::info!(controller = crate::NAME, "starting");
        host.track(&self.pods);
        host.track(&self.pdbs);
        host.track(&self.owners.rcs);
        host.track(&self.owners.rss);
        host.track(&self.owners.deployments);
        host.track(&self.owners.statefulsets);
        if host.wait_for_sync(&stop).await {
            let me = Arc::clone(&self);
            let pdbs = host
                .workers(&self.queue, "PodDisruptionBudget")
                .count(self.pdb_workers)
                .span(|key| tracing::info_span!("pdb_sync", pdb = %key))
                .run(
                    move |key: String| {
                        let me = Arc::clone(&me);
                        async move { me.sync(&key).await }
                    },
                    stop.clone(),
                );
            let me = Arc::clone(&self);
            let recheck = host
                .workers(&self.recheck, "PodDisruptionBudget recheck")
                .run(
                    move |key: String| {
                        me.queue.add_rate_limited(key);
                        async { Ok::<(), std::convert::Infallible>(()) }
                    },
                    stop.clone(),
                );
            let me = Arc::clone(&self);
            let stale = host
                .workers(&self.stale, "stale DisruptionTarget")
                .span(|key| tracing::info_span!("stale_pod_disruption", pod = %key))
                .run(
                    move |key: String| {
                        let me = Arc::clone(&me);
                        async move { me.sync_stale(&key).await }
                    },
                    stop.clone(),
                );
            futures::join!(pdbs, recheck, stale);
        }
        self.shutdown();
        tracing::info!(controller = crate::NAME, "shut down");
    }

    fn shutdown(&self) {
        self.queue.shutdown();
        self.recheck.shutdown();
        self.stale.shutdown();
    }
}
