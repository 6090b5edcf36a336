//! The executor's one write port: every API write a sync or an orphan
//! sweep makes (pod create, delete, finalizer removal, adoption, release,
//! Job status), the live Job read of the adoption recheck, and events.
//! [`JobPort`] is what the executor needs; [`ApiPort`] performs it against
//! the API server, every write through [`LeanApi`]. Which failures mean
//! "nothing left to do" is decided once, in [`is_moot`]; every multi-pod
//! write goes through [`fan_out`] (or [`slow_start`] for creations).
//!
//! Read-your-writes stays with the executor: the key a pod write is filed
//! under depends on the caches (see `orphans`), and any port, the model
//! world's included, then gets the same recording.

use std::future::Future;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kcm_pod::CachedPod;
use kcm_pod::meta::name_of;
use kcm_runtime::client::{LeanApi, Written};
use kcm_runtime::events::{EventType, Recorder};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::job_ref;
use crate::pods::JOB_TRACKING_FINALIZER;
use crate::workload::rules::Object;

/// At most this many pod writes of one batch in flight at once.
pub const FAN_OUT: usize = 64;

/// The writes of [`JobPort`], for [`is_moot`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteKind {
    Create,
    Delete,
    RemoveFinalizer,
    Adopt,
    Release,
    Status,
}

/// A write that did not fail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settled<T> {
    /// The server applied it and answered with this.
    Written(T),
    /// Refused in a way that leaves nothing to do (see [`is_moot`]).
    Moot,
}

/// What a pod write of the port comes to.
pub type Settle<T> = Result<Settled<T>, kube::Error>;

/// The one rule for failures that mean there is nothing left to do:
/// * create: the namespace is terminating (upstream ignores it: every
///   later creation fails the same way);
/// * delete, finalizer removal: NotFound, the pod is gone;
/// * adopt, release: NotFound, or Invalid (the pod lost the reference or
///   was recreated under the same name, so the UID in the patch no longer
///   matches);
/// * status: never.
pub fn is_moot(kind: WriteKind, e: &kube::Error) -> bool {
    let kube::Error::Api(s) = e else {
        return false;
    };
    match kind {
        WriteKind::Create => s
            .details
            .as_ref()
            .is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating")),
        WriteKind::Delete | WriteKind::RemoveFinalizer => s.code == 404,
        // Upstream's ClaimObject ignores only a pod gone on adoption (a 422,
        // e.g. another controller's ownerRef, is retried); ReleasePod also
        // ignores 422 (no ownerRef left, or the pod was recreated).
        WriteKind::Adopt => s.code == 404,
        WriteKind::Release => s.code == 404 || s.code == 422,
        WriteKind::Status => false,
    }
}

/// Applies [`is_moot`] to the result of a `kind` write.
pub fn settle<T>(kind: WriteKind, r: Result<T, kube::Error>) -> Settle<T> {
    match r {
        Ok(t) => Ok(Settled::Written(t)),
        Err(e) if is_moot(kind, &e) => Ok(Settled::Moot),
        Err(e) => Err(e),
    }
}

/// Runs `write` over `items`, at most [`FAN_OUT`] at once; the results
/// come in completion order. Items are taken by value (Arcs, or clones):
/// a closure over borrowed items makes the sync future's `Send` proof fail
/// (rustc's "FnOnce is not general enough").
pub async fn fan_out<T, R, Fut>(
    items: impl IntoIterator<Item = T>,
    write: impl FnMut(T) -> Fut,
) -> Vec<R>
where
    Fut: Future<Output = R>,
{
    futures::stream::iter(items)
        .map(write)
        .buffer_unordered(FAN_OUT)
        .collect()
        .await
}

/// Upstream's slow start: [`fan_out`] over batches of 1, 2, 4, ...;
/// `after_batch` sees each batch's results before the next one starts and
/// says whether to go on. Returns how many items were attempted.
pub async fn slow_start<T: Clone, R, Fut>(
    items: &[T],
    mut write: impl FnMut(T) -> Fut,
    mut after_batch: impl FnMut(Vec<R>) -> bool,
) -> usize
where
    Fut: Future<Output = R>,
{
    let mut next = 0usize;
    let mut batch = 1usize;
    while next < items.len() {
        let end = (next + batch).min(items.len());
        let results = fan_out(items[next..end].to_vec(), &mut write).await;
        next = end;
        if !after_batch(results) {
            break;
        }
        batch = (batch * 2).min(items.len() - next).max(1);
    }
    next
}

/// Every write the Job controller's executor makes, and its events. Not
/// `'static`: a test world may lend itself for one sync.
pub trait JobPort: Send + Sync {
    /// Creates `pod` (built from the Job's template) in the Job's namespace.
    fn create_pod(&self, job: &Job, pod: &Pod) -> impl Future<Output = Settle<Written>> + Send;
    /// Deletes the pod, without preconditions.
    fn delete_pod(&self, pod: &CachedPod) -> impl Future<Output = Settle<()>> + Send;
    /// Removes the Job tracking finalizer; answers the new resourceVersion.
    fn remove_finalizer(&self, pod: &CachedPod) -> impl Future<Output = Settle<Written>> + Send;
    /// Makes the Job the pod's controller and adds the tracking finalizer.
    fn adopt_pod(&self, job: &Job, pod: &CachedPod)
    -> impl Future<Output = Settle<Written>> + Send;
    /// Drops the Job's ownerReference and the tracking finalizer.
    fn release_pod(
        &self,
        job: &Job,
        pod: &CachedPod,
    ) -> impl Future<Output = Settle<Written>> + Send;
    /// Replaces the Job's status (with `job`'s resourceVersion as the
    /// precondition).
    fn write_status(&self, job: &Job) -> impl Future<Output = Result<Written, kube::Error>> + Send;
    /// The Job as the API server has it now (None: not found).
    fn read_job(&self, job: &Job) -> impl Future<Output = Result<Option<Job>, kube::Error>> + Send;
    /// Records an event about the Job.
    fn event(&self, job: &Job, type_: EventType, reason: &str, message: String);

    // WorkloadWithJob's writes, of either minor's types (only with the
    // gate on; a port without them answers 501).
    /// Creates a Workload or PodGroup in its namespace.
    fn create<K: Object>(&self, obj: &K) -> impl Future<Output = Result<K, kube::Error>> + Send {
        let _ = obj;
        async { Err(unsupported(&K::plural(&()))) }
    }
    /// Strategic-merge patches a Workload or PodGroup.
    fn patch<K: Object>(
        &self,
        ns: &str,
        name: &str,
        patch: serde_json::Value,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send {
        let _ = (ns, name, patch);
        async { Err(unsupported(&K::plural(&()))) }
    }
}

/// An error as client-go prints it in events: an API error is just the
/// status message (`pods "x" is forbidden: ...`), not kube's debug dump.
pub fn error_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if !s.message.is_empty() => s.message.clone(),
        other => other.to_string(),
    }
}

/// The error of a write a port does not implement.
fn unsupported(resource: &str) -> kube::Error {
    let status = kube::core::Status::failure(
        &format!("this port does not write {resource}"),
        "NotImplemented",
    )
    .with_code(501);
    kube::Error::Api(Box::new(status))
}

fn ns_of(meta: &ObjectMeta) -> &str {
    meta.namespace.as_deref().unwrap_or("")
}

/// The strategic-merge patch that removes only the tracking finalizer.
pub fn remove_finalizer_patch() -> serde_json::Value {
    json!({ "metadata": { "$deleteFromPrimitiveList/finalizers": [JOB_TRACKING_FINALIZER] } })
}

/// Releases `pod` from the Job `job_uid`; the pod UID guards against a
/// recreated pod of the same name.
fn release_patch(job_uid: &str, pod: &CachedPod) -> serde_json::Value {
    json!({
        "metadata": {
            "uid": uid_of(pod),
            "ownerReferences": [{ "$patch": "delete", "uid": job_uid }],
            "$deleteFromPrimitiveList/finalizers": [JOB_TRACKING_FINALIZER],
        }
    })
}

/// The pod's UID as a patch precondition (`null`, i.e. none, when unset).
fn uid_of(pod: &CachedPod) -> Option<&str> {
    Some(pod.uid()).filter(|u| !u.is_empty())
}

fn adopt_patch(job: &Job, job_uid: &str, pod: &CachedPod) -> serde_json::Value {
    json!({
        "metadata": {
            "uid": uid_of(pod),
            "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": "Job",
                "name": job.metadata.name, "uid": job_uid,
                "controller": true, "blockOwnerDeletion": true
            }],
            "finalizers": [JOB_TRACKING_FINALIZER],
        }
    })
}

/// [`JobPort`] over the API server.
#[derive(Clone)]
pub struct ApiPort {
    client: kube::Client,
    recorder: Recorder,
}

impl ApiPort {
    pub fn new(client: kube::Client, recorder: Recorder) -> Self {
        ApiPort { client, recorder }
    }

    fn pods(&self, ns: &str) -> LeanApi<Pod> {
        LeanApi::namespaced(self.client.clone(), ns)
    }

    async fn strategic(
        &self,
        pod: &CachedPod,
        patch: serde_json::Value,
    ) -> Result<Written, kube::Error> {
        self.pods(pod.namespace())
            .patch(
                pod.name(),
                &PatchParams::default(),
                &Patch::Strategic(patch),
            )
            .await
    }
}

impl JobPort for ApiPort {
    async fn create_pod(&self, job: &Job, pod: &Pod) -> Settle<Written> {
        let r = self
            .pods(ns_of(&job.metadata))
            .create(&PostParams::default(), pod)
            .await;
        settle(WriteKind::Create, r)
    }

    async fn delete_pod(&self, pod: &CachedPod) -> Settle<()> {
        let r = self
            .pods(pod.namespace())
            .delete(pod.name(), &DeleteParams::default())
            .await;
        settle(WriteKind::Delete, r)
    }

    async fn remove_finalizer(&self, pod: &CachedPod) -> Settle<Written> {
        let r = self.strategic(pod, remove_finalizer_patch()).await;
        settle(WriteKind::RemoveFinalizer, r)
    }

    async fn adopt_pod(&self, job: &Job, pod: &CachedPod) -> Settle<Written> {
        let uid = job.metadata.uid.clone().unwrap_or_default();
        let r = self.strategic(pod, adopt_patch(job, &uid, pod)).await;
        settle(WriteKind::Adopt, r)
    }

    async fn release_pod(&self, job: &Job, pod: &CachedPod) -> Settle<Written> {
        let uid = job.metadata.uid.as_deref().unwrap_or("");
        let r = self.strategic(pod, release_patch(uid, pod)).await;
        settle(WriteKind::Release, r)
    }

    async fn write_status(&self, job: &Job) -> Result<Written, kube::Error> {
        LeanApi::<Job>::namespaced(self.client.clone(), ns_of(&job.metadata))
            .replace_status(name_of(&job.metadata), &PostParams::default(), job)
            .await
    }

    async fn read_job(&self, job: &Job) -> Result<Option<Job>, kube::Error> {
        // A read, not a write: the full object is what the recheck needs.
        let jobs: Api<Job> = Api::namespaced(self.client.clone(), ns_of(&job.metadata));
        jobs.get_opt(name_of(&job.metadata)).await
    }

    fn event(&self, job: &Job, type_: EventType, reason: &str, message: String) {
        self.recorder.event(&job_ref(job), type_, reason, message);
    }

    async fn create<K: Object>(&self, obj: &K) -> Result<K, kube::Error> {
        Api::<K>::namespaced(self.client.clone(), ns_of(obj.meta()))
            .create(&PostParams::default(), obj)
            .await
    }

    async fn patch<K: Object>(
        &self,
        ns: &str,
        name: &str,
        patch: serde_json::Value,
    ) -> Result<(), kube::Error> {
        let api = Api::<K>::namespaced(self.client.clone(), ns);
        let p = Patch::Strategic(patch);
        api.patch(name, &PatchParams::default(), &p).await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api_error(code: u16, cause: Option<&str>) -> kube::Error {
        let mut s = json!({ "status": "Failure", "code": code, "message": "m", "reason": "r" });
        if let Some(c) = cause {
            s["details"] = json!({ "causes": [{ "reason": c }] });
        }
        kube::Error::Api(Box::new(
            serde_json::from_value::<Status>(s).expect("status"),
        ))
    }

    #[test]
    fn what_counts_as_nothing_left_to_do() {
        use WriteKind::*;
        let not_found = api_error(404, None);
        let invalid = api_error(422, None);
        let terminating = api_error(403, Some("NamespaceTerminating"));
        for kind in [Delete, RemoveFinalizer, Adopt, Release] {
            assert!(is_moot(kind, &not_found), "{kind:?}");
        }
        assert!(!is_moot(Create, &not_found));
        assert!(!is_moot(Status, &not_found));
        assert!(!is_moot(Adopt, &invalid) && is_moot(Release, &invalid));
        assert!(!is_moot(Delete, &invalid) && !is_moot(RemoveFinalizer, &invalid));
        assert!(is_moot(Create, &terminating));
        assert!(!is_moot(Delete, &terminating));
        assert!(!is_moot(Create, &api_error(500, None)));
    }

    #[tokio::test]
    async fn slow_start_doubles_and_stops_when_told() {
        let items: Vec<u32> = (0..10).collect();
        let mut batches = Vec::new();
        let attempted = slow_start(
            &items,
            |i| async move { i },
            |mut r: Vec<u32>| {
                r.sort_unstable();
                batches.push(r);
                true
            },
        )
        .await;
        assert_eq!(attempted, 10);
        let sizes: Vec<usize> = batches.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![1, 2, 4, 3]);
        let mut n = 0;
        let attempted = slow_start(
            &items,
            |i| async move { i },
            |_: Vec<u32>| {
                n += 1;
                n < 2
            },
        )
        .await;
        assert_eq!(attempted, 3);
    }
}
