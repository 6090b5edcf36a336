//! Bad input through the shipped sync over the model world (issue 14, "Bad input";
//! docs/bad-input.md): hand-edited conditions, corrupted index strings and
//! annotations, failed pods without container statuses. The same rows run
//! against the real API server in `crates/job/tests/bad_input`.

use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus};
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use crate::indexes::OrderedIntervals;
use crate::pods::{JOB_COMPLETION_INDEX, JOB_INDEX_FAILURE_COUNT};
use crate::sync::tests::world::full::{has_tracking_finalizer, is_active};
use crate::sync::tests::world::*;

fn with_conditions(mut j: Job, conditions: serde_json::Value) -> Job {
    let conditions: Vec<JobCondition> = serde_json::from_value(conditions).expect("conditions");
    j.status.get_or_insert_with(JobStatus::default).conditions = Some(conditions);
    j
}

/// Bound to a node: a deleted pod stays terminating until "the kubelet"
/// (the test) finishes it.
fn bound(mut p: Pod) -> Pod {
    p.spec.get_or_insert_with(Default::default).node_name = Some("n1".into());
    p
}

fn annotate(mut p: Pod, key: &str, value: &str) -> Pod {
    p.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(key.into(), value.into());
    p
}

fn count(s: &JobStatus, type_: &str, status: &str) -> usize {
    conditions(s)
        .iter()
        .filter(|c| c.0 == type_ && c.1 == status)
        .count()
}

fn status(w: &World) -> JobStatus {
    w.job.status.clone().unwrap_or_default()
}

fn set_phase(w: &mut World, uid_: &str, phase: &str, code: i32) {
    let p = w.pods.iter_mut().find(|p| uid(p) == uid_).expect("pod");
    p.status.get_or_insert_with(Default::default).phase = Some(phase.into());
    set_exit(p, code, w.now);
}

/// A string the API server's strengthened status validation (JobManagedBy)
/// accepts: ordered, non-overlapping, non-adjacent intervals with
/// `first <= last < completions`.
fn valid_index_string(s: &str, completions: i32) -> bool {
    if s.is_empty() {
        return true;
    }
    let mut last_end: i64 = -2;
    for piece in s.split(',') {
        let mut it = piece.splitn(2, '-');
        let first: i64 = match it.next().and_then(|f| f.parse().ok()) {
            Some(f) => f,
            None => return false,
        };
        let last: i64 = match it.next() {
            None => first,
            Some(l) => match l.parse() {
                Ok(l) => l,
                Err(_) => return false,
            },
        };
        if first > last || first <= last_end || last >= i64::from(completions) {
            return false;
        }
        last_end = last;
    }
    true
}

/// A `FailureTarget` with status `False` written by hand is ignored, and
/// once the controller adds its own `True` one it is not added again on
/// every later sync. Upstream (and kcm-rs before this test) looked only at
/// the first condition of the type, so while a deleted pod was still
/// terminating each sync appended another `FailureTarget=True` and wrote the
/// status again, without bound.
#[test]
fn hand_edited_failure_target_false_is_ignored_and_never_duplicated() {
    let j = with_conditions(
        job(json!({"completions": 2, "parallelism": 2, "backoffLimit": 0})),
        json!([{"type": "FailureTarget", "status": "False", "reason": "ByHand", "message": "edited"}]),
    );
    let a = bound(ready(pod("a", "Running")));
    let b = bound(ready(pod("b", "Running")));
    let mut w = World::new(j).with_pods(vec![a, b]);
    // Not failing: nothing deleted, no terminal condition.
    let r = w.sync(Crash::None);
    assert!(r.removed().is_empty() && !r.finished, "{r:#?}");
    assert!(w.pods.iter().all(is_active));
    assert_eq!(count(&status(&w), "FailureTarget", "True"), 0);

    // `a` fails: backoffLimit 0 is exceeded, `b` is deleted and stays
    // terminating (the kubelet has not stopped it yet).
    set_phase(&mut w, "a", "Failed", 1);
    w.advance(1);
    let r = w.sync(Crash::None);
    assert!(!r.finished, "b is still terminating");
    assert_eq!(count(&status(&w), "FailureTarget", "True"), 1);
    for _ in 0..5 {
        w.advance(1);
        let r = w.sync(Crash::None);
        assert!(!r.finished);
        assert!(r.writes.is_empty(), "nothing new to write: {:#?}", r.writes);
        assert_eq!(
            count(&status(&w), "FailureTarget", "True"),
            1,
            "{:#?}",
            conditions(&status(&w))
        );
    }
    // The kubelet stops `b`: Failed, once.
    set_phase(&mut w, "b", "Failed", 137);
    w.advance(1);
    let r = w.sync(Crash::None);
    assert!(r.finished);
    let s = status(&w);
    assert_eq!(
        conditions(&s),
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
    assert_eq!(s.failed, Some(2));
}

/// The same for `SuccessCriteriaMet=False` written by hand before an
/// Indexed Job meets its success policy while a pod is still terminating.
#[test]
fn hand_edited_success_criteria_met_false_is_never_duplicated() {
    let j = with_conditions(
        job(
            json!({"completions": 2, "parallelism": 2, "completionMode": "Indexed",
            "successPolicy": {"rules": [{"succeededCount": 1}]}}),
        ),
        json!([{"type": "SuccessCriteriaMet", "status": "False", "reason": "ByHand"}]),
    );
    let p0 = bound(indexed(ready(pod("p0", "Running")), 0));
    let p1 = bound(indexed(ready(pod("p1", "Running")), 1));
    let mut w = World::new(j).with_pods(vec![p0, p1]);
    w.sync(Crash::None);
    set_phase(&mut w, "p0", "Succeeded", 0);
    w.advance(1);
    let r = w.sync(Crash::None);
    assert!(!r.finished, "p1 is still terminating");
    for _ in 0..5 {
        w.advance(1);
        let r = w.sync(Crash::None);
        assert!(r.writes.is_empty(), "nothing new to write: {:#?}", r.writes);
    }
    assert_eq!(count(&status(&w), "SuccessCriteriaMet", "True"), 1);
    set_phase(&mut w, "p1", "Failed", 137);
    w.advance(1);
    assert!(w.sync(Crash::None).finished);
    let s = status(&w);
    assert_eq!(count(&s, "SuccessCriteriaMet", "True"), 1);
    assert_eq!(count(&s, "Complete", "True"), 1);
    assert_eq!(s.completed_indexes.as_deref(), Some("0"));
}

/// A hand-written `completedIndexes` that does not parse cleanly (written
/// while the API server's JobManagedBy validation was off): bad intervals
/// are skipped, parsing stops at the first value >= completions, and what is
/// written back is a well-formed string (so the strengthened validation of
/// a later API server never refuses the controller's write). Dropped
/// indexes run again; the kept index 3 is never run (upstream's handling).
#[test]
fn malformed_completed_indexes_are_read_leniently_and_rewritten_well_formed() {
    for (written, kept, first_created) in [
        ("0-x,3,,9-2", "3", vec![0, 1]),
        ("3,1,1", "3", vec![0, 1]),
        ("4-1", "", vec![0, 1]),
        ("+1,2-3-4", "1-3", vec![0, 4]),
        ("99999999999,0", "", vec![0, 1]),
        ("-1,2", "2", vec![0, 1]),
    ] {
        let mut j = job(json!({"completions": 5, "parallelism": 2, "completionMode": "Indexed"}));
        j.status
            .get_or_insert_with(JobStatus::default)
            .completed_indexes = Some(written.into());
        let mut w = World::new(j);
        let r = w.sync(Crash::None);
        let s = status(&w);
        let out = s.completed_indexes.clone().unwrap_or_default();
        assert!(valid_index_string(&out, 5), "{written:?} -> {out:?}");
        assert_eq!(out, kept, "{written:?}");
        let created: Vec<i32> = r
            .created()
            .iter()
            .filter_map(crate::sync::tests::world::full::completion_index)
            .collect();
        assert_eq!(created, first_created, "{written:?}");
        assert_eq!(
            s.succeeded,
            Some(OrderedIntervals::parse(&out, 5).total()),
            "{written:?}"
        );
    }
}

/// Whatever `completedIndexes`/`failedIndexes` hold, every string the
/// controller writes back is well formed and below completions, and the
/// counters are never negative (an inverted `"3-1"` made upstream's
/// `succeeded` negative, a write the API server always refuses).
#[test]
fn written_index_strings_are_always_well_formed() {
    let garbage = [
        "",
        ",",
        "-",
        "x",
        "1-",
        "-3",
        "3-1",
        "2,1",
        "1,1",
        "0-2,1",
        "7",
        "1-9",
        "0,,2",
        "+3",
        "1 2",
        "0-1,3-4,2",
    ];
    for completed in garbage {
        for failed in garbage {
            let mut j = job(json!({"completions": 5, "parallelism": 5,
                "completionMode": "Indexed", "backoffLimitPerIndex": 1}));
            let s = j.status.get_or_insert_with(JobStatus::default);
            s.completed_indexes = Some(completed.into());
            s.failed_indexes = Some(failed.into());
            let p = indexed(pod("done", "Succeeded"), 0);
            let mut w = World::new(j).with_pods(vec![p]);
            w.sync(Crash::None);
            let s = status(&w);
            // Counters the API server refuses when negative.
            assert!(
                s.succeeded.unwrap_or(0) >= 0 && s.failed.unwrap_or(0) >= 0,
                "{s:?} from completed {completed:?} failed {failed:?}"
            );
            for (what, v) in [
                ("completedIndexes", s.completed_indexes.clone()),
                ("failedIndexes", s.failed_indexes.clone()),
            ] {
                let v = v.unwrap_or_default();
                assert!(
                    valid_index_string(&v, 5),
                    "{what} {v:?} from completed {completed:?} failed {failed:?}"
                );
            }
        }
    }
}

/// Completion-index annotations that are missing, not numbers, negative or
/// at least `completions`: such active pods are deleted as invalid and replaced,
/// such finished pods are never counted, and every one of them loses the
/// tracking finalizer.
#[test]
fn bad_completion_index_annotations() {
    let j = job(json!({"completions": 2, "parallelism": 2, "completionMode": "Indexed"}));
    let mut pods = vec![
        ready(pod("missing", "Running")),
        annotate(ready(pod("nan", "Running")), JOB_COMPLETION_INDEX, "one"),
        annotate(ready(pod("neg", "Running")), JOB_COMPLETION_INDEX, "-1"),
        annotate(ready(pod("big", "Running")), JOB_COMPLETION_INDEX, "2"),
        annotate(
            ready(pod("huge", "Running")),
            JOB_COMPLETION_INDEX,
            "99999999999",
        ),
    ];
    for (name, v) in [("s-nan", "x"), ("s-neg", "-5"), ("s-big", "7")] {
        pods.push(annotate(pod(name, "Succeeded"), JOB_COMPLETION_INDEX, v));
    }
    pods.push(pod("s-missing", "Succeeded"));
    let mut w = World::new(j).with_pods(pods);
    let r = w.sync(Crash::None);
    let mut removed = r.removed();
    removed.sort();
    assert_eq!(removed, vec!["big", "huge", "missing", "nan", "neg"]);
    let s = status(&w);
    assert_eq!(s.succeeded, Some(0));
    assert_eq!(s.completed_indexes.as_deref(), Some(""));
    assert!(
        w.pods.iter().all(|p| !has_tracking_finalizer(p)),
        "every bad pod released: {:#?}",
        w.pods
    );
    // The two real indexes are created next.
    w.advance(1);
    let r = w.sync(Crash::None);
    let created: Vec<i32> = r
        .created()
        .iter()
        .filter_map(crate::sync::tests::world::full::completion_index)
        .collect();
    assert_eq!(created, vec![0, 1]);
}

/// A `job-index-failure-count` annotation that is not a number, negative
/// or above MaxInt32 reads as 0: the failure counts once, the index is not
/// failed, and the replacement carries `1`.
#[test]
fn bad_index_failure_count_annotations_read_as_zero() {
    for bad in ["x", "-4", "2147483648", "99999999999", ""] {
        let j = job(json!({"completions": 1, "parallelism": 1,
            "completionMode": "Indexed", "backoffLimitPerIndex": 1}));
        let p = annotate(indexed(pod("f", "Failed"), 0), JOB_INDEX_FAILURE_COUNT, bad);
        let mut w = World::new(j).with_pods(vec![p]);
        // Back-off of the first failure, then the replacement.
        let mut created = Vec::new();
        for _ in 0..4 {
            created = w.sync(Crash::None).created();
            if !created.is_empty() {
                break;
            }
            w.advance(20);
        }
        // The failed pod was held for its replacement; now it is counted.
        w.advance(1);
        w.sync(Crash::None);
        let s = status(&w);
        assert_eq!(s.failed_indexes.as_deref(), Some(""), "{bad:?}");
        assert_eq!(s.failed, Some(1), "{bad:?}");
        assert_eq!(created.len(), 1, "{bad:?}");
        let ann = created[0].metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            ann.get(JOB_INDEX_FAILURE_COUNT).map(String::as_str),
            Some("1"),
            "{bad:?}"
        );
    }
}

/// Failed pods without container statuses (admission failure, evicted
/// before start, node lost) and Failed pods whose container is not
/// terminated: `onExitCodes` rules cannot match them, condition rules
/// still can, otherwise they count.
#[test]
fn failed_pods_without_exit_codes() {
    let policy = json!({"rules": [
        {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [1]}},
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
    ]});
    let j = job(
        json!({"completions": 3, "parallelism": 3, "backoffLimit": 5,
        "podFailurePolicy": policy}),
    );
    let mut bare = pod("bare", "Failed");
    bare.status
        .get_or_insert_with(Default::default)
        .container_statuses = None;
    let mut disrupted = bare.clone();
    disrupted.metadata.name = Some("disrupted".into());
    disrupted.metadata.uid = Some("disrupted".into());
    disrupted
        .status
        .get_or_insert_with(Default::default)
        .conditions = Some(vec![k8s_openapi::api::core::v1::PodCondition {
        type_: "DisruptionTarget".into(),
        status: "True".into(),
        ..Default::default()
    }]);
    let mut running_container = pod("unterminated", "Failed");
    if let Some(cs) = running_container
        .status
        .as_mut()
        .and_then(|s| s.container_statuses.as_mut())
    {
        cs[0].state = Some(k8s_openapi::api::core::v1::ContainerState {
            running: Some(Default::default()),
            ..Default::default()
        });
    }
    let mut w = World::new(j).with_pods(vec![bare, disrupted, running_container]);
    let r = w.sync(Crash::None);
    assert!(!r.finished, "no FailJob: {r:#?}");
    let s = status(&w);
    assert_eq!(
        s.failed,
        Some(2),
        "bare and unterminated count, disrupted is ignored"
    );
    assert_eq!(count(&s, "FailureTarget", "True"), 0);
    assert!(w.pods.iter().all(|p| !has_tracking_finalizer(p)));
}

/// A Job suspended before any status write landed (the first sync crashed
/// after creating its pod), whose pod then succeeds: it finishes without
/// ever having started. The API server refuses a finished Job without
/// `startTime`, so the controller sets it (to the completion time) instead
/// of writing, as upstream, a status refused on every retry.
#[test]
fn finishing_without_a_start_time_sets_one() {
    let mut w = World::new(job(json!({"completions": 1, "parallelism": 1})));
    let r = w.sync(Crash::AfterPodWork);
    assert_eq!(r.created().len(), 1);
    assert!(w.job.status.is_none(), "no status write landed");
    let created = uid(&w.pods[0]);
    set_phase(&mut w, &created, "Succeeded", 0);
    if let Some(spec) = w.job.spec.as_mut() {
        spec.suspend = Some(true);
    }
    w.advance(5);
    let r = w.sync(Crash::None);
    assert!(r.finished, "{r:#?}");
    let s = status(&w);
    assert_eq!(count(&s, "Complete", "True"), 1);
    assert!(s.start_time.is_some(), "{s:?}");
    assert!(s.completion_time >= s.start_time, "{s:?}");
}

/// The one finished-without-start the API server accepts (a suspended Job
/// with zero completions) keeps upstream's status: no `startTime`.
#[test]
fn suspended_with_zero_completions_completes_without_a_start_time() {
    let mut w = World::new(job(
        json!({"completions": 0, "parallelism": 0, "suspend": true}),
    ));
    let mut finished = false;
    for _ in 0..3 {
        finished |= w.sync(Crash::None).finished;
    }
    assert!(finished);
    let s = status(&w);
    assert_eq!(count(&s, "Complete", "True"), 1, "{s:?}");
    assert_eq!(s.start_time, None, "{s:?}");
}
