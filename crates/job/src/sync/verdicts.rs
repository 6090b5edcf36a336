//! The pod failure policy's verdicts of one sync: each pod is matched
//! against the policy at most once, whichever stage asks first (the failed
//! count, the `FailJob` message, the failed indexes, a replacement's
//! failure counts, the tracking of finished pods), and every stage reads
//! the same verdict.

use std::collections::HashMap;

use k8s_openapi::api::batch::v1::{Job, PodFailurePolicy};
use kcm_pod::CachedPod;
use parking_lot::Mutex;

use crate::pod_failure_policy::{self, Action, PolicyMatch, match_pod_failure_policy};

/// Verdicts over the pods of one sync (pods are told apart by name: a
/// sync's pods share the Job's namespace).
#[derive(Debug, Default)]
pub struct Verdicts {
    policy: Option<PodFailurePolicy>,
    seen: Mutex<HashMap<String, PolicyMatch>>,
}

impl Verdicts {
    /// The verdicts of `job`'s policy as the sync reads it (the view of
    /// [`Config::view`](super::Config::view): the gates already applied).
    pub fn new(job: &Job) -> Verdicts {
        Verdicts {
            policy: job.spec.as_ref().and_then(|s| s.pod_failure_policy.clone()),
            seen: Mutex::default(),
        }
    }

    /// Whether the Job has a policy to apply.
    pub fn has_policy(&self) -> bool {
        self.policy.is_some()
    }

    /// The policy's verdict on a failed pod (no policy: counted, no
    /// action).
    pub fn of(&self, pod: &CachedPod) -> PolicyMatch {
        let Some(policy) = self.policy.as_ref() else {
            return PolicyMatch::unmatched();
        };
        self.seen
            .lock()
            .entry(pod.name().to_string())
            .or_insert_with(|| match_pod_failure_policy(Some(policy), pod))
            .clone()
    }

    /// Whether the pod's failure counts towards the back-off limits.
    pub fn counts(&self, pod: &CachedPod) -> bool {
        self.of(pod).counts_towards_backoff
    }

    /// (counts towards back-off, fails its index), for the index helpers.
    pub fn index_verdict(&self, pod: &CachedPod) -> (bool, bool) {
        let m = self.of(pod);
        (
            m.counts_towards_backoff,
            m.action == Some(Action::FailIndex),
        )
    }

    /// The message of the first failed pod a `FailJob` rule matched.
    pub fn fail_job_message(&self, job: &Job, pods: &[&CachedPod]) -> Option<String> {
        self.has_policy()
            .then(|| pod_failure_policy::fail_job_message(job, pods, &|p| self.of(p)))
            .flatten()
    }
}
