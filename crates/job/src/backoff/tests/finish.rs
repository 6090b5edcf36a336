//! Finish times, record evolution and the store.

use super::*;

// ------------------------------------------------------------ finished_time

#[derive(Default)]
struct FinishCase {
    name: &'static str,
    containers: Vec<ContainerStatus>,
    init: Vec<ContainerStatus>,
    sidecars: Vec<&'static str>,
    plain_init: Vec<&'static str>,
    conditions: Vec<PodCondition>,
    deletion: Option<Timestamp>,
    grace: Option<i64>,
    creation: Option<Timestamp>,
    want: Timestamp,
}

impl FinishCase {
    fn pod(&self) -> CachedPod {
        self.full().into()
    }

    fn full(&self) -> Pod {
        let init_containers: Vec<Container> = self
            .sidecars
            .iter()
            .map(|n| Container {
                name: n.to_string(),
                restart_policy: Some("Always".into()),
                ..Default::default()
            })
            .chain(self.plain_init.iter().map(|n| Container {
                name: n.to_string(),
                ..Default::default()
            }))
            .collect();
        Pod {
            metadata: ObjectMeta {
                deletion_timestamp: self.deletion.map(Time),
                deletion_grace_period_seconds: self.grace,
                creation_timestamp: self.creation.map(Time),
                ..Default::default()
            },
            spec: Some(PodSpec {
                init_containers: Some(init_containers),
                ..Default::default()
            }),
            status: Some(PodStatus {
                container_statuses: Some(self.containers.clone()),
                init_container_statuses: Some(self.init.clone()),
                conditions: Some(self.conditions.clone()),
                ..Default::default()
            }),
        }
    }
}

#[test]
fn finished_time_table() {
    let s = |n: i64| at(n * 1000);
    let cases = vec![
        // --- ported from upstream TestGetFinishedTime ---
        FinishCase {
            name: "multiple containers, all terminated: latest",
            containers: vec![
                cs("a", Some(s(-1))),
                cs("b", Some(s(0))),
                cs("c", Some(s(-2))),
            ],
            want: t0(),
            ..Default::default()
        },
        FinishCase {
            name: "one container running: fall back to deletionTimestamp",
            containers: vec![cs("a", Some(s(-1))), cs("b", None), cs("c", Some(s(-2)))],
            deletion: Some(t0()),
            want: t0(),
            ..Default::default()
        },
        FinishCase {
            name: "fallback to deletionTimestamp",
            containers: vec![cs("a", None)],
            deletion: Some(t0()),
            want: t0(),
            ..Default::default()
        },
        FinishCase {
            name: "fallback to deletionTimestamp minus grace period",
            containers: vec![cs("a", None)],
            deletion: Some(t0()),
            grace: Some(30),
            want: s(-30),
            ..Default::default()
        },
        FinishCase {
            name: "fallback to Ready=False lastTransitionTime",
            containers: vec![term_no_time("a")],
            conditions: vec![ready("False", Some(t0()))],
            want: t0(),
            ..Default::default()
        },
        FinishCase {
            name: "Ready=True is skipped",
            containers: vec![term_no_time("a")],
            conditions: vec![ready("True", Some(s(-30)))],
            deletion: Some(t0()),
            want: t0(),
            ..Default::default()
        },
        FinishCase {
            name: "fallback to creationTimestamp",
            containers: vec![term_no_time("a")],
            creation: Some(t0()),
            want: t0(),
            ..Default::default()
        },
        FinishCase {
            name: "sidecar finishes after regular containers",
            containers: vec![cs("main", Some(s(-1)))],
            init: vec![cs("sidecar", Some(s(0)))],
            sidecars: vec!["sidecar"],
            want: t0(),
            ..Default::default()
        },
        // --- additional edge cases ---
        FinishCase {
            name: "regular container later than sidecar",
            containers: vec![cs("main", Some(s(5)))],
            init: vec![cs("sidecar", Some(s(0)))],
            sidecars: vec!["sidecar"],
            want: s(5),
            ..Default::default()
        },
        FinishCase {
            name: "non-restartable init containers are ignored",
            containers: vec![cs("main", Some(s(-1)))],
            init: vec![cs("setup", Some(s(100))), cs("setup2", None)],
            plain_init: vec!["setup", "setup2"],
            want: s(-1),
            ..Default::default()
        },
        FinishCase {
            name: "running sidecar: fall back to Ready=False",
            containers: vec![cs("main", Some(s(-1)))],
            init: vec![cs("sidecar", None)],
            sidecars: vec!["sidecar"],
            conditions: vec![ready("False", Some(s(7)))],
            want: s(7),
            ..Default::default()
        },
        FinishCase {
            name: "quirk: regular running but sidecar terminated uses the sidecar time",
            containers: vec![cs("main", None)],
            init: vec![cs("sidecar", Some(s(3)))],
            sidecars: vec!["sidecar"],
            conditions: vec![ready("False", Some(s(7)))],
            want: s(3),
            ..Default::default()
        },
        FinishCase {
            name: "no container statuses: Ready=False",
            conditions: vec![ready("False", Some(s(2)))],
            creation: Some(s(-100)),
            want: s(2),
            ..Default::default()
        },
        FinishCase {
            name: "Ready=False without time is skipped",
            conditions: vec![ready("False", None)],
            creation: Some(s(-100)),
            want: s(-100),
            ..Default::default()
        },
        FinishCase {
            name: "Ready=False at Go zero time is skipped",
            conditions: vec![ready("False", Some(GO_ZERO_TIME))],
            creation: Some(s(-100)),
            want: s(-100),
            ..Default::default()
        },
        FinishCase {
            name: "terminated at Go zero time counts as unfinished",
            containers: vec![cs("a", Some(GO_ZERO_TIME))],
            creation: Some(s(-100)),
            want: s(-100),
            ..Default::default()
        },
        FinishCase {
            name: "Ready=False wins over deletion",
            conditions: vec![ready("False", Some(s(2)))],
            deletion: Some(s(50)),
            want: s(2),
            ..Default::default()
        },
        FinishCase {
            name: "nothing at all: Go zero time",
            want: GO_ZERO_TIME,
            ..Default::default()
        },
    ];
    for c in cases {
        assert_eq!(finished_time(&c.pod()), c.want, "{}", c.name);
    }
    assert_eq!(finished_time(&CachedPod::default()), GO_ZERO_TIME);
}

// ------------------------------------------------------- new_backoff_record

#[test]
fn new_backoff_record_table() {
    struct Case {
        name: &'static str,
        stored: Option<BackoffRecord>,
        succeeded: Vec<i64>,
        failed: Vec<i64>,
        want: BackoffRecord,
    }
    let rec = |n, t: Option<i64>| BackoffRecord {
        failures_after_last_success: n,
        last_failure_time: t.map(at),
    };
    let cases = vec![
        // --- ported from upstream TestNewBackoffRecord (offsets in ms) ---
        Case {
            name: "empty store, one failure",
            stored: None,
            succeeded: vec![],
            failed: vec![0],
            want: rec(1, Some(0)),
        },
        Case {
            name: "empty store, two failures",
            stored: None,
            succeeded: vec![],
            failed: vec![0, -1],
            want: rec(2, Some(0)),
        },
        Case {
            name: "two failures followed by success",
            stored: None,
            succeeded: vec![0],
            failed: vec![-2, -1],
            want: rec(0, None),
        },
        Case {
            name: "two failures, one success, two more failures",
            stored: None,
            succeeded: vec![-2],
            failed: vec![0, -4, -3, -1],
            want: rec(2, Some(0)),
        },
        Case {
            name: "stored count 2 and one new failure",
            stored: Some(rec(2, None)),
            succeeded: vec![],
            failed: vec![0],
            want: rec(3, Some(0)),
        },
        Case {
            name: "success and failure at the same time",
            stored: None,
            succeeded: vec![0],
            failed: vec![0],
            want: rec(0, None),
        },
        Case {
            name: "no new pods",
            stored: None,
            succeeded: vec![],
            failed: vec![],
            want: rec(0, None),
        },
        Case {
            name: "one success",
            stored: None,
            succeeded: vec![0],
            failed: vec![],
            want: rec(0, None),
        },
        // --- additional ---
        Case {
            name: "no new pods keeps the stored record",
            stored: Some(rec(4, Some(-9))),
            succeeded: vec![],
            failed: vec![],
            want: rec(4, Some(-9)),
        },
        Case {
            name: "success resets a stored record",
            stored: Some(rec(4, Some(-9))),
            succeeded: vec![5],
            failed: vec![],
            want: rec(0, None),
        },
        Case {
            name: "success resets the stored count; only later failures count",
            stored: Some(rec(4, Some(-9))),
            succeeded: vec![10, 20],
            failed: vec![15, 30, 25],
            want: rec(2, Some(30)),
        },
        Case {
            name: "stored failures accumulate",
            stored: Some(rec(4, Some(-9))),
            succeeded: vec![],
            failed: vec![-20, -30],
            want: rec(6, Some(-20)),
        },
        Case {
            name: "failures all before the success",
            stored: Some(rec(1, Some(-50))),
            succeeded: vec![0],
            failed: vec![-1, -2],
            want: rec(0, None),
        },
        Case {
            name: "saturates at i32::MAX",
            stored: Some(rec(i32::MAX, Some(0))),
            succeeded: vec![],
            failed: vec![1],
            want: rec(i32::MAX, Some(1)),
        },
    ];
    for c in cases {
        let succeeded: Vec<CachedPod> = c
            .succeeded
            .iter()
            .map(|ms| pod_finished_at("Succeeded", at(*ms)))
            .collect();
        let failed: Vec<CachedPod> = c
            .failed
            .iter()
            .map(|ms| pod_finished_at("Failed", at(*ms)))
            .collect();
        let s: Vec<&CachedPod> = succeeded.iter().collect();
        let f: Vec<&CachedPod> = failed.iter().collect();
        assert_eq!(
            new_backoff_record(c.stored.as_ref(), &s, &f),
            c.want,
            "{}",
            c.name
        );
        // The store variant starts from the stored record and does not save.
        let store = BackoffStore::new();
        if let Some(r) = c.stored {
            store.update("ns/job", r);
        }
        assert_eq!(
            store.new_record("ns/job", &s, &f),
            c.want,
            "{} (store)",
            c.name
        );
        assert_eq!(
            store.get("ns/job"),
            c.stored,
            "{} (store unchanged)",
            c.name
        );
    }
}

#[test]
fn backoff_store_get_update_remove() {
    let store = BackoffStore::new();
    assert_eq!(store.get("a/b"), None);
    let r = BackoffRecord {
        failures_after_last_success: 3,
        last_failure_time: Some(t0()),
    };
    store.update("a/b", r);
    assert_eq!(store.get("a/b"), Some(r));
    assert_eq!(store.get("a/c"), None);
    let r2 = BackoffRecord::default();
    store.update("a/b", r2);
    assert_eq!(store.get("a/b"), Some(r2));
    store.remove("a/b");
    assert_eq!(store.get("a/b"), None);
    store.remove("a/b"); // removing a missing key is fine
}
