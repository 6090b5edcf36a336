//! Lean decoding of pods from the watch. Profiles of the job workload put
//! a quarter of kcm-rs's CPU into decoding pods, most of it into parts the
//! cache drops anyway (`managedFields`, container specs, volumes). A
//! [`WirePod`] skips those while the JSON is parsed, so they are never
//! allocated; what it keeps is exactly what [`super::trim`] keeps, and the
//! informer trims after decoding as for every other kind.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};

/// Pod spec fields no controller reads (kept in step with `trim`):
/// skipped without being decoded.
const SKIPPED_SPEC_FIELDS: &[&str] = &[
    "containers",
    "ephemeralContainers",
    "volumes",
    "affinity",
    "topologySpreadConstraints",
    "securityContext",
    "dnsConfig",
    "hostAliases",
    "imagePullSecrets",
    "resourceClaims",
    "resources",
    "overhead",
    "nodeSelector",
];

/// A pod as the informer decodes it from the API server.
#[derive(Clone, Debug, Default)]
pub struct WirePod(pub Pod);

impl From<WirePod> for Pod {
    fn from(w: WirePod) -> Pod {
        w.0
    }
}

impl k8s_openapi::Resource for WirePod {
    const API_VERSION: &'static str = <Pod as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <Pod as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <Pod as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <Pod as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = <Pod as k8s_openapi::Resource>::Scope;
}

impl k8s_openapi::ListableResource for WirePod {
    const LIST_KIND: &'static str = <Pod as k8s_openapi::ListableResource>::LIST_KIND;
}

impl k8s_openapi::Metadata for WirePod {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.0.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

impl<'de> Deserialize<'de> for WirePod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(PodVisitor)
    }
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "camelCase")]
enum PodField {
    Metadata,
    Spec,
    Status,
    #[serde(other)]
    Other,
}

struct PodVisitor;

impl<'de> Visitor<'de> for PodVisitor {
    type Value = WirePod;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Pod object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<WirePod, A::Error> {
        let mut pod = Pod::default();
        while let Some(field) = map.next_key::<PodField>()? {
            match field {
                PodField::Metadata => pod.metadata = map.next_value::<LeanMeta>()?.into(),
                PodField::Spec => pod.spec = map.next_value::<Option<LeanSpec>>()?.map(|s| s.0),
                PodField::Status => pod.status = map.next_value::<Option<PodStatus>>()?,
                PodField::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(WirePod(pod))
    }
}

/// `ObjectMeta` without `managedFields` (left undecoded as an unknown key).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct LeanMeta {
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

impl From<LeanMeta> for ObjectMeta {
    fn from(m: LeanMeta) -> ObjectMeta {
        ObjectMeta {
            annotations: m.annotations,
            creation_timestamp: m.creation_timestamp,
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            deletion_timestamp: m.deletion_timestamp,
            finalizers: m.finalizers,
            generate_name: m.generate_name,
            generation: m.generation,
            labels: m.labels,
            managed_fields: None,
            name: m.name,
            namespace: m.namespace,
            owner_references: m.owner_references,
            resource_version: m.resource_version,
            self_link: m.self_link,
            uid: m.uid,
        }
    }
}

/// What a pod failure policy and the sidecar checks need of an init
/// container; everything else in it is skipped.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InitContainerName {
    name: String,
    #[serde(default)]
    restart_policy: Option<String>,
}

/// A `PodSpec` decoded without the skipped fields. Fields not named here
/// (including ones a newer API server adds) are kept, so nothing the
/// controllers read is lost to this list being out of date.
struct LeanSpec(PodSpec);

impl<'de> Deserialize<'de> for LeanSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(SpecVisitor)
    }
}

struct SpecVisitor;

impl<'de> Visitor<'de> for SpecVisitor {
    type Value = LeanSpec;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a PodSpec object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LeanSpec, A::Error> {
        let mut kept = serde_json::Map::new();
        let mut sidecars = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if SKIPPED_SPEC_FIELDS.contains(&key.as_str()) {
                map.next_value::<IgnoredAny>()?;
            } else if key == "initContainers" {
                let init = map.next_value::<Option<Vec<InitContainerName>>>()?;
                sidecars.extend(
                    init.unwrap_or_default()
                        .into_iter()
                        .filter(|c| c.restart_policy.as_deref() == Some("Always"))
                        .map(|c| Container {
                            name: c.name,
                            restart_policy: c.restart_policy,
                            ..Default::default()
                        }),
                );
            } else {
                kept.insert(key, map.next_value::<serde_json::Value>()?);
            }
        }
        let mut spec =
            PodSpec::deserialize(serde_json::Value::Object(kept)).map_err(de::Error::custom)?;
        spec.init_containers = (!sidecars.is_empty()).then_some(sidecars);
        Ok(LeanSpec(spec))
    }
}

#[cfg(test)]
mod tests;
