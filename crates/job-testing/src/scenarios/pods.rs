//! Shared scenarios about pod management: podReplacementPolicy, elastic
//! Indexed Jobs, adoption and release, parallelism changes, failing
//! creations, and invalid completion indexes.

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::{Scenario, exact};
use crate::script::*;
use crate::*;

/// Deletes the running pod of a Job with podReplacementPolicy `policy`,
/// snapshots, then lets the kubelet fail it (finished 30 s ago: no
/// back-off) and completes the Job.
async fn replace_deleted(s: Scn, policy: &'static str) {
    s.create(json!({"completions": 1, "parallelism": 1, "podReplacementPolicy": policy}))
        .await;
    s.wait_pods(J, "1 pod", |ps| active(ps) == 1).await;
    s.run_pending(J).await;
    s.snap("running", "j", J).await;
    let victim = s.list(J).await.first().map(name).expect("pod");
    s.pods
        .delete(&victim, &DeleteParams::default())
        .await
        .expect("delete pod");
    s.snap("deleted", "j", J).await;
    if s.pods.get_opt(&victim).await.ok().flatten().is_some() {
        let long_ago = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(30);
        let update = kcm_e2e::kubelet::PodStatusUpdate::default()
            .phase("Failed")
            .containers(vec![kcm_e2e::kubelet::terminated("main", 137, long_ago)]);
        kcm_e2e::kubelet::update_pod_status(&s.pods, &victim, &update)
            .await
            .expect("fail pod");
    }
    // TerminatingOrFailed waits the 10 s back-off from the deletion.
    s.wait_pods(J, "replacement", |ps| active(ps) == 1).await;
    s.snap("replaced", "j", J).await;
    s.finish_all("j", J, 0).await;
    s.snap("complete", "j", J).await;
}

/// Indexed 4/4, index 3 succeeds, then scaled to 2/2: indexes >= 2 go and
/// the succeeded count drops with the out-of-range index.
async fn elastic(s: Scn) {
    s.create(json!({"completions": 4, "parallelism": 4, "completionMode": "Indexed"}))
        .await;
    s.wait_pods(J, "4 pods", |ps| active(ps) == 4).await;
    s.run_pending(J).await;
    let three = s
        .list(J)
        .await
        .into_iter()
        .find(|p| index(p) == 3)
        .map(|p| name(&p));
    kcm_e2e::kubelet::finish_pod(&s.pods, &three.expect("index 3"), 0)
        .await
        .expect("finish");
    s.wait_job("j", "index 3 counted", |j| {
        outcome(j).completed_indexes == "3"
    })
    .await;
    s.snap("index 3 done", "j", J).await;
    s.patch_spec(json!({"completions": 2, "parallelism": 2}))
        .await;
    s.wait_pods(J, "2 active", |ps| active(ps) == 2).await;
    s.snap("scaled down", "j", J).await;
    s.finish_all("j", J, 0).await;
    s.snap("complete", "j", J).await;
}

/// A stray pod matching a manual selector is adopted; relabelled, it is
/// released and replaced.
async fn adopt_release(s: Scn) {
    const SEL: &str = "app=adopt";
    let stray: Pod = serde_json::from_value(json!({
        "metadata": {"name": "stray", "labels": {"app": "adopt"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}
    }))
    .expect("pod");
    s.pods
        .create(&PostParams::default(), &stray)
        .await
        .expect("stray");
    let mut j = job(
        "j",
        json!({"completions": 2, "parallelism": 2, "manualSelector": true,
               "selector": {"matchLabels": {"app": "adopt"}}}),
    );
    if let Some(spec) = j.spec.as_mut() {
        spec.template.metadata = Some(kube::api::ObjectMeta {
            labels: Some([("app".to_string(), "adopt".to_string())].into()),
            ..Default::default()
        });
    }
    s.jobs
        .create(&PostParams::default(), &j)
        .await
        .expect("job");
    s.wait_pods(SEL, "2 owned pods", |ps| {
        ps.len() == 2 && ps.iter().all(|p| has_tracking(p) && owner_uid(p).is_some())
    })
    .await;
    s.snap("adopted", "j", SEL).await;
    s.pods
        .patch(
            "stray",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"app": "other"}}})),
        )
        .await
        .expect("relabel");
    s.wait_pods("app=other", "released", |ps| {
        ps.iter()
            .all(|p| !has_tracking(p) && owner_uid(p).is_none())
    })
    .await;
    s.wait_pods(SEL, "replaced", |ps| active(ps) == 2).await;
    s.snap("released and replaced", "j", SEL).await;
    s.snap("released pod", "j", "app=other").await;
    s.finish_all("j", SEL, 0).await;
    s.snap("complete", "j", SEL).await;
}

/// NonIndexed parallelism 5 of 8, scaled to 2, then completed.
async fn scale_down(s: Scn) {
    s.create(json!({"completions": 8, "parallelism": 5})).await;
    s.wait_pods(J, "5 pods", |ps| active(ps) == 5).await;
    s.run_pending(J).await;
    s.snap("running", "j", J).await;
    s.patch_spec(json!({"parallelism": 2})).await;
    s.wait_pods(J, "2 active", |ps| active(ps) == 2).await;
    s.snap("scaled down", "j", J).await;
    s.finish_all("j", J, 0).await;
    s.snap("complete", "j", J).await;
}

/// A pod quota of 2 makes creations fail: slow start stops after the
/// failing batch (no overshoot, `active` counts only created pods); raising
/// the quota lets the Job finish.
async fn quota(s: Scn) {
    use k8s_openapi::api::core::v1::ResourceQuota;
    let quotas: Api<ResourceQuota> = Api::namespaced(s.client.clone(), &s.ns);
    let q: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "q"}, "spec": {"hard": {"pods": "2"}}
    }))
    .expect("quota");
    quotas
        .create(&PostParams::default(), &q)
        .await
        .expect("quota");
    // No resourcequota controller runs: publish the status ourselves.
    let status = |hard: &str| {
        Patch::Merge(json!({"status": {"hard": {"pods": hard}, "used": {"pods": "0"}}}))
    };
    quotas
        .patch_status("q", &PatchParams::default(), &status("2"))
        .await
        .expect("quota status");
    s.create(json!({"completions": 5, "parallelism": 5})).await;
    s.wait_pods(J, "2 pods", |ps| active(ps) == 2).await;
    s.snap("quota reached", "j", J).await;
    quotas
        .patch(
            "q",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"hard": {"pods": "100"}}})),
        )
        .await
        .expect("raise quota");
    quotas
        .patch_status(
            "q",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"hard": {"pods": "100"}}})),
        )
        .await
        .expect("quota status");
    s.wait_pods(J, "5 pods", |ps| active(ps) == 5).await;
    s.finish_all("j", J, 0).await;
    s.snap("complete", "j", J).await;
}

/// FailedCreate is retried with the per-key back-off, so how many there
/// were depends on timing: keep its presence, not its count.
fn without_failed_create_count(mut snaps: Snaps) -> Snaps {
    for (_, s) in &mut snaps {
        for e in &mut s.events {
            if e.1 == "FailedCreate" {
                e.3 = 0;
            }
        }
    }
    snaps
}

/// An active Indexed pod whose index annotation becomes invalid is
/// removed and its index re-created.
async fn bad_index(s: Scn) {
    s.create(json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed"}))
        .await;
    s.wait_pods(J, "3 pods", |ps| active(ps) == 3).await;
    s.run_pending(J).await;
    let one = s
        .list(J)
        .await
        .into_iter()
        .find(|p| index(p) == 1)
        .map(|p| name(&p))
        .expect("index 1");
    s.pods
        .patch(
            &one,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations":
                {"batch.kubernetes.io/job-completion-index": "x"}}})),
        )
        .await
        .expect("annotate");
    s.wait_pods(J, "index 1 re-created", |ps| {
        ps.iter().filter(|p| is_active(p) && index(p) == 1).count() == 1
            && ps.iter().filter(|p| is_active(p)).count() == 3
    })
    .await;
    s.snap("replaced", "j", J).await;
    s.finish_all("j", J, 0).await;
    s.snap("complete", "j", J).await;
}

pub const REPLACE_FAILED: Scenario = Scenario {
    name: "podReplacementPolicy Failed",
    script: |s| Box::pin(replace_deleted(s, "Failed")),
    fix: exact,
    expect: |snaps| {
        // No replacement while the deleted pod terminates, still tracked.
        let deleted = &snaps[1].1;
        assert_eq!((deleted.job.failed, deleted.job.terminating), (0, 1));
        assert_eq!((deleted.pods, deleted.active, deleted.tracked), (1, 0, 1));
        let replaced = &snaps[2].1.job;
        assert_eq!((replaced.failed, replaced.active), (1, 1), "{replaced:#?}");
        assert!(replaced.uncounted_empty);
    },
};

pub const REPLACE_TERMINATING_OR_FAILED: Scenario = Scenario {
    name: "podReplacementPolicy TerminatingOrFailed",
    script: |s| Box::pin(replace_deleted(s, "TerminatingOrFailed")),
    fix: exact,
    expect: |snaps| {
        // The deleted pod is a failure at once and loses its finalizer.
        let deleted = &snaps[1].1;
        assert_eq!(
            (deleted.job.failed, deleted.tracked),
            (1, 0),
            "{deleted:#?}"
        );
        let replaced = &snaps[2].1;
        assert_eq!((replaced.active, replaced.job.active), (1, 1));
    },
};

pub const ELASTIC: Scenario = Scenario {
    name: "elastic Indexed scale-down",
    script: |s| Box::pin(elastic(s)),
    fix: exact,
    expect: |snaps| {
        assert_eq!(snaps[1].1.active_indexes, vec![0, 1]);
        // The out-of-range index 3 is no longer counted.
        let done = &snaps[2].1.job;
        assert_eq!(
            (done.succeeded, done.failed, done.completed_indexes.as_str()),
            (2, 0, "0,1"),
            "{done:#?}"
        );
    },
};

pub const ADOPT_RELEASE: Scenario = Scenario {
    name: "orphan adoption and release",
    script: |s| Box::pin(adopt_release(s)),
    fix: exact,
    expect: |snaps| {
        assert_eq!((snaps[0].1.pods, snaps[0].1.tracked), (2, 2));
        let replaced = &snaps[1].1;
        assert_eq!(
            (replaced.active, replaced.job.active, replaced.job.failed),
            (2, 2, 0)
        );
        assert_eq!((snaps[2].1.pods, snaps[2].1.tracked), (1, 0));
    },
};

pub const SCALE_DOWN: Scenario = Scenario {
    name: "parallelism scale-down",
    script: |s| Box::pin(scale_down(s)),
    fix: exact,
    expect: |snaps| {
        let down = &snaps[1].1;
        assert_eq!((down.job.failed, down.active, down.job.active), (0, 2, 2));
    },
};

pub const QUOTA: Scenario = Scenario {
    name: "creations over a pod quota",
    script: |s| Box::pin(quota(s)),
    fix: without_failed_create_count,
    expect: |snaps| {
        let q = &snaps[0].1;
        assert_eq!((q.job.active, q.pods), (2, 2));
        assert!(
            q.events.iter().any(|e| e.1 == "FailedCreate"),
            "{:#?}",
            q.events
        );
    },
};

pub const BAD_INDEX: Scenario = Scenario {
    name: "invalid completion index",
    script: |s| Box::pin(bad_index(s)),
    fix: exact,
    expect: |snaps| {
        assert_eq!(snaps[0].1.active_indexes, vec![0, 1, 2]);
    },
};
