//! `explain` against the shipped sync stages: table cases, and a property
//! test that drives random Jobs and pod failures through the model world
//! ([`World`], which runs the shipped `JobController::sync_job`) and checks
//! that the explanation's replay reaches the same counters, failed indexes
//! and condition as the controller did.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Event, ObjectReference, PodCondition};
use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::sync::tests::world::full::{is_active, is_terminal, phase};
use crate::sync::tests::world::{World, job, set_exit};

fn fail(w: &mut World, i: usize, outcome: Outcome) {
    let now = w.now;
    let p = &mut w.pods[i];
    set_exit(p, outcome.exit_code(), now);
    let status = p.status.get_or_insert_with(Default::default);
    status.phase = Some(
        if outcome == Outcome::Succeed {
            "Succeeded"
        } else {
            "Failed"
        }
        .into(),
    );
    if outcome == Outcome::Disrupted {
        status.conditions = Some(vec![PodCondition {
            type_: "DisruptionTarget".into(),
            status: "True".into(),
            reason: Some("DeletionByTaintManager".into()),
            ..Default::default()
        }]);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Exit(i32),
    Disrupted,
    Succeed,
}

impl Outcome {
    fn exit_code(self) -> i32 {
        match self {
            Outcome::Exit(c) => c,
            Outcome::Disrupted => 137,
            Outcome::Succeed => 0,
        }
    }
}

/// Syncs until nothing changes (the executor's requeues, collapsed).
fn settle(w: &mut World) {
    for _ in 0..6 {
        let before = (w.job.status.clone(), w.pods.len());
        w.sync(crate::sync::tests::world::Crash::None);
        if (w.job.status.clone(), w.pods.len()) == before {
            break;
        }
    }
}

fn finished(w: &World) -> bool {
    w.job
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.status == "True"
                    && ["Failed", "Complete", "FailureTarget"].contains(&c.type_.as_str())
            })
        })
}

/// Runs `outcomes` one pod at a time (each on the oldest active pod, one
/// second apart, back-off waited out) until the Job ends.
fn drive(w: &mut World, outcomes: &[Outcome]) {
    settle(w);
    for o in outcomes {
        if finished(w) {
            break;
        }
        let mut waited = 0;
        while !w.pods.iter().any(is_active) && waited < 20 {
            w.advance(400);
            settle(w);
            waited += 1;
        }
        let Some(i) = w.pods.iter().position(is_active) else {
            break;
        };
        w.advance(1);
        fail(w, i, *o);
        settle(w);
    }
    // Let back-off expire so held failures (backoffLimitPerIndex) are counted.
    for _ in 0..3 {
        w.advance(400);
        settle(w);
    }
}

fn explain_world(w: &World, what_if: Option<&WhatIf>) -> Explanation {
    explain(&Request {
        job: &w.job,
        pods: &w.pods,
        events: &[],
        config: w.config.clone(),
        now: w.now,
        what_if,
    })
}

fn policy() -> serde_json::Value {
    json!({"rules": [
        {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}},
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
        {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [0]}}
    ]})
}

#[test]
fn names_the_rule_of_each_pod_and_the_deciding_failure() {
    let mut w = World::new(job(
        json!({"completions": 4, "parallelism": 4, "backoffLimit": 3,
        "podFailurePolicy": policy()}),
    ));
    drive(
        &mut w,
        &[Outcome::Exit(1), Outcome::Disrupted, Outcome::Exit(42)],
    );
    let e = explain_world(&w, None);
    let actions: Vec<(&str, Option<usize>)> = e
        .failures
        .iter()
        .map(|r| (r.action.as_str(), r.rule))
        .collect();
    assert_eq!(
        actions,
        [
            ("Count", Some(2)),
            ("Ignore", Some(1)),
            ("FailJob", Some(0))
        ]
    );
    let ends = e.failures[2]
        .effect
        .as_ref()
        .and_then(|x| x.ends_job.clone());
    let ft = ends.expect("the exit-42 pod ends the Job");
    assert_eq!(ft.reason, "PodFailurePolicy");
    assert!(
        ft.message
            .contains("exit code 42 matching FailJob rule at index 0"),
        "{ft:?}"
    );
    assert_eq!(e.verdict.state, "Failed");
    assert!(e.verdict.agrees, "{:?}", e.verdict);
    assert_eq!(
        e.verdict.decided_by.as_deref(),
        e.failures[2].pod.as_str().into()
    );
    // The Ignore pod: no rule before it matched, and it did not count.
    let ignore = &e.failures[1];
    assert_eq!(ignore.rules[0].outcome, "no-match");
    assert_eq!(ignore.rules[2].outcome, "shadowed");
    assert!(!ignore.effect.as_ref().is_some_and(|x| x.counted));
}

#[test]
fn why_no_rule_decided() {
    let mut w = World::new(job(json!({"completions": 1, "backoffLimit": 3,
        "podFailurePolicy": {"rules": [
            {"action": "FailJob", "onExitCodes": {"containerName": "other", "operator": "In", "values": [1]}},
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}})));
    drive(&mut w, &[Outcome::Exit(1)]);
    let e = explain_world(&w, None);
    let r = &e.failures[0];
    assert_eq!((r.rule, r.action.as_str()), (None, "default"));
    assert_eq!(r.rules[0].why, "no terminated container named other");
    assert_eq!(r.rules[1].why, "no DisruptionTarget condition");
    assert_eq!(e.verdict.failures_left, 2);
}

#[test]
fn what_if_without_the_ignore_rule_counts_the_disruptions() {
    let mut w = World::new(job(
        json!({"completions": 5, "parallelism": 5, "backoffLimit": 1,
        "podFailurePolicy": policy()}),
    ));
    drive(
        &mut w,
        &[
            Outcome::Disrupted,
            Outcome::Disrupted,
            Outcome::Exit(1),
            Outcome::Succeed,
        ],
    );
    let e = explain_world(&w, None);
    assert_eq!(e.verdict.state, "Running");
    let mut proposed: PodFailurePolicy = serde_json::from_value(policy()).expect("policy");
    proposed.rules.remove(1);
    let w2 = WhatIf {
        policy: Some(proposed),
        ..WhatIf::default()
    };
    let e = explain_world(&w, Some(&w2));
    let wi = e.what_if.expect("what-if");
    assert_eq!(wi.changed.len(), 2, "{:?}", wi.changed);
    assert!(wi.changed.iter().all(|c| c.before == "Ignore (rule 1)"));
    assert!(wi.ends_differently);
    let c = wi.verdict.condition.expect("fails under the proposal");
    assert_eq!(c.reason, "BackoffLimitExceeded");
    // The second disruption is the one past backoffLimit 1.
    assert_eq!(
        wi.verdict.decided_by.as_deref(),
        Some(wi.failures[1].pod.as_str())
    );
}

fn event(kind: &str, name: &str, uid: Option<&str>, reason: &str, message: &str) -> Event {
    Event {
        involved_object: ObjectReference {
            kind: Some(kind.into()),
            name: Some(name.into()),
            namespace: Some("ns".into()),
            uid: uid.map(Into::into),
            ..Default::default()
        },
        reason: Some(reason.into()),
        message: Some(message.into()),
        ..Default::default()
    }
}

#[test]
fn gone_pods_from_events_with_the_eviction_rule_inferred() {
    let mut w = World::new(job(json!({"completions": 1, "podFailurePolicy": policy()})));
    w.job.status = Some(Default::default());
    let events = [
        event(
            "Job",
            "j",
            Some("job-uid"),
            "SuccessfulCreate",
            "Created pod: j-gone1",
        ),
        event(
            "Job",
            "j",
            Some("job-uid"),
            "SuccessfulCreate",
            "Created pod: j-gone2",
        ),
        event(
            "Pod",
            "j-gone1",
            None,
            "TaintManagerEviction",
            "Marking for deletion Pod ns/j-gone1",
        ),
        event(
            "Pod",
            "unrelated",
            None,
            "TaintManagerEviction",
            "Marking for deletion Pod ns/unrelated",
        ),
    ];
    if let Some(s) = w.job.status.as_mut() {
        s.failed = Some(1);
    }
    let e = explain(&Request {
        job: &w.job,
        pods: &[],
        events: &events,
        config: w.config.clone(),
        now: w.now,
        what_if: None,
    });
    assert_eq!(e.gone.counted_failures, 1);
    let names: Vec<&str> = e.gone.pods.iter().map(|g| g.pod.as_str()).collect();
    assert_eq!(names, ["j-gone1", "j-gone2"]);
    let inferred = e.gone.pods[0].inferred.as_ref().expect("eviction inferred");
    assert_eq!(
        (inferred.rule, inferred.action.as_str()),
        (Some(1), "Ignore")
    );
    assert!(e.gone.pods[1].inferred.is_none());
}

#[test]
fn gate_off_ignores_the_policy_as_the_controller_does() {
    let mut w = World::new(job(
        json!({"completions": 2, "parallelism": 2, "backoffLimit": 0,
        "podFailurePolicy": policy()}),
    ));
    w.config.pod_failure_policy = false;
    drive(&mut w, &[Outcome::Disrupted]);
    let e = explain_world(&w, None);
    assert!(!e.policy_applied);
    assert_eq!(e.failures[0].action, "default");
    let c = e.verdict.condition.expect("backoffLimit 0");
    assert_eq!(c.reason, "BackoffLimitExceeded");
    assert!(e.verdict.agrees);
}

// ---- property: explain's replay equals the controller's decisions ----

const RULES: &[&str] = &[
    r#"{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}"#,
    r#"{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}"#,
    r#"{"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [0]}}"#,
    r#"{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [5]}}"#,
    r#"{"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [3]}}"#,
    r#"{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}"#,
];

fn arb_outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        3 => prop::sample::select(vec![1, 3, 5, 42]).prop_map(Outcome::Exit),
        1 => Just(Outcome::Disrupted),
        2 => Just(Outcome::Succeed),
    ]
}

#[derive(Debug, Clone)]
struct Case {
    indexed: bool,
    per_index: Option<i32>,
    backoff_limit: i32,
    rules: Vec<usize>,
    outcomes: Vec<Outcome>,
}

fn arb_case() -> impl Strategy<Value = Case> {
    (
        any::<bool>(),
        prop::option::of(0..3i32),
        0..4i32,
        prop::collection::vec(0..RULES.len(), 0..4),
        prop::collection::vec(arb_outcome(), 1..14),
    )
        .prop_map(
            |(indexed, per_index, backoff_limit, rules, outcomes)| Case {
                indexed,
                per_index: per_index.filter(|_| indexed),
                backoff_limit,
                rules,
                outcomes,
            },
        )
}

fn case_job(c: &Case) -> k8s_openapi::api::batch::v1::Job {
    let rules: Vec<serde_json::Value> = c
        .rules
        .iter()
        // FailIndex is valid only with backoffLimitPerIndex.
        .filter(|&&r| c.per_index.is_some() || r != 4)
        .map(|&r| serde_json::from_str(RULES[r]).expect("rule"))
        .collect();
    let mut spec = json!({"completions": 4, "parallelism": 2, "backoffLimit": c.backoff_limit});
    if c.indexed {
        spec["completionMode"] = json!("Indexed");
    }
    if let Some(b) = c.per_index {
        spec["backoffLimitPerIndex"] = json!(b);
        spec.as_object_mut().map(|m| m.remove("backoffLimit"));
    }
    if !rules.is_empty() {
        spec["podFailurePolicy"] = json!({ "rules": rules });
    }
    job(spec)
}

fn failure_condition(w: &World) -> Option<ConditionText> {
    w.job
        .status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| c.status == "True" && c.type_ == "FailureTarget")
        .map(ConditionText::of)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn explain_replay_equals_the_controller(c in arb_case()) {
        let mut w = World::new(case_job(&c));
        w.now = Timestamp::constant(crate::sync::tests::world::T0, 0) + SignedDuration::from_secs(1);
        drive(&mut w, &c.outcomes);
        let e = explain_world(&w, None);
        let status = w.job.status.clone().unwrap_or_default();
        // Each failed pod's action is the controller's matcher's.
        let policy = w.config.policy(&w.job);
        for r in &e.failures {
            let p = w.pods.iter().find(|p| p.metadata.name.as_deref() == Some(&r.pod)).expect("pod");
            let m = match_pod_failure_policy(policy.as_ref(), &p.into());
            prop_assert_eq!(r.rule, m.rule);
            prop_assert_eq!(r.action.as_str(), m.action.map_or("default", Action::as_str));
        }
        // The replay reaches the controller's failure condition, from the
        // pod whose failure the controller acted on.
        let actual = failure_condition(&w);
        prop_assert_eq!(e.verdict.replay.as_ref().filter(|c| c.type_ == "FailureTarget"), actual.as_ref());
        prop_assert!(e.verdict.agrees, "{:?}", e.verdict);
        // Counters: the replay's last `failed` is the Job's; failedIndexes too.
        let last = e.failures.iter().rev().find_map(|r| r.effect.as_ref());
        let replay_failed = last.map_or(0, |x| x.failed) + e.gone.counted_failures;
        let stopped_counted = i32::try_from(e.stopped.iter().filter(|r| r.action != "Ignore").count()).unwrap_or(0);
        let pending = i32::try_from(status.uncounted_terminated_pods.clone().unwrap_or_default().failed.unwrap_or_default().len()).unwrap_or(0);
        prop_assert_eq!(replay_failed + stopped_counted, status.failed.unwrap_or(0) + pending,
            "{:#?}", e);
        if c.per_index.is_some() && let Some(x) = last {
            prop_assert_eq!(x.failed_indexes.clone().unwrap_or_default(),
                status.failed_indexes.clone().unwrap_or_default());
        }
        // Nothing is left unexplained: every terminal failed pod is reported.
        let failed_pods = w.pods.iter().filter(|p| is_terminal(p) && phase(p) == "Failed").count();
        prop_assert_eq!(e.failures.len() + e.stopped.len(), failed_pods);
    }
}
