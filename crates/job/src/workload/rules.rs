//! What a minor's `WorkloadWithJob` decides, as one trait over its own
//! types: the executor (`controller::scheduling`) is written once and asks
//! the minor's [`Rules`] at each step. 1.37's are `workload::V137` over
//! `scheduling.k8s.io/v1beta1`, 1.36's `workload::v136::V136` over the
//! minimal `v1alpha2` types; where their rules really differ (which Jobs,
//! which lookups count, delegation, resizing, retries, events) each says so
//! here.

use std::fmt::Debug;

use k8s_openapi::api::batch::v1::Job;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// A Workload or PodGroup type a port can create and patch.
pub trait Object:
    kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<T> Object for T where
    T: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// Where a Job's PodGroup comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Its own Workload (created for it) and a PodGroup of it.
    Root,
    /// A PodGroup from the named template of its controller's Workload.
    Delegated(String),
}

/// What the rules say about one object, from the index's matches.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup<T> {
    /// The object to use.
    Use(T),
    /// Create this one (then use it).
    Create(T),
    /// Default scheduling for this sync, and why (logged at error level
    /// when `error`, else at debug).
    Default { why: String, error: bool },
}

impl<T> Lookup<T> {
    pub fn quietly(why: impl Into<String>) -> Self {
        Lookup::Default {
            why: why.into(),
            error: false,
        }
    }

    pub fn loudly(why: impl Into<String>) -> Self {
        Lookup::Default {
            why: why.into(),
            error: true,
        }
    }
}

/// Why the scheduling objects could not be ensured (the sync is retried).
#[derive(Debug, thiserror::Error)]
pub enum EnsureError {
    #[error("{0}")]
    Api(#[from] kube::Error),
    #[error(
        "workload {ns}/{workload} for job {ns}/{job} has {templates} PodGroupTemplates, want exactly 1"
    )]
    Templates {
        ns: String,
        workload: String,
        job: String,
        templates: usize,
    },
    #[error("podGroupTemplate {template:?} not found in workload {workload:?}")]
    NoTemplate { template: String, workload: String },
}

impl EnsureError {
    /// The API server already has an object of that name.
    pub fn already_exists(&self) -> bool {
        matches!(self, EnsureError::Api(kube::Error::Api(s)) if s.reason == "AlreadyExists")
    }
}

/// A minor's `WorkloadWithJob` rules.
pub trait Rules: Send + Sync + 'static {
    type Workload: Object;
    type PodGroup: Object;

    /// How often a get-or-create is tried when the answer is AlreadyExists
    /// (1.36 retries as upstream's `retry.DefaultRetry`; 1.37 does not).
    const ATTEMPTS: usize;
    /// Whether a created PodGroup, and a failed Workload create, get an
    /// event (1.37's do; 1.36 records only the created Workload).
    const FULL_EVENTS: bool;

    /// Whether the Job gets scheduling objects, and from where.
    fn source(job: &Job, gate: bool) -> Option<Source>;
    /// Index value of a Workload: `ns/<job>` of the Job it is for.
    fn workload_job_key(w: &Self::Workload) -> Option<String>;
    /// Index value of a PodGroup: `ns/<workload>` it belongs to.
    fn pod_group_workload_key(pg: &Self::PodGroup) -> Option<String>;
    /// Whether delegated Jobs look for their parent's Workload in the
    /// namespace (the informer needs a namespace index then).
    const DELEGATION: bool;

    /// The root Job's Workload, from the Workloads the index files under
    /// the Job.
    fn workload(
        job: &Job,
        found: &[Self::Workload],
        new_job: bool,
    ) -> Result<Lookup<Self::Workload>, EnsureError>;
    /// A delegated Job's parent Workload among the namespace's (`Use` or
    /// `Default`).
    fn parent(job: &Job, template: &str, in_namespace: &[Self::Workload])
    -> Lookup<Self::Workload>;
    /// The Job's PodGroup, from the PodGroups the index files under its
    /// Workload.
    fn pod_group(
        job: &Job,
        source: &Source,
        workload: &Self::Workload,
        found: &[Self::PodGroup],
        new_job: bool,
    ) -> Result<Lookup<Self::PodGroup>, EnsureError>;
    /// Strategic-merge patches keeping the gang size in step (Workload,
    /// then PodGroup); none where the minor never resizes.
    fn resize(
        job: &Job,
        source: &Source,
        workload: &Self::Workload,
        pod_group: Option<&Self::PodGroup>,
    ) -> (Option<Value>, Option<Value>);
}
