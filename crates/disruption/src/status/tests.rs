use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
use kcm_conditions::pdb::{REASON_INSUFFICIENT_PODS, REASON_SUFFICIENT_PODS};

use k8s_openapi::api::core::v1::Pod;

use super::*;

fn at(s: i64) -> Timestamp {
    Timestamp::from_second(1_000_000 + s).expect("valid")
}

fn pod(name: &str, ready: bool, deleting: bool) -> CachedPod {
    let mut p = Pod::default();
    p.metadata.name = Some(name.into());
    if deleting {
        p.metadata.deletion_timestamp = Some(Time(at(0)));
    }
    p.status = Some(PodStatus {
        conditions: Some(vec![PodCondition {
            type_: "Ready".into(),
            status: if ready { "True" } else { "False" }.into(),
            ..Default::default()
        }]),
        ..Default::default()
    });
    p.into()
}

fn pdb(generation: i64, disrupted: &[(&str, i64)]) -> PodDisruptionBudget {
    let mut p = PodDisruptionBudget::default();
    p.metadata.namespace = Some("ns".into());
    p.metadata.name = Some("pdb".into());
    p.metadata.generation = Some(generation);
    p.status = Some(PodDisruptionBudgetStatus {
        disrupted_pods: (!disrupted.is_empty()).then(|| {
            disrupted
                .iter()
                .map(|(n, s)| (n.to_string(), Time(at(*s))))
                .collect()
        }),
        ..Default::default()
    });
    p
}

#[test]
fn disrupted_pods_are_pruned_and_recheck_is_the_earliest_end() {
    let pods = [
        pod("old", true, false),
        pod("fresh", true, false),
        pod("fresher", true, false),
        pod("going", true, true),
    ];
    let refs: Vec<&CachedPod> = pods.iter().collect();
    // Evicted at 0 (ends 120), 50 (ends 170), 60; "going" is being deleted;
    // "gone" no longer exists.
    let p = pdb(
        1,
        &[
            ("old", 0),
            ("fresh", 50),
            ("fresher", 60),
            ("going", 50),
            ("gone", 50),
        ],
    );
    let d = build_disrupted_pod_map(&refs, &p, at(121));
    assert_eq!(d.not_deleted, vec!["old".to_string()]);
    assert_eq!(d.pods.keys().collect::<Vec<_>>(), vec!["fresh", "fresher"]);
    assert_eq!(d.recheck_at, Some(at(170)));
    // Exactly at the end the entry is kept but no longer keeps the pod out
    // of currentHealthy (upstream's Before/After pair).
    let d = build_disrupted_pod_map(&refs, &p, at(120));
    assert!(d.pods.contains_key("old") && d.not_deleted.is_empty());
    assert_eq!(
        count_healthy(&refs, &d.pods, at(120)),
        1,
        "old counts again; fresh/fresher do not"
    );
}

#[test]
fn healthy_means_ready_not_deleting_not_disrupted() {
    let pods = [
        pod("a", true, false),
        pod("b", false, false),
        pod("c", true, true),
        pod("d", true, false),
    ];
    let refs: Vec<&CachedPod> = pods.iter().collect();
    let disrupted: BTreeMap<String, Time> = [("d".to_string(), Time(at(0)))].into();
    assert_eq!(count_healthy(&refs, &disrupted, at(10)), 1);
    assert_eq!(count_healthy(&refs, &BTreeMap::new(), at(10)), 2);
}

fn counts(current: i32, desired: i32, expected: i32) -> Counts {
    Counts {
        current_healthy: current,
        desired_healthy: desired,
        expected_count: expected,
    }
}

#[test]
fn disruptions_allowed_is_clamped() {
    assert_eq!(disruptions_allowed(counts(3, 2, 3)), 1);
    assert_eq!(disruptions_allowed(counts(1, 2, 3)), 0);
    assert_eq!(disruptions_allowed(counts(3, 0, 0)), 0, "nothing expected");
    assert_eq!(
        disruptions_allowed(counts(3, -1, 3)),
        4,
        "negative minAvailable"
    );
    assert_eq!(disruptions_allowed(counts(0, 0, 2)), 0);
}

#[test]
fn status_is_written_once_then_skipped() {
    let p = pdb(2, &[]);
    let next = new_status(&p, counts(3, 2, 3), BTreeMap::new(), at(5)).expect("changed");
    let s = next.status.as_ref().expect("status");
    assert_eq!(
        (
            s.current_healthy,
            s.desired_healthy,
            s.expected_pods,
            s.disruptions_allowed
        ),
        (Some(3), Some(2), Some(3), Some(1))
    );
    assert_eq!(s.observed_generation, Some(2));
    assert_eq!(s.disrupted_pods, None);
    let c = &s.conditions.as_ref().expect("conditions")[0];
    assert_eq!(
        (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
        ("True", REASON_SUFFICIENT_PODS, "")
    );
    assert_eq!(c.observed_generation, Some(2));
    // Same counts again: nothing to write (empty map equals nil).
    assert_eq!(
        new_status(&next, counts(3, 2, 3), BTreeMap::new(), at(6)),
        None
    );
    // A generation bump alone forces a write.
    let mut bumped = next.clone();
    bumped.metadata.generation = Some(3);
    assert!(new_status(&bumped, counts(3, 2, 3), BTreeMap::new(), at(6)).is_some());
    // Dropping to zero flips the condition with a new transition time.
    let low = new_status(&next, counts(2, 2, 3), BTreeMap::new(), at(7)).expect("changed");
    let c = &low
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .expect("c")[0];
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", REASON_INSUFFICIENT_PODS)
    );
    assert_eq!(c.last_transition_time, Time(at(7)));
}

#[test]
fn fail_safe_keeps_observed_generation_and_zeroes_allowed() {
    let p = pdb(2, &[]);
    let ok = new_status(&p, counts(3, 2, 3), BTreeMap::new(), at(5)).expect("changed");
    let mut respec = ok.clone();
    respec.metadata.generation = Some(3);
    let failed = fail_safe(&respec, "found no controllers for pod \"x\"", at(9));
    let s = failed.status.as_ref().expect("status");
    assert_eq!(s.disruptions_allowed, Some(0));
    assert_eq!(s.observed_generation, Some(2), "not bumped");
    assert_eq!(
        (s.current_healthy, s.expected_pods),
        (Some(3), Some(3)),
        "rest kept"
    );
    let c = &s.conditions.as_ref().expect("c")[0];
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", REASON_SYNC_FAILED)
    );
    assert_eq!(c.message, "found no controllers for pod \"x\"");
    assert_eq!(c.observed_generation, Some(2));
    assert_eq!(c.last_transition_time, Time(at(9)));
}
