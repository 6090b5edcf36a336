//! The four built-in controller finders, in upstream's order: a
//! ReplicationController; a Deployment through its ReplicaSet; a
//! ReplicaSet not controlled by a Deployment; a StatefulSet. Each checks
//! kind and API group, reads the owner from the cache, and answers "not
//! mine" when it is missing or its UID differs.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::ReplicationController;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kcm_pod::meta::controller_of;

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

/// Unset replicas cannot reach the cache (the API server defaults them to
/// 1); treat them as upstream's defaulting would.
fn replicas(r: Option<i32>) -> i32 {
    r.unwrap_or(1)
}

fn uid_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &str {
    meta.uid.as_deref().unwrap_or("")
}

const RS_GROUPS: &[&str] = &["apps", "extensions"];

fn rc(
    o: &OwnerReference,
    ns: &str,
    c: &impl OwnerCache,
) -> Result<Option<ControllerScale>, ExpectedError> {
    if !is_kind(o, "ReplicationController", &[""])? {
        return Ok(None);
    }
    Ok(c.replication_controller(ns, &o.name)
        .filter(|rc| uid_of(&rc.metadata) == o.uid)
        .map(|rc| ControllerScale {
            uid: o.uid.clone(),
            replicas: replicas(rc.spec.as_ref().and_then(|s| s.replicas)),
        }))
}

fn deployment(
    o: &OwnerReference,
    ns: &str,
    c: &impl OwnerCache,
) -> Result<Option<ControllerScale>, ExpectedError> {
    if !is_kind(o, "ReplicaSet", RS_GROUPS)? {
        return Ok(None);
    }
    let Some(rs) = c
        .replica_set(ns, &o.name)
        .filter(|rs| uid_of(&rs.metadata) == o.uid)
    else {
        return Ok(None);
    };
    let Some(d_ref) = controller_of(&rs.metadata) else {
        return Ok(None);
    };
    if !is_kind(d_ref, "Deployment", RS_GROUPS)? {
        return Ok(None);
    }
    Ok(c.deployment(ns, &d_ref.name)
        .filter(|d| uid_of(&d.metadata) == d_ref.uid)
        .map(|d| ControllerScale {
            uid: d_ref.uid.clone(),
            replicas: replicas(d.spec.replicas),
        }))
}

fn replica_set(
    o: &OwnerReference,
    ns: &str,
    c: &impl OwnerCache,
) -> Result<Option<ControllerScale>, ExpectedError> {
    if !is_kind(o, "ReplicaSet", RS_GROUPS)? {
        return Ok(None);
    }
    let Some(rs) = c
        .replica_set(ns, &o.name)
        .filter(|rs| uid_of(&rs.metadata) == o.uid)
    else {
        return Ok(None);
    };
    // Upstream skips any ReplicaSet whose controller has kind Deployment
    // (group not checked), even when that Deployment is gone.
    if controller_of(&rs.metadata).is_some_and(|r| r.kind == "Deployment") {
        return Ok(None);
    }
    Ok(Some(ControllerScale {
        uid: o.uid.clone(),
        replicas: replicas(rs.spec.replicas),
    }))
}

fn stateful_set(
    o: &OwnerReference,
    ns: &str,
    c: &impl OwnerCache,
) -> Result<Option<ControllerScale>, ExpectedError> {
    if !is_kind(o, "StatefulSet", &["apps"])? {
        return Ok(None);
    }
    Ok(c.stateful_set(ns, &o.name)
        .filter(|s| uid_of(&s.metadata) == o.uid)
        .map(|s| ControllerScale {
            uid: o.uid.clone(),
            replicas: replicas(s.spec.replicas),
        }))
}

/// The built-in finders in upstream's order; the first answer wins.
pub fn builtin_scale(
    owner: &OwnerReference,
    ns: &str,
    cache: &impl OwnerCache,
) -> Result<Option<ControllerScale>, ExpectedError> {
    for finder in [rc, deployment, replica_set, stateful_set] {
        if let Some(s) = finder(owner, ns, cache)? {
            return Ok(Some(s));
        }
    }
    Ok(None)
}
