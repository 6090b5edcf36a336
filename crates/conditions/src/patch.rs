//! The status patch a controller sends to append a condition (and set the
//! phase) before it deletes a pod: a strategic-merge patch of the pods/status
//! subresource carrying the pod's UID as a precondition, with the same
//! effect as upstream's `PatchPodStatus` (byte-identical bodies are not
//! needed: only the listed fields and conditions change).

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kcm_pod::{CachedPod, DISRUPTION_TARGET};
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

/// [`pod_status_patch`] for a cached pod whose status moves to `phase`
/// with `observedGeneration` set to `observed_generation`, and a
/// `DisruptionTarget` `condition` upserted as [`crate::update_pod_condition`]
/// does (the cache keeps that condition whole, and only the type and status
/// of the others, which such a patch leaves alone). `None` when nothing
/// would change. A condition of another type is ignored.
pub fn disruption_status_patch(
    pod: &CachedPod,
    phase: &str,
    observed_generation: Option<i64>,
    condition: Option<PodCondition>,
    now: Timestamp,
) -> Option<Value> {
    let mut status = Map::new();
    if pod.phase() != phase {
        status.insert("phase".into(), json!(phase));
    }
    if pod.observed_generation() != observed_generation {
        status.insert("observedGeneration".into(), json!(observed_generation));
    }
    if let Some(mut c) = condition.filter(|c| c.type_ == DISRUPTION_TARGET) {
        let old = pod.disruption_target();
        c.last_transition_time = match old {
            Some(o) if o.status == c.status => o.last_transition_time.clone(),
            _ => Some(Time(now)),
        };
        let as_json = |c: &PodCondition| serde_json::to_value(c).unwrap_or(Value::Null);
        let new_json = as_json(&c);
        if old.is_none_or(|o| as_json(o) != new_json) {
            let mut order: Vec<Value> = pod
                .conditions()
                .iter()
                .map(|x| json!({ "type": &*x.type_ }))
                .collect();
            if old.is_none() {
                order.push(json!({ "type": DISRUPTION_TARGET }));
            }
            status.insert("$setElementOrder/conditions".into(), Value::Array(order));
            status.insert("conditions".into(), Value::Array(vec![new_json]));
        }
    }
    if status.is_empty() {
        return None;
    }
    Some(json!({ "metadata": { "uid": pod.uid() }, "status": status }))
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

    /// The lean builder gives the full one's body for the changes it
    /// supports, on pods with and without a status, phase, generation and
    /// an older DisruptionTarget.
    #[test]
    fn the_cached_pod_builder_matches_the_full_one() {
        let now = Timestamp::from_second(100).expect("ts");
        let dt = |reason: &str, status: &str| {
            let mut c = disruption_target(reason, "m", Timestamp::from_second(50).expect("ts"));
            c.status = status.into();
            c
        };
        let mut pods = vec![Pod::default(), pod()];
        let mut with_gen = pod();
        with_gen.metadata.generation = Some(3);
        pods.push(with_gen.clone());
        for old in [
            dt("DeletionByPodGC", "True"),
            dt("Other", "True"),
            dt("X", "False"),
        ] {
            let mut p = with_gen.clone();
            if let Some(st) = p.status.as_mut() {
                st.observed_generation = Some(3);
                st.conditions.get_or_insert_with(Vec::new).push(old);
            }
            pods.push(p);
        }
        for p in &pods {
            let cached = CachedPod::from(p);
            for phase in ["Failed", "Running"] {
                for cond in [None, Some(dt("DeletionByPodGC", "True"))] {
                    let mut st = p.status.clone().unwrap_or_default();
                    st.phase = Some(phase.into());
                    st.observed_generation = p.metadata.generation;
                    if let Some(c) = cond.clone() {
                        update_pod_condition(&mut st, c, now);
                    }
                    let full = pod_status_patch(p, &st);
                    let lean =
                        disruption_status_patch(&cached, phase, p.metadata.generation, cond, now);
                    assert_eq!(lean, full, "{p:?} {phase}");
                }
            }
        }
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
