//! Corrupted index bookkeeping: `status.completedIndexes` written by hand
//! (through an API server with JobManagedBy off, as before 1.32 or when
//! switched off) or left beyond `completions` by a scale-down, completion
//! index and failure-count annotations edited on pods, and huge sizes.

use std::collections::BTreeMap;
use std::time::Duration;

use kcm_e2e::kubelet;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;

use super::*;

/// Pods of Job `name` per completion index, over the whole run.
async fn per_index(e: &Env, name: &str) -> BTreeMap<i32, usize> {
    let mut m = BTreeMap::new();
    for p in job_pods(&e.pods, name).await {
        *m.entry(index(&p)).or_default() += 1;
    }
    m
}

/// Finishes every pending pod of Job `name` with exit code 0 until the Job
/// is done.
async fn succeed_all(e: &Env, name: &str) -> Job {
    finish_all(e, name, &[]).await
}

/// An API server with JobManagedBy off (1.34 and older) accepts any
/// `completedIndexes`. The controller reads it as upstream does: `"0-x"`
/// and the empty piece are skipped ("corrupted indexes interval, ignoring",
/// at the default log level), `3` is kept, `9-2` ends the parse (>=
/// completions). So index 0, which had succeeded, runs again and index 3
/// never runs; the Job still completes, and what the controller writes back
/// is well formed. An inverted `"2-0"` made upstream's `succeeded` negative
/// (every status write refused until some index succeeded) and then
/// counted index 2 as done while its pod still ran; kcm-rs skips inverted
/// pieces (docs/bad-input.md).
#[tokio::test]
async fn hand_written_completed_indexes_with_job_managed_by_off() {
    // JobManagedBy is locked on from 1.35: only a 1.34 (or older) API
    // server lets such a string in, whatever version the suite runs.
    let cp = ControlPlane::start_version_with_args("1.34", "--feature-gates=JobManagedBy=false")
        .expect("cp");
    let captured = logs::capture();
    let _ours = in_process::start(
        &cp,
        &[kcm_job::SPEC],
        Settings::default(),
        FeatureGates::default(),
    )
    .await
    .expect("our job controller");
    let client = cp.client().await.expect("client");
    let e = on(&client, "gate-off").await;

    e.create(
        "lenient",
        json!({"completionMode": "Indexed", "completions": 5, "parallelism": 1}),
    )
    .await;
    wait_pods(&e.pods, "lenient", "index 0", |ps| ps.len() == 1).await;
    let first = job_pods(&e.pods, "lenient").await;
    kubelet::finish_pod(&e.pods, &name(&first[0]), 0)
        .await
        .expect("finish index 0");
    wait_job(&e.jobs, "lenient", "index 0 counted", |j| {
        j.status
            .as_ref()
            .and_then(|s| s.completed_indexes.as_deref())
            == Some("0")
    })
    .await;
    wait_pods(
        &e.pods,
        "lenient",
        "index 0 released, index 1 created",
        |ps| ps.len() == 2 && ps.iter().all(|p| index(p) == 1 || !has_tracking(p)),
    )
    .await;
    e.patch_status("lenient", json!({"completedIndexes": "0-x,3,,9-2"}))
        .await
        .expect("accepted with JobManagedBy off");

    // Inverted: upstream would compute succeeded = -1 here.
    e.create(
        "inverted",
        json!({"completionMode": "Indexed", "completions": 3, "parallelism": 3}),
    )
    .await;
    wait_pods(&e.pods, "inverted", "3 pods", |ps| ps.len() == 3).await;
    e.patch_status("inverted", json!({"completedIndexes": "2-0"}))
        .await
        .expect("accepted with JobManagedBy off");

    // NonIndexed: completedIndexes means nothing.
    e.create("nonindexed", json!({"completions": 2, "parallelism": 2}))
        .await;
    e.patch_status("nonindexed", json!({"completedIndexes": "1-x"}))
        .await
        .expect("accepted with JobManagedBy off");

    let line = captured
        .wait_for(
            &["corrupted indexes interval, ignoring", "interval=0-x"],
            Duration::from_secs(20),
        )
        .await;
    assert!(line.starts_with("INFO"), "{line}");

    let done = succeed_all(&e, "lenient").await;
    let o = outcome(&done);
    assert_eq!(o.completed_indexes, "0-4", "{o:#?}");
    assert_eq!((o.succeeded, o.failed), (5, 0), "{o:#?}");
    assert_eq!(
        per_index(&e, "lenient").await,
        BTreeMap::from([(0, 2), (1, 1), (2, 1), (4, 1)]),
        "index 0 ran again, index 3 never ran"
    );

    // The controller's next write replaces it (upstream's write, with
    // succeeded = -1, is refused until some index succeeds).
    wait_job(&e.jobs, "inverted", "inverted piece dropped", |j| {
        let o = outcome(j);
        o.completed_indexes.is_empty() && o.succeeded == 0
    })
    .await;
    // Indexes 0 and 1 succeed; index 2 is still running and must not be
    // taken as done (upstream would now write "0,1,2": (0,1) plus the
    // inverted (2,0) counts 1 and prints as "2").
    for p in job_pods(&e.pods, "inverted").await {
        if index(&p) < 2 {
            kubelet::finish_pod(&e.pods, &name(&p), 0)
                .await
                .expect("finish");
        }
    }
    let j = wait_job(&e.jobs, "inverted", "0,1 counted", |j| {
        outcome(j).succeeded == 2
    })
    .await;
    assert_eq!(outcome(&j).completed_indexes, "0,1", "{:#?}", j.status);
    assert!(!finished(&j), "index 2 still runs: {:#?}", j.status);
    let done = succeed_all(&e, "inverted").await;
    let o = outcome(&done);
    assert_eq!(
        (o.completed_indexes.as_str(), o.succeeded),
        ("0-2", 3),
        "{o:#?}"
    );
    assert_eq!(
        condition(&done, "Complete").map(|c| c.0).as_deref(),
        Some("True")
    );

    let done = succeed_all(&e, "nonindexed").await;
    assert_eq!(outcome(&done).succeeded, 2);
    for j in ["lenient", "inverted", "nonindexed"] {
        no_finalizer_left(&e.pods, &format!("batch.kubernetes.io/job-name={j}")).await;
    }
    e.control().await;
}

/// An elastic Indexed Job scaled down after indexes above the new
/// completions succeeded: `completedIndexes` now holds values >= completions
/// (the API server allows this, it only validates strings that change).
/// They are dropped (parsing stops there), the counter goes down (allowed
/// when completions == parallelism), and the Job completes on the
/// remaining indexes.
#[tokio::test]
async fn completed_indexes_beyond_completions_after_a_scale_down() {
    let e = env("scale-down").await;
    e.create(
        "el",
        json!({"completionMode": "Indexed", "completions": 5, "parallelism": 5}),
    )
    .await;
    wait_pods(&e.pods, "el", "5 pods", |ps| ps.len() == 5).await;
    for p in job_pods(&e.pods, "el").await {
        if index(&p) >= 3 {
            kubelet::finish_pod(&e.pods, &name(&p), 0)
                .await
                .expect("finish");
        }
    }
    wait_job(&e.jobs, "el", "3,4 counted", |j| {
        outcome(j).completed_indexes == "3,4" && outcome(j).succeeded == 2
    })
    .await;
    e.jobs
        .patch(
            "el",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"completions": 3, "parallelism": 3}})),
        )
        .await
        .expect("scale down");
    wait_job(&e.jobs, "el", "indexes beyond completions dropped", |j| {
        outcome(j).completed_indexes.is_empty() && outcome(j).succeeded == 0
    })
    .await;
    let done = succeed_all(&e, "el").await;
    let o = outcome(&done);
    assert_eq!(
        (o.completed_indexes.as_str(), o.succeeded),
        ("0-2", 3),
        "{o:#?}"
    );
    no_finalizer_left(&e.pods, "batch.kubernetes.io/job-name=el").await;
    e.control().await;
}

/// Completion-index annotations edited on live pods: not a number, >=
/// completions. Upstream treats them as an unknown index: such active pods
/// are deleted (event `SuccessfulDelete`) and replaced; a pod that finishes
/// with such an index is never counted. Every one loses the finalizer.
#[tokio::test]
async fn bad_completion_index_annotations() {
    let e = env("bad-index").await;
    e.create(
        "ix",
        json!({"completionMode": "Indexed", "completions": 3, "parallelism": 3}),
    )
    .await;
    wait_pods(&e.pods, "ix", "3 pods", |ps| ps.len() == 3).await;
    run_pending(&e.pods, "ix").await;
    let pods = job_pods(&e.pods, "ix").await;
    let by_index = |i: i32| name(pods.iter().find(|p| index(p) == i).expect("index"));
    let (one, two) = (by_index(1), by_index(2));
    for (pod, bad) in [(&one, "x"), (&two, "7")] {
        e.pods
            .patch(
                pod,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations":
                    {"batch.kubernetes.io/job-completion-index": bad}}})),
            )
            .await
            .expect("annotate");
    }
    // The one with "7" finishes at once: it must not be counted.
    kubelet::finish_pod(&e.pods, &two, 0).await.expect("finish");
    wait_pods(&e.pods, "ix", "indexes 1 and 2 replaced", |ps| {
        [1, 2]
            .iter()
            .all(|i| ps.iter().filter(|p| is_active(p) && index(p) == *i).count() == 1)
    })
    .await;
    let evs = wait_event(&e.client, &e.ns, "ix", "SuccessfulDelete").await;
    assert!(
        evs.iter().any(|ev| ev.1 == format!("Deleted pod: {one}")),
        "{evs:#?}"
    );
    let j = e.jobs.get("ix").await.expect("job");
    assert_eq!(outcome(&j).succeeded, 0, "the bad pod is not counted");
    let done = succeed_all(&e, "ix").await;
    let o = outcome(&done);
    assert_eq!(
        (o.completed_indexes.as_str(), o.succeeded),
        ("0-2", 3),
        "{o:#?}"
    );
    no_finalizer_left(&e.pods, "batch.kubernetes.io/job-name=ix").await;
    e.control().await;
}

/// A `job-index-failure-count` annotation the user set to more than
/// MaxInt32 reads as 0 (upstream `parseInt32`, with a log line): the failure
/// counts once against `backoffLimitPerIndex: 1`, the index is not failed,
/// and the replacement carries `1`.
#[tokio::test]
async fn bad_index_failure_count_annotation() {
    let e = env("bad-count").await;
    let captured = logs::capture();
    e.create(
        "per",
        json!({"completionMode": "Indexed", "completions": 2, "parallelism": 2,
            "backoffLimitPerIndex": 1}),
    )
    .await;
    wait_pods(&e.pods, "per", "2 pods", |ps| ps.len() == 2).await;
    run_pending(&e.pods, "per").await;
    let pods = job_pods(&e.pods, "per").await;
    let zero = name(pods.iter().find(|p| index(p) == 0).expect("index 0"));
    e.pods
        .patch(
            &zero,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations":
                {"batch.kubernetes.io/job-index-failure-count": "99999999999"}}})),
        )
        .await
        .expect("annotate");
    kubelet::finish_pod(&e.pods, &zero, 1).await.expect("fail");
    // The first failure's back-off is 10 s.
    let ps = kcm_e2e::wait::wait_for_list(
        &e.pods,
        &ListParams::default().labels("batch.kubernetes.io/job-name=per"),
        Duration::from_secs(40),
        "index 0 replaced",
        |ps| ps.iter().any(|p| is_active(p) && index(p) == 0),
    )
    .await
    .unwrap_or_else(|err| panic!("{err}"));
    let replacement = ps
        .iter()
        .find(|p| is_active(p) && index(p) == 0)
        .expect("replacement");
    let ann = replacement.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        ann.get("batch.kubernetes.io/job-index-failure-count")
            .map(String::as_str),
        Some("1")
    );
    let line = captured
        .wait_for(
            &["invalid count annotation", "99999999999", &e.ns],
            Duration::from_secs(10),
        )
        .await;
    assert!(line.starts_with("INFO"), "{line}");
    let done = succeed_all(&e, "per").await;
    let o = outcome(&done);
    assert_eq!(
        (
            o.completed_indexes.as_str(),
            o.failed_indexes.as_deref(),
            o.failed
        ),
        ("0,1", Some(""), 1),
        "{o:#?}"
    );
    no_finalizer_left(&e.pods, "batch.kubernetes.io/job-name=per").await;
    e.control().await;
}

/// Huge sizes the API server allows (it only warns): 2*10^5 completions.
/// The controller's work per sync does not grow with completions: the Job
/// runs its first indexes like any other, and a suspended one with 2*10^4
/// parallelism just records Suspended.
#[tokio::test]
async fn huge_completions() {
    let e = env("huge").await;
    e.create(
        "big",
        json!({"completionMode": "Indexed", "completions": 200_000, "parallelism": 3}),
    )
    .await;
    e.create(
        "wide",
        json!({"completionMode": "Indexed", "completions": 200_000, "parallelism": 20_000,
            "suspend": true}),
    )
    .await;
    let mut finished = 0;
    while finished < 6 {
        for p in job_pods(&e.pods, "big").await {
            if phase(&p) == "Pending" || phase(&p).is_empty() {
                kubelet::finish_pod(&e.pods, &name(&p), 0)
                    .await
                    .expect("finish");
                finished += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let want = format!("0-{}", finished - 1);
    wait_job(&e.jobs, "big", "every finished index counted", |j| {
        let o = outcome(j);
        o.succeeded == finished && o.completed_indexes == want && o.active == 3
    })
    .await;
    wait_job(&e.jobs, "wide", "Suspended", |j| {
        condition(j, "Suspended").is_some_and(|c| c.0 == "True")
    })
    .await;
    assert!(job_pods(&e.pods, "wide").await.is_empty());
    for j in ["big", "wide"] {
        e.jobs
            .delete(j, &DeleteParams::background())
            .await
            .expect("delete");
    }
    no_finalizer_left(&e.pods, "batch.kubernetes.io/job-name=big").await;
    e.control().await;
}
