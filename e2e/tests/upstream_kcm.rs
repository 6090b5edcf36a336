//! Upstream kube-controller-manager's job-controller, built from the same
//! Kubernetes module, runs a Job on the local control plane while the test
//! plays the kubelet: the reference for differential tests.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kcm_e2e::kubelet;
use kcm_e2e::wait::{wait_for, wait_for_list};
use kcm_e2e::{ControlPlane, TestNamespace, UpstreamKcm};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;

#[tokio::test]
async fn upstream_job_controller_creates_and_completes_pods() {
    // A control plane of its own, so no other test's controllers interfere.
    let cp = ControlPlane::start().expect("control plane");
    let _kcm = UpstreamKcm::start(&cp, &["job-controller"], &[]).expect("upstream KCM");
    let client = cp.client().await.expect("client");
    let ns = TestNamespace::create(&client, "upstream")
        .await
        .expect("namespace");
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let job: Job = serde_json::from_value(json!({
        "metadata": { "name": "pi" },
        "spec": {
            "completions": 3, "parallelism": 2,
            "template": { "spec": {
                "restartPolicy": "Never",
                "containers": [{ "name": "main", "image": "busybox" }]
            }}
        }
    }))
    .expect("job");
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("create job");

    let lp = ListParams::default().labels("batch.kubernetes.io/job-name=pi");
    let first = wait_for_list(
        &pods,
        &lp,
        Duration::from_secs(60),
        "2 pods from upstream",
        |p| p.len() == 2,
    )
    .await
    .unwrap_or_else(|e| {
        panic!(
            "{e}\nKCM log tail:\n{}",
            kcm_e2e::control_plane::tail(_kcm.log(), 20)
        )
    });
    for p in &first {
        let fins = p.metadata.finalizers.clone().unwrap_or_default();
        assert!(
            fins.contains(&"batch.kubernetes.io/job-tracking".to_string()),
            "upstream adds the tracking finalizer: {fins:?}"
        );
    }
    // Play the kubelet until the Job completes.
    let mut finished = std::collections::HashSet::new();
    let done = loop {
        let job = jobs.get("pi").await.expect("job");
        let complete = job
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Complete" && c.status == "True")
            });
        if complete {
            break job;
        }
        for p in pods.list(&lp).await.expect("list").items {
            let name = p.metadata.name.clone().unwrap_or_default();
            if p.status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .unwrap_or("Pending")
                == "Pending"
                && finished.insert(name.clone())
            {
                kubelet::finish_pod(&pods, &name, 0)
                    .await
                    .expect("finish pod");
            }
        }
        assert!(
            finished.len() <= 3,
            "upstream never creates more than completions pods"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let status = done.status.expect("status");
    assert_eq!(status.succeeded, Some(3));
    assert_eq!(status.failed.unwrap_or(0), 0);
    // The finalizers are gone once the pods are counted.
    wait_for_list(
        &pods,
        &lp,
        Duration::from_secs(30),
        "finalizers removed",
        |ps| {
            ps.iter()
                .all(|p| p.metadata.finalizers.as_ref().is_none_or(|f| f.is_empty()))
        },
    )
    .await
    .expect("finalizers");
    let _ = wait_for(&jobs, "pi", Duration::from_secs(5), "completionTime", |j| {
        j.status
            .as_ref()
            .and_then(|s| s.completion_time.as_ref())
            .is_some()
    })
    .await
    .expect("completion time");
}
