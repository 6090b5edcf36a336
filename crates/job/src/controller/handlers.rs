//! Informer event handlers (upstream addPod/updatePod/deletePod,
//! addJob/updateJob/deleteJob): they only map changes to queue keys and
//! expectation observations.

use std::sync::{Arc, Weak};
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use kcm_conditions::pod::is_pod_terminal;
use kcm_pod::{CachedPod, ControllerRef};
use kcm_runtime::informer::{BY_NAMESPACE, Change, Informable as _, key_of};

use super::port::JobPort;
use super::{JobController, OrphanKey, SYNC_JOB_BATCH_PERIOD};
use crate::pod_failure_policy::{Action, match_pod_failure_policy};
use crate::selector;
use crate::sync::Config;
use crate::untrusted;

pub use crate::pods::is_finished;

fn terminal_with_finalizer(p: Option<&CachedPod>) -> bool {
    p.is_some_and(|p| is_pod_terminal(p) && p.has_tracking_finalizer())
}

fn record_tracking_finalizer(
    m: &crate::metrics::Metrics,
    old: Option<&CachedPod>,
    new: Option<&CachedPod>,
) {
    match (terminal_with_finalizer(old), terminal_with_finalizer(new)) {
        (false, true) => m
            .terminated_pods_tracking_finalizer
            .with_label_values(&["add"])
            .inc(),
        (true, false) => m
            .terminated_pods_tracking_finalizer
            .with_label_values(&["delete"])
            .inc(),
        _ => {}
    }
}

/// Deliberate deviation from upstream, which batches every pod update for
/// a second: a pod that has just failed and matches a `FailJob` rule ends
/// its Job whatever else the batch would bring, so the Job is synced at once
/// (at most once per Job: later syncs see `FailureTarget`). This halves the
/// time from the failure to `FailureTarget` and costs no extra requests.
fn newly_fails_job(job: &Job, old: &CachedPod, cur: &CachedPod, config: &Config) -> bool {
    let failed = |p: &CachedPod| p.phase() == "Failed";
    if failed(old) || !failed(cur) || is_finished(job) {
        return false;
    }
    // The policy as the sync applies it (the gates shape it one way).
    let policy = config.policy(job);
    policy.is_some()
        && match_pod_failure_policy(policy.as_ref(), cur).action == Some(Action::FailJob)
}

impl<P: JobPort> JobController<P> {
    fn resolve(&self, namespace: &str, r: &ControllerRef) -> Option<Arc<Job>> {
        if &*r.kind != "Job" {
            return None;
        }
        self.jobs
            .store()
            .get(&key_of(namespace, &r.name))
            .filter(|j| j.metadata.uid.as_deref() == Some(&*r.uid))
    }

    fn enqueue_after(&self, job: &Job, delay: Duration) {
        self.queue.add_after(job.key(), delay);
    }

    fn enqueue_orphan(&self, pod: &CachedPod) {
        self.orphan_queue.add(OrphanKey::Name {
            namespace: pod.namespace().to_string(),
            name: pod.name().to_string(),
        });
    }

    /// Deliberate deviation from upstream: a pod with the tracking
    /// finalizer whose controller Job is finished goes to the orphan queue
    /// whenever it is seen (a create that landed after the finish, the
    /// first list after a restart, a later update). Upstream only syncs the
    /// finished Job, which does nothing, so such a pod keeps its finalizer
    /// and can never be deleted. The finished Job's counters are not
    /// touched; `handle_orphan` re-checks against the cache. A pod whose
    /// Job is gone is left as upstream leaves it: the garbage collector
    /// deletes it, and the delete handler releases it.
    fn release_if_job_done(&self, pod: &CachedPod, job: Option<&Job>) {
        if pod.has_tracking_finalizer()
            && job.is_some_and(|j| is_finished(j) && self.config.managed_elsewhere(j).is_none())
        {
            self.enqueue_orphan(pod);
        }
    }

    pub(super) fn enqueue_selector(&self, job: &Job) {
        let selector = job
            .spec
            .as_ref()
            .and_then(|s| s.selector.clone())
            .unwrap_or_default();
        self.orphan_queue.add(OrphanKey::Selector {
            namespace: job.metadata.namespace.clone().unwrap_or_default(),
            selector: serde_json::to_string(&selector).unwrap_or_default(),
        });
    }

    /// Jobs in the pod's namespace whose non-empty selector matches it.
    fn pod_jobs(&self, pod: &CachedPod) -> Vec<Arc<Job>> {
        if pod.labels().is_empty() {
            return Vec::new();
        }
        let ns = pod.namespace();
        let jobs: Vec<Arc<Job>> = self
            .jobs
            .store()
            .by_index(BY_NAMESPACE, ns)
            .into_iter()
            .filter(|j| {
                j.spec
                    .as_ref()
                    .and_then(|s| s.selector.as_ref())
                    .is_some_and(|s| !selector::is_empty(s) && selector::matches(s, pod.labels()))
            })
            .collect();
        if jobs.len() > 1 {
            tracing::warn!(pod = %pod.key(), "user error! more than one job is selecting pods with labels");
        }
        jobs
    }

    fn add_pod(&self, pod: &CachedPod) {
        record_tracking_finalizer(&self.metrics, None, Some(pod));
        if pod.is_deleting() {
            self.delete_pod(pod, false);
            return;
        }
        let ns = pod.namespace();
        if let Some(r) = pod.controller() {
            let job = self.resolve(ns, r);
            if let Some(job) = &job {
                self.expectations.creation_observed(&job.key());
                self.enqueue_after(job, SYNC_JOB_BATCH_PERIOD);
            }
            self.release_if_job_done(pod, job.as_deref());
            return;
        }
        if pod.has_tracking_finalizer() {
            self.enqueue_orphan(pod);
        }
        for job in self.pod_jobs(pod) {
            self.enqueue_after(&job, SYNC_JOB_BATCH_PERIOD);
        }
    }

    fn update_pod(&self, old: &CachedPod, cur: &CachedPod) {
        record_tracking_finalizer(&self.metrics, Some(old), Some(cur));
        if cur.resource_version() == old.resource_version() {
            return;
        }
        if cur.is_deleting() {
            self.delete_pod(cur, false);
            return;
        }
        let ns = cur.namespace();
        let uid = cur.uid();
        let finalizer_removed = !cur.has_tracking_finalizer();
        let (cur_ref, old_ref) = (cur.controller(), old.controller());
        let ref_changed = cur_ref != old_ref;
        if ref_changed
            && let Some(r) = old_ref
            && let Some(job) = self.resolve(ns, r)
        {
            if finalizer_removed {
                self.finalizer_expectations
                    .finalizer_removal_observed(&job.key(), uid);
            }
            self.enqueue_after(&job, SYNC_JOB_BATCH_PERIOD);
        }
        if let Some(r) = cur_ref {
            let job = self.resolve(ns, r);
            if let Some(job) = &job {
                if finalizer_removed {
                    self.finalizer_expectations
                        .finalizer_removal_observed(&job.key(), uid);
                }
                let delay = if newly_fails_job(job, old, cur, &self.config) {
                    Duration::ZERO
                } else {
                    SYNC_JOB_BATCH_PERIOD
                };
                self.enqueue_after(job, delay);
            }
            self.release_if_job_done(cur, job.as_deref());
            return;
        }
        if cur.has_tracking_finalizer() {
            self.enqueue_orphan(cur);
        }
        if cur.labels() != old.labels() || ref_changed {
            for job in self.pod_jobs(cur) {
                self.enqueue_after(&job, SYNC_JOB_BATCH_PERIOD);
            }
        }
    }

    fn delete_pod(&self, pod: &CachedPod, last: bool) {
        if last {
            record_tracking_finalizer(&self.metrics, Some(pod), None);
        }
        let has_finalizer = pod.has_tracking_finalizer();
        let ns = pod.namespace();
        let Some(r) = pod.controller() else {
            if has_finalizer {
                self.enqueue_orphan(pod);
            }
            return;
        };
        let Some(job) = self.resolve(ns, r).filter(|j| !is_finished(j)) else {
            if has_finalizer {
                self.enqueue_orphan(pod);
            }
            return;
        };
        let key = job.key();
        self.expectations.deletion_observed(&key);
        if last || !has_finalizer {
            self.finalizer_expectations
                .finalizer_removal_observed(&key, pod.uid());
        }
        self.enqueue_after(&job, SYNC_JOB_BATCH_PERIOD);
    }

    /// A trace of `managedFields` times only a Job's author can have set.
    fn note_forged_times(&self, old: Option<&Job>, job: &Job) {
        let now = self.clock.now();
        let Some((manager, at)) = untrusted::future_managed_fields(job, now) else {
            return;
        };
        if old.and_then(|o| untrusted::future_managed_fields(o, now)) == Some((manager.clone(), at))
        {
            return;
        }
        self.metrics.untrusted.record(
            untrusted::Reason::FutureManagedFields,
            &job.key(),
            || format!("managedFields entry of {manager:?} dated {at}, ahead of now ({now})"),
            self.clock.instant(),
        );
    }

    fn add_job(&self, job: &Job) {
        self.note_forged_times(None, job);
        self.enqueue_after(job, Duration::ZERO);
        // A finished Job seen first (a restart): its pods may have been
        // listed before it, when they could not be resolved to it.
        if is_finished(job) && self.config.managed_elsewhere(job).is_none() {
            self.enqueue_selector(job);
        }
        // Beside KCM, KCM counts the Jobs it leaves to others; kcm-rs's
        // job_controller_* families count only its own Jobs.
        if let Some(name) = self
            .config
            .managed_elsewhere(job)
            .filter(|_| !self.config.beside_kcm())
        {
            let label = self.metrics.external_controller_label(
                name,
                job.metadata.namespace.as_deref().unwrap_or_default(),
                job.metadata.uid.as_deref().unwrap_or_default(),
            );
            if label == crate::metrics::OTHER_CONTROLLER {
                self.metrics.untrusted.record(
                    untrusted::Reason::ManagedByLabelOverflow,
                    &job.key(),
                    || {
                        format!(
                            "spec.managedBy {name:?} counted as \"other\": its namespace holds {} label slots or all {} are taken",
                            crate::metrics::MAX_EXTERNAL_CONTROLLERS_PER_NAMESPACE,
                            crate::metrics::MAX_EXTERNAL_CONTROLLERS
                        )
                    },
                    self.clock.instant(),
                );
            }
            self.metrics
                .jobs_by_external_controller
                .with_label_values(&[label])
                .inc();
        }
    }

    fn update_job(&self, old: &Job, cur: &Job) {
        self.observe_job_update(old, cur);
        self.note_forged_times(Some(old), cur);
        if is_finished(cur) {
            self.enqueue_selector(cur);
            return;
        }
        if cur.metadata.generation == old.metadata.generation {
            self.enqueue_after(cur, SYNC_JOB_BATCH_PERIOD);
        } else {
            self.enqueue_after(cur, Duration::ZERO);
        }
        let start = cur.status.as_ref().and_then(|s| s.start_time.as_ref());
        let cur_ads = cur.spec.as_ref().and_then(|s| s.active_deadline_seconds);
        let old_ads = old.spec.as_ref().and_then(|s| s.active_deadline_seconds);
        if let (Some(start), Some(ads)) = (start, cur_ads)
            && old_ads != Some(ads)
        {
            let passed = self
                .clock
                .now()
                .duration_since(start.0)
                .as_secs_f64()
                .max(0.0);
            let left = (ads as f64 - passed).max(0.0);
            self.enqueue_after(
                cur,
                Duration::try_from_secs_f64(left).unwrap_or(Duration::ZERO),
            );
        }
    }

    fn delete_job(&self, job: &Job) {
        // A Job created again under the same name must not wait for the old
        // one's pod creations or deletions (upstream 1.37).
        let key = job.key();
        self.expectations.delete_expectations(&key);
        self.rw.forget(&key, job.metadata.uid.as_deref());
        self.finalizer_expectations.delete_expectations(&key);
        self.enqueue_after(job, Duration::ZERO);
        if let Some(uid) = job.metadata.uid.as_ref() {
            self.finished_jobs.lock().remove(uid);
        }
        self.enqueue_selector(job);
        self.backoff.remove(&job.key());
        if let Some(name) = self
            .config
            .managed_elsewhere(job)
            .filter(|_| !self.config.beside_kcm())
        {
            self.metrics
                .forget_external_controller(name, job.metadata.uid.as_deref().unwrap_or_default());
        }
    }

    /// Registers the handlers on the shared informers. They hold a weak
    /// reference so a stopped controller can be dropped.
    pub fn register(self: &Arc<Self>)
    where
        P: 'static,
    {
        let me: Weak<Self> = Arc::downgrade(self);
        self.pods
            .add_handler(Arc::new(move |c: &Change<CachedPod>| {
                let Some(me) = me.upgrade() else { return };
                match c {
                    Change::Added(p) => me.add_pod(p),
                    Change::Updated { old, new } => me.update_pod(old, new),
                    Change::Deleted(p) => me.delete_pod(p, true),
                }
            }));
        let me: Weak<Self> = Arc::downgrade(self);
        self.jobs.add_handler(Arc::new(move |c: &Change<Job>| {
            let Some(me) = me.upgrade() else { return };
            match c {
                Change::Added(j) => me.add_job(j),
                Change::Updated { old, new } => me.update_job(old, new),
                Change::Deleted(j) => me.delete_job(j),
            }
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::{Config, newly_fails_job};
    use k8s_openapi::api::batch::v1::Job;
    use kcm_pod::CachedPod;
    use serde_json::json;

    fn job(policy: bool, finished: bool) -> Job {
        let mut j = json!({ "metadata": { "name": "j" }, "spec": { "template": {} } });
        if policy {
            j["spec"]["podFailurePolicy"] = json!({ "rules": [
                { "action": "Ignore", "onExitCodes": { "operator": "In", "values": [3] } },
                { "action": "FailJob", "onExitCodes": { "operator": "In", "values": [42] } }
            ]});
        }
        if finished {
            j["status"] = json!({ "conditions": [{ "type": "Failed", "status": "True" }] });
        }
        serde_json::from_value(j).expect("job")
    }

    fn pod(phase: &str, code: i32) -> CachedPod {
        serde_json::from_value(json!({
            "metadata": { "name": "p" },
            "status": { "phase": phase, "containerStatuses": [{
                "name": "main", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                "state": { "terminated": { "exitCode": code } } }] }
        }))
        .expect("pod")
    }

    #[test]
    fn only_a_fresh_failjob_match_skips_the_batch() {
        let running = pod("Running", 0);
        let j = job(true, false);
        let (on, off) = (
            &Config::default(),
            &Config {
                pod_failure_policy: false,
                ..Config::default()
            },
        );
        assert!(newly_fails_job(&j, &running, &pod("Failed", 42), on));
        // Already failed before: not a new failure.
        assert!(!newly_fails_job(
            &j,
            &pod("Failed", 42),
            &pod("Failed", 42),
            on
        ));
        // Other actions, no policy, gate off, finished Job, success.
        assert!(!newly_fails_job(&j, &running, &pod("Failed", 3), on));
        assert!(!newly_fails_job(&j, &running, &pod("Failed", 1), on));
        assert!(!newly_fails_job(
            &job(false, false),
            &running,
            &pod("Failed", 42),
            on
        ));
        assert!(!newly_fails_job(&j, &running, &pod("Failed", 42), off));
        assert!(!newly_fails_job(
            &job(true, true),
            &running,
            &pod("Failed", 42),
            on
        ));
        assert!(!newly_fails_job(&j, &running, &pod("Succeeded", 0), on));
    }
}
