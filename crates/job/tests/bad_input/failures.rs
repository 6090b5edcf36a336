//! Failures that do not look like the textbook: failed pods without exit
//! codes, node-pressure evictions, pods deleted but not yet terminal, a
//! `FailureTarget=False` condition written by hand, pods with duplicate
//! env and port keys (which the API server only warns about).

use std::time::Duration;

use kcm_e2e::kubelet::{self, PodStatusUpdate, condition as pod_condition, running, terminated};
use kube::api::DeleteParams;
use serde_json::json;

use super::*;

const IGNORE_DISRUPTION: &str = "DisruptionTarget";

fn policy() -> serde_json::Value {
    json!({"rules": [
        {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}},
        {"action": "Ignore", "onPodConditions": [{"type": IGNORE_DISRUPTION}]}
    ]})
}

async fn set_status(e: &Env, pod: &str, update: PodStatusUpdate) {
    kubelet::update_pod_status(&e.pods, pod, &update)
        .await
        .unwrap_or_else(|err| panic!("status of {pod}: {err}"));
}

/// Failed pods the textbook kubelet never writes: no container statuses at
/// all (admission failure, node lost), no finish time either (so back-off
/// falls back to the creation time), a container not terminated, and a
/// node-pressure eviction (`ContainerStatusUnknown`, 137, DisruptionTarget).
/// The FailJob-on-42 rule cannot match any of them; the Ignore rule takes
/// the eviction; the others count. Replacements come, the Job completes.
#[tokio::test]
async fn failed_pods_without_exit_codes() {
    let e = env("no-exit").await;
    e.create(
        "odd",
        json!({"completions": 4, "parallelism": 4, "backoffLimit": 6,
            "podFailurePolicy": policy()}),
    )
    .await;
    let ps = wait_pods(&e.pods, "odd", "4 pods", |ps| ps.len() == 4).await;
    let now = jiff::Timestamp::now();
    let names: Vec<String> = ps.iter().map(name).collect();
    set_status(&e, &names[0], PodStatusUpdate::default().phase("Failed")).await;
    set_status(
        &e,
        &names[1],
        PodStatusUpdate::default()
            .phase("Failed")
            .containers(vec![running("main", false, now)]),
    )
    .await;
    let mut unknown = terminated("main", 137, now);
    if let Some(t) = unknown.state.as_mut().and_then(|s| s.terminated.as_mut()) {
        t.reason = Some("ContainerStatusUnknown".into());
        t.message = Some("The container could not be located when the pod was terminated".into());
    }
    set_status(
        &e,
        &names[2],
        PodStatusUpdate::default()
            .phase("Failed")
            .containers(vec![unknown])
            .condition(pod_condition(
                IGNORE_DISRUPTION,
                true,
                "TerminationByKubelet",
                "node pressure",
            )),
    )
    .await;
    set_status(
        &e,
        &names[3],
        PodStatusUpdate::default()
            .phase("Failed")
            .condition(pod_condition(
                IGNORE_DISRUPTION,
                true,
                "PreemptionByScheduler",
                "evicted before start",
            )),
    )
    .await;
    let j = wait_job(&e.jobs, "odd", "2 counted, 2 ignored", |j| {
        let o = outcome(j);
        o.failed == 2 && o.uncounted_empty
    })
    .await;
    assert!(
        condition(&j, "FailureTarget").is_none(),
        "no FailJob match: {:#?}",
        j.status
    );
    let done = drive(&e.jobs, &e.pods, "odd", Duration::from_secs(90), |p, _| {
        (!names.contains(&name(p))).then_some(0)
    })
    .await;
    let o = outcome(&done);
    assert_eq!((o.succeeded, o.failed), (4, 2), "{o:#?}");
    assert_eq!(
        condition(&done, "Complete").map(|c| c.0).as_deref(),
        Some("True")
    );
    no_finalizer_left(&e.pods, "batch.kubernetes.io/job-name=odd").await;
    e.control().await;
}

/// Deleted but not yet terminal pods: without a pod failure policy such a
/// pod is a failure at once and is replaced; with one, it is only
/// `terminating` until its phase is terminal, and then the policy decides
/// (here Ignore on DisruptionTarget: not counted).
#[tokio::test]
async fn terminating_but_not_terminal_pods() {
    let e = env("terminating").await;
    e.create("plain", json!({"completions": 1, "parallelism": 1}))
        .await;
    e.create(
        "pfp",
        json!({"completions": 1, "parallelism": 1, "podFailurePolicy": policy()}),
    )
    .await;
    let mut victims = Vec::new();
    for j in ["plain", "pfp"] {
        let ps = wait_pods(&e.pods, j, "1 pod", |ps| ps.len() == 1).await;
        let n = name(&ps[0]);
        // Bound, so the delete leaves it terminating until "the kubelet"
        // (this test) stops it.
        kubelet::bind_pod(&e.pods, &n, "n1").await.expect("bind");
        kubelet::run_pod(&e.pods, &n, true).await.expect("run");
        victims.push(n);
    }
    for n in &victims {
        e.pods
            .delete(n, &DeleteParams::default())
            .await
            .expect("delete");
    }
    let plain = wait_job(&e.jobs, "plain", "counted failed at once", |j| {
        let o = outcome(j);
        o.failed == 1 && o.active == 1
    })
    .await;
    assert_eq!(outcome(&plain).terminating, 1, "{:#?}", plain.status);
    tokio::time::sleep(SETTLE).await;
    let pfp = e.jobs.get("pfp").await.expect("pfp");
    let o = outcome(&pfp);
    assert_eq!(
        (o.failed, o.active, o.terminating),
        (0, 0, 1),
        "waits for the terminal phase: {o:#?}"
    );
    assert_eq!(
        job_pods(&e.pods, "pfp").await.len(),
        1,
        "no replacement yet"
    );
    // The kubelet stops both; the PFP one was disrupted.
    let now = jiff::Timestamp::now();
    set_status(
        &e,
        &victims[1],
        PodStatusUpdate::default()
            .phase("Failed")
            .containers(vec![terminated("main", 137, now)])
            .condition(pod_condition(IGNORE_DISRUPTION, true, "DeletionByTest", "")),
    )
    .await;
    kubelet::finish_pod(&e.pods, &victims[0], 137)
        .await
        .expect("stop");
    for (j, failed) in [("plain", 1), ("pfp", 0)] {
        let done = drive(&e.jobs, &e.pods, j, Duration::from_secs(60), |p, _| {
            (!victims.contains(&name(p))).then_some(0)
        })
        .await;
        let o = outcome(&done);
        assert_eq!((o.succeeded, o.failed), (1, failed), "{j}: {o:#?}");
        no_finalizer_left(&e.pods, &format!("batch.kubernetes.io/job-name={j}")).await;
    }
    e.control().await;
}

/// A `FailureTarget` condition with status False written by hand is
/// ignored (only True counts): the Job runs on. When it then really fails,
/// exactly one `FailureTarget=True` is added while the other pod is still
/// terminating; upstream (which reads only the first condition of a type)
/// appended another one and rewrote the status about once a second until
/// that pod was gone (see docs/bad-input.md).
#[tokio::test]
async fn hand_edited_failure_target() {
    let e = env("ft-false").await;
    e.create(
        "ft",
        json!({"completions": 2, "parallelism": 2, "backoffLimit": 0}),
    )
    .await;
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now());
    e.patch_status(
        "ft",
        json!({"conditions": [{"type": "FailureTarget", "status": "False", "reason": "ByHand",
            "message": "edited", "lastProbeTime": now, "lastTransitionTime": now}]}),
    )
    .await
    .expect("the API server accepts FailureTarget=False");
    let ps = wait_pods(&e.pods, "ft", "2 pods", |ps| ps.len() == 2).await;
    for p in &ps {
        kubelet::bind_pod(&e.pods, &name(p), "n1")
            .await
            .expect("bind");
    }
    run_pending(&e.pods, "ft").await;
    tokio::time::sleep(SETTLE).await;
    let j = e.jobs.get("ft").await.expect("ft");
    assert!(!finished(&j), "{:#?}", j.status);
    assert_eq!(outcome(&j).active, 2, "not failing: {:#?}", j.status);
    kubelet::finish_pod(&e.pods, &name(&ps[0]), 1)
        .await
        .expect("fail");
    wait_job(&e.jobs, "ft", "FailureTarget=True", |j| {
        condition_count(j, "FailureTarget", "True") >= 1
    })
    .await;
    // The other pod is terminating; give a repeating sync time to show.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let j = e.jobs.get("ft").await.expect("ft");
    assert_eq!(
        condition_count(&j, "FailureTarget", "True"),
        1,
        "{:#?}",
        conditions(&j)
    );
    assert!(!finished(&j), "still a terminating pod: {:#?}", j.status);
    kubelet::finish_pod(&e.pods, &name(&ps[1]), 137)
        .await
        .expect("stop");
    let j = wait_job(&e.jobs, "ft", "Failed", finished).await;
    assert_eq!(
        conditions(&j),
        vec![
            ("FailureTarget".into(), "False".into(), "ByHand".into()),
            (
                "FailureTarget".into(),
                "True".into(),
                "BackoffLimitExceeded".into()
            ),
            (
                "Failed".into(),
                "True".into(),
                "BackoffLimitExceeded".into()
            ),
        ]
    );
    wait_event(&e.client, &e.ns, "ft", "BackoffLimitExceeded").await;
    no_finalizer_left(&e.pods, "batch.kubernetes.io/job-name=ft").await;
    e.control().await;
}

/// `startTime` removed by hand while the Job is suspended (the API server
/// allows that only then; 1.35+ clears it itself on suspension), then the
/// elastic Indexed Job is scaled down to the indexes it already completed:
/// it finishes without a start. The API server refuses a finished Job
/// without `startTime`, so upstream's Complete write is refused on every
/// retry and the Job stays at SuccessCriteriaMet for ever; kcm-rs sets
/// `startTime` with the terminal condition (docs/bad-input.md).
#[tokio::test]
async fn finishing_while_suspended_without_a_start_time() {
    let e = env("no-start").await;
    e.create(
        "ns",
        json!({"completionMode": "Indexed", "completions": 2, "parallelism": 2}),
    )
    .await;
    let ps = wait_pods(&e.pods, "ns", "2 pods", |ps| ps.len() == 2).await;
    let zero = ps
        .iter()
        .find(|p| index(p) == 0)
        .map(name)
        .expect("index 0");
    kubelet::finish_pod(&e.pods, &zero, 0)
        .await
        .expect("finish");
    wait_job(&e.jobs, "ns", "index 0 counted", |j| {
        outcome(j).completed_indexes == "0"
    })
    .await;
    let patch_spec = |spec: serde_json::Value| {
        let jobs = e.jobs.clone();
        async move {
            jobs.patch(
                "ns",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({ "spec": spec })),
            )
            .await
            .expect("patch spec")
        }
    };
    patch_spec(json!({"suspend": true})).await;
    wait_job(&e.jobs, "ns", "suspended, nothing active", |j| {
        condition(j, "Suspended").is_some_and(|c| c.0 == "True") && outcome(j).active == 0
    })
    .await;
    e.patch_status("ns", json!({"startTime": null}))
        .await
        .expect("startTime may be removed while suspended");
    patch_spec(json!({"completions": 1, "parallelism": 1})).await;
    let j = wait_job(&e.jobs, "ns", "Complete", finished).await;
    assert_eq!(
        condition(&j, "Complete").map(|c| c.0).as_deref(),
        Some("True")
    );
    let s = j.status.clone().unwrap_or_default();
    assert_eq!(
        (s.succeeded, s.completed_indexes.as_deref()),
        (Some(1), Some("0"))
    );
    let (start, done) = (
        s.start_time.clone().expect("startTime"),
        s.completion_time.clone().expect("completionTime"),
    );
    assert!(done.0 >= start.0, "{s:?}");
    no_finalizer_left(&e.pods, "batch.kubernetes.io/job-name=ns").await;
    e.control().await;
}

fn condition_count(j: &Job, type_: &str, status: &str) -> usize {
    conditions(j)
        .iter()
        .filter(|c| c.0 == type_ && c.1 == status)
        .count()
}

/// Pods whose spec the API server accepts only with warnings (duplicate env
/// names, duplicate container ports): the controller's minimal strategic
/// merge patches still remove the tracking finalizer (no server-side apply
/// of the whole object, which such duplicates break), and the Job
/// completes.
#[tokio::test]
async fn pods_with_duplicate_env_and_port_keys() {
    let e = env("dup-keys").await;
    e.create(
        "dup",
        json!({"completions": 2, "parallelism": 2,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{
                "name": "main", "image": "busybox",
                "env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}],
                "ports": [{"containerPort": 80}, {"containerPort": 80}]}]}}}),
    )
    .await;
    let done = drive(&e.jobs, &e.pods, "dup", Duration::from_secs(60), |_, _| {
        Some(0)
    })
    .await;
    assert_eq!(outcome(&done).succeeded, 2);
    let ps = job_pods(&e.pods, "dup").await;
    let env_len = ps[0]
        .spec
        .as_ref()
        .map(|s| s.containers[0].env.as_ref().map_or(0, Vec::len));
    assert_eq!(env_len, Some(2), "the duplicates are really there");
    no_finalizer_left(&e.pods, "batch.kubernetes.io/job-name=dup").await;
    e.control().await;
}
