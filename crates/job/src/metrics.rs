//! `job_controller_*` metrics with upstream names, labels and buckets
//! (pkg/controller/job/metrics/metrics.go), and kcm-rs's own Job families.
//! Each help text opens with the metric's stability level in the minor
//! kcm-rs behaves as, as Go's component-base writes it (`[STABLE] `,
//! `[BETA] `, `[ALPHA] `): 1.36 promoted the failure-policy and
//! tracking-finalizer counters to BETA. [`Metrics::new`] takes the
//! registry and that minor as values; the controller holds the result.

use std::collections::BTreeSet;

use kcm_features::KubeVersion;
use parking_lot::Mutex;
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};

use crate::untrusted::Untrusted;

/// The Job controller's families on one registry, for one minor.
pub struct Metrics {
    pub sync_duration: HistogramVec,
    pub syncs: IntCounterVec,
    pub jobs_finished: IntCounterVec,
    pub jobs_by_external_controller: IntCounterVec,
    pub pods_finished: IntCounterVec,
    pub pod_failures_handled_by_failure_policy: IntCounterVec,
    pub terminated_pods_tracking_finalizer: IntCounterVec,
    pub finished_indexes: IntCounterVec,
    pub pods_creation: IntCounterVec,
    /// `job_controller_stale_sync_skips_total{group,resource}`: KCM 1.36+
    /// registers it whatever the gate says; none before.
    pub stale_sync_skips: Option<IntCounterVec>,
    /// `kcm_rs_job_untrusted_input_total{reason}` and its log throttle.
    pub untrusted: Untrusted,
    /// `kcm_rs_conflicting_controller{writer}`: Jobs whose status that
    /// writer changed within the last two minutes (a series per writer
    /// seen), and the writers it shows.
    pub conflicting: IntGaugeVec,
    pub(crate) conflicting_shown: Mutex<BTreeSet<String>>,
    managed_by: IntGaugeVec,
    external: Mutex<ExternalControllers>,
}

/// A metric's stability level (component-base's `StabilityLevel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Alpha,
    Beta,
    Stable,
}

fn help(level: Level, text: &str) -> String {
    let tag = match level {
        Level::Alpha => "ALPHA",
        Level::Beta => "BETA",
        Level::Stable => "STABLE",
    };
    format!("[{tag}] {text}")
}

fn counter(r: &Registry, name: &str, help: String, labels: &[&str]) -> IntCounterVec {
    kcm_runtime::metrics::register(
        r,
        IntCounterVec::new(Opts::new(name, help), labels)
            .expect("constant metric definition is valid"),
    )
}

fn gauge(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    kcm_runtime::metrics::register(
        r,
        IntGaugeVec::new(Opts::new(name, help), labels)
            .expect("constant metric definition is valid"),
    )
}

impl Metrics {
    /// The families of `version`'s KCM, registered on `r`.
    pub fn new(r: &Registry, version: KubeVersion) -> Self {
        // BETA from 1.36, ALPHA before.
        let beta_from_1_36 = if version.at_least(36) {
            Level::Beta
        } else {
            Level::Alpha
        };
        // Upstream's buckets: 4 ms doubling 15 times (to about 65 s).
        let buckets =
            prometheus::exponential_buckets(0.004, 2.0, 15).expect("constant buckets are valid");
        let sync_duration = kcm_runtime::metrics::register(
            r,
            HistogramVec::new(
                HistogramOpts::new(
                    "job_controller_job_sync_duration_seconds",
                    help(Level::Stable, "The time it took to sync a job"),
                )
                .buckets(buckets),
                &["completion_mode", "result", "action"],
            )
            .expect("constant metric definition is valid"),
        );
        Metrics {
            sync_duration,
            syncs: counter(
                r,
                "job_controller_job_syncs_total",
                help(Level::Stable, "The number of job syncs"),
                &["completion_mode", "result", "action"],
            ),
            jobs_finished: counter(
                r,
                "job_controller_jobs_finished_total",
                help(Level::Stable, "The number of finished jobs"),
                &["completion_mode", "result", "reason"],
            ),
            jobs_by_external_controller: counter(
                r,
                "job_controller_jobs_by_external_controller_total",
                help(
                    Level::Alpha,
                    "The number of Jobs managed by an external controller",
                ),
                &["controller_name"],
            ),
            pods_finished: counter(
                r,
                "job_controller_job_pods_finished_total",
                help(
                    Level::Stable,
                    "The number of finished Pods that are fully tracked",
                ),
                &["completion_mode", "result"],
            ),
            pod_failures_handled_by_failure_policy: counter(
                r,
                "job_controller_pod_failures_handled_by_failure_policy_total",
                help(
                    beta_from_1_36,
                    "The number of failed Pods handled by failure policy, by the action taken: FailJob, FailIndex, Ignore or Count.",
                ),
                &["action"],
            ),
            terminated_pods_tracking_finalizer: counter(
                r,
                "job_controller_terminated_pods_tracking_finalizer_total",
                help(
                    beta_from_1_36,
                    "The number of terminated pods (phase Failed or Succeeded) that carry the job tracking finalizer: event add when one appears, delete when one goes.",
                ),
                &["event"],
            ),
            finished_indexes: counter(
                r,
                "job_controller_job_finished_indexes_total",
                help(
                    Level::Alpha,
                    "The number of finished indexes, by status (succeeded, failed) and backoffLimit (perIndex, global).",
                ),
                &["status", "backoffLimit"],
            ),
            pods_creation: counter(
                r,
                "job_controller_job_pods_creation_total",
                help(
                    Level::Alpha,
                    "The number of Pods created by the Job controller, by reason (new, recreate_terminating_or_failed, recreate_failed) and status (succeeded, failed).",
                ),
                &["reason", "status"],
            ),
            stale_sync_skips: version.at_least(36).then(|| {
                counter(
                    r,
                    "job_controller_stale_sync_skips_total",
                    help(
                        Level::Alpha,
                        "Total number of Job syncs skipped due to a stale watch cache.",
                    ),
                    &["group", "resource"],
                )
            }),
            untrusted: Untrusted::new(counter(
                r,
                "kcm_rs_job_untrusted_input_total",
                "Inputs written by Job and pod authors that the Job controller ignored or \
                 undid, by reason."
                    .into(),
                &["reason"],
            )),
            conflicting: gauge(
                r,
                "kcm_rs_conflicting_controller",
                "Jobs this Job controller syncs whose status another writer (a second Job \
                 controller, such as kube-controller-manager's job-controller) changed \
                 within the last 2 minutes, by the writer's field manager.",
                &["writer"],
            ),
            conflicting_shown: Mutex::default(),
            managed_by: gauge(
                r,
                "kcm_rs_job_managed_by",
                "1 when the Job controller runs beside kube-controller-manager and syncs \
                 only the Jobs whose spec.managedBy is name.",
                &["name"],
            ),
            external: Mutex::default(),
        }
    }

    /// `kcm_rs_job_managed_by{name} 1` while the Job controller runs beside
    /// KCM answering to `name` (`--job-managed-by`): dashboards and the
    /// KcmRsOptedInJobsNotSynced alert tell the mode by it.
    pub fn set_managed_by(&self, name: &str) {
        self.managed_by.with_label_values(&[name]).set(1);
    }

    /// The `controller_name` label value for a Job `job_uid` in `namespace`
    /// managed by `managed_by`, which now counts as existing.
    pub fn external_controller_label(
        &self,
        managed_by: &str,
        namespace: &str,
        job_uid: &str,
    ) -> String {
        let mut s = self.external.lock();
        s.jobs
            .entry(managed_by.to_string())
            .or_default()
            .insert(job_uid.to_string());
        if s.slotted.contains_key(managed_by) {
            return managed_by.to_string();
        }
        let held = s.held.get(namespace).copied().unwrap_or(0);
        if s.slotted.len() < MAX_EXTERNAL_CONTROLLERS
            && held < MAX_EXTERNAL_CONTROLLERS_PER_NAMESPACE
        {
            s.slotted
                .insert(managed_by.to_string(), namespace.to_string());
            *s.held.entry(namespace.to_string()).or_default() += 1;
            return managed_by.to_string();
        }
        OTHER_CONTROLLER.to_string()
    }

    /// Job `job_uid` managed by `managed_by` is gone: when it was the last
    /// Job with that value, the value's slot and its series are freed.
    pub fn forget_external_controller(&self, managed_by: &str, job_uid: &str) {
        let mut s = self.external.lock();
        let Some(uids) = s.jobs.get_mut(managed_by) else {
            return;
        };
        uids.remove(job_uid);
        if !uids.is_empty() {
            return;
        }
        s.jobs.remove(managed_by);
        if let Some(ns) = s.slotted.remove(managed_by) {
            if let Some(n) = s.held.get_mut(&ns) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    s.held.remove(&ns);
                }
            }
            let _ = self
                .jobs_by_external_controller
                .remove_label_values(&[managed_by]);
        }
    }
}

/// At most this many distinct `controller_name` values; later ones count
/// under [`OTHER_CONTROLLER`]. `spec.managedBy` is user data: without a
/// bound, anyone who may create Jobs could grow the metrics without end
/// (upstream does not bound it; a deliberate deviation). A value holds its
/// slot while a Job with it exists, and the namespace whose Job first
/// claimed it holds the slot: one namespace holds at most
/// [`MAX_EXTERNAL_CONTROLLERS_PER_NAMESPACE`], so filling every slot takes
/// Jobs kept in 8 namespaces, and slots come free when their Jobs go.
pub const MAX_EXTERNAL_CONTROLLERS: usize = 32;
pub const MAX_EXTERNAL_CONTROLLERS_PER_NAMESPACE: usize = 4;
pub const OTHER_CONTROLLER: &str = "other";

/// Which existing Jobs carry each `managedBy` value, and which values hold
/// a label slot (and for which namespace).
#[derive(Default)]
struct ExternalControllers {
    /// Value -> the Jobs (by uid) that exist with it. Keyed by uid so a
    /// handler seeing the same Job twice counts it once.
    jobs: std::collections::HashMap<String, std::collections::HashSet<String>>,
    /// Value -> the namespace that claimed its slot.
    slotted: std::collections::HashMap<String, String>,
    /// Namespace -> slots it holds.
    held: std::collections::HashMap<String, usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn external_controller_labels_are_bounded_per_namespace_and_freed_with_their_jobs() {
        let m = Metrics::new(&Registry::new(), minor(34));
        let external_controller_label =
            |v: &str, ns: &str, uid: &str| m.external_controller_label(v, ns, uid);
        let forget_external_controller = |v: &str, uid: &str| m.forget_external_controller(v, uid);
        // Namespace n{i / 4}: four values each, so 32 slots take 8 namespaces.
        let label = |i: usize| {
            external_controller_label(
                &format!("example.com/c{i}"),
                &format!("n{}", i / 4),
                &format!("uid{i}"),
            )
        };
        // One tenant namespace with 100 values holds 4 slots, not all.
        let squat: std::collections::HashSet<String> = (0..100)
            .map(|i| {
                external_controller_label(&format!("squat.io/c{i}"), "tenant", &format!("s{i}"))
            })
            .collect();
        assert_eq!(squat.len(), MAX_EXTERNAL_CONTROLLERS_PER_NAMESPACE + 1);
        let labels: std::collections::HashSet<String> = (0..200).map(label).collect();
        assert_eq!(labels.len(), MAX_EXTERNAL_CONTROLLERS - 4 + 1, "{labels:?}");
        assert!(labels.contains(OTHER_CONTROLLER));
        // A value with a slot keeps its own label, for a second Job too,
        // from any namespace.
        assert_eq!(
            external_controller_label("example.com/c0", "elsewhere", "uid0-b"),
            "example.com/c0"
        );
        // Deleting every Job with a value frees its slot (and its
        // namespace's share) for a new value; a value whose Jobs are not
        // all gone keeps it.
        forget_external_controller("example.com/c0", "uid0");
        assert_eq!(label(150), OTHER_CONTROLLER);
        forget_external_controller("example.com/c0", "uid0-b");
        forget_external_controller("example.com/c0", "uid0-b");
        assert_eq!(
            external_controller_label("example.com/new", "n0", "uid-new"),
            "example.com/new"
        );
        assert_eq!(label(151), OTHER_CONTROLLER);
        for i in 0..100 {
            forget_external_controller(&format!("squat.io/c{i}"), &format!("s{i}"));
        }
        for i in 0..200 {
            forget_external_controller(&format!("example.com/c{i}"), &format!("uid{i}"));
        }
        forget_external_controller("example.com/new", "uid-new");
        let s = m.external.lock();
        assert!(s.slotted.is_empty() && s.held.is_empty() && s.jobs.is_empty());
    }

    fn minor(n: u32) -> KubeVersion {
        KubeVersion::new(n).expect("a supported minor")
    }

    /// The HELP line of `family` as `minor`'s registry renders it.
    fn help_line(minor_: u32, family: &str) -> Option<String> {
        let r = Registry::new();
        let m = Metrics::new(&r, minor(minor_));
        m.pod_failures_handled_by_failure_policy
            .with_label_values(&["Count"])
            .inc();
        if let Some(c) = &m.stale_sync_skips {
            c.with_label_values(&["batch", "jobs"]).inc();
        }
        let text = kcm_runtime::metrics::render_of(&r);
        let want = format!("# HELP {family} ");
        text.lines()
            .find(|l| l.starts_with(&want))
            .map(str::to_string)
    }

    #[test]
    fn help_texts_carry_the_minors_stability_level() {
        let family = "job_controller_pod_failures_handled_by_failure_policy_total";
        let h35 = help_line(35, family).expect("registered");
        let h36 = help_line(36, family).expect("registered");
        assert!(h35.contains("[ALPHA] "), "{h35}");
        assert!(h36.contains("[BETA] "), "{h36}");
        assert_eq!(help(Level::Stable, "x"), "[STABLE] x");
    }

    #[test]
    fn stale_sync_skips_is_registered_from_1_36() {
        let family = "job_controller_stale_sync_skips_total";
        assert_eq!(help_line(35, family), None);
        assert!(help_line(36, family).is_some());
    }
}
