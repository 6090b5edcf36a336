//! apimachinery's `meta/v1` helpers over any object's metadata (upstream
//! `controller_ref.go`) and the one spelling of an object's key
//! ([`key_of`]), for every controller and tool; a [`CachedPod`]
//! answers the same through [`CachedPod::controller`].
//!
//! [`CachedPod`]: crate::CachedPod
//! [`CachedPod::controller`]: crate::CachedPod::controller

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

/// The controller ownerReference of an object: the first with `controller:
/// true` (upstream `metav1.GetControllerOf`).
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .as_deref()?
        .iter()
        .find(|r| r.controller == Some(true))
}

/// Whether the object's controller has `uid` (upstream
/// `metav1.IsControlledBy`).
pub fn is_controlled_by(meta: &ObjectMeta, uid: &str) -> bool {
    controller_of(meta).is_some_and(|r| r.uid == uid)
}

/// An object's key in every cache, queue and log line: `namespace/name`, or
/// `name` for a cluster-scoped object (client-go's `MetaNamespaceKeyFunc`).
/// The one place the key is spelled: every `key()` method calls it.
pub fn key_of(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_string()
    } else {
        format!("{namespace}/{name}")
    }
}

/// `metadata.name`, "" when unset.
pub fn name_of(meta: &ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(uid: &str, controller: Option<bool>) -> OwnerReference {
        OwnerReference {
            uid: uid.into(),
            controller,
            ..Default::default()
        }
    }

    #[test]
    fn a_key_is_namespace_slash_name_or_the_name_alone() {
        assert_eq!(key_of("ns", "a"), "ns/a");
        assert_eq!(key_of("", "node-1"), "node-1");
    }

    #[test]
    fn the_first_controller_reference_counts() {
        let meta = ObjectMeta {
            owner_references: Some(vec![
                owner("a", None),
                owner("b", Some(false)),
                owner("c", Some(true)),
                owner("d", Some(true)),
            ]),
            ..Default::default()
        };
        assert_eq!(controller_of(&meta).map(|r| r.uid.as_str()), Some("c"));
        assert!(is_controlled_by(&meta, "c"));
        assert!(!is_controlled_by(&meta, "d"));
        assert!(!is_controlled_by(&meta, "a"));
        assert_eq!(controller_of(&ObjectMeta::default()), None);
        assert_eq!(name_of(&ObjectMeta::default()), "");
    }
}
