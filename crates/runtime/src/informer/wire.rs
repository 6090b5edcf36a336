//! What the pod watch decodes. Profiles of the job workload put a quarter
//! of kcm-rs's CPU into decoding pods, most of it into parts no controller
//! reads (`managedFields`, container specs, volumes). A [`WirePod`] is a
//! [`CachedPod`] decoded straight from the JSON (see `kcm_pod`'s
//! decoder), plus the `resourceVersion` kube's watcher resumes from.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kcm_pod::CachedPod;
use serde::{Deserialize, Deserializer};

/// A pod as the informer decodes it from the API server.
#[derive(Clone, Debug, Default)]
pub struct WirePod {
    /// Only `resourceVersion` (and name and namespace, for kube's logs).
    meta: ObjectMeta,
    pod: CachedPod,
}

impl From<WirePod> for CachedPod {
    fn from(w: WirePod) -> CachedPod {
        w.pod
    }
}

impl<'de> Deserialize<'de> for WirePod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let pod = CachedPod::deserialize(d)?;
        let set = |s: &str| (!s.is_empty()).then(|| s.to_string());
        let meta = ObjectMeta {
            name: set(pod.name()),
            namespace: set(pod.namespace()),
            resource_version: set(pod.resource_version()),
            ..Default::default()
        };
        Ok(WirePod { meta, pod })
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
        &self.meta
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

#[cfg(test)]
mod tests;
