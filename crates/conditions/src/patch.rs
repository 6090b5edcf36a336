//! The status patch a controller sends to append a condition (and set the
//! phase) before it deletes a pod: a strategic-merge patch of the pods/status
//! subresource carrying the pod's UID as a precondition, with the same
//! effect as upstream's `PatchPodStatus` (byte-identical bodies are not
//! needed: only the listed fields and conditions change).

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use serde_json::{Map, Value, json};

/// The patch body turning `pod`'s status into `new`, or `None` when nothing
/// would change (upstream sends no request then).
///
/// Top-level status fields that differ are set (removed ones become null);
/// conditions merge by `type`: changed or new entries are listed whole,
/// removed ones are deleted, and `$setElementOrder/conditions` keeps the
/// order of `new`.
pub fn pod_status_patch(pod: &Pod, new: &PodStatus) -> Option<Value> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let old = serde_json::to_value(pod.status.clone().unwrap_or_default()).unwrap_or(Value::Null);
    let new_v = serde_json::to_value(new).unwrap_or(Value::Null);
    let empty = Map::new();
    let old_m = old.as_object().unwrap_or(&empty);
    let new_m = new_v.as_object().unwrap_or(&empty);
    let mut status = Map::new();
    for (k, v) in new_m {
        if k != "conditions" && old_m.get(k) != Some(v) {
            status.insert(k.clone(), v.clone());
        }
    }
    for k in old_m.keys() {
        if k != "conditions" && !new_m.contains_key(k) {
            status.insert(k.clone(), Value::Null);
        }
    }
    let list = |m: &Map<String, Value>| -> Vec<Value> {
        m.get("conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let (old_c, new_c) = (list(old_m), list(new_m));
    let type_of = |c: &Value| c.get("type").cloned().unwrap_or(Value::Null);
    let mut changed: Vec<Value> = new_c
        .iter()
        .filter(|c| !old_c.iter().any(|o| o == *c))
        .cloned()
        .collect();
    for o in &old_c {
        if !new_c.iter().any(|n| type_of(n) == type_of(o)) {
            changed.push(json!({ "type": type_of(o), "$patch": "delete" }));
        }
    }
    if !changed.is_empty() {
        let order: Vec<Value> = new_c
            .iter()
            .map(|c| json!({ "type": type_of(c) }))
            .collect();
        status.insert("$setElementOrder/conditions".into(), Value::Array(order));
        status.insert("conditions".into(), Value::Array(changed));
    }
    if status.is_empty() {
        return None;
    }
    Some(json!({ "metadata": { "uid": uid }, "status": status }))
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;
    use k8s_openapi::api::core::v1::PodCondition;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::{disruption_target, update_pod_condition};

    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                uid: Some("u-1".into()),
                ..Default::default()
            },
            status: Some(PodStatus {
                phase: Some("Running".into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn unchanged_status_sends_nothing() {
        let p = pod();
        assert_eq!(
            pod_status_patch(&p, p.status.as_ref().expect("status")),
            None
        );
    }

    #[test]
    fn appending_disruption_target_and_failing_lists_only_changes() {
        let p = pod();
        let mut st = p.status.clone().expect("status");
        st.phase = Some("Failed".into());
        let now = Timestamp::from_second(100).expect("ts");
        update_pod_condition(
            &mut st,
            disruption_target("DeletionByPodGC", "PodGC: node no longer exists", now),
            now,
        );
        let body = pod_status_patch(&p, &st).expect("patch");
        assert_eq!(body["metadata"]["uid"], "u-1");
        assert_eq!(body["status"]["phase"], "Failed");
        let conds = body["status"]["conditions"].as_array().expect("list");
        assert_eq!(conds.len(), 1, "Ready is unchanged: {body}");
        assert_eq!(conds[0]["type"], "DisruptionTarget");
        assert_eq!(conds[0]["reason"], "DeletionByPodGC");
        assert_eq!(
            body["status"]["$setElementOrder/conditions"],
            json!([{ "type": "Ready" }, { "type": "DisruptionTarget" }])
        );
    }

    #[test]
    fn removed_fields_and_conditions_are_deleted() {
        let p = pod();
        let st = PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        };
        let body = pod_status_patch(&p, &st).expect("patch");
        assert_eq!(
            body["status"]["conditions"],
            json!([{ "type": "Ready", "$patch": "delete" }])
        );
    }
}
