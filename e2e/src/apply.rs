//! Creating objects from YAML manifests (a small `kubectl create -f`).

use std::path::Path;

use kube::api::{DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};
use kube::{Api, ResourceExt};
use serde::Deserialize;

use crate::HarnessError;

/// Creates every document of a YAML file; objects that already exist are
/// left as they are. Returns `kind/name` of each document.
pub async fn create_from_file(
    client: &kube::Client,
    path: &Path,
    default_namespace: &str,
) -> Result<Vec<String>, HarnessError> {
    let text = std::fs::read_to_string(path)?;
    let bad = |message: String| HarnessError::Kubeconfig {
        path: path.to_path_buf(),
        message,
    };
    let mut created = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let value = serde_yaml_ng::Value::deserialize(doc).map_err(|e| bad(e.to_string()))?;
        if value.is_null() {
            continue;
        }
        let obj: DynamicObject =
            serde_yaml_ng::from_value(value).map_err(|e| bad(e.to_string()))?;
        let types = obj
            .types
            .clone()
            .ok_or_else(|| bad("a document lacks apiVersion/kind".into()))?;
        let gvk = GroupVersionKind::try_from(&types).map_err(|e| bad(e.to_string()))?;
        let (ar, caps) = discovery::pinned_kind(client, &gvk).await?;
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Namespaced => Api::namespaced_with(
                client.clone(),
                obj.namespace().as_deref().unwrap_or(default_namespace),
                &ar,
            ),
            Scope::Cluster => Api::all_with(client.clone(), &ar),
        };
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        created.push(format!("{}/{}", gvk.kind.to_lowercase(), obj.name_any()));
    }
    Ok(created)
}
