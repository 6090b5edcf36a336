//! A [`CachedPod`] from a full `Pod` (tests, tools, pods a controller
//! fetched), and the API references writes and events are built from.

use k8s_openapi::api::core::v1::Toleration as ApiToleration;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use k8s_openapi::api::core::v1::ContainerStatus;

use crate::intern::{intern, intern_tolerations};
use crate::{
    CachedPod, Condition, ContainerState, ControllerRef, DISRUPTION_TARGET, JOB_COMPLETION_INDEX,
    JOB_INDEX_FAILURE_COUNT, JOB_INDEX_IGNORED_FAILURE_COUNT, JOB_TRACKING_FINALIZER,
    JobAnnotations, Labels, Terminated, Toleration,
};

impl From<&Pod> for CachedPod {
    /// Field by field, keeping what the watch decoder keeps (the tests hold
    /// the two equal); times keep their sub-second part, which the API's
    /// JSON would drop.
    fn from(pod: &Pod) -> CachedPod {
        let meta = &pod.metadata;
        let spec = pod.spec.as_ref();
        let status = pod.status.as_ref();
        let text = |s: &Option<String>| s.as_deref().unwrap_or("").into();
        let annotation = |key: &str| -> Option<Box<str>> {
            meta.annotations
                .as_ref()?
                .get(key)
                .map(|v| v.as_str().into())
        };
        let job_annotations = JobAnnotations {
            completion_index: annotation(JOB_COMPLETION_INDEX),
            index_failure_count: annotation(JOB_INDEX_FAILURE_COUNT),
            index_ignored_failure_count: annotation(JOB_INDEX_IGNORED_FAILURE_COUNT),
        };
        let controller = crate::meta::controller_of(meta).map(|r| {
            let (v, k, b) = (&r.api_version, &r.kind, r.block_owner_deletion);
            Box::new(ControllerRef::new(v, k, &r.name, &r.uid, b))
        });
        let tolerations = spec.and_then(|s| s.tolerations.as_ref()).map(|list| {
            let opt = |v: &Option<String>| v.as_deref().map(Into::into);
            intern_tolerations(
                list.iter()
                    .map(|t| Toleration {
                        key: opt(&t.key),
                        operator: opt(&t.operator),
                        value: opt(&t.value),
                        effect: opt(&t.effect),
                        toleration_seconds: t.toleration_seconds,
                    })
                    .collect(),
            )
        });
        let sidecars = spec
            .and_then(|s| s.init_containers.as_ref())
            .into_iter()
            .flatten()
            .filter(|c| c.restart_policy.as_deref() == Some("Always"))
            .map(|c| intern(&c.name))
            .collect();
        let conditions = status.and_then(|s| s.conditions.as_ref());
        let states = |list: Option<&Vec<ContainerStatus>>| -> Box<[ContainerState]> {
            list.into_iter()
                .flatten()
                .map(|c| ContainerState {
                    name: intern(&c.name),
                    restart_count: c.restart_count,
                    terminated: c
                        .state
                        .as_ref()
                        .and_then(|s| s.terminated.as_ref())
                        .map(|t| Terminated {
                            exit_code: t.exit_code,
                            finished_at: t.finished_at.as_ref().map(|t| t.0),
                        }),
                })
                .collect()
        };
        CachedPod {
            namespace: intern(meta.namespace.as_deref().unwrap_or("")),
            name: text(&meta.name),
            uid: text(&meta.uid),
            resource_version: text(&meta.resource_version),
            generation: meta.generation,
            creation_timestamp: meta.creation_timestamp.as_ref().map(|t| t.0),
            deletion_timestamp: meta.deletion_timestamp.as_ref().map(|t| t.0),
            deletion_grace_period_seconds: meta.deletion_grace_period_seconds,
            labels: meta
                .labels
                .as_ref()
                .map(|l| Labels::from_pairs(l.iter().map(|(k, v)| (k, v.as_str()))))
                .unwrap_or_default(),
            job_annotations: (!job_annotations.is_empty()).then(|| Box::new(job_annotations)),
            controller,
            tracking_finalizer: meta
                .finalizers
                .iter()
                .flatten()
                .any(|f| f == JOB_TRACKING_FINALIZER),
            node_name: spec.and_then(|s| s.node_name.as_deref()).map(intern),
            tolerations,
            sidecars,
            has_status: status.is_some(),
            phase: status.and_then(|s| s.phase.as_deref()).map(intern),
            evicted_reason: status.and_then(|s| s.reason.as_deref()) == Some("Evicted"),
            observed_generation: status.and_then(|s| s.observed_generation),
            conditions: conditions
                .into_iter()
                .flatten()
                .map(|c| Condition {
                    type_: intern(&c.type_),
                    status: intern(&c.status),
                    last_transition_time: c.last_transition_time.as_ref().map(|t| t.0),
                })
                .collect(),
            disruption_target: conditions
                .into_iter()
                .flatten()
                .find(|c| c.type_ == DISRUPTION_TARGET)
                .map(|c| Box::new(c.clone())),
            container_statuses: states(status.and_then(|s| s.container_statuses.as_ref())),
            init_container_statuses: states(
                status.and_then(|s| s.init_container_statuses.as_ref()),
            ),
        }
    }
}

impl From<Pod> for CachedPod {
    fn from(pod: Pod) -> CachedPod {
        CachedPod::from(&pod)
    }
}

impl CachedPod {
    /// The reference an event about this pod names.
    pub fn object_reference(&self) -> ObjectReference {
        let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_string());
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: non_empty(self.namespace()),
            name: non_empty(self.name()),
            uid: non_empty(self.uid()),
            resource_version: non_empty(self.resource_version()),
            ..Default::default()
        }
    }
}

impl ControllerRef {
    /// As the API's ownerReference (`controller: true`).
    pub fn to_owner_reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: self.api_version.to_string(),
            kind: self.kind.to_string(),
            name: self.name.to_string(),
            uid: self.uid.to_string(),
            controller: Some(true),
            block_owner_deletion: self.block_owner_deletion,
        }
    }
}

impl Toleration {
    /// As the API type.
    pub fn to_api(&self) -> ApiToleration {
        let s = |v: &Option<Box<str>>| v.as_deref().map(str::to_string);
        ApiToleration {
            key: s(&self.key),
            operator: s(&self.operator),
            value: s(&self.value),
            effect: s(&self.effect),
            toleration_seconds: self.toleration_seconds,
        }
    }
}
