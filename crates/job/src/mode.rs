//! Which mode kcm-rs runs in, as written on the objects it leaves in the
//! cluster: its leader Lease and the Job controller's events carry
//! [`MODE`] (`replacement` or `beside-kcm`) and [`JOB_MANAGED_BY`] (the
//! `spec.managedBy` its Job controller answers to). `kcm-rs lint` reads them
//! back to tell whether a Job's `managedBy` names a running controller.

use std::collections::BTreeMap;

use crate::pods::JOB_CONTROLLER_NAME;

/// `replacement` or `beside-kcm`.
pub const MODE: &str = "kcm-rs.dev/mode";
/// The `spec.managedBy` value kcm-rs's Job controller syncs: KCM's
/// `kubernetes.io/job-controller` when it replaces KCM's, the
/// `--job-managed-by` name beside KCM, empty when no Job controller runs.
pub const JOB_MANAGED_BY: &str = "kcm-rs.dev/job-managed-by";

/// kcm-rs replaces KCM's controllers (KCM runs without them).
pub const REPLACEMENT: &str = "replacement";
/// kcm-rs's Job controller runs beside an unmodified KCM
/// (`--job-managed-by`).
pub const BESIDE_KCM: &str = "beside-kcm";

/// The marks of a process started with `--job-managed-by=managed_by`
/// (`None`: replacement mode), `job_controller` telling whether its Job
/// controller runs. Both keys always get a value, so a Lease taken over
/// from a process in the other mode loses the old one.
pub fn annotations(managed_by: Option<&str>, job_controller: bool) -> BTreeMap<String, String> {
    let (mode, answers_to) = match managed_by {
        Some(name) => (BESIDE_KCM, name),
        None => (REPLACEMENT, JOB_CONTROLLER_NAME),
    };
    BTreeMap::from([
        (MODE.to_string(), mode.to_string()),
        (
            JOB_MANAGED_BY.to_string(),
            if job_controller { answers_to } else { "" }.to_string(),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mode_names_what_it_answers_to() {
        let beside = annotations(Some("kcm-rs.dev/job-controller"), true);
        assert_eq!(beside[MODE], BESIDE_KCM);
        assert_eq!(beside[JOB_MANAGED_BY], "kcm-rs.dev/job-controller");
        let replacing = annotations(None, true);
        assert_eq!(replacing[MODE], REPLACEMENT);
        assert_eq!(replacing[JOB_MANAGED_BY], JOB_CONTROLLER_NAME);
        let no_jobs = annotations(None, false);
        assert_eq!(no_jobs[MODE], REPLACEMENT);
        assert_eq!(no_jobs[JOB_MANAGED_BY], "");
    }
}
