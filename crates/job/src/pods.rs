//! Constants of the batch/v1 API and the Job's own pod predicates
//! (upstream: batch/v1 types.go, job_controller.go `isPodFailed`,
//! indexed_job_utils.go annotation readers); the predicates every
//! controller shares are `kcm_conditions::pod`'s.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kcm_pod::CachedPod;

/// Annotation (read) and label (written) holding a pod's completion index.
pub use kcm_pod::JOB_COMPLETION_INDEX;
/// Failures of this index counted before this pod was created.
pub use kcm_pod::JOB_INDEX_FAILURE_COUNT;
/// Ignored failures of this index before this pod was created.
pub use kcm_pod::JOB_INDEX_IGNORED_FAILURE_COUNT;
/// The finalizer that keeps a pod until the controller has counted it.
pub use kcm_pod::JOB_TRACKING_FINALIZER;
/// The `managedBy` value (or unset) that means "this controller".
pub const JOB_CONTROLLER_NAME: &str = "kubernetes.io/job-controller";
/// Env var carrying the completion index into Indexed pods.
pub const JOB_COMPLETION_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";

/// Complete=True or Failed=True.
pub fn is_finished(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        })
}

/// The controller `spec.managedBy` names (unset: KCM's) when it is not
/// `own`, this controller's name (`JOB_CONTROLLER_NAME`, or the
/// `--job-managed-by` name beside KCM).
pub fn managed_by_other<'a>(job: &'a Job, own: &str) -> Option<&'a str> {
    let named = job
        .spec
        .as_ref()
        .and_then(|s| s.managed_by.as_deref())
        .unwrap_or(JOB_CONTROLLER_NAME);
    (named != own).then_some(named)
}

/// `podReplacementPolicy: Failed` (or, as in 1.34, any pod failure policy):
/// terminating pods are not failures until their phase is `Failed`.
pub fn only_replace_failed_pods(job: &Job) -> bool {
    let spec = job.spec.as_ref();
    spec.and_then(|s| s.pod_replacement_policy.as_deref()) == Some("Failed")
        || spec.is_some_and(|s| s.pod_failure_policy.is_some())
}

/// The controller ownerReference a Job puts on what it creates (its pods,
/// its Workload and PodGroup).
pub fn controller_ref(job: &Job) -> OwnerReference {
    OwnerReference {
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        name: job.metadata.name.clone().unwrap_or_default(),
        uid: job.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Upstream `isPodFailed`: phase `Failed`; or, unless the Job replaces only
/// failed pods, a pod being deleted that did not succeed.
pub fn is_pod_failed(pod: &CachedPod, job: &Job) -> bool {
    if pod.phase() == "Failed" {
        return true;
    }
    if only_replace_failed_pods(job) {
        return false;
    }
    pod.is_deleting() && pod.phase() != "Succeeded"
}

fn annotation<'a>(pod: &'a CachedPod, key: &str) -> Option<&'a str> {
    let a = pod.job_annotations();
    match key {
        JOB_COMPLETION_INDEX => a.completion_index.as_deref(),
        JOB_INDEX_FAILURE_COUNT => a.index_failure_count.as_deref(),
        JOB_INDEX_IGNORED_FAILURE_COUNT => a.index_ignored_failure_count.as_deref(),
        _ => None,
    }
}

/// The completion index from the annotation (never the label); missing,
/// unparsable or negative means unknown (`None`).
pub fn completion_index(pod: &CachedPod) -> Option<i32> {
    annotation(pod, JOB_COMPLETION_INDEX)?
        .parse::<i32>()
        .ok()
        .filter(|i| *i >= 0)
}

/// A count annotation: missing → 0; unparsable, negative or above i32::MAX → 0.
fn count_annotation(pod: &CachedPod, key: &str) -> i32 {
    match annotation(pod, key) {
        None => 0,
        Some(v) => match v.parse::<i64>() {
            Ok(n) if (0..=i64::from(i32::MAX)).contains(&n) => i32::try_from(n).unwrap_or(0),
            _ => {
                // Upstream `parseInt32` logs these at level 0 too ("Failed to
                // parse the value", "The value is invalid").
                tracing::info!(
                    pod = %pod.key(),
                    annotation = key,
                    value = v,
                    "invalid count annotation; using 0"
                );
                0
            }
        },
    }
}

/// `batch.kubernetes.io/job-index-failure-count`.
pub fn index_failure_count(pod: &CachedPod) -> i32 {
    count_annotation(pod, JOB_INDEX_FAILURE_COUNT)
}

/// `batch.kubernetes.io/job-index-ignored-failure-count`.
pub fn index_ignored_failure_count(pod: &CachedPod) -> i32 {
    count_annotation(pod, JOB_INDEX_IGNORED_FAILURE_COUNT)
}

/// `spec.completions` as used by Indexed Jobs (0 when unset, which API
/// validation forbids for Indexed).
pub fn completions(job: &Job) -> i32 {
    job.spec.as_ref().and_then(|s| s.completions).unwrap_or(0)
}

/// `spec.completionMode` when it is set to a mode this version does not
/// know (only a newer, skewed API server can serve one; validation refuses
/// it). Upstream then records a Warning `UnknownCompletionMode` and skips
/// the sync; so does `sync_job`.
pub fn unknown_completion_mode(job: &Job) -> Option<&str> {
    job.spec
        .as_ref()?
        .completion_mode
        .as_deref()
        .filter(|m| !matches!(*m, "NonIndexed" | "Indexed"))
}

pub fn is_indexed(job: &Job) -> bool {
    job.spec.as_ref().and_then(|s| s.completion_mode.as_deref()) == Some("Indexed")
}

/// A valid index for this Job: known and below completions.
pub fn valid_index(pod: &CachedPod, job: &Job) -> Option<i32> {
    completion_index(pod).filter(|i| *i < completions(job))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::batch::v1::JobSpec;
    use k8s_openapi::api::core::v1::{Pod, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    use super::*;

    fn pod(phase: &str, deleting: bool, ann: &[(&str, &str)]) -> CachedPod {
        CachedPod::from(Pod {
            metadata: ObjectMeta {
                deletion_timestamp: deleting.then_some(Time(jiff::Timestamp::UNIX_EPOCH)),
                annotations: Some(
                    ann.iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect::<BTreeMap<_, _>>(),
                ),
                ..Default::default()
            },
            status: Some(PodStatus {
                phase: Some(phase.into()),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn job(policy: Option<&str>) -> Job {
        Job {
            spec: Some(JobSpec {
                pod_replacement_policy: policy.map(str::to_string),
                completions: Some(3),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn failed_pods_by_replacement_policy() {
        assert!(is_pod_failed(
            &pod("Failed", false, &[]),
            &job(Some("Failed"))
        ));
        assert!(!is_pod_failed(
            &pod("Running", true, &[]),
            &job(Some("Failed"))
        ));
        assert!(is_pod_failed(
            &pod("Running", true, &[]),
            &job(Some("TerminatingOrFailed"))
        ));
        assert!(is_pod_failed(&pod("Pending", true, &[]), &job(None)));
        assert!(!is_pod_failed(&pod("Succeeded", true, &[]), &job(None)));
        assert!(!is_pod_failed(&pod("Running", false, &[]), &job(None)));
    }

    #[test]
    fn indexes_and_counts_from_annotations() {
        let j = job(None);
        assert_eq!(
            completion_index(&pod("Running", false, &[(JOB_COMPLETION_INDEX, "2")])),
            Some(2)
        );
        assert_eq!(
            valid_index(&pod("Running", false, &[(JOB_COMPLETION_INDEX, "3")]), &j),
            None
        );
        for bad in ["-1", "x", "", "99999999999"] {
            assert_eq!(
                completion_index(&pod("Running", false, &[(JOB_COMPLETION_INDEX, bad)])),
                None,
                "{bad}"
            );
        }
        assert_eq!(
            index_failure_count(&pod("Failed", false, &[(JOB_INDEX_FAILURE_COUNT, "4")])),
            4
        );
        for bad in ["-1", "2147483648", "x"] {
            assert_eq!(
                index_failure_count(&pod("Failed", false, &[(JOB_INDEX_FAILURE_COUNT, bad)])),
                0,
                "{bad}"
            );
        }
        assert_eq!(index_ignored_failure_count(&pod("Failed", false, &[])), 0);
    }

    #[test]
    fn unknown_completion_modes() {
        let mode = |m: Option<&str>| {
            let mut j = job(None);
            if let Some(spec) = j.spec.as_mut() {
                spec.completion_mode = m.map(str::to_string);
            }
            j
        };
        assert_eq!(unknown_completion_mode(&mode(None)), None);
        assert_eq!(unknown_completion_mode(&mode(Some("Indexed"))), None);
        assert_eq!(unknown_completion_mode(&mode(Some("NonIndexed"))), None);
        for bad in ["Foo", "indexed", ""] {
            assert_eq!(
                unknown_completion_mode(&mode(Some(bad))),
                Some(bad),
                "{bad:?}"
            );
        }
        assert_eq!(unknown_completion_mode(&Job::default()), None);
    }
}
