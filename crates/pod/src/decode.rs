//! Decoding a [`CachedPod`] straight from the API server's JSON. Only the
//! fields of the cache are decoded; everything else (`managedFields`,
//! container specs, volumes, most of the status) is skipped by the parser
//! without being allocated. Strings that repeat across pods are borrowed
//! from the input where it allows and interned.
//!
//! Decoding is as lenient as Go's: a missing required field (a condition
//! without `status`, a terminated state without `exitCode`) or a `null`
//! map value reads as its zero value instead of failing the whole event.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use k8s_openapi::api::core::v1::PodCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::intern::{intern, intern_tolerations};
use crate::{
    CachedPod, Condition, ContainerState, ControllerRef, DISRUPTION_TARGET, JOB_TRACKING_FINALIZER,
    JobAnnotations, Labels, Terminated, Toleration,
};

impl<'de> Deserialize<'de> for CachedPod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Only a JSON object is a pod (a derived struct would also take an
        // array).
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CachedPod;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a Pod object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<CachedPod, A::Error> {
                let wire = WirePod::deserialize(MapAccessDeserializer::new(map))?;
                Ok(wire.into_cached())
            }
        }
        d.deserialize_map(V)
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct WirePod<'a> {
    #[serde(borrow)]
    pub(crate) metadata: Option<Meta<'a>>,
    #[serde(borrow)]
    pub(crate) spec: Option<Spec<'a>>,
    #[serde(borrow)]
    pub(crate) status: Option<Status<'a>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct Meta<'a> {
    pub(crate) name: Option<String>,
    #[serde(borrow)]
    pub(crate) namespace: Option<Cow<'a, str>>,
    pub(crate) uid: Option<String>,
    pub(crate) resource_version: Option<String>,
    pub(crate) generation: Option<i64>,
    pub(crate) creation_timestamp: Option<Time>,
    pub(crate) deletion_timestamp: Option<Time>,
    pub(crate) deletion_grace_period_seconds: Option<i64>,
    pub(crate) labels: Option<LabelsDe>,
    pub(crate) annotations: Option<JobAnnotationsDe>,
    #[serde(borrow)]
    pub(crate) owner_references: Option<Vec<OwnerRef<'a>>>,
    pub(crate) finalizers: Option<TrackingDe>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct OwnerRef<'a> {
    #[serde(borrow)]
    pub(crate) api_version: Cow<'a, str>,
    #[serde(borrow)]
    pub(crate) kind: Cow<'a, str>,
    pub(crate) name: String,
    pub(crate) uid: String,
    pub(crate) controller: Option<bool>,
    pub(crate) block_owner_deletion: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct Spec<'a> {
    #[serde(borrow)]
    pub(crate) node_name: Option<Cow<'a, str>>,
    pub(crate) tolerations: Option<Vec<TolerationDe>>,
    #[serde(borrow)]
    pub(crate) init_containers: Option<Vec<InitContainer<'a>>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct TolerationDe {
    pub(crate) key: Option<String>,
    pub(crate) operator: Option<String>,
    pub(crate) value: Option<String>,
    pub(crate) effect: Option<String>,
    pub(crate) toleration_seconds: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct InitContainer<'a> {
    #[serde(borrow)]
    pub(crate) name: Cow<'a, str>,
    #[serde(borrow)]
    pub(crate) restart_policy: Option<Cow<'a, str>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct Status<'a> {
    #[serde(borrow)]
    pub(crate) phase: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub(crate) reason: Option<Cow<'a, str>>,
    pub(crate) observed_generation: Option<i64>,
    #[serde(borrow)]
    pub(crate) conditions: Option<Vec<ConditionDe<'a>>>,
    #[serde(borrow)]
    pub(crate) container_statuses: Option<Vec<ContainerStatusDe<'a>>>,
    #[serde(borrow)]
    pub(crate) init_container_statuses: Option<Vec<ContainerStatusDe<'a>>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct ConditionDe<'a> {
    #[serde(rename = "type", borrow)]
    pub(crate) type_: Cow<'a, str>,
    #[serde(borrow)]
    pub(crate) status: Cow<'a, str>,
    pub(crate) reason: Option<String>,
    pub(crate) message: Option<String>,
    pub(crate) last_probe_time: Option<Time>,
    pub(crate) last_transition_time: Option<Time>,
    pub(crate) observed_generation: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct ContainerStatusDe<'a> {
    #[serde(borrow)]
    pub(crate) name: Cow<'a, str>,
    pub(crate) restart_count: Option<i32>,
    pub(crate) state: Option<StateDe>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct StateDe {
    pub(crate) terminated: Option<TerminatedDe>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct TerminatedDe {
    pub(crate) exit_code: Option<i32>,
    pub(crate) finished_at: Option<Time>,
}

/// Labels straight into [`Labels`] (no map in between).
#[derive(Default)]
pub(crate) struct LabelsDe(pub(crate) Labels);

impl<'de> Deserialize<'de> for LabelsDe {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = LabelsDe;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of labels")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LabelsDe, A::Error> {
                let mut pairs: Vec<(Cow<'de, str>, String)> = Vec::new();
                while let Some((k, v)) = map.next_entry::<Cow<'de, str>, Option<String>>()? {
                    pairs.push((k, v.unwrap_or_default()));
                }
                Ok(LabelsDe(Labels::from_pairs(pairs)))
            }
        }
        d.deserialize_map(V)
    }
}

/// Only the three Job annotations; the others are skipped.
#[derive(Default)]
pub(crate) struct JobAnnotationsDe(pub(crate) JobAnnotations);

impl<'de> Deserialize<'de> for JobAnnotationsDe {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = JobAnnotationsDe;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of annotations")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<JobAnnotationsDe, A::Error> {
                let mut out = JobAnnotations::default();
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    let slot = match &*key {
                        crate::JOB_COMPLETION_INDEX => &mut out.completion_index,
                        crate::JOB_INDEX_FAILURE_COUNT => &mut out.index_failure_count,
                        crate::JOB_INDEX_IGNORED_FAILURE_COUNT => {
                            &mut out.index_ignored_failure_count
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                            continue;
                        }
                    };
                    *slot = Some(
                        map.next_value::<Option<String>>()?
                            .unwrap_or_default()
                            .into(),
                    );
                }
                Ok(JobAnnotationsDe(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// Whether the finalizer list holds the Job tracking finalizer.
#[derive(Default)]
pub(crate) struct TrackingDe(pub(crate) bool);

impl<'de> Deserialize<'de> for TrackingDe {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'de>(PhantomData<&'de ()>);
        impl<'de> Visitor<'de> for V<'de> {
            type Value = TrackingDe;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of finalizers")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<TrackingDe, A::Error> {
                let mut found = false;
                while let Some(f) = seq.next_element::<Option<Cow<'de, str>>>()? {
                    found |= f.as_deref() == Some(JOB_TRACKING_FINALIZER);
                }
                Ok(TrackingDe(found))
            }
        }
        d.deserialize_seq(V(PhantomData))
    }
}

fn boxed(s: Option<String>) -> Box<str> {
    s.unwrap_or_default().into_boxed_str()
}

fn container_states(list: Option<Vec<ContainerStatusDe<'_>>>) -> Box<[ContainerState]> {
    list.unwrap_or_default()
        .into_iter()
        .map(|c| ContainerState {
            name: intern(&c.name),
            restart_count: c.restart_count.unwrap_or(0),
            terminated: c.state.and_then(|s| s.terminated).map(|t| Terminated {
                exit_code: t.exit_code.unwrap_or(0),
                finished_at: t.finished_at.map(|t| t.0),
            }),
        })
        .collect()
}

impl WirePod<'_> {
    pub(crate) fn into_cached(self) -> CachedPod {
        let meta = self.metadata.unwrap_or_default();
        let spec = self.spec.unwrap_or_default();
        let has_status = self.status.is_some();
        let status = self.status.unwrap_or_default();
        let annotations = meta.annotations.map(|a| a.0).filter(|a| !a.is_empty());
        let controller = meta
            .owner_references
            .unwrap_or_default()
            .into_iter()
            .find(|r| r.controller == Some(true))
            .map(|r| {
                let (v, k, b) = (&r.api_version, &r.kind, r.block_owner_deletion);
                Box::new(ControllerRef::new(v, k, &r.name, &r.uid, b))
            });
        let tolerations = spec.tolerations.map(|list| {
            intern_tolerations(
                list.into_iter()
                    .map(|t| Toleration {
                        key: t.key.map(Into::into),
                        operator: t.operator.map(Into::into),
                        value: t.value.map(Into::into),
                        effect: t.effect.map(Into::into),
                        toleration_seconds: t.toleration_seconds,
                    })
                    .collect(),
            )
        });
        let sidecars = spec
            .init_containers
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.restart_policy.as_deref() == Some("Always"))
            .map(|c| intern(&c.name))
            .collect();
        let mut disruption_target = None;
        let conditions = status
            .conditions
            .unwrap_or_default()
            .into_iter()
            .map(|c| {
                let kept = Condition {
                    type_: intern(&c.type_),
                    status: intern(&c.status),
                    last_transition_time: c.last_transition_time.as_ref().map(|t| t.0),
                };
                if c.type_ == DISRUPTION_TARGET && disruption_target.is_none() {
                    disruption_target = Some(Box::new(PodCondition {
                        type_: c.type_.into_owned(),
                        status: c.status.into_owned(),
                        reason: c.reason,
                        message: c.message,
                        last_probe_time: c.last_probe_time,
                        last_transition_time: c.last_transition_time,
                        observed_generation: c.observed_generation,
                    }));
                }
                kept
            })
            .collect();
        CachedPod {
            namespace: intern(meta.namespace.as_deref().unwrap_or("")),
            name: boxed(meta.name),
            uid: boxed(meta.uid),
            resource_version: boxed(meta.resource_version),
            generation: meta.generation,
            creation_timestamp: meta.creation_timestamp.map(|t| t.0),
            deletion_timestamp: meta.deletion_timestamp.map(|t| t.0),
            deletion_grace_period_seconds: meta.deletion_grace_period_seconds,
            labels: meta.labels.map(|l| l.0).unwrap_or_default(),
            job_annotations: annotations.map(Box::new),
            controller,
            tracking_finalizer: meta.finalizers.is_some_and(|f| f.0),
            node_name: spec.node_name.as_deref().map(intern),
            tolerations,
            sidecars,
            has_status,
            phase: status.phase.as_deref().map(intern),
            evicted_reason: status.reason.as_deref() == Some("Evicted"),
            observed_generation: status.observed_generation,
            conditions,
            disruption_target,
            container_statuses: container_states(status.container_statuses),
            init_container_statuses: container_states(status.init_container_statuses),
        }
    }
}
