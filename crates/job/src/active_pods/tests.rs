//! Ported from upstream `TestSortingActivePods` (controller_utils_test.go,
//! v1.34), per-criterion pair tests, and order-law property tests.

use k8s_openapi::api::core::v1::{
    Container, ContainerStatus, Pod, PodCondition, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use proptest::prelude::*;

use super::*;

fn now() -> Timestamp {
    Timestamp::constant(1_700_000_000, 0)
}

/// A month earlier, like upstream's `then`.
fn then() -> Timestamp {
    Timestamp::constant(1_700_000_000 - 30 * 24 * 3600, 0)
}

#[derive(Clone, Debug, Default)]
struct P {
    name: &'static str,
    node: &'static str,
    phase: &'static str,
    /// `Some(time)`: Ready=True with that transition time (None inside = unset).
    ready: Option<Option<Timestamp>>,
    restarts: Vec<i32>,
    /// (name, restart count, restartable)
    init: Vec<(&'static str, i32, bool)>,
    created: Option<Timestamp>,
}

impl P {
    fn pod(&self) -> CachedPod {
        self.full().into()
    }

    fn full(&self) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(self.name.into()),
                creation_timestamp: self.created.map(Time),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: (!self.node.is_empty()).then(|| self.node.to_string()),
                init_containers: Some(
                    self.init
                        .iter()
                        .map(|(n, _, restartable)| Container {
                            name: n.to_string(),
                            restart_policy: restartable.then(|| "Always".to_string()),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: (!self.phase.is_empty()).then(|| self.phase.to_string()),
                conditions: self.ready.map(|t| {
                    vec![PodCondition {
                        type_: "Ready".into(),
                        status: "True".into(),
                        last_transition_time: t.map(Time),
                        ..Default::default()
                    }]
                }),
                container_statuses: Some(
                    self.restarts
                        .iter()
                        .map(|r| ContainerStatus {
                            restart_count: *r,
                            ..Default::default()
                        })
                        .collect(),
                ),
                init_container_statuses: Some(
                    self.init
                        .iter()
                        .map(|(n, r, _)| ContainerStatus {
                            name: n.to_string(),
                            restart_count: *r,
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
        }
    }
}

fn upstream_pods() -> Vec<P> {
    let running = |name, ready: Option<Option<Timestamp>>, restarts: Vec<i32>| P {
        name,
        node: "foo",
        phase: "Running",
        ready,
        restarts,
        ..Default::default()
    };
    vec![
        P {
            name: "unscheduled",
            phase: "Pending",
            ..Default::default()
        },
        P {
            name: "scheduledButPending",
            node: "bar",
            phase: "Pending",
            ..Default::default()
        },
        P {
            name: "unknownPhase",
            node: "foo",
            phase: "Unknown",
            ..Default::default()
        },
        running("runningButNotReady", None, vec![]),
        running("runningNoLastTransitionTime", Some(None), vec![3, 0]),
        running(
            "runningWithLastTransitionTime",
            Some(Some(now())),
            vec![3, 0],
        ),
        running("runningLongerTime", Some(Some(then())), vec![3, 0]),
        P {
            init: vec![("sidecar", 2, true)],
            created: Some(now()),
            ..running(
                "lowerSidecarContainerRestartCount",
                Some(Some(then())),
                vec![2, 1],
            )
        },
        P {
            created: Some(now()),
            ..running("lowerContainerRestartCount", Some(Some(then())), vec![2, 1])
        },
        P {
            created: Some(then()),
            ..running("oldest", Some(Some(then())), vec![2, 1])
        },
    ]
}

fn names(pods: &[&CachedPod]) -> Vec<String> {
    pods.iter().map(|p| p.name().to_string()).collect()
}

#[test]
fn sorting_active_pods_upstream_case() {
    let specs = upstream_pods();
    let want: Vec<String> = specs.iter().map(|p| p.name.to_string()).collect();
    let pods: Vec<CachedPod> = specs.iter().map(P::pod).collect();
    // Deterministic "shuffles": every rotation, forwards and reversed.
    for rot in 0..pods.len() {
        for rev in [false, true] {
            let mut refs: Vec<&CachedPod> = pods.iter().collect();
            refs.rotate_left(rot);
            if rev {
                refs.reverse();
            }
            sort_active_pods(&mut refs);
            assert_eq!(names(&refs), want, "rotation {rot}, reversed {rev}");
        }
    }
}

/// A scheduled, Running, Ready pod with one restart: what the
/// one-criterion cases below vary.
fn running() -> P {
    P {
        name: "x",
        node: "n",
        phase: "Running",
        ready: Some(Some(then())),
        restarts: vec![1],
        created: Some(then()),
        ..Default::default()
    }
}

#[test]
fn each_criterion_decides() {
    let base = running();
    // (name, first, second): `first` must sort strictly before `second`.
    let cases: Vec<(&str, P, P)> = vec![
        (
            "unscheduled first",
            P {
                node: "",
                phase: "Running",
                ..base.clone()
            },
            P {
                phase: "Pending",
                ready: None,
                ..base.clone()
            },
        ),
        (
            "different nodes do not decide",
            P {
                node: "a",
                restarts: vec![5],
                ..base.clone()
            },
            P {
                node: "b",
                ..base.clone()
            },
        ),
        (
            "Pending before Unknown",
            P {
                phase: "Pending",
                ..base.clone()
            },
            P {
                phase: "Unknown",
                ..base.clone()
            },
        ),
        (
            "Unknown before Running",
            P {
                phase: "Unknown",
                ..base.clone()
            },
            base.clone(),
        ),
        (
            "unset phase ranks as Pending",
            P {
                phase: "",
                ..base.clone()
            },
            P {
                phase: "Unknown",
                ..base.clone()
            },
        ),
        (
            "Succeeded ranks as Pending",
            P {
                phase: "Succeeded",
                ..base.clone()
            },
            P {
                phase: "Unknown",
                ..base.clone()
            },
        ),
        (
            "not ready before ready",
            P {
                ready: None,
                restarts: vec![0],
                ..base.clone()
            },
            P {
                restarts: vec![9],
                ..base.clone()
            },
        ),
        (
            "ready more recently first",
            P {
                ready: Some(Some(now())),
                restarts: vec![0],
                ..base.clone()
            },
            base.clone(),
        ),
        (
            "missing ready time counts as most recent",
            P {
                ready: Some(None),
                ..base.clone()
            },
            P {
                ready: Some(Some(now())),
                ..base.clone()
            },
        ),
        (
            "more restarts first",
            P {
                restarts: vec![0, 4],
                ..base.clone()
            },
            P {
                restarts: vec![3, 3],
                ..base.clone()
            },
        ),
        (
            "regular restarts beat sidecar restarts",
            P {
                restarts: vec![2],
                ..base.clone()
            },
            P {
                init: vec![("s", 50, true)],
                ..base.clone()
            },
        ),
        (
            "sidecar restarts break regular ties",
            P {
                init: vec![("s", 2, true)],
                ..base.clone()
            },
            P {
                init: vec![("s", 1, true)],
                ..base.clone()
            },
        ),
        (
            "newer first",
            P {
                created: Some(now()),
                ..base.clone()
            },
            base.clone(),
        ),
        (
            "missing creation time counts as newest",
            P {
                created: None,
                ..base.clone()
            },
            P {
                created: Some(now()),
                ..base.clone()
            },
        ),
    ];
    for (name, first, second) in cases {
        let (a, b) = (first.pod(), second.pod());
        assert_eq!(active_pods_order(&a, &b), Ordering::Less, "{name}");
        assert_eq!(
            active_pods_order(&b, &a),
            Ordering::Greater,
            "{name} (reversed)"
        );
    }
}

#[test]
fn ties_are_equal() {
    let base = running();
    let cases: Vec<(&str, P, P)> = vec![
        ("identical", base.clone(), base.clone()),
        (
            "names and nodes do not matter",
            P {
                name: "y",
                node: "m",
                ..base.clone()
            },
            base.clone(),
        ),
        (
            "ready times ignored unless both ready",
            P {
                ready: None,
                ..base.clone()
            },
            P {
                ready: None,
                name: "z",
                ..base.clone()
            },
        ),
        (
            "non-restartable init restarts ignored",
            P {
                init: vec![("setup", 7, false)],
                ..base.clone()
            },
            base.clone(),
        ),
        (
            "negative restarts count as zero",
            P {
                restarts: vec![-5],
                ..base.clone()
            },
            P {
                restarts: vec![0],
                ..base.clone()
            },
        ),
        (
            "both missing ready time",
            P {
                ready: Some(None),
                ..base.clone()
            },
            P {
                ready: Some(None),
                ..base.clone()
            },
        ),
        ("empty pods", P::default(), P::default()),
    ];
    for (name, a, b) in cases {
        assert_eq!(
            active_pods_order(&a.pod(), &b.pod()),
            Ordering::Equal,
            "{name}"
        );
    }
    assert_eq!(
        active_pods_order(&CachedPod::default(), &CachedPod::default()),
        Ordering::Equal
    );
}

fn arb_p() -> impl Strategy<Value = P> {
    let time = prop::option::of((0i64..4).prop_map(|d| Timestamp::constant(1_700_000_000 + d, 0)));
    (
        prop::sample::select(vec!["", "a", "b"]),
        prop::sample::select(vec!["", "Pending", "Unknown", "Running", "Failed"]),
        prop::option::of(time.clone()),
        prop::collection::vec(-1i32..3, 0..3),
        prop::collection::vec(
            (prop::sample::select(vec!["s", "t"]), 0i32..3, any::<bool>()),
            0..2,
        ),
        time,
    )
        .prop_map(|(node, phase, ready, restarts, init, created)| P {
            name: "p",
            node,
            phase,
            ready,
            restarts,
            init,
            created,
        })
}

proptest! {
    #[test]
    fn order_is_antisymmetric_and_reflexive(a in arb_p(), b in arb_p()) {
        let (pa, pb) = (a.pod(), b.pod());
        prop_assert_eq!(active_pods_order(&pa, &pb), active_pods_order(&pb, &pa).reverse());
        prop_assert_eq!(active_pods_order(&pa, &pa), Ordering::Equal);
    }

    #[test]
    fn order_is_transitive(a in arb_p(), b in arb_p(), c in arb_p()) {
        let (pa, pb, pc) = (a.pod(), b.pod(), c.pod());
        if active_pods_order(&pa, &pb) != Ordering::Greater && active_pods_order(&pb, &pc) != Ordering::Greater {
            prop_assert_ne!(active_pods_order(&pa, &pc), Ordering::Greater);
        }
    }

    #[test]
    fn sorting_yields_a_sorted_list(ps in prop::collection::vec(arb_p(), 0..8)) {
        let pods: Vec<CachedPod> = ps.iter().map(P::pod).collect();
        let mut refs: Vec<&CachedPod> = pods.iter().collect();
        sort_active_pods(&mut refs);
        for w in refs.windows(2) {
            prop_assert_ne!(active_pods_order(w[0], w[1]), Ordering::Greater);
        }
    }
}
