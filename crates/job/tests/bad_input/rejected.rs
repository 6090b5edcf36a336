//! Rows of the catalogue the API server refuses: the Job controller can
//! only meet them through a skewed or differently configured API server,
//! so the matcher handles them in unit tests
//! (`pod_failure_policy::tests::bad_input`, `sync::tests::bad_input`);
//! here the refusals themselves are shown on the real API server.

use kube::api::PostParams;
use serde_json::{Value, json};

use super::*;

fn pfp(rules: Value) -> Value {
    json!({"podFailurePolicy": {"rules": rules}})
}

fn on_exit(action: &str, operator: &str, values: Value) -> Value {
    json!({"action": action, "onExitCodes": {"operator": operator, "values": values}})
}

/// Every invalid spec of the catalogue is refused at create, with the
/// upstream message; nothing reaches the controller, which keeps working.
#[tokio::test]
async fn the_api_server_refuses_invalid_specs() {
    let e = env("bad-spec").await;
    let many_rules: Vec<Value> = (1..=21)
        .map(|c| on_exit("Count", "In", json!([c])))
        .collect();
    let many_patterns: Vec<Value> = (0..21)
        .map(|i| json!({"type": format!("Custom{i}"), "status": "True"}))
        .collect();
    let values_256: Vec<i32> = (1..=256).collect();
    let both = json!({"action": "Ignore", "onExitCodes": {"operator": "In", "values": [1]},
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]});
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "unknown PFP action",
            pfp(json!([on_exit("Foo", "In", json!([1]))])),
            "Unsupported value: \"Foo\"",
        ),
        (
            "FailIndex without backoffLimitPerIndex",
            pfp(json!([on_exit("FailIndex", "In", json!([1]))])),
            "requires the backoffLimitPerIndex to be set",
        ),
        (
            "unknown onExitCodes operator",
            pfp(json!([on_exit("Count", "Gt", json!([1]))])),
            "Unsupported value: \"Gt\"",
        ),
        (
            "more than 255 exit codes",
            pfp(json!([on_exit("Count", "In", json!(values_256))])),
            "must have at most 255 items",
        ),
        (
            "unsorted exit codes",
            pfp(json!([on_exit("Count", "In", json!([3, 1]))])),
            "must be ordered",
        ),
        (
            "duplicate exit codes",
            pfp(json!([on_exit("Count", "In", json!([1, 1]))])),
            "Duplicate value: 1",
        ),
        (
            "exit code 0 with In",
            pfp(json!([on_exit("Count", "In", json!([0, 1]))])),
            "must not be 0 for the In operator",
        ),
        (
            "no exit codes",
            pfp(json!([on_exit("Count", "In", json!([]))])),
            "at least one value is required",
        ),
        (
            "21 rules",
            pfp(json!(many_rules)),
            "Too many: 21: must have at most 20 items",
        ),
        (
            "21 onPodConditions patterns",
            pfp(json!([{"action": "Ignore", "onPodConditions": many_patterns}])),
            "Too many: 21: must have at most 20 items",
        ),
        (
            "onPodConditions status other than True/False/Unknown",
            pfp(json!([{"action": "Ignore",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "Maybe"}]}])),
            "Unsupported value: \"Maybe\"",
        ),
        (
            "rule with both onExitCodes and onPodConditions",
            pfp(json!([both])),
            "specifying both OnExitCodes and OnPodConditions is not supported",
        ),
        (
            "rule with neither onExitCodes nor onPodConditions",
            pfp(json!([{"action": "Ignore"}])),
            "specifying one of OnExitCodes and OnPodConditions is required",
        ),
        (
            "containerName that names no container",
            pfp(json!([{"action": "Ignore",
                "onExitCodes": {"containerName": "nosuch", "operator": "In", "values": [1]}}])),
            "must be one of the container or initContainer names in the pod template",
        ),
        (
            "unknown completionMode",
            json!({"completionMode": "Foo"}),
            "Unsupported value: \"Foo\"",
        ),
        (
            "Indexed parallelism above 10^5",
            json!({"completionMode": "Indexed", "completions": 200_000, "parallelism": 100_001}),
            "must be less than or equal to 100000 when completion mode is Indexed",
        ),
        (
            "completions above 10^5 with backoffLimitPerIndex, no maxFailedIndexes",
            json!({"completionMode": "Indexed", "completions": 100_001, "parallelism": 1,
                "backoffLimitPerIndex": 1}),
            "must be specified when completions is above 100000",
        ),
        (
            "completions above 10^5 with backoffLimitPerIndex, parallelism above 10^4",
            json!({"completionMode": "Indexed", "completions": 100_001, "parallelism": 10_001,
                "backoffLimitPerIndex": 1, "maxFailedIndexes": 10}),
            "must be less than or equal to 10000 when completions are above 100000",
        ),
    ];
    for (i, (what, spec, want)) in cases.into_iter().enumerate() {
        let r = e
            .jobs
            .create(&PostParams::default(), &job(&format!("bad-{i}"), spec))
            .await;
        assert_invalid(what, r, want);
    }
    // restartPolicy OnFailure with a pod failure policy.
    let mut j = job(
        "bad-onfailure",
        pfp(json!([on_exit("Count", "In", json!([1]))])),
    );
    if let Some(spec) = j.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
        spec.restart_policy = Some("OnFailure".into());
    }
    assert_invalid(
        "PFP with restartPolicy OnFailure",
        e.jobs.create(&PostParams::default(), &j).await,
        "only \"Never\" is supported when podFailurePolicy is specified",
    );
    assert!(
        e.jobs
            .list(&Default::default())
            .await
            .expect("list")
            .items
            .is_empty()
    );
    e.control().await;
}

/// With JobManagedBy on (the 1.34 default), status writes that change the
/// index strings to something malformed, out of range, overlapping, or
/// present where they make no sense are refused; a hand-written
/// `FailureTarget=False` is not (see `failures::hand_edited_failure_target`).
#[tokio::test]
async fn the_api_server_refuses_malformed_index_status() {
    let e = env("bad-status").await;
    e.create(
        "ix",
        json!({"completionMode": "Indexed", "completions": 4, "parallelism": 2,
            "backoffLimitPerIndex": 1, "suspend": true}),
    )
    .await;
    e.create("nonix", json!({"suspend": true})).await;
    e.create(
        "nolimit",
        json!({"completionMode": "Indexed", "completions": 4, "suspend": true}),
    )
    .await;
    let cases: Vec<(&str, &str, Value, &str)> = vec![
        (
            "corrupted completedIndexes",
            "ix",
            json!({"completedIndexes": "1-x,3,,9-2"}),
            "error parsing completedIndexes",
        ),
        (
            "completedIndexes beyond completions",
            "ix",
            json!({"completedIndexes": "0-9"}),
            "error parsing completedIndexes",
        ),
        (
            "unsorted completedIndexes",
            "ix",
            json!({"completedIndexes": "3,1"}),
            "error parsing completedIndexes",
        ),
        (
            "corrupted failedIndexes",
            "ix",
            json!({"failedIndexes": "x"}),
            "error parsing failedIndexes",
        ),
        (
            "failedIndexes overlapping completedIndexes",
            "ix",
            json!({"completedIndexes": "0-2", "failedIndexes": "1"}),
            "failedIndexes and completedIndexes overlap",
        ),
        (
            "completedIndexes on a NonIndexed Job",
            "nonix",
            json!({"completedIndexes": "0"}),
            "cannot set non-empty completedIndexes when non-indexed completion mode",
        ),
        (
            "failedIndexes without backoffLimitPerIndex",
            "nolimit",
            json!({"failedIndexes": "0"}),
            "cannot set non-null failedIndexes when backoffLimitPerIndex is null",
        ),
    ];
    for (what, name, status, want) in cases {
        let r = e
            .jobs
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await;
        assert_invalid(what, r, want);
    }
    e.control().await;
}
