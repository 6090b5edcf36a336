//! Job condition helpers with the Job controller's rules
//! (pkg/controller/job/job_controller.go `ensureJobConditionStatus`,
//! `newCondition`).

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::JobCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// A Job condition stamped with `now` as both probe and transition time.
pub fn new_job_condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> JobCondition {
    JobCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        last_probe_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

/// The first condition of `type_`.
pub fn find_job_condition<'a>(list: &'a [JobCondition], type_: &str) -> Option<&'a JobCondition> {
    list.iter().find(|c| c.type_ == type_)
}

/// True when a condition of `type_` has status `True`.
pub fn is_job_condition_true(list: &[JobCondition], type_: &str) -> bool {
    find_job_condition(list, type_).is_some_and(|c| c.status == "True")
}

/// Sets a condition of `type_` to `status`/`reason`/`message`, returning
/// whether the list changed. An existing condition that differs in any of
/// the three is replaced by a fresh one (both times become `now`); a missing
/// condition is appended unless `status` is `False` (nothing to false is
/// meaningless).
pub fn ensure_job_condition_status(
    list: &mut Vec<JobCondition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> bool {
    if let Some(c) = list.iter_mut().find(|c| c.type_ == type_) {
        let same = c.status == status
            && c.reason.as_deref().unwrap_or("") == reason
            && c.message.as_deref().unwrap_or("") == message;
        if same {
            return false;
        }
        *c = new_job_condition(type_, status, reason, message, now);
        return true;
    }
    if status != "False" {
        list.push(new_job_condition(type_, status, reason, message, now));
        return true;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).expect("valid")
    }

    /// Ensures `Suspended` with `status`, `reason` and `message` at second `t`.
    fn suspended(
        l: &mut Vec<JobCondition>,
        status: &str,
        reason: &str,
        message: &str,
        t: i64,
    ) -> bool {
        ensure_job_condition_status(l, "Suspended", status, reason, message, at(t))
    }

    #[test]
    fn missing_false_is_not_added_but_true_is() {
        let mut l = Vec::new();
        assert!(!suspended(&mut l, "False", "JobResumed", "m", 1));
        assert!(l.is_empty());
        assert!(suspended(&mut l, "True", "JobSuspended", "m", 1));
        assert!(is_job_condition_true(&l, "Suspended"));
    }

    #[test]
    fn any_difference_replaces_with_fresh_times() {
        let mut l = Vec::new();
        suspended(&mut l, "True", "JobSuspended", "a", 1);
        assert!(!suspended(&mut l, "True", "JobSuspended", "a", 2));
        assert_eq!(l[0].last_transition_time, Some(Time(at(1))));
        assert!(suspended(&mut l, "True", "JobSuspended", "b", 3));
        assert_eq!(l[0].last_transition_time, Some(Time(at(3))));
        assert!(suspended(&mut l, "False", "JobResumed", "c", 4));
        assert_eq!(l.len(), 1);
        assert!(!is_job_condition_true(&l, "Suspended"));
    }
}
