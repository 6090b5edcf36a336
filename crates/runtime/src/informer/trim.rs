//! What the cache keeps of an object cached as its API type (every kind
//! but pods, which are cached as `kcm_pod::CachedPod`): everything but its
//! `managedFields`, with the metadata lists shrunk to their length (serde
//! grows a list from empty, leaving spare room).

use kube::Resource;

/// Trims `obj` for the cache.
pub fn trim<K: Resource>(mut obj: K) -> K {
    let meta = obj.meta_mut();
    // Only who last wrote the status and when (no field sets): the Job
    // controller tells a second Job controller by it (kcm_job::conflict).
    meta.managed_fields = meta
        .managed_fields
        .take()
        .map(|all| {
            all.into_iter()
                .filter(|f| f.subresource.as_deref() == Some("status"))
                .map(|mut f| {
                    f.fields_v1 = None;
                    f
                })
                .collect::<Vec<_>>()
        })
        .filter(|kept| !kept.is_empty());
    shrink(&mut meta.owner_references);
    shrink(&mut meta.finalizers);
    obj
}

fn shrink<T>(list: &mut Option<Vec<T>>) {
    if let Some(list) = list {
        list.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::ReplicaSet;
    use k8s_openapi::api::core::v1::Node;
    use serde_json::json;

    #[test]
    fn kept_lists_have_no_spare_room() -> Result<(), serde_json::Error> {
        let rs: ReplicaSet = serde_json::from_value(json!({
            "metadata": { "name": "r", "finalizers": ["f"],
                "ownerReferences": [{ "apiVersion": "apps/v1", "kind": "Deployment",
                    "name": "d", "uid": "u" }] }
        }))?;
        let t = trim(rs);
        let owners = t.metadata.owner_references.as_ref().expect("owners");
        assert_eq!(owners.capacity(), owners.len());
        let finalizers = t.metadata.finalizers.as_ref().expect("finalizers");
        assert_eq!(finalizers.capacity(), finalizers.len());
        Ok(())
    }

    #[test]
    fn other_kinds_only_lose_managed_fields() -> Result<(), serde_json::Error> {
        let node: Node = serde_json::from_value(json!({
            "metadata": { "name": "n", "managedFields": [{ "manager": "m" }] },
            "spec": { "taints": [{ "key": "k", "effect": "NoExecute" }] }
        }))?;
        let t = trim(node.clone());
        assert!(t.metadata.managed_fields.is_none());
        assert_eq!(t.spec, node.spec);
        Ok(())
    }
}
