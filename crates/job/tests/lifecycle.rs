//! Job lifecycle against the real API server, beyond the shared scenarios
//! (`scenarios.rs`: restart mid-Job, deletion while pods run, ...): suspend
//! and resume seen through the pod history and events, the external
//! controller metric of `managedBy`, and a sweep whose finalizer removal
//! fails.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use kcm_e2e::history::{PodHistory, Seen};
use kcm_features::FeatureGates;
use kcm_job_testing as support;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use support::*;

async fn patch_spec(jobs: &Api<Job>, name: &str, spec: serde_json::Value) {
    jobs.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": spec })),
    )
    .await
    .expect("patch job");
}

/// Created suspended: no pods, Suspended=True, event; resume: pods,
/// Suspended=False JobResumed and a fresh startTime; suspend again: the
/// active pods go (finalizer first) without being counted as failed.
#[tokio::test]
async fn suspend_and_resume() {
    let e = plane("life").await;
    let _c = ours(&e.cp, FeatureGates::default()).await;
    let history = PodHistory::start(&e.client, &e.ns.name).await;
    e.jobs
        .create(
            &PostParams::default(),
            &job(
                "sus",
                json!({"completions": 4, "parallelism": 2, "suspend": true}),
            ),
        )
        .await
        .expect("create");
    let j = wait_job(&e.jobs, "sus", "Suspended=True", |j| {
        condition(j, "Suspended") == Some(("True".into(), "JobSuspended".into()))
    })
    .await;
    assert!(start_time(&j).is_none(), "no startTime while suspended");
    let evs = wait_event(&e.client, &e.ns.name, "sus", "Suspended").await;
    assert!(
        evs.iter()
            .any(|e| e.0 == "Suspended" && e.1 == "Job suspended" && e.2 == "job-controller")
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(job_pods(&e.pods, "sus").await.is_empty());

    patch_spec(&e.jobs, "sus", json!({"suspend": false})).await;
    let j = wait_job(&e.jobs, "sus", "resumed", |j| {
        condition(j, "Suspended") == Some(("False".into(), "JobResumed".into()))
            && j.status.as_ref().and_then(|s| s.active) == Some(2)
    })
    .await;
    let first_start = start_time(&j).expect("startTime after resume");
    wait_event(&e.client, &e.ns.name, "sus", "Resumed").await;
    run_pending(&e.pods, "sus").await;
    wait_job(&e.jobs, "sus", "ready 2", |j| {
        j.status.as_ref().and_then(|s| s.ready) == Some(2)
    })
    .await;

    let running: Vec<String> = job_pods(&e.pods, "sus").await.iter().map(name).collect();
    // Suspend the running Job.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    patch_spec(&e.jobs, "sus", json!({"suspend": true})).await;
    let j = wait_job(&e.jobs, "sus", "suspended again, no active", |j| {
        condition(j, "Suspended").is_some_and(|c| c.0 == "True")
            && j.status.as_ref().and_then(|s| s.active).unwrap_or(0) == 0
    })
    .await;
    wait_pods(&e.pods, "sus", "pods removed", |ps| {
        ps.iter().all(|p| !is_active(p))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let o = outcome(&e.jobs.get("sus").await.expect("job"));
    assert_eq!(o.failed, 0, "removed pods are not failures: {o:#?}");
    assert!(o.uncounted_empty);
    let evs = wait_event(&e.client, &e.ns.name, "sus", "SuccessfulDelete").await;
    for pod in &running {
        let msg = format!("Deleted pod: {pod}");
        assert!(
            evs.iter().any(|e| e.0 == "SuccessfulDelete" && e.1 == msg),
            "{msg}: {evs:#?}"
        );
    }
    // Finalizer first: no pod was ever seen being deleted with the finalizer.
    for pod in &running {
        let seen = history.of(pod);
        assert!(
            seen.iter().any(|s| matches!(s, Seen::Deleted(_))),
            "pod {pod} deleted"
        );
        for s in seen {
            let (Seen::Applied(p) | Seen::Deleted(p)) = s;
            assert!(
                !(p.metadata.deletion_timestamp.is_some() && has_tracking(&p)),
                "pod {pod} deleted before its finalizer was removed"
            );
        }
    }
    let _ = j;

    // Resume again: startTime is reset and new pods come.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    patch_spec(&e.jobs, "sus", json!({"suspend": false})).await;
    let j = wait_job(&e.jobs, "sus", "resumed again", |j| {
        condition(j, "Suspended").is_some_and(|c| c.0 == "False")
            && j.status.as_ref().and_then(|s| s.active) == Some(2)
    })
    .await;
    let second_start = start_time(&j).expect("startTime");
    assert!(
        second_start > first_start,
        "startTime reset: {first_start} -> {second_start}"
    );
    let done = drive(&e.jobs, &e.pods, "sus", Duration::from_secs(30), |_, _| {
        Some(0)
    })
    .await;
    let o = outcome(&done);
    assert_eq!((o.succeeded, o.failed), (4, 0), "{o:#?}");
}

/// `spec.managedBy` names another controller: kcm-rs leaves the Job alone.
#[tokio::test]
async fn job_managed_by_another_controller_is_ignored() {
    let e = plane("life").await;
    let c = ours(&e.cp, FeatureGates::default()).await;
    let before = metric(
        &c.metrics,
        "job_controller_jobs_by_external_controller_total",
        &[("controller_name", "example.com/other")],
    );
    e.jobs
        .create(
            &PostParams::default(),
            &job(
                "ext",
                json!({"completions": 2, "parallelism": 2, "managedBy": "example.com/other"}),
            ),
        )
        .await
        .expect("create");
    // Ours sees it (a control Job next to it gets its pods).
    e.jobs
        .create(&PostParams::default(), &job("mine", json!({})))
        .await
        .expect("create");
    wait_pods(&e.pods, "mine", "control job pod", |ps| ps.len() == 1).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(job_pods(&e.pods, "ext").await.is_empty(), "no pods");
    let j = e.jobs.get("ext").await.expect("job");
    assert_eq!(
        j.status.clone().unwrap_or_default(),
        Default::default(),
        "no status written"
    );
    let after = metric(
        &c.metrics,
        "job_controller_jobs_by_external_controller_total",
        &[("controller_name", "example.com/other")],
    );
    assert!(after >= before + 1.0, "external controller metric");
}

/// A tracking finalizer whose removal fails in the sweep after a Job is
/// deleted is retried for that pod with back-off (upstream 1.37), not only
/// logged: a ValidatingAdmissionPolicy refuses the removal, then its binding
/// goes (no event on the pod), and the finalizer must still go.
#[tokio::test]
async fn failed_finalizer_removal_in_the_sweep_is_retried() {
    use kube::api::DynamicObject;
    use kube::discovery::ApiResource;
    let e = plane("life").await;
    let _jc = ours(&e.cp, FeatureGates::default()).await;
    let gvk = |kind: &str| {
        ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            kind,
        ))
    };
    let policies: Api<DynamicObject> =
        Api::all_with(e.client.clone(), &gvk("ValidatingAdmissionPolicy"));
    let bindings: Api<DynamicObject> =
        Api::all_with(e.client.clone(), &gvk("ValidatingAdmissionPolicyBinding"));
    let vap = format!("{}-keep-finalizer", e.ns.name);
    let keep = "!(has(object.metadata.labels) && 'block' in object.metadata.labels) || \
                (has(object.metadata.finalizers) && \
                 object.metadata.finalizers.exists(f, f == 'batch.kubernetes.io/job-tracking'))";
    let policy: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": vap},
        "spec": {"failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["UPDATE"], "resources": ["pods"]}]},
            "validations": [{"expression": keep, "message": "blocked by the test"}]}
    }))
    .expect("policy");
    policies
        .create(&PostParams::default(), &policy)
        .await
        .expect("policy");
    let binding: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": vap},
        "spec": {"policyName": vap, "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels":
                {"kubernetes.io/metadata.name": e.ns.name}}}}
    }))
    .expect("binding");
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .expect("binding");

    let mut j = job("swept", json!({"parallelism": 1, "completions": 1}));
    if let Some(spec) = j.spec.as_mut() {
        spec.template.metadata =
            Some(serde_json::from_value(json!({"labels": {"block": "true"}})).expect("meta"));
    }
    e.jobs
        .create(&PostParams::default(), &j)
        .await
        .expect("job");
    let pods = wait_pods(&e.pods, "swept", "one pod", |ps| ps.len() == 1).await;
    let pod = name(&pods[0]);
    // The policy is in force once removing the finalizer by hand is refused.
    let removal = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [TRACKING]}});
    let start = std::time::Instant::now();
    loop {
        // A dry run: admission runs, nothing is written.
        let r = e
            .pods
            .patch(
                &pod,
                &PatchParams::default().dry_run(),
                &Patch::Strategic(&removal),
            )
            .await;
        match r {
            Err(kube::Error::Api(err)) if err.message.contains("blocked by the test") => break,
            Ok(_) | Err(_) => {}
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "policy never in force"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Background: the Job goes at once (no garbage collector runs here).
    let background = DeleteParams {
        propagation_policy: Some(kube::api::PropagationPolicy::Background),
        ..Default::default()
    };
    e.jobs
        .delete("swept", &background)
        .await
        .expect("delete job");
    // The sweep runs and is refused; the finalizer stays meanwhile.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let held = e.pods.get(&pod).await.expect("pod");
    assert!(
        has_tracking(&held),
        "the policy should have kept the finalizer"
    );
    // Lift the block without touching the pod: only a retry can finish.
    bindings
        .delete(&vap, &DeleteParams::default())
        .await
        .expect("unbind");
    let start = std::time::Instant::now();
    while has_tracking(&e.pods.get(&pod).await.expect("pod")) {
        assert!(
            start.elapsed() < Duration::from_secs(45),
            "the tracking finalizer was never retried"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let _ = policies.delete(&vap, &DeleteParams::default()).await;
}
