//! Table tests of a Job's syncs: the shipped executor
//! (`controller/sync_job.rs` and the pure stages it runs) against the model
//! world ([`World`]), an API server reduced to "writes land at once and are
//! observed at once". Property tests of the §3c invariants are in `model`.

/// Bad input through the sync stages (issue 14; docs/bad-input.md).
mod bad_input;
mod model;
mod server;
pub(crate) mod world;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use super::JobEvent;
use super::manage::PodWork;
use crate::pods::JOB_COMPLETION_INDEX;
use crate::sync::tests::world::full::is_active;
use world::*;

#[test]
fn first_sync_creates_parallelism_pods() {
    let mut w = World::new(job(json!({"completions": 5, "parallelism": 3})));
    let r = w.sync(Crash::None);
    let created = r.created();
    assert_eq!(created.len(), 3);
    for p in &created {
        assert_eq!(p.metadata.generate_name.as_deref(), Some("j-"));
        assert!(crate::sync::tests::world::full::has_tracking_finalizer(p));
        let owner = &p.metadata.owner_references.as_ref().expect("owner")[0];
        assert_eq!(
            (owner.uid.as_str(), owner.controller),
            ("job-uid", Some(true))
        );
    }
    // (The sync's action label is only a metric label, not observable
    // here; its creations and their events are.)
    assert_eq!(r.reasons(), vec!["SuccessfulCreate"; 3]);
    assert_eq!(r.writes.len(), 1, "one status write");
    let s = &r.writes[0];
    assert_eq!(
        (s.active, s.ready, s.terminating),
        (Some(3), Some(0), Some(0))
    );
    assert_eq!(s.start_time, Some(Time(w.now)));
    assert_eq!(uncounted(s), (vec![], vec![]));
    assert!(s.uncounted_terminated_pods.is_some(), "always written");
    // Replaying the sync changes nothing.
    let again = w.sync(Crash::None);
    assert!(again.created().is_empty() && again.writes.is_empty());
    assert!(matches!(again.work, PodWork::Nothing) && again.events.is_empty());
}

#[test]
fn indexed_first_sync_creates_lowest_indexes() {
    let mut w = World::new(job(
        json!({"completions": 3, "parallelism": 2, "completionMode": "Indexed"}),
    ));
    let created = w.sync(Crash::None).created();
    let got: Vec<(String, String, String)> = created
        .iter()
        .map(|p| {
            (
                p.metadata.annotations.as_ref().expect("ann")[JOB_COMPLETION_INDEX].clone(),
                p.metadata.generate_name.clone().unwrap_or_default(),
                p.spec
                    .as_ref()
                    .and_then(|s| s.hostname.clone())
                    .unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("0".into(), "j-0-".into(), "j-0".into()),
            ("1".into(), "j-1-".into(), "j-1".into())
        ]
    );
    let s = w.job.status.clone().unwrap_or_default();
    assert_eq!(s.completed_indexes.as_deref(), Some(""));
}

#[test]
fn succeeded_pod_is_uncounted_then_counted_then_complete() {
    let a = pod("a", "Succeeded");
    let b = ready(pod("b", "Running"));
    let mut w = World::new(job(json!({"completions": 2, "parallelism": 2}))).with_pods(vec![a, b]);
    let r = w.sync(Crash::None);
    assert_eq!(r.writes.len(), 2, "{:#?}", r.writes);
    assert_eq!(uncounted(&r.writes[0]), (vec!["a".to_string()], vec![]));
    assert_eq!(
        r.writes[0].succeeded, None,
        "not counted before the removal"
    );
    assert_eq!(uncounted(&r.writes[1]), (vec![], vec![]));
    assert_eq!(r.writes[1].succeeded, Some(1));
    assert!(!r.finished);
    assert!(
        w.pods
            .iter()
            .all(|p| uid(p) != "a" || !crate::sync::tests::world::full::has_tracking_finalizer(p))
    );

    // b succeeds: SuccessCriteriaMet goes out with the uncounted UID, then
    // Complete with the counter.
    let b = w.pods.iter_mut().find(|p| uid(p) == "b").expect("b");
    b.status = pod("b", "Succeeded").status;
    let r = w.sync(Crash::None);
    assert!(r.finished);
    assert_eq!(r.writes.len(), 2);
    assert_eq!(types(&r.writes[0]), vec!["SuccessCriteriaMet"]);
    assert_eq!(uncounted(&r.writes[0]).0, vec!["b".to_string()]);
    assert_eq!(types(&r.writes[1]), vec!["SuccessCriteriaMet", "Complete"]);
    assert_eq!(conditions(&r.writes[1])[1].2, "CompletionsReached");
    assert_eq!(r.writes[1].succeeded, Some(2));
    assert!(r.writes[1].completion_time.is_some());
    assert_eq!(r.writes[1].active, None);
}

fn fail_job_policy() -> serde_json::Value {
    json!({"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]})
}

#[test]
fn fail_job_rule_waits_for_terminating_pods() {
    let a = with_exit(pod("a", "Failed"), 42);
    let mut b = ready(pod("b", "Running"));
    b.spec.as_mut().expect("spec").node_name = Some("node".into());
    let mut w = World::new(job(json!({"completions": 2, "parallelism": 2,
        "podReplacementPolicy": "Failed", "podFailurePolicy": fail_job_policy()})))
    .with_pods(vec![a, b]);
    let r = w.sync(Crash::None);
    assert!(matches!(&r.work, PodWork::DeleteActive(p) if p.len() == 1));
    assert!(!r.finished, "b is still terminating");
    assert_eq!(types(&r.writes[0]), vec!["FailureTarget"]);
    assert_eq!(conditions(&r.writes[0])[0].2, "PodFailurePolicy");
    let mut uf = uncounted(&r.writes[0]).1;
    uf.sort();
    assert_eq!(
        uf,
        vec!["a".to_string(), "b".to_string()],
        "failing: all counted"
    );
    let last = r.writes.last().expect("write");
    assert_eq!((last.failed, last.terminating), (Some(2), Some(1)));
    assert_eq!(types(last), vec!["FailureTarget"]);

    // Still terminating: no Failed yet, nothing recounted.
    let r = w.sync(Crash::None);
    assert!(!r.finished);
    assert_eq!(w.job.status.as_ref().and_then(|s| s.failed), Some(2));
    // The kubelet stops b: Failed is added.
    let b = w.pods.iter_mut().find(|p| uid(p) == "b").expect("b");
    b.status.get_or_insert_with(Default::default).phase = Some("Failed".into());
    w.gc();
    let r = w.sync(Crash::None);
    assert!(r.finished);
    let s = w.job.status.clone().unwrap_or_default();
    assert_eq!(types(&s), vec!["FailureTarget", "Failed"]);
    assert_eq!((s.failed, s.terminating), (Some(2), Some(0)));
}

#[test]
fn ignore_rule_never_counts_but_backs_off() {
    let policy =
        json!({"rules": [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [7]}}]});
    let a = with_exit(pod("a", "Failed"), 7);
    let mut w = World::new(job(json!({"completions": 1, "backoffLimit": 0,
        "podReplacementPolicy": "Failed", "podFailurePolicy": policy})))
    .with_pods(vec![a]);
    w.now = Timestamp::constant(T0 + 2, 0);
    let r = w.sync(Crash::None);
    // Held back by the back-off, not by anything else.
    assert!(
        matches!(r.work, PodWork::Nothing) && r.backoff.is_some(),
        "{r:?}"
    );
    for s in &r.writes {
        assert_eq!((s.failed, uncounted(s).1.len()), (None, 0));
    }
    assert!(
        w.pods
            .iter()
            .all(|p| !crate::sync::tests::world::full::has_tracking_finalizer(p))
    );
    w.advance(10);
    let r = w.sync(Crash::None);
    assert_eq!(r.created().len(), 1);
    assert_eq!(w.job.status.as_ref().and_then(|s| s.failed), None);
}

#[test]
fn backoff_limit_zero_fails_at_once() {
    let a = pod("a", "Failed");
    let mut w = World::new(job(json!({"completions": 1, "backoffLimit": 0}))).with_pods(vec![a]);
    let r = w.sync(Crash::None);
    assert!(r.finished);
    let s = w.job.status.clone().unwrap_or_default();
    assert_eq!(types(&s), vec!["FailureTarget", "Failed"]);
    assert_eq!(conditions(&s)[1].2, "BackoffLimitExceeded");
    assert_eq!(s.failed, Some(1));
}

#[test]
fn suspended_removes_all_active_without_counting() {
    let pods = vec![
        ready(pod("a", "Running")),
        pod("b", "Pending"),
        pod("c", "Succeeded"),
    ];
    let mut w = World::new(job(
        json!({"completions": 5, "parallelism": 2, "suspend": true}),
    ))
    .with_pods(pods);
    let r = w.sync(Crash::None);
    let mut removed = r.removed();
    removed.sort();
    assert_eq!(removed, vec!["a".to_string(), "b".to_string()]);
    assert!(matches!(r.work, PodWork::Remove(_)));
    let event = |reason: &str, message: &str| JobEvent {
        warning: false,
        reason: reason.into(),
        message: message.into(),
    };
    assert_eq!(
        r.events,
        vec![
            event("SuccessfulDelete", "Deleted pod: b"),
            event("SuccessfulDelete", "Deleted pod: a"),
            event("Suspended", "Job suspended")
        ]
    );
    let s = w.job.status.clone().unwrap_or_default();
    assert_eq!(
        conditions(&s),
        vec![("Suspended".into(), "True".into(), "JobSuspended".into())]
    );
    assert_eq!(
        (s.failed, s.succeeded, s.active, s.ready),
        (None, Some(1), None, Some(0))
    );
    // Suspended Jobs created without startTime do not get one.
    let mut fresh = World::new(job(json!({"suspend": true})));
    fresh.sync(Crash::None);
    assert_eq!(
        fresh.job.status.as_ref().and_then(|s| s.start_time.clone()),
        None
    );
    // Resume: Suspended=False, startTime reset, pods created.
    fresh.advance(30);
    if let Some(spec) = fresh.job.spec.as_mut() {
        spec.suspend = Some(false);
    }
    let r = fresh.sync(Crash::None);
    assert_eq!(r.created().len(), 1);
    let s = fresh.job.status.clone().unwrap_or_default();
    assert_eq!(
        conditions(&s),
        vec![("Suspended".into(), "False".into(), "JobResumed".into())]
    );
    assert_eq!(s.start_time, Some(Time(fresh.now)));
    assert_eq!(r.reasons(), vec!["SuccessfulCreate", "Resumed"]);
}

#[test]
fn never_suspended_job_gets_no_suspended_condition() {
    let mut w = World::new(job(json!({})));
    w.sync(Crash::None);
    assert!(types(&w.job.status.clone().unwrap_or_default()).is_empty());
}

#[test]
fn caps_of_500() {
    let mut w = World::new(job(json!({"completions": 2000, "parallelism": 1000})));
    assert_eq!(w.sync(Crash::None).created().len(), 500);
    assert_eq!(w.sync(Crash::None).created().len(), 500);

    // Deletions for scale-down are capped, suspension is not.
    let active: Vec<Pod> = (0..600).map(|i| pod(&format!("r{i}"), "Running")).collect();
    let mut w =
        World::new(job(json!({"completions": 2000, "parallelism": 10}))).with_pods(active.clone());
    assert_eq!(w.sync(Crash::None).removed().len(), 500);
    let mut w = World::new(job(
        json!({"completions": 2000, "parallelism": 10, "suspend": true}),
    ))
    .with_pods(active);
    assert_eq!(w.sync(Crash::None).removed().len(), 600);

    // At most 500 pods are accounted per sync, and the Job cannot finish.
    let done: Vec<Pod> = (0..600)
        .map(|i| pod(&format!("s{i}"), "Succeeded"))
        .collect();
    let mut w = World::new(job(json!({"completions": 600, "parallelism": 600}))).with_pods(done);
    let r = w.sync(Crash::None);
    assert!(!r.finished);
    assert_eq!(uncounted(&r.writes[0]).0.len(), 500);
    assert_eq!(w.job.status.as_ref().and_then(|s| s.succeeded), Some(500));
    let r = w.sync(Crash::None);
    assert!(r.finished);
    assert_eq!(w.job.status.as_ref().and_then(|s| s.succeeded), Some(600));
}

#[test]
fn terminating_pods_count_as_failed_unless_policy_failed() {
    for (policy, failed) in [("TerminatingOrFailed", Some(1)), ("Failed", None)] {
        let mut w = World::new(job(
            json!({"completions": 1, "podReplacementPolicy": policy}),
        ))
        .with_pods(vec![deleting(ready(pod("a", "Running")))]);
        let r = w.sync(Crash::None);
        let s = w.job.status.clone().unwrap_or_default();
        assert_eq!(s.failed, failed, "{policy}");
        assert_eq!(s.terminating, Some(1), "{policy}");
        // Failed waits for the terminating pod before creating; the other
        // policy replaces it (after the back-off its failure started).
        assert_eq!(
            matches!(r.work, PodWork::Nothing) && r.backoff.is_none(),
            policy == "Failed",
            "{policy}: {:?}",
            r.work
        );
    }
}

#[test]
fn elastic_scale_down_removes_high_indexes() {
    let spec = json!({"completions": 4, "parallelism": 4, "completionMode": "Indexed"});
    let pods: Vec<Pod> = (0..4)
        .map(|i| indexed(pod(&format!("i{i}"), "Running"), i))
        .collect();
    let mut w = World::new(job(spec)).with_pods(pods);
    if let Some(s) = w.job.spec.as_mut() {
        (s.completions, s.parallelism) = (Some(2), Some(2));
    }
    let mut removed = w.sync(Crash::None).removed();
    removed.sort();
    assert_eq!(removed, vec!["i2".to_string(), "i3".to_string()]);
    assert_eq!(w.pods.iter().filter(|p| is_active(p)).count(), 2);
}

#[test]
fn deleted_job_releases_finalizers_without_counting_running_pods() {
    let mut j = job(json!({"completions": 3, "parallelism": 2}));
    j.metadata.deletion_timestamp = Some(Time(Timestamp::constant(T0, 0)));
    let mut w = World::new(j).with_pods(vec![pod("a", "Running"), pod("b", "Succeeded")]);
    let r = w.sync(Crash::None);
    assert!(matches!(r.work, PodWork::Nothing));
    assert!(
        w.pods
            .iter()
            .all(|p| !crate::sync::tests::world::full::has_tracking_finalizer(p))
    );
    let s = w.job.status.clone().unwrap_or_default();
    assert_eq!((s.succeeded, s.failed), (Some(1), None));
}

/// Found by the `model` property tests: a pod already in
/// `uncountedTerminatedPods.failed` (counted while terminating, then the
/// sync was interrupted before its finalizer went) that later reaches
/// Succeeded must not also count as a success; upstream counts it twice in
/// memory and could complete the Job with `succeeded < completions`.
#[test]
fn pod_uncounted_as_failed_that_succeeds_stays_a_failure() {
    let mut j = job(json!({"completions": 2, "parallelism": 2}));
    j.status = Some(
        serde_json::from_value(json!({
            "active": 1, "ready": 0, "terminating": 1,
            "uncountedTerminatedPods": {"succeeded": ["b"], "failed": ["a"]}
        }))
        .expect("status"),
    );
    let pods = vec![
        deleting(pod("a", "Succeeded")),
        pod("b", "Succeeded"),
        pod("c", "Running"),
    ];
    let mut w = World::new(j).with_pods(pods);
    let r = w.sync(Crash::None);
    assert!(matches!(r.work, PodWork::Nothing), "{:?}", r.work);
    assert!(!r.finished);
    let s = w.job.status.clone().unwrap_or_default();
    assert!(types(&s).is_empty(), "{s:?}");
    assert_eq!(
        (s.succeeded, s.failed, s.active),
        (Some(1), Some(1), Some(1))
    );
}

/// 1.35+ (MutableSchedulingDirectivesForSuspendedJobs): suspending clears
/// `startTime`, also on a re-suspension; 1.34 keeps it.
#[test]
fn suspending_clears_start_time_from_1_35_with_the_gate() {
    for clears in [false, true] {
        let mut w = World::new(job(json!({"completions": 5, "parallelism": 2})));
        w.config.clear_start_time_on_suspend = clears;
        w.sync(Crash::None);
        let started = w.job.status.as_ref().and_then(|s| s.start_time.clone());
        assert!(started.is_some());
        for round in 0..2 {
            w.advance(10);
            if let Some(spec) = w.job.spec.as_mut() {
                spec.suspend = Some(true);
            }
            let r = w.sync(Crash::None);
            assert_eq!(
                r.reasons(),
                vec!["SuccessfulDelete", "SuccessfulDelete", "Suspended"],
                "round {round}"
            );
            let now = w.job.status.as_ref().and_then(|s| s.start_time.clone());
            if clears {
                assert_eq!(now, None, "round {round}");
            } else {
                assert!(now.is_some(), "round {round}");
            }
            // Resume: startTime set again either way.
            w.advance(10);
            if let Some(spec) = w.job.spec.as_mut() {
                spec.suspend = Some(false);
            }
            w.sync(Crash::None);
            let s = w.job.status.clone().unwrap_or_default();
            assert_eq!(s.start_time, Some(Time(w.now)));
        }
    }
}

/// Where each crash point stops a sync that records two successes, removes
/// their finalizers and completes the Job (flush, 2 removals, flush); the
/// next sync, in a fresh process, finishes the work counting each once.
#[test]
fn crash_points_stop_the_sync_where_named() {
    // (crash, status writes that land, finalizers removed)
    let rows = [
        (Crash::AfterPodWork, 0, 0),
        (Crash::AfterFlush, 1, 0),
        (Crash::MidRemoval(0), 1, 0),
        (Crash::MidRemoval(1), 1, 1),
        (Crash::BeforeLastWrite, 1, 2),
        // Not reached: the sync completes and nothing dies.
        (Crash::MidRemoval(2), 2, 2),
        (Crash::MidCreation(0), 2, 2),
    ];
    for (crash, writes, removed) in rows {
        let pods = vec![pod("a", "Succeeded"), pod("b", "Succeeded")];
        let mut w = World::new(job(json!({"completions": 2, "parallelism": 2}))).with_pods(pods);
        let r = w.sync(crash);
        assert_eq!(r.crashed, writes < 2, "{crash:?}");
        assert_eq!(r.writes.len(), writes, "{crash:?}");
        let kept = w
            .pods
            .iter()
            .filter(|p| crate::sync::tests::world::full::has_tracking_finalizer(p))
            .count();
        assert_eq!(2 - kept, removed, "{crash:?}");
        let r = w.sync(Crash::None);
        assert_eq!(r.finished, writes < 2, "{crash:?}");
        let s = w.job.status.clone().unwrap_or_default();
        assert_eq!(s.succeeded, Some(2), "{crash:?}");
        assert_eq!(types(&s), vec!["SuccessCriteriaMet", "Complete"]);
    }
}

/// A process that dies part-way through a slow-start batch loses its
/// expectations; the next one sees the pods that landed and creates only
/// the rest.
#[test]
fn crash_mid_creation_creates_the_rest_once() {
    let mut w = World::new(job(json!({"completions": 6, "parallelism": 5})));
    let r = w.sync(Crash::MidCreation(2));
    assert!(r.crashed);
    // Slow start: a batch of 1, then one of 2 whose second creation dies.
    assert_eq!(r.created().len(), 2);
    assert_eq!(w.pods.len(), 2);
    assert!(w.job.status.is_none(), "no status write landed");
    let r = w.sync(Crash::None);
    assert_eq!(r.created().len(), 3);
    assert_eq!(w.pods.iter().filter(|p| is_active(p)).count(), 5);
    let s = w.job.status.clone().unwrap_or_default();
    assert_eq!(s.active, Some(5));
}
