//! Shared scenarios about a Job's lifecycle: suspend and resume, controller
//! restart, deletion (background and foreground), `managedBy`, and pods
//! holding the finalizer without a live Job.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::{Scenario, exact};
use crate::script::*;
use crate::*;

/// Created suspended, resumed, suspended while running, resumed, completed.
async fn suspend_resume(s: Scn) {
    s.create(json!({"completions": 3, "parallelism": 2, "suspend": true}))
        .await;
    s.wait_job("j", "Suspended", |j| condition(j, "Suspended").is_some())
        .await;
    s.snap("created suspended", "j", J).await;
    s.patch_spec(json!({"suspend": false})).await;
    s.wait_pods(J, "2 pods", |ps| active(ps) == 2).await;
    s.run_pending(J).await;
    s.snap("resumed, running", "j", J).await;
    s.patch_spec(json!({"suspend": true})).await;
    s.wait_pods(J, "pods removed", |ps| active(ps) == 0).await;
    s.snap("suspended while running", "j", J).await;
    s.patch_spec(json!({"suspend": false})).await;
    s.wait_pods(J, "2 pods again", |ps| active(ps) == 2).await;
    s.snap("resumed again", "j", J).await;
    s.finish_all("j", J, 0).await;
    s.snap("complete", "j", J).await;
}

/// Background deletion while pods run: every pod loses the finalizer.
async fn delete_running(s: Scn) {
    s.create(json!({"completions": 4, "parallelism": 3})).await;
    s.wait_pods(J, "3 pods", |ps| active(ps) == 3).await;
    s.run_pending(J).await;
    s.snap("running", "j", J).await;
    s.jobs
        .delete("j", &DeleteParams::background())
        .await
        .expect("delete");
    s.wait_pods(J, "finalizers gone", |ps| {
        ps.iter().all(|p| !has_tracking(p))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ps = s.list(J).await;
    // No Job to snapshot: record the pods through a stand-in Job.
    s.probe().await;
    s.snap("after delete", "probe", J).await;
    assert_eq!(ps.len(), 3);
}

/// `managedBy` another controller: neither controller touches the Job.
async fn managed_elsewhere(s: Scn) {
    s.create(json!({"completions": 2, "parallelism": 2, "managedBy": "example.com/x"}))
        .await;
    s.probe().await;
    s.snap("ignored", "j", J).await;
}

/// The controller stops while pods run; one pod fails and one succeeds
/// while it is down; a new instance counts each once and completes.
async fn restart(s: Scn) {
    s.create(json!({"completions": 4, "parallelism": 3})).await;
    s.wait_pods(J, "3 pods", |ps| active(ps) == 3).await;
    s.run_pending(J).await;
    s.snap("running", "j", J).await;
    s.stop_controller().await;
    let mut names: Vec<String> = s.list(J).await.iter().map(name).collect();
    names.sort();
    // The failure first, so it does not finish after the success (which
    // would start the 10 s back-off).
    kcm_e2e::kubelet::finish_pod(&s.pods, &names[0], 1)
        .await
        .expect("fail");
    kcm_e2e::kubelet::finish_pod(&s.pods, &names[1], 0)
        .await
        .expect("succeed");
    s.snap("finished while down", "j", J).await;
    s.start_controller().await;
    s.wait_pods(J, "replacements", |ps| active(ps) == 3).await;
    s.snap("restarted", "j", J).await;
    s.finish_all("j", J, 0).await;
    s.snap("complete", "j", J).await;
}

/// Pods holding the tracking finalizer without a live Job: no owner
/// (cleaned at once), a batch/v1 owner that does not exist (cleaned when
/// deleted), an owner of another API group named "Job" (never touched).
async fn orphans(s: Scn) {
    const SEL: &str = "orphan=yes";
    let mk = |n: &str, owner: Option<(&str, &str)>| -> Pod {
        let mut p = json!({
            "metadata": {"name": n, "labels": {"orphan": "yes"},
                "finalizers": ["batch.kubernetes.io/job-tracking"]},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}
        });
        if let Some((api, uid)) = owner {
            p["metadata"]["ownerReferences"] = json!([{"apiVersion": api, "kind": "Job",
                "name": "ghost", "uid": uid, "controller": true}]);
        }
        serde_json::from_value(p).expect("pod")
    };
    for p in [
        mk("free", None),
        mk(
            "dangling",
            Some(("batch/v1", "00000000-0000-0000-0000-000000000001")),
        ),
        mk(
            "foreign",
            Some(("example.com/v1", "00000000-0000-0000-0000-000000000002")),
        ),
    ] {
        s.pods
            .create(&PostParams::default(), &p)
            .await
            .expect("pod");
    }
    s.probe().await;
    s.snap("created", "probe", SEL).await;
    for n in ["dangling", "foreign"] {
        s.pods
            .delete(n, &DeleteParams::default())
            .await
            .expect("delete");
    }
    s.snap("deleted", "probe", SEL).await;
    let left: Vec<String> = s.list(SEL).await.iter().map(name).collect();
    s.snap(&format!("left {left:?}"), "probe", SEL).await;
    // Let the test end: drop the foreign pod's finalizer ourselves.
    s.pods
        .patch(
            "foreign",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .ok();
}

/// Foreground deletion: the Job keeps existing with a deletionTimestamp
/// (no garbage collector here); the controller stops managing pods and
/// releases every finalizer, counting only finished pods.
async fn foreground(s: Scn) {
    s.create(json!({"completions": 5, "parallelism": 3})).await;
    s.wait_pods(J, "3 pods", |ps| active(ps) == 3).await;
    s.run_pending(J).await;
    let first = s.list(J).await.first().map(name).expect("pod");
    kcm_e2e::kubelet::finish_pod(&s.pods, &first, 0)
        .await
        .expect("finish");
    // Counted before the delete: otherwise whether the finished pod counts
    // depends on which event each controller sees first.
    s.wait_job("j", "the finished pod counted", |j| {
        j.status.as_ref().and_then(|st| st.succeeded) == Some(1)
    })
    .await;
    s.jobs
        .delete("j", &DeleteParams::foreground())
        .await
        .expect("delete");
    s.wait_pods(J, "finalizers gone", |ps| {
        ps.iter().all(|p| !has_tracking(p))
    })
    .await;
    s.snap("deleting", "j", J).await;
}

pub const SUSPEND_RESUME: Scenario = Scenario {
    name: "suspend and resume",
    script: |s| Box::pin(suspend_resume(s)),
    fix: exact,
    expect: |snaps| {
        let created = &snaps[0].1;
        assert_eq!((created.pods, created.start_time_set), (0, false));
        let suspended = &snaps[2].1;
        // Removed pods are not failures and nothing stays uncounted.
        assert_eq!((suspended.job.failed, suspended.active), (0, 0));
        assert!(suspended.job.uncounted_empty, "{suspended:#?}");
        // What upstream does depends on the minor: from 1.36
        // (MutableSchedulingDirectivesForSuspendedJobs on by default)
        // suspending clears startTime, before it stays.
        let minor = kcm_e2e::binaries::k8s_minor();
        assert_eq!(
            suspended.start_time_set,
            minor < 36,
            "startTime after suspending on 1.{minor}"
        );
        assert!(snaps[3].1.start_time_set, "resumed: startTime set again");
        let done = &snaps[4].1.job;
        assert_eq!((done.succeeded, done.failed), (3, 0), "{done:#?}");
    },
};

pub const DELETE_RUNNING: Scenario = Scenario {
    name: "background deletion releases every finalizer",
    script: |s| Box::pin(delete_running(s)),
    fix: exact,
    expect: |snaps| {
        // The pods stay (no garbage collector here), none recreated, none
        // tracked.
        assert_eq!((snaps[1].1.pods, snaps[1].1.tracked), (3, 0));
    },
};

pub const MANAGED_ELSEWHERE: Scenario = Scenario {
    name: "managedBy another controller",
    script: |s| Box::pin(managed_elsewhere(s)),
    fix: exact,
    expect: |snaps| {
        let s = &snaps[0].1;
        assert_eq!((s.pods, s.start_time_set), (0, false));
        assert!(s.job.conditions.is_empty(), "no status written: {s:#?}");
    },
};

pub const RESTART: Scenario = Scenario {
    name: "restart mid-Job counts each pod once",
    script: |s| Box::pin(restart(s)),
    fix: exact,
    expect: |snaps| {
        // Nothing counted the pods that finished while no controller ran.
        let down = &snaps[1].1;
        assert_eq!(
            (down.job.succeeded, down.job.failed, down.tracked),
            (0, 0, 3)
        );
        let done = &snaps[3].1;
        assert_eq!(
            (done.job.succeeded, done.job.failed, done.tracked),
            (4, 1, 0)
        );
        // 3 first pods, one replacement for the failure, one more
        // completion.
        assert_eq!(done.pods, 5);
        assert!(done.job.uncounted_empty && done.job.active == 0);
    },
};

pub const ORPHANS: Scenario = Scenario {
    name: "orphan pods holding the finalizer",
    script: |s| Box::pin(orphans(s)),
    fix: exact,
    expect: |snaps| {
        // free cleaned; dangling and foreign still tracked until deleted.
        assert_eq!((snaps[0].1.pods, snaps[0].1.tracked), (3, 2));
        assert_eq!(snaps[2].0, "left [\"foreign\", \"free\"]");
    },
};

pub const FOREGROUND: Scenario = Scenario {
    name: "foreground deletion",
    script: |s| Box::pin(foreground(s)),
    fix: exact,
    expect: |snaps| {
        // The sync that counted the finished pod created its replacement.
        assert_eq!((snaps[0].1.tracked, snaps[0].1.pods), (0, 4));
        assert_eq!(snaps[0].1.job.succeeded, 1, "{:#?}", snaps[0].1);
    },
};
