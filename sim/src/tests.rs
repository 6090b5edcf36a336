use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use kube::api::ObjectMeta;

use super::*;

fn pod(containers: &[&str], ann: &[(&str, &str)]) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("p".into()),
            annotations: Some(
                ann.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: containers
                .iter()
                .map(|n| Container {
                    name: n.to_string(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn durations_parse_with_units() {
    assert_eq!(
        parse_duration("250ms"),
        Ok(Some(Duration::from_millis(250)))
    );
    assert_eq!(parse_duration("5s"), Ok(Some(Duration::from_secs(5))));
    assert_eq!(parse_duration("7"), Ok(Some(Duration::from_secs(7))));
    assert_eq!(parse_duration("2m"), Ok(Some(Duration::from_secs(120))));
    assert_eq!(parse_duration("never"), Ok(None));
    assert!(parse_duration("5 days").is_err());
    assert!(parse_duration("s").is_err());
}

#[test]
fn defaults_apply_without_annotations() {
    let plan = plan_for(&pod(&["main"], &[])).expect("plan");
    assert_eq!(
        plan.containers,
        vec![ContainerPlan {
            name: "main".into(),
            run: Some(DEFAULT_RUN),
            exit_code: 0
        }]
    );
    assert_eq!(plan.fail_condition, None);
}

#[test]
fn per_container_overrides_win() {
    let plan = plan_for(&pod(
        &["main", "side"],
        &[
            (ANN_RUN, "1s"),
            (ANN_EXIT_CODE, "3"),
            (ANN_CONTAINERS, "side=250ms:42"),
        ],
    ))
    .expect("plan");
    assert_eq!(plan.containers[0].run, Some(Duration::from_secs(1)));
    assert_eq!(plan.containers[0].exit_code, 3);
    assert_eq!(plan.containers[1].run, Some(Duration::from_millis(250)));
    assert_eq!(plan.containers[1].exit_code, 42);
}

#[test]
fn fail_condition_parses_type_and_reason() {
    let plan = plan_for(&pod(
        &["main"],
        &[(ANN_FAIL_CONDITION, "DisruptionTarget:TerminationByKubelet")],
    ))
    .expect("plan");
    assert_eq!(
        plan.fail_condition,
        Some(("DisruptionTarget".into(), "TerminationByKubelet".into()))
    );
}

#[test]
fn bad_annotations_are_reported_not_panicked() {
    for (k, v) in [
        (ANN_RUN, "soon"),
        (ANN_EXIT_CODE, "x"),
        (ANN_CONTAINERS, "main"),
        (ANN_CONTAINERS, "main=1s:y"),
        (ANN_FAIL_CONDITION, ":Reason"),
    ] {
        let e = plan_for(&pod(&["main"], &[(k, v)])).expect_err(v);
        assert_eq!(e.key, k);
    }
}
