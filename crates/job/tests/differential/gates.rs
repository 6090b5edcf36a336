//! Job feature gates turned off as upstream's integration tests run KCM:
//! `--emulated-version` of an older minor, where the gate was still beta,
//! and `--feature-gates=X=false`, the same flags to upstream KCM and to
//! kcm-rs, on the default API server of the suite's minor (which keeps the
//! Job's fields, so only the controllers ignore them). A scenario is skipped
//! on a minor whose KCM cannot take its flags (kcm-rs's parse of them
//! stands in for upstream's refusal).

use kcm_features::{Emulation, FeatureGates, KubeVersion};
use serde_json::{Value, json};

use crate::support::script::index;
use crate::{Gated, Kubelet, Outcome, compare_gated};

/// Whether KCM of the suite's minor takes `gated`'s flags.
fn runs(gated: Gated) -> bool {
    let minor = kcm_e2e::binaries::k8s_minor();
    let accepted = KubeVersion::new(minor)
        .and_then(|b| Emulation::new(b, gated.emulated.unwrap_or(minor)))
        .map_err(|e| e.to_string())
        .and_then(|e| FeatureGates::parse_at(e, gated.gates).map_err(|e| e.to_string()));
    if let Err(e) = &accepted {
        eprintln!("skipped on 1.{minor}: {e}");
    }
    accepted.is_ok()
}

/// `--emulated-version=1.<emulated>` and `--feature-gates=<gates>` for
/// upstream KCM and kcm-rs, and for the API server too when `apiserver`.
fn gated(emulated: u32, gates: &'static str, apiserver: bool) -> Gated {
    Gated {
        emulated: Some(emulated),
        gates,
        apiserver,
    }
}

/// The scenario compared with upstream, or `None` (skipped) on a minor
/// whose KCM does not take `gated`'s flags.
async fn compare_if_taken(gated: Gated, spec: Value, kubelet: Kubelet) -> Option<Outcome> {
    runs(gated).then_some(())?;
    Some(compare_gated(gated, spec, kubelet).await)
}

/// Index 0 succeeds; indexes 1 and 2 fail once, then succeed.
fn others_fail_once(p: &k8s_openapi::api::core::v1::Pod, n: usize) -> Option<i32> {
    Some(if index(p) != 0 && n < 3 { 1 } else { 0 })
}

#[tokio::test]
async fn d33_success_policy_ignored_with_its_gate_off() {
    // With the gate on, index 0 alone would end the Job (SuccessPolicy).
    let spec = json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed",
           "successPolicy": {"rules": [{"succeededIndexes": "0"}]}});
    let flags = gated(32, "JobSuccessPolicy=false", false);
    let Some(o) = compare_if_taken(flags, spec, others_fail_once).await else {
        return;
    };
    assert_eq!((o.succeeded, o.failed), (3, 2), "{o:?}");
    assert_eq!(o.completed_indexes, "0-2");
    // No reason or message without the gate (newSuccessCondition).
    let last = o.conditions.last().cloned().unwrap_or_default();
    assert_eq!(
        (last.0.as_str(), last.2.as_str()),
        ("Complete", ""),
        "{o:?}"
    );
}

#[tokio::test]
async fn d34_backoff_limit_per_index_ignored_with_its_gate_off() {
    // With the gate on, index 1's one failure would fail the Job
    // (FailedIndexes); off, the Job-wide backoffLimit (defaulted to MaxInt32
    // with backoffLimitPerIndex set) lets it retry.
    let spec = json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed",
    "backoffLimitPerIndex": 0,
    "podFailurePolicy": {"rules": [
        {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [1]}},
        {"action": "Count", "onExitCodes": {"operator": "In", "values": [1]}}
    ]}});
    let flags = gated(32, "JobBackoffLimitPerIndex=false", false);
    let Some(o) = compare_if_taken(flags, spec, others_fail_once).await else {
        return;
    };
    assert_eq!((o.succeeded, o.failed), (3, 2), "{o:?}");
    assert_eq!(o.failed_indexes, None);
    assert_eq!(o.conditions.last().map(|c| c.0.as_str()), Some("Complete"));
}

#[tokio::test]
async fn d35_pod_replacement_policy_ignored_with_its_gate_off() {
    let spec = json!({"completions": 2, "parallelism": 2, "podReplacementPolicy": "Failed"});
    let flags = gated(32, "JobPodReplacementPolicy=false", false);
    let Some(o) = compare_if_taken(flags, spec, |_, n| Some(if n == 0 { 1 } else { 0 })).await
    else {
        return;
    };
    assert_eq!((o.succeeded, o.failed), (2, 1), "{o:?}");
    assert!(!o.terminating_set, "no status.terminating: {o:?}");
}

#[tokio::test]
async fn d36_managed_by_ignored_with_its_gate_off() {
    // JobManagedBy is beta in 1.34, so every supported KCM takes it off
    // when emulating 1.34.
    let spec = json!({"completions": 2, "parallelism": 2, "managedBy": "example.com/other"});
    let Some(o) =
        compare_if_taken(gated(34, "JobManagedBy=false", false), spec, |_, _| Some(0)).await
    else {
        return;
    };
    assert_eq!(o.succeeded, 2);
    assert_eq!(o.conditions.last().map(|c| c.0.as_str()), Some("Complete"));
}

/// Indexes 0 and 1 succeed; index 2 fails every time.
fn last_index_fails(p: &k8s_openapi::api::core::v1::Pod, _: usize) -> Option<i32> {
    Some(if index(p) == 2 { 1 } else { 0 })
}

#[tokio::test]
async fn d37_terminal_conditions_at_once_with_both_gates_off() {
    // Upstream's delayTerminalCondition is off only with JobManagedBy and
    // JobPodReplacementPolicy both off (the latter GA from 1.34, so only
    // when emulating 1.33 or older); the API server takes the same flags,
    // or its JobManagedBy status rules would refuse Failed without
    // FailureTarget.
    let flags = gated(33, "JobManagedBy=false,JobPodReplacementPolicy=false", true);
    let spec = json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed",
           "backoffLimit": 1});
    let Some(failed) = compare_if_taken(flags, spec, last_index_fails).await else {
        return;
    };
    let types: Vec<&str> = failed.conditions.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(types, ["Failed"], "no FailureTarget first: {failed:?}");
    assert_eq!(failed.conditions[0].2, "BackoffLimitExceeded", "{failed:?}");
    let complete = compare_gated(
        flags,
        json!({"completions": 2, "parallelism": 2}),
        |_, _| Some(0),
    )
    .await;
    let types: Vec<&str> = complete.conditions.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(
        types,
        ["Complete"],
        "no SuccessCriteriaMet first: {complete:?}"
    );
}
