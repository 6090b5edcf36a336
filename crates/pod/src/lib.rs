//! kcm-pod: the pod as kcm-rs caches it.
//!
//! Layout:
//! - `lib.rs`: [`CachedPod`] and its accessors, one per field some
//!   controller reads (`docs/architecture.md`, "The pod cache");
//! - `types.rs`: the parts ([`Labels`], [`ControllerRef`], [`Toleration`],
//!   [`Condition`], [`ContainerState`], [`JobAnnotations`]);
//! - `decode.rs`: serde decoding straight from the watch's JSON, skipping
//!   everything else without allocating it;
//! - `proto.rs`: the same from protobuf ([`CachedPod::decode_proto`]),
//!   through the same intermediate structs and conversion;
//! - `convert.rs`: from a full `Pod` (tests, tools, fetched pods), and the
//!   references writes and events need;
//! - `meta.rs`: apimachinery's metadata helpers for any object (the
//!   controller ownerReference, `metav1.GetControllerOf`);
//! - `intern.rs`: the shared copies of repeated strings.
//!
//! Data flow: the pod informer decodes each watch event into a
//! `CachedPod` and stores it in an `Arc`; the controllers read it through
//! the accessors. A field that is not cached has no accessor, so reading
//! one is a compile error rather than a silent empty value; a write that
//! needs the whole pod fetches it.

mod convert;
mod decode;
pub mod intern;
pub mod meta;
mod proto;
mod types;

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::PodCondition;

pub use types::{
    Condition, ContainerState, ControllerRef, JobAnnotations, Labels, Terminated, Toleration,
};

/// The finalizer the Job controller tracks pods with; the only finalizer
/// the cache records.
pub const JOB_TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";

/// Annotation holding a Job pod's completion index.
pub const JOB_COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// Failures of this index counted before this pod was created.
pub const JOB_INDEX_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-failure-count";
/// Ignored failures of this index before this pod was created.
pub const JOB_INDEX_IGNORED_FAILURE_COUNT: &str =
    "batch.kubernetes.io/job-index-ignored-failure-count";

/// The condition type whose reason and message the cache keeps.
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";

/// A pod as cached: what the four controllers read of it, nothing else.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CachedPod {
    namespace: Arc<str>,
    name: Box<str>,
    uid: Box<str>,
    resource_version: Box<str>,
    generation: Option<i64>,
    creation_timestamp: Option<Timestamp>,
    deletion_timestamp: Option<Timestamp>,
    deletion_grace_period_seconds: Option<i64>,
    labels: Labels,
    job_annotations: Option<Box<JobAnnotations>>,
    controller: Option<Box<ControllerRef>>,
    tracking_finalizer: bool,
    node_name: Option<Arc<str>>,
    tolerations: Option<Arc<[Toleration]>>,
    sidecars: Box<[Arc<str>]>,
    has_status: bool,
    phase: Option<Arc<str>>,
    evicted_reason: bool,
    observed_generation: Option<i64>,
    conditions: Box<[Condition]>,
    disruption_target: Option<Box<PodCondition>>,
    container_statuses: Box<[ContainerState]>,
    init_container_statuses: Box<[ContainerState]>,
}

impl CachedPod {
    /// `metadata.namespace` ("" when unset).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// `metadata.name` ("" when unset).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `metadata.uid` ("" when unset).
    pub fn uid(&self) -> &str {
        &self.uid
    }

    /// `metadata.resourceVersion` ("" when unset).
    pub fn resource_version(&self) -> &str {
        &self.resource_version
    }

    pub fn generation(&self) -> Option<i64> {
        self.generation
    }

    pub fn creation_timestamp(&self) -> Option<Timestamp> {
        self.creation_timestamp
    }

    pub fn deletion_timestamp(&self) -> Option<Timestamp> {
        self.deletion_timestamp
    }

    /// `metadata.deletionTimestamp` is set.
    pub fn is_deleting(&self) -> bool {
        self.deletion_timestamp.is_some()
    }

    pub fn deletion_grace_period_seconds(&self) -> Option<i64> {
        self.deletion_grace_period_seconds
    }

    pub fn labels(&self) -> &Labels {
        &self.labels
    }

    /// The Job annotations (all unset on other pods).
    pub fn job_annotations(&self) -> &JobAnnotations {
        static NONE: JobAnnotations = JobAnnotations {
            completion_index: None,
            index_failure_count: None,
            index_ignored_failure_count: None,
        };
        self.job_annotations.as_deref().unwrap_or(&NONE)
    }

    /// The controller ownerReference, if any.
    pub fn controller(&self) -> Option<&ControllerRef> {
        self.controller.as_deref()
    }

    /// Holds the Job tracking finalizer.
    pub fn has_tracking_finalizer(&self) -> bool {
        self.tracking_finalizer
    }

    /// `spec.nodeName` as given (`None` when unset).
    pub fn node_name(&self) -> Option<&str> {
        self.node_name.as_deref()
    }

    /// `spec.tolerations` (empty when unset).
    pub fn tolerations(&self) -> &[Toleration] {
        self.tolerations.as_deref().unwrap_or(&[])
    }

    /// Names of the sidecar init containers (container-level
    /// `restartPolicy: Always`), in spec order.
    pub fn sidecar_names(&self) -> &[Arc<str>] {
        &self.sidecars
    }

    /// The pod has a `status` at all.
    pub fn has_status(&self) -> bool {
        self.has_status
    }

    /// `status.phase` ("" when unset).
    pub fn phase(&self) -> &str {
        self.phase.as_deref().unwrap_or("")
    }

    /// `status.reason` is `Evicted` (the kubelet's eviction mark; no other
    /// reason is cached).
    pub fn reason_is_evicted(&self) -> bool {
        self.evicted_reason
    }

    pub fn observed_generation(&self) -> Option<i64> {
        self.observed_generation
    }

    /// Every condition, in status order.
    pub fn conditions(&self) -> &[Condition] {
        &self.conditions
    }

    /// The first condition of `type_`.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| &*c.type_ == type_)
    }

    /// The whole `DisruptionTarget` condition, reason and message included.
    pub fn disruption_target(&self) -> Option<&PodCondition> {
        self.disruption_target.as_deref()
    }

    pub fn container_statuses(&self) -> &[ContainerState] {
        &self.container_statuses
    }

    pub fn init_container_statuses(&self) -> &[ContainerState] {
        &self.init_container_statuses
    }

    /// `namespace/name`, or `name` for an empty namespace (the store key).
    pub fn key(&self) -> String {
        meta::key_of(&self.namespace, &self.name)
    }

    /// This pod with the Job tracking finalizer (what an adoption writes).
    pub fn with_tracking_finalizer(mut self) -> Self {
        self.tracking_finalizer = true;
        self
    }

    /// This pod with `controller` as its controller reference.
    pub fn with_controller(mut self, controller: Option<ControllerRef>) -> Self {
        self.controller = controller.map(Box::new);
        self
    }
}

#[cfg(test)]
mod tests;
