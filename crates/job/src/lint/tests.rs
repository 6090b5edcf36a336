use k8s_openapi::api::batch::v1::PodFailurePolicyRule;
use serde_json::json;

use super::*;

fn rule(v: serde_json::Value) -> PodFailurePolicyRule {
    serde_json::from_value(v).expect("rule")
}

fn checks(doc: serde_json::Value) -> Vec<(String, &'static str)> {
    lint_document(&doc)
        .expect("lints")
        .into_iter()
        .map(|f| (f.path, f.check))
        .collect()
}

fn job(rules: serde_json::Value, extra: serde_json::Value) -> serde_json::Value {
    let mut spec = json!({
        "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "main", "image": "x"}],
            "initContainers": [{"name": "setup", "image": "x"}]}},
        "podFailurePolicy": {"rules": rules}
    });
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    json!({"kind": "Job", "metadata": {"name": "j", "namespace": "ns"}, "spec": spec})
}

#[test]
fn shadowing_by_exit_codes() {
    let not_in_1 =
        rule(json!({"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [1]}}));
    let in_42 = rule(json!({"action": "Count", "onExitCodes": {"operator": "In", "values": [42]}}));
    let in_1 = rule(json!({"action": "Count", "onExitCodes": {"operator": "In", "values": [1]}}));
    let in_1_42 =
        rule(json!({"action": "Count", "onExitCodes": {"operator": "In", "values": [1, 42]}}));
    let not_in_1_2 =
        rule(json!({"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [1, 2]}}));
    let main_in_42 = rule(
        json!({"action": "Count", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}}),
    );
    let empty = rule(json!({"action": "Count", "onExitCodes": {"operator": "In", "values": []}}));
    assert!(shadow::covers(&not_in_1, &in_42));
    assert!(!shadow::covers(&not_in_1, &in_1));
    assert!(!shadow::covers(&not_in_1, &in_1_42));
    assert!(shadow::covers(&not_in_1, &not_in_1_2));
    assert!(!shadow::covers(&not_in_1_2, &not_in_1));
    assert!(shadow::covers(&in_1_42, &in_1));
    assert!(!shadow::covers(&in_1, &in_1_42));
    // A rule for any container covers one for a named container, not back.
    assert!(shadow::covers(&in_42, &main_in_42));
    assert!(!shadow::covers(&main_in_42, &in_42));
    assert!(!shadow::covers(&in_42, &not_in_1));
    assert!(!shadow::covers(&not_in_1, &empty));
}

#[test]
fn shadowing_by_conditions_and_unknown_actions() {
    let dt = rule(json!({"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}));
    let dt_true = rule(
        json!({"action": "Count", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}),
    );
    let dt_false = rule(
        json!({"action": "Count", "onPodConditions": [{"type": "DisruptionTarget", "status": "False"}]}),
    );
    assert!(shadow::covers(&dt, &dt_true));
    assert!(!shadow::covers(&dt, &dt_false));
    // An earlier rule whose action is unknown is skipped, so shadows nothing.
    let doc = job(
        json!([{"action": "Later", "onPodConditions": [{"type": "DisruptionTarget"}]},
               {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]),
        json!({}),
    );
    assert_eq!(
        checks(doc),
        [(
            "spec.podFailurePolicy.rules[0].action".to_string(),
            "unknown-action"
        )]
    );
}

#[test]
fn every_check_has_a_path() {
    let doc = job(
        json!([
            {"action": "FailJob", "onExitCodes": {"containerName": "setup", "operator": "In", "values": [0, 2]}},
            {"action": "FailJob", "onExitCodes": {"containerName": "nope", "operator": "In", "values": [3]}},
            {"action": "FailIndex", "onPodConditions": [{"type": "Custom"}]},
            {"action": "Count", "onExitCodes": {"operator": "Between", "values": [4]}},
            {"action": "Count"}
        ]),
        json!({"template": {"spec": {"restartPolicy": "OnFailure",
            "containers": [{"name": "main", "image": "x"}]}}}),
    );
    let got = checks(doc);
    let want = [
        ("spec.template.spec.restartPolicy", "restart-policy"),
        (
            "spec.podFailurePolicy.rules[0].onExitCodes.values",
            "exit-code-zero",
        ),
        (
            "spec.podFailurePolicy.rules[0].onExitCodes.containerName",
            "unknown-container",
        ),
        (
            "spec.podFailurePolicy.rules[1].onExitCodes.containerName",
            "unknown-container",
        ),
        (
            "spec.podFailurePolicy.rules[2].action",
            "failindex-without-per-index",
        ),
        (
            "spec.podFailurePolicy.rules[2].onPodConditions[0].type",
            "unknown-condition",
        ),
        (
            "spec.podFailurePolicy.rules[3].onExitCodes.operator",
            "unknown-operator",
        ),
        ("spec.podFailurePolicy.rules[4]", "one-requirement"),
    ];
    let want: Vec<(String, &str)> = want.iter().map(|(p, c)| (p.to_string(), *c)).collect();
    assert_eq!(got, want);
}

#[test]
fn readiness_gate_conditions_are_known() {
    let doc = job(
        json!([{"action": "Ignore", "onPodConditions": [{"type": "example.com/Preempted"}]}]),
        json!({"template": {"spec": {"restartPolicy": "Never",
            "readinessGates": [{"conditionType": "example.com/Preempted"}],
            "containers": [{"name": "main", "image": "x"}]}}}),
    );
    assert!(checks(doc).is_empty());
}

#[test]
fn bad_spec_is_an_error_not_a_panic() {
    let doc = json!({"kind": "Job", "metadata": {"name": "j"},
        "spec": {"podFailurePolicy": {"rules": "not a list"}, "template": {}}});
    let err = lint_document(&doc).expect_err("invalid");
    assert!(
        err.to_string()
            .contains("Job j: spec is not a valid Job spec"),
        "{err}"
    );
}
