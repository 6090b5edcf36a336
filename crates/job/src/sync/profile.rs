//! The version profile: everything in which the Job controllers of KCM
//! 1.34 to 1.37 differ in what they do, decided once from the minor kcm-rs
//! behaves as and its feature gates, and read by the stages and the
//! executor. The only other reader of the version is `crate::metrics`,
//! given it as a value at start: what the metric families say (stability
//! levels in the help texts, the 1.36+ family), never what is done.
//!
//! | difference | from | gate |
//! |---|---|---|
//! | suspending clears `status.startTime` | 1.35 (off), 1.36 (on) | `MutableSchedulingDirectivesForSuspendedJobs` |
//! | read-your-writes check before a sync (`controller::consistency`) | 1.36 | `StaleControllerConsistencyJob` |
//! | Workloads and PodGroups for gang-shaped Jobs (`crate::workload::v136`; alpha, off; `scheduling.k8s.io/v1alpha2`) | 1.36 | `WorkloadWithJob` |
//! | … for every Job, from `spec.scheduling`, delegation, gang resizing (`crate::workload`; alpha, off; `v1beta1`) | 1.37 | `WorkloadWithJob` |
//!
//! Gates off only under `--emulated-version` (or, for `JobManagedBy`, on
//! 1.34), each as upstream's `feature.DefaultFeatureGate.Enabled` sites:
//! mostly the Job's field is ignored ([`Config::view`]); the rest are
//! read where they act (`JobSuccessPolicy`: no reason or message on the
//! completions-reached condition; `JobPodReplacementPolicy`: no
//! `status.terminating`, pod creations counted as `new`). With both
//! `JobManagedBy` and `JobPodReplacementPolicy` off ([`Config::delay_terminal`]
//! false), Jobs end `Failed` or `Complete` at once, without the interim
//! `FailureTarget` (but for the pod failure policy's) or `SuccessCriteriaMet`,
//! and without waiting for terminating pods (upstream `delayTerminalCondition`).
//!
//! What kcm-rs does the newer way on every minor (listed in
//! docs/deviations.md): `status.active` while creation waits for back-off (1.36), the
//! per-pod retry of a failed finalizer removal in the sweep and the
//! expectations cleared on Job delete (1.37). Gate removals (1.37) change
//! nothing at the defaults.

use std::sync::Arc;

use k8s_openapi::api::batch::v1::{Job, PodFailurePolicy};
use kcm_features::{Feature, FeatureGates};

use crate::pods::{JOB_CONTROLLER_NAME, managed_by_other};

/// Why `--job-managed-by` cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BesideError {
    #[error(
        "--job-managed-by needs the JobManagedBy feature gate: with it off every Job would be synced, KCM's too"
    )]
    GateOff,
}

/// Options that change decisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `JobPodFailurePolicy`: off means `spec.podFailurePolicy` is ignored.
    pub pod_failure_policy: bool,
    /// Suspending a Job (JobSuspended newly True) clears `status.startTime`.
    pub clear_start_time_on_suspend: bool,
    /// Skip a sync until the informers have seen the controller's own last
    /// writes for the Job (job_controller_stale_sync_skips_total).
    pub read_your_writes: bool,
    /// `JobManagedBy`: off means `spec.managedBy` is ignored (every Job is
    /// synced).
    pub managed_by: bool,
    /// `JobSuccessPolicy`: off means `spec.successPolicy` is ignored.
    pub success_policy: bool,
    /// `JobBackoffLimitPerIndex`: off means `spec.backoffLimitPerIndex`
    /// is ignored and `FailIndex` rules never decide.
    pub backoff_limit_per_index: bool,
    /// `JobPodReplacementPolicy`: off means `spec.podReplacementPolicy` is
    /// ignored and `status.terminating` is not written.
    pub pod_replacement_policy: bool,
    /// `WorkloadWithJob`: Jobs get scheduling Workloads and PodGroups, and
    /// their pods name the PodGroup.
    pub workload_with_job: bool,
    /// Which minor's rules and API version `workload_with_job` follows (the
    /// binary minor's: 1.36's v1alpha2, or 1.37's v1beta1).
    pub workload_api: crate::workload::Api,
    /// The `spec.managedBy` this controller answers to: KCM's name, or the
    /// `--job-managed-by` name when it runs beside KCM ([`Config::beside_kcm`]).
    pub own_name: Arc<str>,
}

impl Config {
    /// The profile of `gates`' minor with those gates.
    pub fn new(gates: &FeatureGates) -> Config {
        Config {
            pod_failure_policy: gates.enabled(Feature::JobPodFailurePolicy),
            clear_start_time_on_suspend: gates
                .enabled(Feature::MutableSchedulingDirectivesForSuspendedJobs),
            read_your_writes: gates.enabled(Feature::StaleControllerConsistencyJob),
            managed_by: gates.enabled(Feature::JobManagedBy),
            success_policy: gates.enabled(Feature::JobSuccessPolicy),
            backoff_limit_per_index: gates.enabled(Feature::JobBackoffLimitPerIndex),
            pod_replacement_policy: gates.enabled(Feature::JobPodReplacementPolicy),
            workload_with_job: gates.enabled(Feature::WorkloadWithJob),
            workload_api: if gates.version().at_least(37) {
                crate::workload::Api::V1beta1
            } else {
                crate::workload::Api::V1alpha2
            },
            own_name: JOB_CONTROLLER_NAME.into(),
        }
    }

    /// This profile beside KCM, answering to `name` (`--job-managed-by`):
    /// refused with `JobManagedBy` off, where every Job would be synced.
    pub fn beside(self, name: &str) -> Result<Config, BesideError> {
        if !self.managed_by {
            return Err(BesideError::GateOff);
        }
        Ok(Config {
            own_name: name.into(),
            ..self
        })
    }

    /// Whether a Job's terminal condition waits behind an interim one
    /// (`FailureTarget`, `SuccessCriteriaMet`) and for its terminating pods:
    /// either gate on (upstream `delayTerminalCondition`).
    pub fn delay_terminal(&self) -> bool {
        self.managed_by || self.pod_replacement_policy
    }

    /// The condition a failure (backoff limit, deadline, failed indexes)
    /// sets: the interim `FailureTarget`, or `Failed` at once.
    pub fn failure_type(&self) -> &'static str {
        if self.delay_terminal() {
            "FailureTarget"
        } else {
            "Failed"
        }
    }

    /// Runs beside KCM's job-controller (`--job-managed-by`): Jobs without
    /// `spec.managedBy`, and ownerless pods, are KCM's.
    pub fn beside_kcm(&self) -> bool {
        &*self.own_name != JOB_CONTROLLER_NAME
    }

    /// The controller `spec.managedBy` names when it is not this one,
    /// whatever the gate says.
    pub fn foreign<'a>(&self, job: &'a Job) -> Option<&'a str> {
        managed_by_other(job, &self.own_name)
    }

    /// The controller named in `spec.managedBy` when it is not this one
    /// and the gate makes the field count (upstream
    /// `managedByExternalController`).
    pub fn managed_elsewhere<'a>(&self, job: &'a Job) -> Option<&'a str> {
        self.foreign(job).filter(|_| self.managed_by)
    }

    /// The Job as the sync reads it: the fields of gates that are off
    /// cleared, as upstream's checks treat them (`hasBackoffLimitPerIndex`,
    /// `matchSuccessPolicy`, `onlyReplaceFailedPods` and
    /// `managedByExternalController` all test gate and field together), and
    /// the pod failure policy as [`Config::policy`] reads it. The one place
    /// the gates shape a Job: the sync runs on this copy, and only its
    /// status is written, so the stored spec stays.
    pub fn view(&self, mut job: Job) -> Job {
        let Some(spec) = job.spec.as_mut() else {
            return job;
        };
        if !self.managed_by {
            spec.managed_by = None;
        }
        if !self.success_policy {
            spec.success_policy = None;
        }
        if !self.pod_replacement_policy {
            spec.pod_replacement_policy = None;
        }
        if !self.backoff_limit_per_index {
            spec.backoff_limit_per_index = None;
            spec.max_failed_indexes = None;
        }
        spec.pod_failure_policy = self.shape_policy(spec.pod_failure_policy.take());
        job
    }

    /// The pod failure policy of `job` as the controller applies it (what
    /// [`Config::view`] leaves): for readers of a Job that is not viewed
    /// (the pod handlers, `kcm-rs explain`).
    pub fn policy(&self, job: &Job) -> Option<PodFailurePolicy> {
        self.shape_policy(job.spec.as_ref()?.pod_failure_policy.clone())
    }

    /// None with `JobPodFailurePolicy` off (upstream then ignored the
    /// field, also in `onlyReplaceFailedPods`); with
    /// `JobBackoffLimitPerIndex` off, `FailIndex` rules read as an action
    /// the matcher does not know: upstream's matcher passes over them, and
    /// every later rule keeps its index.
    fn shape_policy(&self, policy: Option<PodFailurePolicy>) -> Option<PodFailurePolicy> {
        let mut policy = policy.filter(|_| self.pod_failure_policy)?;
        if !self.backoff_limit_per_index {
            for rule in &mut policy.rules {
                if rule.action == "FailIndex" {
                    rule.action = GATED_FAIL_INDEX.into();
                }
            }
        }
        Some(policy)
    }
}

/// The action a `FailIndex` rule reads as with `JobBackoffLimitPerIndex`
/// off: none the matcher knows.
pub const GATED_FAIL_INDEX: &str = "FailIndex (JobBackoffLimitPerIndex off)";

impl Default for Config {
    /// The oldest supported minor at its defaults.
    fn default() -> Self {
        Config::new(&FeatureGates::default())
    }
}

#[cfg(test)]
mod tests {
    use kcm_features::KubeVersion;

    use super::*;

    #[test]
    fn each_minor_has_its_profile() {
        let at = |m| Config::new(&FeatureGates::defaults(KubeVersion::new(m).expect("v")));
        let rows: Vec<(bool, bool)> = [34, 35, 36, 37]
            .map(at)
            .iter()
            .map(|c| (c.clear_start_time_on_suspend, c.read_your_writes))
            .collect();
        assert_eq!(
            rows,
            [(false, false), (false, false), (true, true), (true, true)]
        );
        let on35 = FeatureGates::parse_for(
            KubeVersion::new(35).expect("v"),
            "MutableSchedulingDirectivesForSuspendedJobs=true",
        )
        .expect("gates");
        assert!(Config::new(&on35).clear_start_time_on_suspend);
        assert!(Config::default().pod_failure_policy);
    }

    #[test]
    fn gates_off_hide_their_fields() {
        let job: Job = serde_json::from_value(serde_json::json!({"spec": {
            "template": {},
            "managedBy": "example.com/other",
            "successPolicy": {"rules": [{"succeededCount": 1}]},
            "backoffLimitPerIndex": 1, "maxFailedIndexes": 1,
            "podReplacementPolicy": "Failed",
            "podFailurePolicy": {"rules": [
                {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [3]}},
                {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [4]}}
            ]}
        }}))
        .expect("job");
        let on = Config::default();
        assert_eq!(on.view(job.clone()), job);
        assert_eq!(on.managed_elsewhere(&job), Some("example.com/other"));
        let e32 = kcm_features::Emulation::new(KubeVersion::OLDEST, 32).expect("e");
        let off = FeatureGates::parse_at(
            e32,
            "JobManagedBy=false,JobSuccessPolicy=false,JobBackoffLimitPerIndex=false",
        )
        .expect("gates")
        .with(Feature::JobPodReplacementPolicy, false);
        let off = Config::new(&off);
        assert_eq!(off.managed_elsewhere(&job), None);
        let spec = off.view(job.clone()).spec.expect("spec");
        assert!(spec.managed_by.is_none() && spec.success_policy.is_none());
        assert!(spec.backoff_limit_per_index.is_none() && spec.max_failed_indexes.is_none());
        assert!(spec.pod_replacement_policy.is_none());
        let actions: Vec<String> = spec
            .pod_failure_policy
            .expect("kept")
            .rules
            .into_iter()
            .map(|r| r.action)
            .collect();
        assert_eq!(actions, [GATED_FAIL_INDEX, "FailJob"]);
        assert_eq!(off.policy(&job).map(|p| p.rules.len()), Some(2));
        let no_policy = Config {
            pod_failure_policy: false,
            ..Config::default()
        };
        assert!(no_policy.policy(&job).is_none());
        let viewed = no_policy.view(job).spec.expect("spec");
        assert!(
            viewed.pod_failure_policy.is_none(),
            "one way: view and policy agree"
        );
    }

    #[test]
    fn beside_kcm_answers_only_to_its_name() {
        let job = |m: Option<&str>| -> Job {
            let mut spec = serde_json::json!({"template": {}});
            if let Some(m) = m {
                spec["managedBy"] = m.into();
            }
            serde_json::from_value(serde_json::json!({ "spec": spec })).expect("job")
        };
        let (kcm, ours, other) = (job(None), job(Some("kcm-rs.dev/j")), job(Some("x.io/y")));
        let classic = Config::default();
        assert!(!classic.beside_kcm());
        assert_eq!(classic.managed_elsewhere(&kcm), None);
        assert_eq!(classic.managed_elsewhere(&ours), Some("kcm-rs.dev/j"));
        let beside = Config::default().beside("kcm-rs.dev/j").expect("gate on");
        assert!(beside.beside_kcm());
        assert_eq!(beside.managed_elsewhere(&ours), None);
        assert_eq!(beside.managed_elsewhere(&kcm), Some(JOB_CONTROLLER_NAME));
        let explicit = job(Some(JOB_CONTROLLER_NAME));
        assert_eq!(
            beside.managed_elsewhere(&explicit),
            Some(JOB_CONTROLLER_NAME)
        );
        assert_eq!(beside.managed_elsewhere(&other), Some("x.io/y"));
        let off = Config {
            managed_by: false,
            ..Config::default()
        };
        assert_eq!(off.beside("kcm-rs.dev/j"), Err(BesideError::GateOff));
    }
}
