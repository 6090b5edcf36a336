//! Pod condition lookup and upsert (upstream pkg/api/v1/pod/util.go
//! semantics) and the pod and node predicates the controllers share.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kcm_pod::CachedPod;

/// The first condition of `type_` in list order.
pub fn get_pod_condition<'a>(
    status: Option<&'a PodStatus>,
    type_: &str,
) -> Option<&'a PodCondition> {
    status?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// Upserts `condition` into `status` with upstream's rules, returning
/// whether anything observable changed:
/// - its transition time becomes `now`, or stays the old one when the status
///   value is unchanged;
/// - a new type is appended at the end;
/// - an existing entry is replaced wholesale (fields the new condition
///   leaves empty are lost);
/// - `observedGeneration` alone never counts as a change.
pub fn update_pod_condition(
    status: &mut PodStatus,
    mut condition: PodCondition,
    now: Timestamp,
) -> bool {
    condition.last_transition_time = Some(Time(now));
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let Some(old) = conditions.iter_mut().find(|c| c.type_ == condition.type_) else {
        conditions.push(condition);
        return true;
    };
    if condition.status == old.status {
        condition.last_transition_time = old.last_transition_time.clone();
    }
    let equal = condition.status == old.status
        && condition.reason.as_deref().unwrap_or("") == old.reason.as_deref().unwrap_or("")
        && condition.message.as_deref().unwrap_or("") == old.message.as_deref().unwrap_or("")
        && condition.last_probe_time == old.last_probe_time
        && condition.last_transition_time == old.last_transition_time;
    *old = condition;
    !equal
}

/// Phase `Succeeded` or `Failed` (upstream `podutil.IsPodTerminal`).
pub fn is_pod_terminal(pod: &CachedPod) -> bool {
    matches!(pod.phase(), "Succeeded" | "Failed")
}

/// Not terminal and not being deleted (upstream `controller.IsPodActive`).
pub fn is_pod_active(pod: &CachedPod) -> bool {
    !is_pod_terminal(pod) && !pod.is_deleting()
}

/// Not terminal and being deleted (upstream `controller.IsPodTerminating`).
pub fn is_pod_terminating(pod: &CachedPod) -> bool {
    !is_pod_terminal(pod) && pod.is_deleting()
}

/// The `Ready` condition exists and is `True`, phase not consulted
/// (upstream `podutil.IsPodReady`).
pub fn is_pod_ready(pod: &CachedPod) -> bool {
    pod.condition("Ready").is_some_and(|c| &*c.status == "True")
}

/// Evicted by the kubelet: phase `Failed` and `status.reason` `Evicted`.
pub fn is_evicted(pod: &CachedPod) -> bool {
    pod.phase() == "Failed" && pod.reason_is_evicted()
}

/// The node's `Ready` condition exists and is `True`; absent means not ready.
pub fn is_node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond(t: &str, status: &str, reason: &str) -> PodCondition {
        PodCondition {
            type_: t.into(),
            status: status.into(),
            reason: Some(reason.into()),
            ..Default::default()
        }
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).expect("valid")
    }

    #[test]
    fn new_types_are_appended_with_now() {
        let mut st = PodStatus {
            conditions: Some(vec![cond("Ready", "True", "")]),
            ..Default::default()
        };
        assert!(update_pod_condition(
            &mut st,
            cond("DisruptionTarget", "True", "R"),
            at(10)
        ));
        let cs = st.conditions.expect("conditions");
        assert_eq!(cs[1].type_, "DisruptionTarget");
        assert_eq!(cs[1].last_transition_time, Some(Time(at(10))));
    }

    #[test]
    fn same_status_keeps_transition_time_and_reports_reason_changes() {
        let mut st = PodStatus::default();
        update_pod_condition(&mut st, cond("DisruptionTarget", "True", "A"), at(10));
        assert!(!update_pod_condition(
            &mut st,
            cond("DisruptionTarget", "True", "A"),
            at(20)
        ));
        assert!(update_pod_condition(
            &mut st,
            cond("DisruptionTarget", "True", "B"),
            at(30)
        ));
        let c = get_pod_condition(Some(&st), "DisruptionTarget")
            .expect("c")
            .clone();
        assert_eq!(c.last_transition_time, Some(Time(at(10))));
        assert_eq!(c.reason.as_deref(), Some("B"));
        assert!(update_pod_condition(
            &mut st,
            cond("DisruptionTarget", "False", ""),
            at(40)
        ));
        let c = get_pod_condition(Some(&st), "DisruptionTarget").expect("c");
        assert_eq!(c.last_transition_time, Some(Time(at(40))));
        assert_eq!(c.reason.as_deref(), Some(""), "replaced wholesale");
    }

    #[test]
    fn observed_generation_alone_is_not_a_change() {
        let mut st = PodStatus::default();
        update_pod_condition(&mut st, cond("X", "True", "A"), at(1));
        let mut next = cond("X", "True", "A");
        next.observed_generation = Some(7);
        assert!(!update_pod_condition(&mut st, next, at(2)));
        assert_eq!(
            get_pod_condition(Some(&st), "X").and_then(|c| c.observed_generation),
            Some(7)
        );
    }

    #[test]
    fn predicates() {
        use k8s_openapi::api::core::v1::Pod;
        let mut p = Pod::default();
        let cached = CachedPod::from(&p);
        assert!(!is_pod_terminal(&cached) && !is_pod_ready(&cached) && !is_evicted(&cached));
        p.status = Some(PodStatus {
            phase: Some("Failed".into()),
            reason: Some("Evicted".into()),
            conditions: Some(vec![cond("Ready", "True", "")]),
            ..Default::default()
        });
        let cached = CachedPod::from(&p);
        assert!(is_pod_terminal(&cached) && is_pod_ready(&cached) && is_evicted(&cached));
        assert!(!is_node_ready(&Node::default()));
        let pod = |phase: &str, deleting: bool| {
            CachedPod::from(Pod {
                metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                    deletion_timestamp: deleting.then_some(Time(Timestamp::UNIX_EPOCH)),
                    ..Default::default()
                },
                status: Some(PodStatus {
                    phase: Some(phase.into()),
                    ..Default::default()
                }),
                ..Default::default()
            })
        };
        assert!(is_pod_active(&pod("Running", false)));
        assert!(is_pod_terminating(&pod("Running", true)));
        assert!(!is_pod_terminating(&pod("Failed", true)));
        assert!(!is_pod_active(&pod("Succeeded", false)));
        assert!(!is_pod_active(&pod("Pending", true)));
    }
}
