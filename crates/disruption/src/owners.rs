//! The four built-in controller finders, in upstream's order: a
//! ReplicationController; a Deployment through its ReplicaSet; a
//! ReplicaSet not controlled by a Deployment; a StatefulSet. Each checks
//! kind and API group, reads the owner from the cache, and answers "not
//! mine" when it is missing or its UID differs ([`builtin_scale`]).

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::ReplicationController;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kcm_pod::meta::controller_of;
use kube::Resource;

use crate::expected::{ControllerScale, ExpectedError, parse_group_version};

/// Read access to the owners' informer caches.
pub trait OwnerCache {
    fn replication_controller(&self, ns: &str, name: &str) -> Option<Arc<ReplicationController>>;
    fn replica_set(&self, ns: &str, name: &str) -> Option<Arc<ReplicaSet>>;
    fn deployment(&self, ns: &str, name: &str) -> Option<Arc<Deployment>>;
    fn stateful_set(&self, ns: &str, name: &str) -> Option<Arc<StatefulSet>>;
}

/// `verifyGroupKind`.
fn is_kind(owner: &OwnerReference, kind: &str, groups: &[&str]) -> Result<bool, ExpectedError> {
    let (group, _) = parse_group_version(&owner.api_version)?;
    Ok(owner.kind == kind && groups.contains(&group))
}

/// The cached object `r` names, if it is still the one `r` means (its UID).
fn referent<T: Resource<DynamicType = ()>>(
    found: Option<Arc<T>>,
    r: &OwnerReference,
) -> Option<Arc<T>> {
    found.filter(|o| o.meta().uid.as_deref().unwrap_or("") == r.uid)
}

/// The scale of the controller `r`; unset replicas cannot reach the cache
/// (the API server defaults them to 1), so they count as upstream's
/// defaulting would.
fn scale(r: &OwnerReference, replicas: Option<i32>) -> ControllerScale {
    ControllerScale {
        uid: r.uid.clone(),
        replicas: replicas.unwrap_or(1),
    }
}

const RS_GROUPS: &[&str] = &["apps", "extensions"];

/// The built-in finders in upstream's order, the first answer winning.
/// Each claims one kind (and API group) of `owner`, so at most one is
/// asked; a ReplicaSet is asked of twice, for its Deployment, then for
/// itself.
pub fn builtin_scale(
    owner: &OwnerReference,
    ns: &str,
    cache: &impl OwnerCache,
) -> Result<Option<ControllerScale>, ExpectedError> {
    let o = owner;
    if is_kind(o, "ReplicationController", &[""])? {
        let rc = referent(cache.replication_controller(ns, &o.name), o);
        return Ok(rc.map(|rc| scale(o, rc.spec.as_ref().and_then(|s| s.replicas))));
    }
    if is_kind(o, "ReplicaSet", RS_GROUPS)? {
        let Some(rs) = referent(cache.replica_set(ns, &o.name), o) else {
            return Ok(None);
        };
        let parent = controller_of(&rs.metadata);
        // The Deployment finder: the ReplicaSet's controlling Deployment.
        if let Some(d_ref) = parent
            && is_kind(d_ref, "Deployment", RS_GROUPS)?
        {
            let d = referent(cache.deployment(ns, &d_ref.name), d_ref);
            return Ok(d.map(|d| scale(d_ref, d.spec.replicas)));
        }
        // The ReplicaSet finder skips any ReplicaSet whose controller has
        // kind Deployment (group not checked), even when that Deployment
        // is gone.
        if parent.is_some_and(|r| r.kind == "Deployment") {
            return Ok(None);
        }
        return Ok(Some(scale(o, rs.spec.replicas)));
    }
    if is_kind(o, "StatefulSet", &["apps"])? {
        let set = referent(cache.stateful_set(ns, &o.name), o);
        return Ok(set.map(|s| scale(o, s.spec.replicas)));
    }
    Ok(None)
}
