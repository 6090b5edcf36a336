//! `job_controller_*` metrics with upstream names, labels and buckets
//! (pkg/controller/job/metrics/metrics.go). Each help text opens with the
//! metric's stability level in the minor kcm-rs behaves as, as Go's
//! component-base writes it (`[STABLE] `, `[BETA] `, `[ALPHA] `): 1.36
//! promoted the failure-policy and tracking-finalizer counters to BETA.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts};

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
}

/// The minor whose stability levels the help texts carry.
static MINOR: AtomicU32 = AtomicU32::new(34);

/// Sets the minor for the help texts; call before the first [`metrics`].
pub fn set_minor(minor: u32) {
    MINOR.store(minor, Ordering::Relaxed);
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

/// BETA from 1.36, ALPHA before.
fn beta_from_1_36() -> Level {
    if MINOR.load(Ordering::Relaxed) >= 36 {
        Level::Beta
    } else {
        Level::Alpha
    }
}

fn counter(name: &str, level: Level, text: &str, labels: &[&str]) -> IntCounterVec {
    let help = help(level, text);
    kcm_runtime::metrics::register(
        IntCounterVec::new(Opts::new(name, help), labels)
            .expect("constant metric definition is valid"),
    )
}

pub fn metrics() -> &'static Metrics {
    static M: OnceLock<Metrics> = OnceLock::new();
    M.get_or_init(|| {
        // Upstream's buckets: 4 ms doubling 15 times (to about 65 s).
        let buckets = prometheus::exponential_buckets(0.004, 2.0, 15).expect("constant buckets are valid");
        let sync_duration = kcm_runtime::metrics::register(
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
                "job_controller_job_syncs_total",
                Level::Stable,
                "The number of job syncs",
                &["completion_mode", "result", "action"],
            ),
            jobs_finished: counter(
                "job_controller_jobs_finished_total",
                Level::Stable,
                "The number of finished jobs",
                &["completion_mode", "result", "reason"],
            ),
            jobs_by_external_controller: counter(
                "job_controller_jobs_by_external_controller_total",
                Level::Alpha,
                "The number of Jobs managed by an external controller",
                &["controller_name"],
            ),
            pods_finished: counter(
                "job_controller_job_pods_finished_total",
                Level::Stable,
                "The number of finished Pods that are fully tracked",
                &["completion_mode", "result"],
            ),
            pod_failures_handled_by_failure_policy: counter(
                "job_controller_pod_failures_handled_by_failure_policy_total",
                beta_from_1_36(),
                "The number of failed Pods handled by failure policy, by the action taken: FailJob, FailIndex, Ignore or Count.",
                &["action"],
            ),
            terminated_pods_tracking_finalizer: counter(
                "job_controller_terminated_pods_tracking_finalizer_total",
                beta_from_1_36(),
                "The number of terminated pods (phase Failed or Succeeded) that carry the job tracking finalizer: event add when one appears, delete when one goes.",
                &["event"],
            ),
            finished_indexes: counter(
                "job_controller_job_finished_indexes_total",
                Level::Alpha,
                "The number of finished indexes, by status (succeeded, failed) and backoffLimit (perIndex, global).",
                &["status", "backoffLimit"],
            ),
            pods_creation: counter(
                "job_controller_job_pods_creation_total",
                Level::Alpha,
                "The number of Pods created by the Job controller, by reason (new, recreate_terminating_or_failed, recreate_failed) and status (succeeded, failed).",
                &["reason", "status"],
            ),
        }
    })
}

/// `job_controller_stale_sync_skips_total{group,resource}` (KCM 1.36+):
/// registered on first use, which the controller makes at start on 1.36+.
pub fn stale_sync_skips() -> &'static IntCounterVec {
    static C: OnceLock<IntCounterVec> = OnceLock::new();
    C.get_or_init(|| {
        counter(
            "job_controller_stale_sync_skips_total",
            Level::Alpha,
            "Total number of Job syncs skipped due to a stale watch cache.",
            &["group", "resource"],
        )
    })
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

fn external_controllers() -> &'static parking_lot::Mutex<ExternalControllers> {
    static S: OnceLock<parking_lot::Mutex<ExternalControllers>> = OnceLock::new();
    S.get_or_init(Default::default)
}

/// The `controller_name` label value for a Job `job_uid` in `namespace`
/// managed by `managed_by`, which now counts as existing.
pub fn external_controller_label(managed_by: &str, namespace: &str, job_uid: &str) -> String {
    let mut s = external_controllers().lock();
    s.jobs
        .entry(managed_by.to_string())
        .or_default()
        .insert(job_uid.to_string());
    if s.slotted.contains_key(managed_by) {
        return managed_by.to_string();
    }
    let held = s.held.get(namespace).copied().unwrap_or(0);
    if s.slotted.len() < MAX_EXTERNAL_CONTROLLERS && held < MAX_EXTERNAL_CONTROLLERS_PER_NAMESPACE {
        s.slotted
            .insert(managed_by.to_string(), namespace.to_string());
        *s.held.entry(namespace.to_string()).or_default() += 1;
        return managed_by.to_string();
    }
    OTHER_CONTROLLER.to_string()
}

/// Job `job_uid` managed by `managed_by` is gone: when it was the last Job
/// with that value, the value's slot and its series are freed.
pub fn forget_external_controller(managed_by: &str, job_uid: &str) {
    let mut s = external_controllers().lock();
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
        let _ = metrics()
            .jobs_by_external_controller
            .remove_label_values(&[managed_by]);
    }
}

/// `kcm_rs_job_managed_by{name} 1` while the Job controller runs beside
/// KCM answering to `name` (`--job-managed-by`): dashboards and the
/// KcmRsOptedInJobsNotSynced alert tell the mode by it.
pub fn set_managed_by(name: &str) {
    static G: OnceLock<prometheus::IntGaugeVec> = OnceLock::new();
    G.get_or_init(|| {
        kcm_runtime::metrics::register(
            prometheus::IntGaugeVec::new(
                Opts::new(
                    "kcm_rs_job_managed_by",
                    "1 when the Job controller runs beside kube-controller-manager and syncs \
                     only the Jobs whose spec.managedBy is name.",
                ),
                &["name"],
            )
            .expect("constant metric definition is valid"),
        )
    })
    .with_label_values(&[name])
    .set(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn external_controller_labels_are_bounded_per_namespace_and_freed_with_their_jobs() {
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
        let s = external_controllers().lock();
        assert!(s.slotted.is_empty() && s.held.is_empty() && s.jobs.is_empty());
    }

    #[test]
    fn help_texts_carry_the_minors_stability_level() {
        set_minor(35);
        assert_eq!(beta_from_1_36(), Level::Alpha);
        set_minor(36);
        assert_eq!(beta_from_1_36(), Level::Beta);
        assert_eq!(help(Level::Stable, "x"), "[STABLE] x");
        set_minor(34);
    }
}
