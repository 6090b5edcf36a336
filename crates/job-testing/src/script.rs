//! Scripted differential scenarios: the same script (create, patch, delete,
//! play the kubelet) runs against upstream's and kcm-rs's job-controller,
//! each on its own control plane, and records snapshots at checkpoints
//! where the system is settled. The two lists of snapshots must be equal.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kcm_e2e::{ControlPlane, TestNamespace};
use kcm_features::FeatureGates;
use kube::Api;
use kube::api::ListParams;
use parking_lot::Mutex;

use super::{
    Controller, Outcome, Side, event_summary, finished, has_tracking, is_active, normalize,
    outcome, phase, pod_shapes, start_side,
};

/// What a script works with.
#[derive(Clone)]
pub struct Scn {
    pub client: kube::Client,
    pub ns: String,
    pub jobs: Api<Job>,
    pub pods: Api<Pod>,
    /// Snapshots so far, in order.
    snaps: Arc<Mutex<Vec<(String, Snap)>>>,
    cp: Arc<ControlPlane>,
    side: Side,
    /// The running controller, None while stopped.
    controller: Arc<Mutex<Option<Controller>>>,
}

/// A settled view of one Job and the pods its selector matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snap {
    pub job: Outcome,
    pub start_time_set: bool,
    pub pods: usize,
    pub active: usize,
    pub terminating: usize,
    pub terminal: usize,
    /// Pods still carrying the tracking finalizer.
    pub tracked: usize,
    /// Sorted completion indexes of the active pods (Indexed Jobs).
    pub active_indexes: Vec<i32>,
    /// Job events (type, reason, message, count), see [`event_summary`].
    pub events: Vec<(String, String, String, i32)>,
    /// The pods' shapes, see [`pod_shapes`].
    pub shapes: Vec<String>,
}

/// Labelled snapshots, in checkpoint order.
pub type Snaps = Vec<(String, Snap)>;

pub type Script = fn(Scn) -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// How long the system gets to settle before a snapshot: upstream batches
/// pod events for 1 s, then writes status twice.
const SETTLE: Duration = Duration::from_millis(2500);

/// The completion index annotation of a pod, -1 if missing or invalid.
pub fn index(p: &Pod) -> i32 {
    p.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("batch.kubernetes.io/job-completion-index"))
        .and_then(|s| s.parse().ok())
        .unwrap_or(-1)
}

/// The pods of the Job every script names `j`.
pub const J: &str = "batch.kubernetes.io/job-name=j";

/// Active (not terminal, not being deleted) pods among `ps`.
pub fn active(ps: &[Pod]) -> usize {
    ps.iter().filter(|p| is_active(p)).count()
}

/// The UID in a pod's controller ownerReference.
pub fn owner_uid(p: &Pod) -> Option<String> {
    kcm_pod::meta::controller_of(&p.metadata).map(|r| r.uid.clone())
}

impl Scn {
    /// Creates Job `j` (the Job every script names) with `spec`.
    pub async fn create(&self, spec: serde_json::Value) {
        self.jobs
            .create(
                &kube::api::PostParams::default(),
                &super::job_on(self.side, "j", spec),
            )
            .await
            .expect("create job");
    }

    /// Creates the suspended stand-in Job `probe` and waits until it is
    /// seen, so a snapshot can record pods when Job `j` is gone or ignored.
    pub async fn probe(&self) {
        self.jobs
            .create(
                &kube::api::PostParams::default(),
                &super::job_on(self.side, "probe", serde_json::json!({"suspend": true})),
            )
            .await
            .expect("create probe");
        self.wait_job("probe", "probe suspended", |j| {
            super::condition(j, "Suspended").is_some()
        })
        .await;
    }

    /// Merge-patches the spec of Job `j`.
    pub async fn patch_spec(&self, spec: serde_json::Value) {
        self.jobs
            .patch(
                "j",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(serde_json::json!({ "spec": spec })),
            )
            .await
            .expect("patch job");
    }

    /// Stops the controller (upstream: kills the process; kcm-rs: drops
    /// the in-process instance).
    pub async fn stop_controller(&self) {
        let c = self.controller.lock().take();
        drop(c);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    /// Starts a fresh controller instance.
    pub async fn start_controller(&self) {
        let c = start_side(&self.cp, self.side, FeatureGates::default(), &[]).await;
        *self.controller.lock() = Some(c);
    }

    /// Pods matching `selector` (a label selector string).
    pub async fn list(&self, selector: &str) -> Vec<Pod> {
        self.pods
            .list(&ListParams::default().labels(selector))
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    }

    /// Waits up to 40 s for `pred` over the pods matching `selector`.
    pub async fn wait_pods(&self, selector: &str, what: &str, pred: impl Fn(&[Pod]) -> bool) {
        kcm_e2e::wait::wait_for_list(
            &self.pods,
            &ListParams::default().labels(selector),
            Duration::from_secs(40),
            what,
            pred,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Waits up to 40 s for `pred` over Job `name`.
    pub async fn wait_job(&self, name: &str, what: &str, pred: impl Fn(&Job) -> bool) {
        kcm_e2e::wait::wait_for(&self.jobs, name, Duration::from_secs(40), what, pred)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Lets the controller settle, then records Job `name` and the pods
    /// matching `selector` under `label`.
    pub async fn snap(&self, label: &str, name: &str, selector: &str) {
        tokio::time::sleep(SETTLE).await;
        let job = self.jobs.get(name).await.expect("job");
        let pods = self.list(selector).await;
        let mut active_indexes: Vec<i32> = pods
            .iter()
            .filter(|p| is_active(p) && index(p) >= 0)
            .map(index)
            .collect();
        active_indexes.sort_unstable();
        let snap = Snap {
            start_time_set: job.status.as_ref().is_some_and(|s| s.start_time.is_some()),
            job: normalize(outcome(&job), &self.ns),
            pods: pods.len(),
            active: pods.iter().filter(|p| is_active(p)).count(),
            terminating: pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_some())
                .filter(|p| !matches!(phase(p), "Succeeded" | "Failed"))
                .count(),
            terminal: pods
                .iter()
                .filter(|p| matches!(phase(p), "Succeeded" | "Failed"))
                .count(),
            tracked: pods.iter().filter(|p| has_tracking(p)).count(),
            active_indexes,
            events: event_summary(&self.client, &self.ns, name).await,
            shapes: pod_shapes(&pods),
        };
        self.snaps.lock().push((label.to_string(), snap));
    }

    /// Marks every pending pod matching `selector` Running and Ready.
    pub async fn run_pending(&self, selector: &str) {
        for p in self.list(selector).await {
            if is_active(&p) && matches!(phase(&p), "Pending" | "") {
                let name = p.metadata.name.clone().unwrap_or_default();
                kcm_e2e::kubelet::run_pod(&self.pods, &name, true)
                    .await
                    .expect("run pod");
            }
        }
    }

    /// Finishes every active pod matching `selector` with exit code `code`
    /// until Job `name` is finished (new pods included).
    pub async fn finish_all(&self, name: &str, selector: &str, code: i32) {
        let start = std::time::Instant::now();
        loop {
            let job = self.jobs.get(name).await.expect("job");
            if finished(&job) {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "job {name} did not finish: {:#?}",
                job.status
            );
            for p in self.list(selector).await {
                if is_active(&p) {
                    let n = p.metadata.name.clone().unwrap_or_default();
                    kcm_e2e::kubelet::finish_pod(&self.pods, &n, code)
                        .await
                        .ok();
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Plays `script` against one side (upstream or kcm-rs) on a fresh
/// control plane; returns its snapshots.
pub async fn play(upstream: bool, script: Script) -> Vec<(String, Snap)> {
    let side = Side::of(upstream);
    let cp = Arc::new(ControlPlane::start().expect("cp"));
    let c = start_side(&cp, side, FeatureGates::default(), &[]).await;
    let client = cp.client().await.expect("client");
    let ns = TestNamespace::create(&client, "diff").await.expect("ns");
    let scn = Scn {
        jobs: Api::namespaced(client.clone(), &ns.name),
        pods: Api::namespaced(client.clone(), &ns.name),
        ns: ns.name.clone(),
        client,
        snaps: Default::default(),
        cp,
        side,
        controller: Arc::new(Mutex::new(Some(c))),
    };
    script(scn.clone()).await;
    let snaps = scn.snaps.lock().clone();
    // Stop the controller before the control plane goes.
    scn.controller.lock().take();
    snaps
}

/// Plays `script` against upstream and kcm-rs concurrently; returns
/// (upstream's, kcm-rs's) snapshots, for scenarios that show a listed
/// deviation and assert each side themselves.
pub async fn play_both(script: Script) -> (Snaps, Snaps) {
    tokio::join!(play(true, script), play(false, script))
}

/// Plays `script` against upstream and kcm-rs concurrently and asserts
/// every checkpoint matches; returns kcm-rs's snapshots.
pub async fn compare_script(script: Script) -> Vec<(String, Snap)> {
    compare_script_with(script, |s| s).await
}

/// [`compare_script`] with both lists of snapshots passed through `fix`
/// first (to drop what legitimately depends on timing).
pub async fn compare_script_with(script: Script, fix: fn(Snaps) -> Snaps) -> Vec<(String, Snap)> {
    let (theirs, ours) = play_both(script).await;
    let (theirs, ours) = (fix(theirs), fix(ours));
    assert_eq!(
        ours.len(),
        theirs.len(),
        "checkpoints: kcm-rs {ours:#?} vs upstream {theirs:#?}"
    );
    for ((label, o), (_, t)) in ours.iter().zip(&theirs) {
        assert_eq!(
            o, t,
            "checkpoint {label:?}: kcm-rs (left) vs upstream (right)"
        );
    }
    ours
}
