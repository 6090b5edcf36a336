//! `scheduling.k8s.io/v1alpha2` Workload and PodGroup (Kubernetes 1.36),
//! only the fields 1.36's Job controller reads or writes: k8s-openapi 0.29
//! is built for 1.37, which has no v1alpha2. Fields not listed here are
//! dropped on decode; the controller never writes a decoded object back
//! (it only creates), so nothing is lost on the server.
//!
//! The scheduling policy is kept as JSON: the PodGroup copies its
//! template's policy as it is (upstream `DeepCopy`), whatever it holds.

use std::borrow::Cow;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The group and version of both kinds.
pub const API_VERSION: &str = "scheduling.k8s.io/v1alpha2";
const GROUP: &str = "scheduling.k8s.io";
const VERSION: &str = "v1alpha2";

/// A Workload (without apiVersion and kind: the API server takes them from
/// the request path, and list items may lack them).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: WorkloadSpec,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_ref: Option<TypedLocalObjectReference>,
    /// Required on the wire (no omitempty upstream).
    #[serde(default)]
    pub pod_group_templates: Vec<PodGroupTemplate>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TypedLocalObjectReference {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupTemplate {
    #[serde(default)]
    pub name: String,
    /// `{basic: {}}` or `{gang: {minCount}}`, as stored.
    #[serde(default)]
    pub scheduling_policy: Value,
}

/// A PodGroup (see [`Workload`] on apiVersion and kind).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PodGroup {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: PodGroupSpec,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_group_template_ref: Option<PodGroupTemplateReference>,
    #[serde(default)]
    pub scheduling_policy: Value,
}

/// v1alpha2's reference (v1beta1 has `spec.workloadRef` instead).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PodGroupTemplateReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadPodGroupTemplateReference>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadPodGroupTemplateReference {
    #[serde(default)]
    pub workload_name: String,
    #[serde(default)]
    pub pod_group_template_name: String,
}

macro_rules! resource {
    ($kind:ident, $plural:literal) => {
        impl kube::Resource for $kind {
            type DynamicType = ();
            type Scope = NamespaceResourceScope;
            fn kind(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(stringify!($kind))
            }
            fn group(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(GROUP)
            }
            fn version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(VERSION)
            }
            fn api_version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(API_VERSION)
            }
            fn plural(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($plural)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}
resource!(Workload, "workloads");
resource!(PodGroup, "podgroups");
