//! A [`CachedPod`] from a full `Pod` (tests, tools, pods a controller
//! fetched), and the API references writes and events are built from.

use k8s_openapi::api::core::v1::Toleration as ApiToleration;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::{CachedPod, ControllerRef, Toleration};

impl From<&Pod> for CachedPod {
    /// Through the same decoder the watch uses, so a test that builds a
    /// `Pod` sees exactly what the cache would hold.
    fn from(pod: &Pod) -> CachedPod {
        // A typed Pod always serialises, and the decoder accepts every
        // shape k8s-openapi writes (the tests decode full pods).
        let bytes = serde_json::to_vec(pod).expect("a Pod serialises");
        serde_json::from_slice(&bytes).expect("a serialised Pod decodes")
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
