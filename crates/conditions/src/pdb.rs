//! The PodDisruptionBudget `DisruptionAllowed` condition (component-helpers
//! apps/poddisruptionbudget) and `meta.SetStatusCondition` semantics for
//! `metav1.Condition` lists.

use jiff::Timestamp;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// The PDB condition type the disruption controller maintains.
pub const DISRUPTION_ALLOWED: &str = "DisruptionAllowed";
/// Reason when `disruptionsAllowed > 0` (status True).
pub const REASON_SUFFICIENT_PODS: &str = "SufficientPods";
/// Reason when `disruptionsAllowed == 0` (status False).
pub const REASON_INSUFFICIENT_PODS: &str = "InsufficientPods";
/// Reason written only by the controller's fail-safe path.
pub const REASON_SYNC_FAILED: &str = "SyncFailed";

/// Go omits a zero `observedGeneration`; treat 0 and unset alike.
fn generation(g: Option<i64>) -> Option<i64> {
    g.filter(|g| *g != 0)
}

/// The first condition of `type_`.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// `meta.SetStatusCondition`: a new type is appended with
/// `lastTransitionTime = now`; an existing one gets a new transition time
/// only when its status changes, and reason, message and observedGeneration
/// are overwritten in place. The caller's `last_transition_time` is ignored
/// (every kcm-rs caller leaves it unset, which upstream replaces by now).
/// Returns whether anything changed.
pub fn set_status_condition(
    conditions: &mut Vec<Condition>,
    new: Condition,
    now: Timestamp,
) -> bool {
    let Some(old) = conditions.iter_mut().find(|c| c.type_ == new.type_) else {
        conditions.push(Condition {
            last_transition_time: Time(now),
            observed_generation: generation(new.observed_generation),
            ..new
        });
        return true;
    };
    let mut changed = false;
    if old.status != new.status {
        old.status = new.status;
        old.last_transition_time = Time(now);
        changed = true;
    }
    if old.reason != new.reason {
        old.reason = new.reason;
        changed = true;
    }
    if old.message != new.message {
        old.message = new.message;
        changed = true;
    }
    let og = generation(new.observed_generation);
    if generation(old.observed_generation) != og {
        old.observed_generation = og;
        changed = true;
    }
    changed
}

/// `UpdateDisruptionAllowedCondition`: `SufficientPods`/True when
/// `disruptionsAllowed > 0`, else `InsufficientPods`/False; empty message;
/// condition `observedGeneration` copied from `status.observedGeneration`.
pub fn update_disruption_allowed_condition(pdb: &mut PodDisruptionBudget, now: Timestamp) {
    let status = pdb.status.get_or_insert_with(Default::default);
    let (st, reason) = if status.disruptions_allowed.unwrap_or(0) > 0 {
        ("True", REASON_SUFFICIENT_PODS)
    } else {
        ("False", REASON_INSUFFICIENT_PODS)
    };
    let cond = Condition {
        type_: DISRUPTION_ALLOWED.into(),
        status: st.into(),
        reason: reason.into(),
        message: String::new(),
        observed_generation: status.observed_generation,
        last_transition_time: Time(now),
    };
    set_status_condition(status.conditions.get_or_insert_with(Vec::new), cond, now);
}

/// `ConditionsAreUpToDate`: the condition exists, `status.observedGeneration`
/// equals `metadata.generation`, and status/reason match the
/// `disruptionsAllowed > 0` rule.
pub fn conditions_are_up_to_date(pdb: &PodDisruptionBudget) -> bool {
    let Some(status) = pdb.status.as_ref() else {
        return false;
    };
    let Some(cond) = find_condition(
        status.conditions.as_deref().unwrap_or(&[]),
        DISRUPTION_ALLOWED,
    ) else {
        return false;
    };
    if status.observed_generation.unwrap_or(0) != pdb.metadata.generation.unwrap_or(0) {
        return false;
    }
    if status.disruptions_allowed.unwrap_or(0) > 0 {
        cond.status == "True" && cond.reason == REASON_SUFFICIENT_PODS
    } else {
        cond.status == "False" && cond.reason == REASON_INSUFFICIENT_PODS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::policy::v1::PodDisruptionBudgetStatus;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).expect("valid")
    }

    fn pdb(generation: i64, observed: i64, allowed: i32) -> PodDisruptionBudget {
        let mut p = PodDisruptionBudget::default();
        p.metadata.generation = Some(generation);
        p.status = Some(PodDisruptionBudgetStatus {
            observed_generation: Some(observed),
            disruptions_allowed: Some(allowed),
            ..Default::default()
        });
        p
    }

    fn conditions(p: &PodDisruptionBudget) -> Vec<Condition> {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .expect("conditions")
    }

    #[test]
    fn condition_follows_disruptions_allowed_and_keeps_transition_time() {
        let mut p = pdb(2, 2, 1);
        assert!(!conditions_are_up_to_date(&p));
        update_disruption_allowed_condition(&mut p, at(10));
        assert!(conditions_are_up_to_date(&p));
        let c = conditions(&p);
        assert_eq!(
            (
                c[0].status.as_str(),
                c[0].reason.as_str(),
                c[0].message.as_str()
            ),
            ("True", REASON_SUFFICIENT_PODS, "")
        );
        assert_eq!(c[0].observed_generation, Some(2));
        assert_eq!(c[0].last_transition_time, Time(at(10)));
        // Same status later: transition time kept.
        update_disruption_allowed_condition(&mut p, at(20));
        let c = conditions(&p);
        assert_eq!(c[0].last_transition_time, Time(at(10)));
        // Flip to False: new transition time.
        if let Some(s) = p.status.as_mut() {
            s.disruptions_allowed = Some(0);
        }
        assert!(!conditions_are_up_to_date(&p));
        update_disruption_allowed_condition(&mut p, at(30));
        let c = conditions(&p);
        assert_eq!(
            (c[0].status.as_str(), c[0].reason.as_str()),
            ("False", REASON_INSUFFICIENT_PODS)
        );
        assert_eq!(c[0].last_transition_time, Time(at(30)));
        assert!(conditions_are_up_to_date(&p));
    }

    #[test]
    fn stale_generation_is_not_up_to_date() {
        let mut p = pdb(3, 2, 0);
        update_disruption_allowed_condition(&mut p, at(1));
        assert!(!conditions_are_up_to_date(&p));
    }

    #[test]
    fn set_status_condition_overwrites_reason_message_generation() {
        let mut cs = Vec::new();
        let c = |status: &str, reason: &str, msg: &str, g: i64| Condition {
            type_: "X".into(),
            status: status.into(),
            reason: reason.into(),
            message: msg.into(),
            observed_generation: Some(g),
            last_transition_time: Time(at(0)),
        };
        assert!(set_status_condition(&mut cs, c("False", "A", "", 0), at(5)));
        assert_eq!(cs[0].observed_generation, None, "0 is omitted");
        assert!(!set_status_condition(
            &mut cs,
            c("False", "A", "", 0),
            at(6)
        ));
        assert!(set_status_condition(
            &mut cs,
            c("False", "B", "m", 4),
            at(7)
        ));
        assert_eq!(cs[0].last_transition_time, Time(at(5)));
        assert_eq!((cs[0].reason.as_str(), cs[0].message.as_str()), ("B", "m"));
        assert_eq!(cs[0].observed_generation, Some(4));
    }
}
