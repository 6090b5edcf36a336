use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, ReplicaSet, ReplicaSetSpec, StatefulSet, StatefulSetSpec,
};
use k8s_openapi::api::core::v1::{ReplicationController, ReplicationControllerSpec};
use k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use k8s_openapi::api::core::v1::Pod;

use super::*;
use crate::owners::{OwnerCache, builtin_scale};

fn owner(api_version: &str, kind: &str, name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: name.into(),
        uid: uid.into(),
        controller: Some(true),
        ..Default::default()
    }
}

fn pod(name: &str, owner: Option<OwnerReference>) -> CachedPod {
    let mut p = Pod::default();
    p.metadata.name = Some(name.into());
    p.metadata.namespace = Some("ns".into());
    p.metadata.owner_references = owner.map(|o| vec![o]);
    p.into()
}

/// Answers by owner UID; unknown UIDs are "not mine".
struct Fake(HashMap<String, Result<Option<ControllerScale>, ExpectedError>>);

impl Finder for Fake {
    async fn find(
        &self,
        owner: &OwnerReference,
        _ns: &str,
    ) -> Result<Option<ControllerScale>, ExpectedError> {
        self.0.get(&owner.uid).cloned().unwrap_or(Ok(None))
    }
}

fn fake(entries: &[(&str, i32)]) -> Fake {
    Fake(
        entries
            .iter()
            .map(|(uid, n)| {
                (
                    uid.to_string(),
                    Ok(Some(ControllerScale {
                        uid: uid.to_string(),
                        replicas: *n,
                    })),
                )
            })
            .collect(),
    )
}

fn spec(min: Option<IntOrString>, max: Option<IntOrString>) -> PodDisruptionBudgetSpec {
    PodDisruptionBudgetSpec {
        min_available: min,
        max_unavailable: max,
        ..Default::default()
    }
}

fn pct(s: &str) -> IntOrString {
    IntOrString::String(s.into())
}

async fn count(
    s: PodDisruptionBudgetSpec,
    pods: &[CachedPod],
    f: &Fake,
) -> Result<Expected, ExpectedError> {
    let refs: Vec<&CachedPod> = pods.iter().collect();
    let scales = if needs_scale(&s) {
        Scales::fetch(&refs, f).await
    } else {
        Scales::default()
    };
    expected_pod_count(&s, &refs, &scales)
}

fn rs_pods(n: usize, uid: &str) -> Vec<CachedPod> {
    (0..n)
        .map(|i| {
            pod(
                &format!("p{i}"),
                Some(owner("apps/v1", "ReplicaSet", "rs", uid)),
            )
        })
        .collect()
}

#[test]
fn scaled_values_round_up() {
    assert_eq!(scaled_value(&IntOrString::Int(3), 10), Ok(3));
    assert_eq!(scaled_value(&pct("25%"), 3), Ok(1)); // ceil(0.75)
    assert_eq!(scaled_value(&pct("50%"), 3), Ok(2)); // ceil(1.5)
    assert_eq!(scaled_value(&pct("0%"), 7), Ok(0));
    assert_eq!(scaled_value(&pct("100%"), 7), Ok(7));
    assert_eq!(scaled_value(&pct("10%"), 0), Ok(0));
    assert_eq!(scaled_value(&pct("-50%"), 3), Ok(-1)); // ceil(-1.5)
    assert_eq!(
        scaled_value(&pct("abc"), 3).map_err(|e| e.to_string()),
        Err("invalid value for IntOrString: invalid type: string is not a percentage".into())
    );
    assert_eq!(
        scaled_value(&pct("x%"), 3).map_err(|e| e.to_string()),
        Err("invalid value for IntOrString: invalid value \"x%\": strconv.Atoi: parsing \"x\": invalid syntax".into())
    );
}

#[tokio::test]
async fn integer_min_available_counts_selected_pods_without_owner_lookups() {
    // No finder answers, and one pod is unmanaged: no error, no event.
    let mut pods = rs_pods(4, "unknown");
    pods.push(pod("bare", None));
    let e = count(spec(Some(IntOrString::Int(2)), None), &pods, &fake(&[])).await;
    assert_eq!(
        e,
        Ok(Expected {
            expected_count: 5,
            desired_healthy: 2,
            unmanaged: vec![]
        })
    );
    // Zero and negative are taken as they are.
    let e = count(spec(Some(IntOrString::Int(0)), None), &pods, &fake(&[])).await;
    assert_eq!(e.map(|e| e.desired_healthy), Ok(0));
    let e = count(spec(Some(IntOrString::Int(-1)), None), &pods, &fake(&[])).await;
    assert_eq!(e.map(|e| e.desired_healthy), Ok(-1));
}

#[tokio::test]
async fn percentages_and_max_unavailable_use_the_owners_scale() {
    let pods = rs_pods(2, "rs1"); // 2 pods exist, the owner wants 3
    let f = fake(&[("rs1", 3)]);
    let e = count(spec(None, Some(pct("25%"))), &pods, &f)
        .await
        .expect("ok");
    assert_eq!((e.expected_count, e.desired_healthy), (3, 2));
    let e = count(spec(Some(pct("50%")), None), &pods, &f)
        .await
        .expect("ok");
    assert_eq!((e.expected_count, e.desired_healthy), (3, 2));
    let e = count(spec(None, Some(IntOrString::Int(1))), &pods, &f)
        .await
        .expect("ok");
    assert_eq!((e.expected_count, e.desired_healthy), (3, 2));
    // maxUnavailable above the scale clamps desiredHealthy at 0.
    let e = count(spec(None, Some(IntOrString::Int(5))), &pods, &f)
        .await
        .expect("ok");
    assert_eq!((e.expected_count, e.desired_healthy), (3, 0));
    let e = count(spec(None, Some(pct("0%"))), &pods, &f)
        .await
        .expect("ok");
    assert_eq!((e.expected_count, e.desired_healthy), (3, 3));
    // maxUnavailable wins over minAvailable when both are set.
    let e = count(
        spec(Some(IntOrString::Int(1)), Some(IntOrString::Int(0))),
        &pods,
        &f,
    )
    .await
    .expect("ok");
    assert_eq!((e.expected_count, e.desired_healthy), (3, 3));
    // Neither set: zeros.
    let e = count(spec(None, None), &pods, &f).await.expect("ok");
    assert_eq!(e, Expected::default());
}

#[tokio::test]
async fn distinct_controllers_are_summed_once() {
    let mut pods = rs_pods(3, "a");
    pods.extend((0..2).map(|i| {
        pod(
            &format!("q{i}"),
            Some(owner("apps/v1", "StatefulSet", "s", "b")),
        )
    }));
    let e = count(
        spec(None, Some(IntOrString::Int(1))),
        &pods,
        &fake(&[("a", 3), ("b", 2)]),
    )
    .await
    .expect("ok");
    assert_eq!((e.expected_count, e.desired_healthy), (5, 4));
}

#[tokio::test]
async fn unmanaged_pods_are_reported_and_not_counted() {
    let mut pods = rs_pods(1, "a");
    pods.push(pod("bare", None));
    let e = count(spec(Some(pct("100%")), None), &pods, &fake(&[("a", 2)]))
        .await
        .expect("ok");
    assert_eq!(e.expected_count, 2);
    assert_eq!(e.unmanaged, vec!["bare".to_string()]);
    // Only unmanaged pods: nothing expected.
    let e = count(
        spec(None, Some(IntOrString::Int(1))),
        &[pod("bare", None)],
        &fake(&[]),
    )
    .await
    .expect("ok");
    assert_eq!((e.expected_count, e.desired_healthy), (0, 0));
}

#[tokio::test]
async fn owners_nobody_claims_or_without_scale_fail() {
    let pods = vec![pod("j", Some(owner("batch/v1", "Job", "job", "j1")))];
    let e = count(spec(None, Some(IntOrString::Int(1))), &pods, &fake(&[])).await;
    assert_eq!(
        e.map_err(|e| e.to_string()),
        Err("found no controllers for pod \"j\"".into())
    );
    let f = Fake(
        [(
            "j1".to_string(),
            Err(ExpectedError::Lookup(
                "jobs.batch does not implement the scale subresource".into(),
            )),
        )]
        .into(),
    );
    let e = count(spec(Some(pct("50%")), None), &pods, &f).await;
    assert_eq!(
        e.map_err(|e| e.to_string()),
        Err("jobs.batch does not implement the scale subresource".into())
    );
}

#[test]
fn group_versions_parse_like_go() {
    assert_eq!(parse_group_version("v1"), Ok(("", "v1")));
    assert_eq!(parse_group_version("apps/v1"), Ok(("apps", "v1")));
    assert_eq!(parse_group_version(""), Ok(("", "")));
    assert!(parse_group_version("a/b/c").is_err());
}

#[derive(Default)]
struct Cache {
    rc: HashMap<String, Arc<ReplicationController>>,
    rs: HashMap<String, Arc<ReplicaSet>>,
    dep: HashMap<String, Arc<Deployment>>,
    sts: HashMap<String, Arc<StatefulSet>>,
}

impl OwnerCache for Cache {
    fn replication_controller(&self, _: &str, n: &str) -> Option<Arc<ReplicationController>> {
        self.rc.get(n).cloned()
    }
    fn replica_set(&self, _: &str, n: &str) -> Option<Arc<ReplicaSet>> {
        self.rs.get(n).cloned()
    }
    fn deployment(&self, _: &str, n: &str) -> Option<Arc<Deployment>> {
        self.dep.get(n).cloned()
    }
    fn stateful_set(&self, _: &str, n: &str) -> Option<Arc<StatefulSet>> {
        self.sts.get(n).cloned()
    }
}

fn meta(name: &str, uid: &str, owner: Option<OwnerReference>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        uid: Some(uid.into()),
        owner_references: owner.map(|o| vec![o]),
        ..Default::default()
    }
}

fn cache() -> Cache {
    let mut c = Cache::default();
    let rs = |name: &str, uid: &str, n: i32, o: Option<OwnerReference>| {
        Arc::new(ReplicaSet {
            metadata: meta(name, uid, o),
            spec: ReplicaSetSpec {
                replicas: Some(n),
                ..Default::default()
            },
            ..Default::default()
        })
    };
    c.rs.insert("plain".into(), rs("plain", "rs-plain", 4, None));
    c.rs.insert(
        "of-dep".into(),
        rs(
            "of-dep",
            "rs-dep",
            9,
            Some(owner("apps/v1", "Deployment", "d", "dep-uid")),
        ),
    );
    c.rs.insert(
        "orphaned".into(),
        rs(
            "orphaned",
            "rs-orph",
            2,
            Some(owner("apps/v1", "Deployment", "gone", "gone-uid")),
        ),
    );
    c.dep.insert(
        "d".into(),
        Arc::new(Deployment {
            metadata: meta("d", "dep-uid", None),
            spec: DeploymentSpec {
                replicas: Some(3),
                ..Default::default()
            },
            ..Default::default()
        }),
    );
    c.sts.insert(
        "s".into(),
        Arc::new(StatefulSet {
            metadata: meta("s", "sts-uid", None),
            spec: StatefulSetSpec {
                replicas: Some(5),
                ..Default::default()
            },
            ..Default::default()
        }),
    );
    c.rc.insert(
        "r".into(),
        Arc::new(ReplicationController {
            metadata: meta("r", "rc-uid", None),
            spec: Some(ReplicationControllerSpec {
                replicas: Some(6),
                ..Default::default()
            }),
            ..Default::default()
        }),
    );
    c
}

#[test]
fn builtin_finders() {
    let c = cache();
    let s = |o: OwnerReference| builtin_scale(&o, "ns", &c).map(|s| s.map(|s| (s.uid, s.replicas)));
    assert_eq!(
        s(owner("apps/v1", "ReplicaSet", "plain", "rs-plain")),
        Ok(Some(("rs-plain".into(), 4)))
    );
    // A Deployment's ReplicaSet counts as the Deployment.
    assert_eq!(
        s(owner("apps/v1", "ReplicaSet", "of-dep", "rs-dep")),
        Ok(Some(("dep-uid".into(), 3)))
    );
    // ReplicaSet whose Deployment is gone: no built-in finder claims it
    // (the generic scale finder then reads the ReplicaSet's scale).
    assert_eq!(
        s(owner("apps/v1", "ReplicaSet", "orphaned", "rs-orph")),
        Ok(None)
    );
    assert_eq!(
        s(owner("apps/v1", "StatefulSet", "s", "sts-uid")),
        Ok(Some(("sts-uid".into(), 5)))
    );
    assert_eq!(
        s(owner("v1", "ReplicationController", "r", "rc-uid")),
        Ok(Some(("rc-uid".into(), 6)))
    );
    // UID mismatch, wrong group, unknown kind: not mine.
    assert_eq!(s(owner("apps/v1", "StatefulSet", "s", "other")), Ok(None));
    assert_eq!(
        s(owner("example.com/v1", "ReplicaSet", "plain", "rs-plain")),
        Ok(None)
    );
    assert_eq!(
        s(owner(
            "extensions/v1beta1",
            "ReplicaSet",
            "plain",
            "rs-plain"
        )),
        Ok(Some(("rs-plain".into(), 4)))
    );
    assert_eq!(s(owner("batch/v1", "Job", "j", "j")), Ok(None));
    assert!(s(owner("a/b/c", "ReplicaSet", "plain", "rs-plain")).is_err());
}
