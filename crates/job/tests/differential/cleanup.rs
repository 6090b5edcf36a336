//! What a deleted Job leaves behind, where upstream changed in 1.37: each
//! side runs behind its own fault proxy (one worker, `--concurrent-job-syncs=1`,
//! so a stalled pod creation holds every other sync back) on the minor of
//! `KCM_E2E_K8S_VERSION`. kcm-rs does the 1.37 thing on every minor (a
//! listed deviation); upstream before 1.37 shows the older behaviour.
//!
//! - d31: a Job deleted while its pod creation is still unobserved, and a
//!   replacement of the same name: 1.37 clears the expectations on the
//!   delete event, so the replacement gets its pod; before, the replacement
//!   inherits them and creates nothing until they expire (5 min).
//! - d32: the finalizer sweep after a Job is deleted fails once to remove a
//!   pod's tracking finalizer: 1.37 retries that pod with back-off; before,
//!   the failure is only logged and the finalizer stays.

use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kcm_e2e::faults::{Fault, FaultProxy, FaultSettings, Script, When};
use kcm_e2e::in_process;
use kcm_e2e::wait::wait_for_list;
use kcm_e2e::{ControlPlane, TestNamespace, UpstreamKcm};
use kcm_features::FeatureGates;
use kcm_runtime::controller::Settings;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::json;

use crate::support::{Controller, has_tracking, job};

/// How long the fault proxy holds a stalled request.
const STALL: Duration = Duration::from_secs(10);
const WAIT: Duration = Duration::from_secs(30);

/// One side: a control plane, its proxy and a one-worker job-controller
/// talking through the proxy. Fields drop in order: controller first.
struct Side {
    controller: Controller,
    proxy: FaultProxy,
    jobs: Api<Job>,
    pods: Api<Pod>,
    ns: String,
    _ns: TestNamespace,
    _cp: ControlPlane,
}

async fn side(upstream: bool) -> Side {
    let cp = ControlPlane::start().expect("control plane");
    let client = cp.client().await.expect("client");
    let ns = TestNamespace::create(&client, "cleanup").await.expect("ns");
    let proxy = FaultProxy::start(&cp, FaultSettings::none())
        .await
        .expect("proxy");
    proxy.set_stall(STALL);
    let controller = if upstream {
        let kc = format!("--kubeconfig={}", proxy.kubeconfig().display());
        Controller::Upstream(
            UpstreamKcm::start(&cp, &["job-controller"], &[&kc, "--concurrent-job-syncs=1"])
                .expect("upstream KCM"),
        )
    } else {
        let settings = Settings::default().with(kcm_job::JobSettings {
            concurrent_job_syncs: 1,
            ..Default::default()
        });
        Controller::Ours(
            in_process::start_at(
                proxy.kubeconfig(),
                &[kcm_job::SPEC],
                settings,
                FeatureGates::default(),
            )
            .await
            .expect("kcm-rs job controller"),
        )
    };
    let s = Side {
        controller,
        jobs: Api::namespaced(client.clone(), &ns.name),
        pods: Api::namespaced(client, &ns.name),
        ns: ns.name.clone(),
        _ns: ns,
        proxy,
        _cp: cp,
    };
    // The controller is running with synced informers once a probe Job
    // gets its pod (upstream's start returns before its caches sync).
    s.jobs
        .create(&PostParams::default(), &one_pod_job("probe"))
        .await
        .expect("probe");
    s.pods_of(
        "batch.kubernetes.io/job-name=probe",
        "the probe's pod",
        |p| p.len() == 1,
    )
    .await;
    s
}

impl Side {
    fn who(&self) -> &'static str {
        match self.controller {
            Controller::Ours(_) | Controller::Beside(..) => "kcm-rs",
            Controller::Upstream(_) => "upstream",
        }
    }

    /// The next `method` request whose path contains `path` gets `fault`.
    fn fault_once(&self, method: &str, path: &str, fault: Fault) {
        self.proxy.script(Script {
            method: method.into(),
            path_contains: path.into(),
            fault,
            when: When::Before,
            times: 1,
        });
    }

    /// Waits until every scripted fault was injected.
    async fn until_injected(&self, what: &str) {
        let began = Instant::now();
        while self.proxy.scripts_left() > 0 {
            assert!(
                began.elapsed() < WAIT,
                "{}: {what} never happened\n{}",
                self.who(),
                self.tail()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn pods_of(&self, sel: &str, what: &str, pred: impl Fn(&[Pod]) -> bool) -> Vec<Pod> {
        let lp = ListParams::default().labels(sel);
        wait_for_list(&self.pods, &lp, WAIT, what, pred)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}\n{}", self.who(), self.tail()))
    }

    /// The end of the controller's log (upstream) and the proxy's record.
    fn tail(&self) -> String {
        let log = match &self.controller {
            Controller::Upstream(k) => kcm_e2e::control_plane::tail(k.log(), 30),
            Controller::Ours(_) | Controller::Beside(..) => String::new(),
        };
        format!("{log}\n{}", kcm_e2e::faults::summary(&self.proxy.records()))
    }
}

fn one_pod_job(name: &str) -> Job {
    job(name, json!({"completions": 1, "parallelism": 1}))
}

/// d31: how many pods the replacement Job has 15 s after the sync that
/// could create them.
async fn replacement_after_unobserved_creation(upstream: bool) -> usize {
    let s = side(upstream).await;
    // Hold the controller's pod watch back: cut every connection and stall
    // the pod list or watch that replaces the cut one.
    s.fault_once("GET", "/api/v1/pods?", Fault::Stall);
    s.proxy.cut(true);
    tokio::time::sleep(Duration::from_millis(300)).await;
    s.proxy.cut(false);
    s.until_injected("the pod watch stall").await;
    let pp = PostParams::default();
    s.jobs
        .create(&pp, &one_pod_job("same"))
        .await
        .expect("create");
    s.pods_of(
        "batch.kubernetes.io/job-name=same",
        "the first Job's pod",
        |p| p.len() == 1,
    )
    .await;
    // Occupy the only worker: the next pod creation stalls.
    s.fault_once("POST", &format!("/namespaces/{}/pods", s.ns), Fault::Stall);
    s.jobs
        .create(&pp, &one_pod_job("blocker"))
        .await
        .expect("blocker");
    s.until_injected("the blocker's stalled pod creation").await;
    s.jobs
        .delete("same", &DeleteParams::background())
        .await
        .expect("delete");
    let replacement = s
        .jobs
        .create(&pp, &one_pod_job("same"))
        .await
        .expect("again");
    let uid = replacement.metadata.uid.expect("uid");
    s.pods_of(
        "batch.kubernetes.io/job-name=blocker",
        "the blocker's pod",
        |p| p.len() == 1,
    )
    .await;
    let lp = ListParams::default().labels(&format!("batch.kubernetes.io/controller-uid={uid}"));
    let until = Instant::now() + Duration::from_secs(15);
    let mut n = 0;
    while Instant::now() < until {
        n = s.pods.list(&lp).await.expect("list").items.len();
        if n > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!("d31 {}: replacement pods {n}", s.who());
    n
}

/// d32: whether the deleted Job's pod still has its tracking finalizer 8 s
/// after the sweep's removal failed once.
async fn finalizer_left_after_failed_sweep(upstream: bool) -> bool {
    let s = side(upstream).await;
    let pp = PostParams::default();
    s.jobs
        .create(&pp, &one_pod_job("swept"))
        .await
        .expect("create");
    let pods = s
        .pods_of("batch.kubernetes.io/job-name=swept", "a tracked pod", |p| {
            p.len() == 1 && p.iter().all(has_tracking)
        })
        .await;
    let name = pods[0].metadata.name.clone().expect("name");
    kcm_e2e::wait::wait_for(&s.jobs, "swept", WAIT, "1 active", |j| {
        j.status.as_ref().and_then(|s| s.active) == Some(1)
    })
    .await
    .unwrap_or_else(|e| panic!("{}: {e}", s.who()));
    s.fault_once("PATCH", &format!("/pods/{name}"), Fault::InternalError);
    s.jobs
        .delete("swept", &DeleteParams::background())
        .await
        .expect("delete");
    s.until_injected("the sweep's refused finalizer removal")
        .await;
    let until = Instant::now() + Duration::from_secs(8);
    let mut left = true;
    while left && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(250)).await;
        left = has_tracking(&s.pods.get(&name).await.expect("pod"));
    }
    eprintln!("d32 {}: finalizer left {left}", s.who());
    left
}

#[tokio::test]
async fn d31_replacement_job_after_delete_with_unobserved_creation() {
    let (theirs, ours) = tokio::join!(
        replacement_after_unobserved_creation(true),
        replacement_after_unobserved_creation(false)
    );
    let minor = kcm_e2e::binaries::k8s_minor();
    assert_eq!(ours, 1, "kcm-rs: the replacement got no pod");
    let expected = usize::from(minor >= 37);
    assert_eq!(theirs, expected, "upstream 1.{minor}: replacement pods");
}

#[tokio::test]
async fn d32_failed_finalizer_removal_in_the_sweep() {
    let (theirs, ours) = tokio::join!(
        finalizer_left_after_failed_sweep(true),
        finalizer_left_after_failed_sweep(false)
    );
    let minor = kcm_e2e::binaries::k8s_minor();
    assert!(!ours, "kcm-rs left the tracking finalizer");
    assert_eq!(theirs, minor < 37, "upstream 1.{minor}: finalizer left");
}
