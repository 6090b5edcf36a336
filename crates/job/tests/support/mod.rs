//! Shared pieces of the Job controller's end-to-end and differential tests:
//! start kcm-rs's or upstream's job-controller, play the kubelet, and read
//! back what a user can observe.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kcm_e2e::in_process::{self, InProcess};
use kcm_e2e::{ControlPlane, UpstreamKcm};
use kcm_features::FeatureGates;
use kcm_runtime::controller::Settings;
use kube::Api;
use kube::api::ListParams;

/// A Job named `name` with a one-container `restartPolicy: Never` template
/// and the given spec fields on top.
pub fn job(name: &str, spec: serde_json::Value) -> Job {
    let mut j = serde_json::json!({
        "metadata": { "name": name },
        "spec": {
            "template": { "spec": {
                "restartPolicy": "Never",
                "containers": [{ "name": "main", "image": "busybox" }]
            }}
        }
    });
    if let (Some(dst), Some(src)) = (j["spec"].as_object_mut(), spec.as_object()) {
        for (k, v) in src {
            dst.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(j).expect("job")
}

pub enum Controller {
    Ours(InProcess),
    Upstream(UpstreamKcm),
}

pub async fn start(cp: &ControlPlane, upstream: bool, gates: FeatureGates) -> Controller {
    if upstream {
        Controller::Upstream(
            UpstreamKcm::start(cp, &["job-controller"], &[]).expect("upstream KCM"),
        )
    } else {
        Controller::Ours(
            in_process::start(cp, &[kcm_job::SPEC], Settings::default(), gates)
                .await
                .expect("kcm-rs job controller"),
        )
    }
}

pub fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

pub async fn job_pods(pods: &Api<Pod>, job: &str) -> Vec<Pod> {
    pods.list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

/// What a user sees of a Job's outcome (no times, no UIDs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub succeeded: i32,
    pub failed: i32,
    pub active: i32,
    pub ready: i32,
    pub terminating: i32,
    pub completed_indexes: String,
    pub failed_indexes: Option<String>,
    /// (type, status, reason, message) in order.
    pub conditions: Vec<(String, String, String, String)>,
    pub completion_time_set: bool,
    pub uncounted_empty: bool,
}

pub fn outcome(job: &Job) -> Outcome {
    let s = job.status.clone().unwrap_or_default();
    Outcome {
        succeeded: s.succeeded.unwrap_or(0),
        failed: s.failed.unwrap_or(0),
        active: s.active.unwrap_or(0),
        ready: s.ready.unwrap_or(0),
        terminating: s.terminating.unwrap_or(0),
        completed_indexes: s.completed_indexes.unwrap_or_default(),
        failed_indexes: s.failed_indexes,
        conditions: s
            .conditions
            .unwrap_or_default()
            .into_iter()
            .map(|c| {
                (
                    c.type_,
                    c.status,
                    c.reason.unwrap_or_default(),
                    c.message.unwrap_or_default(),
                )
            })
            .collect(),
        completion_time_set: s.completion_time.is_some(),
        uncounted_empty: s.uncounted_terminated_pods.is_none_or(|u| {
            u.succeeded.unwrap_or_default().is_empty() && u.failed.unwrap_or_default().is_empty()
        }),
    }
}

/// Replaces run-specific names (namespace, pod names) in messages.
pub fn normalize(mut o: Outcome, ns: &str) -> Outcome {
    for c in &mut o.conditions {
        let msg = c.3.replace(ns, "<ns>");
        // "pod <ns>/<name> ..." : drop the generated pod name.
        c.3 = match msg.find("<ns>/") {
            Some(i) => {
                let rest = &msg[i + 5..];
                let end = rest.find(' ').unwrap_or(rest.len());
                format!("{}<ns>/<pod>{}", &msg[..i], &rest[end..])
            }
            None => msg,
        };
    }
    o
}

pub fn finished(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        })
}

/// Plays the kubelet: every pending pod of the Job gets `decide(pod)`:
/// Some(exit code) to finish it, None to leave it running. Returns when the
/// Job finished, with the final Job.
pub async fn drive(
    jobs: &Api<Job>,
    pods: &Api<Pod>,
    name: &str,
    timeout: Duration,
    decide: impl Fn(&Pod, usize) -> Option<i32>,
) -> Job {
    let start = std::time::Instant::now();
    let mut handled: BTreeMap<String, ()> = BTreeMap::new();
    loop {
        let job = jobs.get(name).await.expect("job");
        if finished(&job) {
            // Let in-flight finalizer removals settle.
            return job;
        }
        assert!(
            start.elapsed() < timeout,
            "job {name} did not finish: {:#?}",
            job.status
        );
        for p in job_pods(pods, name).await {
            let pname = p.metadata.name.clone().unwrap_or_default();
            if p.metadata.deletion_timestamp.is_some() {
                // The kubelet stops a deleted pod: phase Failed, exit 137.
                if !matches!(phase(&p), "Failed" | "Succeeded") {
                    kcm_e2e::kubelet::finish_pod(pods, &pname, 137).await.ok();
                }
                continue;
            }
            if phase(&p) != "Pending" && !phase(&p).is_empty() || handled.contains_key(&pname) {
                continue;
            }
            let n = handled.len();
            match decide(&p, n) {
                Some(code) => {
                    kcm_e2e::kubelet::finish_pod(pods, &pname, code)
                        .await
                        .expect("finish");
                    handled.insert(pname, ());
                }
                None => {
                    kcm_e2e::kubelet::run_pod(pods, &pname, true)
                        .await
                        .expect("run");
                    handled.insert(pname, ());
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}
