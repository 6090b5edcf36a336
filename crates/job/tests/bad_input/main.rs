//! The Job controller against bad input on the real API server (issue 14,
//! "Bad input"; the catalogue is §5 of the perf/reliability notes, the
//! row-by-row map is docs/bad-input.md). Each test puts one kind of bad
//! input in front of kcm-rs's Job controller and checks upstream's
//! handling, the event or log line upstream gives, that nothing is lost
//! (no stuck finalizer, nothing double counted) and that the controller
//! keeps working: a normal Job next to the bad input still completes.
//!
//! * `rejected`: what the API server refuses, so only skew could bring it;
//! * `indexes`: corrupted index strings and annotations;
//! * `owners`: dangling, mismatched and foreign owners, `managedBy`,
//!   overlapping selectors, a Job recreated under the same name;
//! * `failures`: failed pods without exit codes, terminating pods, a
//!   hand-edited `FailureTarget`, pods the API server only warns about.
//!
//! One control plane and one controller serve every test of this binary
//! (each test works in its own namespace); the few tests that need an API
//! server configured otherwise start their own.

mod failures;
mod indexes;
mod owners;
mod rejected;

use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kcm_e2e::in_process::{self, Detached};
use kcm_e2e::logs;
use kcm_e2e::{ControlPlane, TestNamespace};
use kcm_features::FeatureGates;
use kcm_job_testing as support;
use kcm_runtime::controller::Settings;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use support::*;

/// How long a bad input gets to do harm before the test looks.
pub const SETTLE: Duration = Duration::from_secs(3);

/// The shared control plane with our Job controller watching it; logs are
/// captured from the start.
pub fn plane() -> &'static ControlPlane {
    static OURS: OnceLock<Detached> = OnceLock::new();
    logs::capture();
    let cp = kcm_e2e::shared();
    OURS.get_or_init(|| {
        in_process::start_detached(
            cp,
            &[kcm_job::SPEC],
            Settings::default(),
            FeatureGates::default(),
        )
        .unwrap_or_else(|e| panic!("starting our job controller: {e}"))
    });
    cp
}

pub struct Env {
    pub client: kube::Client,
    pub ns: String,
    pub jobs: Api<Job>,
    pub pods: Api<Pod>,
}

/// A fresh namespace on the shared control plane.
pub async fn env(prefix: &str) -> Env {
    let client = plane().client().await.expect("client");
    on(&client, prefix).await
}

/// A fresh namespace on the cluster of `client`.
pub async fn on(client: &kube::Client, prefix: &str) -> Env {
    let ns = TestNamespace::create(client, prefix)
        .await
        .expect("namespace")
        .name;
    Env {
        jobs: Api::namespaced(client.clone(), &ns),
        pods: Api::namespaced(client.clone(), &ns),
        client: client.clone(),
        ns,
    }
}

impl Env {
    pub async fn create(&self, name: &str, spec: serde_json::Value) -> Job {
        self.jobs
            .create(&PostParams::default(), &job(name, spec))
            .await
            .unwrap_or_else(|e| panic!("create job {name}: {e}"))
    }

    /// Writes `status` fields as a user would (JSON merge patch on the
    /// status subresource, no resourceVersion).
    pub async fn patch_status(&self, name: &str, status: serde_json::Value) -> Result<Job, String> {
        self.jobs
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .map_err(|e| e.to_string())
    }

    /// The controller still works: a plain Job in the same namespace runs
    /// to completion with every pod counted once and no finalizer left.
    pub async fn control(&self) {
        let name = "control";
        self.create(name, json!({"completions": 2, "parallelism": 2}))
            .await;
        let done = drive(
            &self.jobs,
            &self.pods,
            name,
            Duration::from_secs(60),
            |_, _| Some(0),
        )
        .await;
        let o = outcome(&done);
        assert_eq!(
            (o.succeeded, o.failed, o.active),
            (2, 0, 0),
            "control Job: {o:#?}"
        );
        assert_eq!(
            condition(&done, "Complete").map(|c| c.0).as_deref(),
            Some("True")
        );
        no_finalizer_left(&self.pods, &format!("batch.kubernetes.io/job-name={name}")).await;
    }
}

/// Plays the kubelet until Job `name` is finished: every pod that is not
/// terminal is finished with exit code 0 (137 if being deleted), except the
/// pods `skip` names. Unlike `support::drive`, pods already running count.
pub async fn finish_all(e: &Env, name_: &str, skip: &[String]) -> Job {
    let start = std::time::Instant::now();
    loop {
        let j = e.jobs.get(name_).await.expect("job");
        if finished(&j) {
            return j;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "job {name_} did not finish: {:#?}",
            j.status
        );
        for p in job_pods(&e.pods, name_).await {
            let n = name(&p);
            if skip.contains(&n) || matches!(phase(&p), "Succeeded" | "Failed") {
                continue;
            }
            let code = if p.metadata.deletion_timestamp.is_some() {
                137
            } else {
                0
            };
            kcm_e2e::kubelet::finish_pod(&e.pods, &n, code).await.ok();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until no pod matching `labels` holds the tracking finalizer.
pub async fn no_finalizer_left(pods: &Api<Pod>, labels: &str) {
    kcm_e2e::wait::wait_for_list(
        pods,
        &ListParams::default().labels(labels),
        Duration::from_secs(30),
        "no tracking finalizer left",
        |ps| ps.iter().all(|p| !has_tracking(p)),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

/// The completion index annotation of a pod (-1 if none).
pub use support::script::index;

/// Conditions as (type, status, reason).
pub fn conditions(j: &Job) -> Vec<(String, String, String)> {
    outcome(j)
        .conditions
        .into_iter()
        .map(|c| (c.0, c.1, c.2))
        .collect()
}

/// The API server refused `r` as invalid (422) with a message containing
/// `want`.
pub fn assert_invalid<T: std::fmt::Debug>(what: &str, r: Result<T, kube::Error>, want: &str) {
    match r {
        Err(kube::Error::Api(e)) if e.code == 422 && e.message.contains(want) => {}
        other => panic!("{what}: expected 422 containing {want:?}, got {other:#?}"),
    }
}
