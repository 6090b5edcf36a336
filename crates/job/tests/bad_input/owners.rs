//! Ownership gone wrong: pods whose controller reference names a missing
//! Job, the right name with another UID, a "Job" of another API group or
//! version, or another kind; Jobs managed by another controller; Jobs with
//! overlapping manual selectors; a Job deleted and created again under the
//! same name while its pods finish.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kcm_e2e::kubelet;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::*;

const GHOST_UID: &str = "00000000-0000-0000-0000-00000000dead";

/// A bare pod with the tracking finalizer, labelled `labels`, whose
/// controller reference is `owner` (apiVersion, kind, name, uid).
fn owned_pod(
    name: &str,
    labels: serde_json::Value,
    owner: Option<(&str, &str, &str, &str)>,
) -> Pod {
    let mut p = json!({
        "metadata": {"name": name, "labels": labels,
            "finalizers": ["batch.kubernetes.io/job-tracking"]},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}
    });
    if let Some((api, kind, owner_name, uid)) = owner {
        p["metadata"]["ownerReferences"] = json!([{"apiVersion": api, "kind": kind,
            "name": owner_name, "uid": uid, "controller": true}]);
    }
    serde_json::from_value(p).expect("pod")
}

async fn drop_finalizers(e: &Env, names: &[&str]) {
    for n in names {
        e.pods
            .patch(
                n,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await
            .ok();
    }
}

/// Controller references to a missing Job or to a live Job's name with
/// another UID resolve to nothing (upstream `resolveControllerRef` checks
/// name, then UID): the live Job neither adopts nor counts them, and once
/// deleted they go to the orphan queue, which removes the finalizer so
/// they are not stuck. References to a "Job" of another group or version,
/// or to another kind, are not ours: their finalizer is never touched.
#[tokio::test]
async fn dangling_mismatched_and_foreign_owners() {
    let e = env("owners").await;
    let real = e
        .create("real", json!({"completions": 1, "parallelism": 1}))
        .await;
    let uid = real.metadata.uid.clone().unwrap_or_default();
    // The labels of real's own pods: its selector matches all of these.
    let labels = json!({"batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": "real"});
    let cases = [
        ("ghost", ("batch/v1", "Job", "ghost", GHOST_UID), true),
        ("mismatch", ("batch/v1", "Job", "real", GHOST_UID), true),
        (
            "crd-job",
            ("example.com/v1", "Job", "real", GHOST_UID),
            false,
        ),
        (
            "old-api",
            ("batch/v1beta1", "Job", "real", GHOST_UID),
            false,
        ),
        ("cronjob", ("batch/v1", "CronJob", "real", GHOST_UID), false),
    ];
    for (n, owner, _) in &cases {
        e.pods
            .create(
                &PostParams::default(),
                &owned_pod(n, labels.clone(), Some(*owner)),
            )
            .await
            .expect("pod");
    }
    wait_pods(&e.pods, "real", "real's own pod", |ps| {
        ps.len() == 1 + cases.len()
    })
    .await;
    run_pending(&e.pods, "real").await;
    tokio::time::sleep(SETTLE).await;
    let j = e.jobs.get("real").await.expect("real");
    assert_eq!(outcome(&j).active, 1, "nothing adopted: {:#?}", j.status);
    for (n, _, _) in &cases {
        let p = e.pods.get(n).await.expect("pod");
        assert!(has_tracking(&p), "{n}: a live pod keeps its finalizer");
        let refs = p.metadata.owner_references.clone().unwrap_or_default();
        assert_eq!(refs.len(), 1, "{n}: not adopted: {refs:#?}");
    }
    for (n, _, _) in &cases {
        e.pods
            .delete(n, &DeleteParams::default())
            .await
            .expect("delete");
    }
    for (n, _, released) in &cases {
        if *released {
            kcm_e2e::wait::wait_gone(&e.pods, n, Duration::from_secs(20))
                .await
                .unwrap_or_else(|err| panic!("{n}: {err}"));
        }
    }
    tokio::time::sleep(SETTLE).await;
    for (n, _, released) in &cases {
        if !*released {
            let p = e.pods.get(n).await.expect("foreign pod still there");
            assert!(
                has_tracking(&p) && p.metadata.deletion_timestamp.is_some(),
                "{n}: finalizer of a foreign owner untouched"
            );
        }
    }
    drop_finalizers(&e, &["crd-job", "old-api", "cronjob"]).await;
    let done = finish_all(&e, "real", &[]).await;
    assert_eq!((outcome(&done).succeeded, outcome(&done).failed), (1, 0));
    e.control().await;
}

/// `spec.managedBy` names another controller: kcm-rs writes nothing and
/// also leaves the finalizers of the Job's pods alone, even after that
/// controller marks the Job finished and the pod is deleted (upstream
/// skips the orphan clean-up for such Jobs). Once the Job itself is gone
/// the finalizer is removed, so the pod is not stuck.
#[tokio::test]
async fn managed_by_another_controller() {
    let e = env("managed").await;
    let ext = e
        .create(
            "ext",
            json!({"completions": 1, "parallelism": 1, "managedBy": "example.com/other"}),
        )
        .await;
    let uid = ext.metadata.uid.clone().unwrap_or_default();
    let labels = json!({"batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": "ext"});
    e.pods
        .create(
            &PostParams::default(),
            &owned_pod("ext-pod", labels, Some(("batch/v1", "Job", "ext", &uid))),
        )
        .await
        .expect("pod");
    kubelet::finish_pod(&e.pods, "ext-pod", 0)
        .await
        .expect("finish");
    // The other controller finishes its Job.
    let now = jiff::Timestamp::now();
    let t = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now);
    e.patch_status(
        "ext",
        json!({"startTime": t, "completionTime": t, "succeeded": 1,
            "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached"},
                {"type": "Complete", "status": "True", "reason": "CompletionsReached"}]}),
    )
    .await
    .expect("the other controller's status");
    e.pods
        .delete("ext-pod", &DeleteParams::default())
        .await
        .expect("delete");
    tokio::time::sleep(SETTLE).await;
    let p = e
        .pods
        .get("ext-pod")
        .await
        .expect("pod kept by its finalizer");
    assert!(
        has_tracking(&p),
        "finalizer of a managedBy Job's pod untouched"
    );
    let j = e.jobs.get("ext").await.expect("ext");
    let o = outcome(&j);
    assert_eq!(
        (o.succeeded, o.uncounted_empty),
        (1, true),
        "status as the other controller wrote it: {o:#?}"
    );
    e.jobs
        .delete("ext", &DeleteParams::background())
        .await
        .expect("delete job");
    kcm_e2e::wait::wait_gone(&e.pods, "ext-pod", Duration::from_secs(20))
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    e.control().await;
}

/// Two Jobs with `manualSelector` selecting the same pods, and a bare pod
/// both select: the controller reference decides ownership (neither Job
/// takes the other's pods), the bare pod is adopted by at most one of them,
/// the controller logs the user error, and both Jobs complete with their
/// own pods counted once.
#[tokio::test]
async fn overlapping_manual_selectors() {
    let e = env("overlap").await;
    let captured = logs::capture();
    let spec = json!({"completions": 1, "parallelism": 1, "manualSelector": true,
        "selector": {"matchLabels": {"app": "overlap"}},
        "template": {"metadata": {"labels": {"app": "overlap"}},
            "spec": {"restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox"}]}}});
    let a = e.create("a", spec.clone()).await;
    let b = e.create("b", spec).await;
    let uids = [
        a.metadata.uid.clone().unwrap_or_default(),
        b.metadata.uid.clone().unwrap_or_default(),
    ];
    let lp = ListParams::default().labels("app=overlap");
    let owner = |p: &Pod| {
        p.metadata
            .owner_references
            .iter()
            .flatten()
            .filter(|r| r.controller == Some(true))
            .map(|r| r.uid.clone())
            .collect::<Vec<_>>()
    };
    kcm_e2e::wait::wait_for_list(
        &e.pods,
        &lp,
        Duration::from_secs(30),
        "one pod each",
        |ps| {
            uids.iter()
                .all(|u| ps.iter().filter(|p| owner(p) == vec![u.clone()]).count() == 1)
        },
    )
    .await
    .unwrap_or_else(|err| panic!("{err}"));
    let mut bare = owned_pod("bare", json!({"app": "overlap"}), None);
    bare.metadata.finalizers = None;
    e.pods
        .create(&PostParams::default(), &bare)
        .await
        .expect("bare pod");
    let line = captured
        .wait_for(
            &["more than one job is selecting pods with labels", &e.ns],
            Duration::from_secs(10),
        )
        .await;
    assert!(line.starts_with("WARN"), "{line}");
    // Play the kubelet for every pod until both Jobs are done.
    let start = std::time::Instant::now();
    loop {
        let ps = e.pods.list(&lp).await.expect("pods").items;
        for p in &ps {
            assert!(owner(p).len() <= 1, "one controller at most: {p:#?}");
            if is_active(p) && phase(p) != "Succeeded" {
                kubelet::finish_pod(&e.pods, &name(p), 0).await.ok();
            }
        }
        let done = [
            e.jobs.get("a").await.expect("a"),
            e.jobs.get("b").await.expect("b"),
        ];
        if done.iter().all(finished) {
            for j in &done {
                let o = outcome(j);
                assert_eq!(o.failed, 0, "{o:#?}");
                assert!(o.succeeded >= 1, "{o:#?}");
            }
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{done:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    no_finalizer_left(&e.pods, "app=overlap").await;
    e.control().await;
}

/// A Job deleted while its pods finish and at once created again under the
/// same name (new UID): the old pods are never counted for the new Job,
/// every old pod loses its finalizer, and the new Job starts clean and
/// completes.
#[tokio::test]
async fn same_name_job_recreated_mid_sync() {
    let e = env("same-name").await;
    let old = e
        .create("same", json!({"completions": 3, "parallelism": 2}))
        .await;
    let old_uid = old.metadata.uid.clone().unwrap_or_default();
    wait_pods(&e.pods, "same", "2 pods", |ps| ps.len() == 2).await;
    run_pending(&e.pods, "same").await;
    let old_pods = job_pods(&e.pods, "same").await;
    kubelet::finish_pod(&e.pods, &name(&old_pods[0]), 0)
        .await
        .expect("finish");
    e.jobs
        .delete("same", &DeleteParams::background())
        .await
        .expect("delete");
    let new = e
        .create("same", json!({"completions": 1, "parallelism": 1}))
        .await;
    let new_uid = new.metadata.uid.clone().unwrap_or_default();
    assert_ne!(old_uid, new_uid);
    kubelet::finish_pod(&e.pods, &name(&old_pods[1]), 1)
        .await
        .expect("finish");
    let lp = ListParams::default().labels(&format!("batch.kubernetes.io/controller-uid={old_uid}"));
    kcm_e2e::wait::wait_for_list(
        &e.pods,
        &lp,
        Duration::from_secs(30),
        "old pods released",
        |ps| ps.iter().all(|p| !has_tracking(p)),
    )
    .await
    .unwrap_or_else(|err| panic!("{err}"));
    let done = drive(&e.jobs, &e.pods, "same", Duration::from_secs(30), |p, _| {
        let ours = p
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("batch.kubernetes.io/controller-uid"));
        (ours == Some(&new_uid)).then_some(0)
    })
    .await;
    assert_eq!(done.metadata.uid.as_deref(), Some(new_uid.as_str()));
    let o = outcome(&done);
    assert_eq!((o.succeeded, o.failed), (1, 0), "only its own pod: {o:#?}");
    let mine = job_pods(&e.pods, "same")
        .await
        .into_iter()
        .filter(|p| {
            p.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|r| r.uid == new_uid)
        })
        .count();
    assert_eq!(mine, 1, "one pod for the new Job");
    e.control().await;
}
