use k8s_openapi::api::batch::v1::JobCondition;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::*;
use crate::sync::tests::world::{job, pod};
use crate::sync::{Input, Prepared, prepare};

fn arc(p: Pod) -> Arc<CachedPod> {
    Arc::new(p.into())
}

fn labelled(name: &str, labels: serde_json::Value) -> Pod {
    let mut p = pod(name, "Running");
    p.metadata.labels = serde_json::from_value(labels).ok();
    p
}

fn selecting(mut j: Job) -> Job {
    j.spec.get_or_insert_with(Default::default).selector =
        serde_json::from_value(json!({"matchLabels": {"app": "a"}})).ok();
    j
}

#[test]
fn managed_by_counts_only_with_its_gate() {
    let other = job(json!({"managedBy": "example.com/other"}));
    let off = Config {
        managed_by: false,
        ..Config::default()
    };
    assert_eq!(guard(Some(&other), false, &off), Guard::Sync);
}

#[test]
fn guards_in_upstream_order() {
    assert_eq!(guard(None, false, &Config::default()), Guard::Gone);
    let mut other = job(json!({"managedBy": "example.com/other"}));
    other.status =
        serde_json::from_value(json!({"conditions": [{"type": "Complete", "status": "True"}]}))
            .ok();
    assert_eq!(
        guard(Some(&other), true, &Config::default()),
        Guard::ManagedElsewhere
    );
    let mut done = job(json!({}));
    done.status = other.status.clone();
    assert_eq!(
        guard(Some(&done), true, &Config::default()),
        Guard::Finished
    );
    let plain = job(json!({}));
    assert_eq!(
        guard(Some(&plain), true, &Config::default()),
        Guard::AwaitingFinishedUpdate
    );
    assert_eq!(guard(Some(&plain), false, &Config::default()), Guard::Sync);
    let odd = job(json!({"completionMode": "Sometimes"}));
    assert!(matches!(
        guard(Some(&odd), false, &Config::default()),
        Guard::UnknownCompletionMode(e) if e.warning && e.reason == "UnknownCompletionMode"
    ));
}

#[test]
fn claim_keeps_releases_and_adopts_by_selector() {
    let j = selecting(job(json!({})));
    let owned = vec![
        arc(labelled("mine", json!({"app": "a"}))),
        arc(labelled("strayed", json!({"app": "b"}))),
    ];
    let mut other_ns = labelled("elsewhere", json!({"app": "a"}));
    other_ns.metadata.namespace = Some("other".into());
    let mut orphan = labelled("orphan", json!({"app": "a"}));
    orphan.metadata.owner_references = None;
    let mut leaving = orphan.clone();
    leaving.metadata.name = Some("leaving".into());
    leaving.metadata.deletion_timestamp = pod("x", "Failed").metadata.creation_timestamp;
    let mut owned_orphan_list = owned.clone();
    owned_orphan_list.push(arc(other_ns));
    let c = claim(
        &j,
        owned_orphan_list,
        vec![
            arc(orphan),
            arc(leaving),
            arc(labelled("owned", json!({"app": "a"}))),
        ],
    );
    let names =
        |v: &[Arc<CachedPod>]| -> Vec<String> { v.iter().map(|p| p.name().to_string()).collect() };
    assert_eq!(names(&c.keep), ["mine"]);
    assert_eq!(names(&c.release), ["strayed"]);
    assert_eq!(names(&c.adopt), ["orphan"]);

    let mut deleting = j.clone();
    deleting.metadata.deletion_timestamp = pod("x", "Failed").metadata.creation_timestamp;
    let c = claim(&deleting, owned, vec![]);
    assert_eq!(names(&c.keep), ["mine"]);
    assert!(c.release.is_empty() && c.adopt.is_empty());
}

fn prepared(j: Job, pods: Vec<Pod>) -> Prepared {
    prepare(Input {
        job: j,
        pods: pods.into_iter().map(|p| Arc::new(p.into())).collect(),
        satisfied: true,
        expected_rm_finalizers: Default::default(),
        stored_backoff: None,
        now: jiff::Timestamp::constant(crate::sync::tests::world::T0, 0),
        config: Default::default(),
        pod_group: None,
    })
}

#[test]
fn counts_need_a_write_only_when_they_change() {
    let p = prepared(job(json!({"parallelism": 1})), vec![pod("a", "Running")]);
    let config = Config::default();
    let status = p.job.status.clone().unwrap_or_default();
    let (status, changed) = with_counts(&status, p.counts, false, &config);
    assert!(changed, "first count");
    assert_eq!(status.active, Some(1));
    let (status, changed) = with_counts(&status, p.counts, false, &config);
    assert!(!changed, "same counts");
    assert!(
        with_counts(&status, p.counts, true, &config).1,
        "suspension changed"
    );
    let none = Counts {
        active: 0,
        ..p.counts
    };
    let (status, changed) = with_counts(&status, none, false, &config);
    assert!(changed);
    assert_eq!(status.active, None, "0 is omitted");
}

#[test]
fn finishing_events_and_labels() {
    let mut j = prepared(job(json!({"completions": 1})), vec![]).job;
    let complete = JobCondition {
        type_: "Complete".into(),
        status: "True".into(),
        ..Default::default()
    };
    j.status.get_or_insert_with(Default::default).succeeded = Some(2);
    let f = finished(&j, &complete);
    let reasons: Vec<&str> = f.events.iter().map(|e| e.reason.as_str()).collect();
    assert_eq!(reasons, ["TooManySucceededPods", "Completed"]);
    assert_eq!((f.mode, f.result), ("NonIndexed", "succeeded"));
    let failed = JobCondition {
        type_: "Failed".into(),
        status: "True".into(),
        reason: Some("BackoffLimitExceeded".into()),
        message: Some("Job has reached the specified backoff limit".into()),
        ..Default::default()
    };
    let f = finished(&j, &failed);
    assert_eq!(f.events.len(), 1);
    assert!(f.events[0].warning);
    assert_eq!(
        (f.result, f.reason.as_str()),
        ("failed", "BackoffLimitExceeded")
    );
}

#[test]
fn pods_finished_deltas() {
    let mut j =
        job(json!({"completions": 5, "completionMode": "Indexed", "backoffLimitPerIndex": 1}));
    j.status = serde_json::from_value(
        json!({"completedIndexes": "0-2", "failedIndexes": "4", "failed": 2}),
    )
    .ok();
    let old: JobStatus =
        serde_json::from_value(json!({"completedIndexes": "0", "failed": 1})).unwrap_or_default();
    let d = pods_finished(&j, &old);
    assert_eq!((d.mode, d.succeeded, d.failed), ("Indexed", 2, 1));
    assert_eq!(
        d.indexes,
        [("succeeded", "perIndex", 2), ("failed", "perIndex", 1)]
    );
    let mut n = job(json!({}));
    n.status = serde_json::from_value(json!({"succeeded": 3})).ok();
    let d = pods_finished(&n, &JobStatus::default());
    assert_eq!((d.mode, d.succeeded, d.failed), ("NonIndexed", 3, 0));
    assert!(d.indexes.is_empty());
}
