//! The two events the taint manager records, with upstream's reason and
//! messages (taint_eviction.go `emitPodDeletionEvent`,
//! `emitCancelPodDeletionEvent`). Both are `Normal` and regard the pod by
//! apiVersion, kind, namespace and name only (no UID), as upstream.

use k8s_openapi::api::core::v1::ObjectReference;
use kcm_runtime::events::{EventType, Recorder};

/// Event reason of both events.
pub const REASON_TAINT_MANAGER_EVICTION: &str = "TaintManagerEviction";

/// "Marking for deletion Pod ns/name": emitted once when an eviction fires,
/// before any API call (also when the deletion then fails).
pub fn marking_message(namespace: &str, name: &str) -> String {
    format!("Marking for deletion Pod {namespace}/{name}")
}

/// "Cancelling deletion of Pod ns/name": emitted when a pending eviction is
/// withdrawn.
pub fn cancelling_message(namespace: &str, name: &str) -> String {
    format!("Cancelling deletion of Pod {namespace}/{name}")
}

/// Where the controller sends its events; the recorder in production, a list
/// in tests.
pub trait EvictionEvents: Send + Sync {
    /// An eviction of the pod fired.
    fn marking(&self, namespace: &str, name: &str);
    /// A pending eviction of the pod was cancelled.
    fn cancelling(&self, namespace: &str, name: &str);
}

/// The pod reference upstream's events carry.
pub fn pod_reference(namespace: &str, name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(namespace.into()),
        name: Some(name.into()),
        ..Default::default()
    }
}

impl EvictionEvents for Recorder {
    fn marking(&self, namespace: &str, name: &str) {
        eviction_event(self, namespace, name, marking_message(namespace, name));
    }

    fn cancelling(&self, namespace: &str, name: &str) {
        eviction_event(self, namespace, name, cancelling_message(namespace, name));
    }
}

/// A Normal `TaintManagerEviction` event about the pod.
fn eviction_event(r: &Recorder, namespace: &str, name: &str, message: String) {
    r.event(
        &pod_reference(namespace, name),
        EventType::Normal,
        REASON_TAINT_MANAGER_EVICTION,
        message,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_wording() {
        assert_eq!(marking_message("ns", "p"), "Marking for deletion Pod ns/p");
        assert_eq!(
            cancelling_message("ns", "p"),
            "Cancelling deletion of Pod ns/p"
        );
        let r = pod_reference("ns", "p");
        assert_eq!(r.api_version.as_deref(), Some("v1"));
        assert_eq!(r.kind.as_deref(), Some("Pod"));
        assert_eq!(r.uid, None);
    }
}
