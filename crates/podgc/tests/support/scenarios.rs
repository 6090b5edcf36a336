//! Pod GC scenarios, run against whichever pod GC watches the cluster of
//! `client` (ours or upstream's): each sets up nodes and pods in its
//! namespace and names the pods that must disappear; [`observe`] waits for
//! them and reads every pod's outcome from a watch history; each
//! `expect_*` says what the scenario must show, for both implementations.
//! Pod GC looks at every pod in the cluster, so each run needs a control
//! plane of its own.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kcm_e2e::history::{PodHistory, Seen};
use kcm_e2e::kubelet::{self, create_bound_pod, simple_pod, taint};
use kcm_e2e::wait::wait_gone;
use kube::Api;
use kube::api::{DeleteParams, PostParams};

/// What a test can observe of one pod.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Outcome {
    pub deleted: bool,
    pub seen_failed: bool,
    /// DisruptionTarget (status, reason, message) if it was ever seen.
    pub disruption_target: Option<(String, String, String)>,
}

/// A scenario set up: every pod it made, and those that must go.
pub struct Scenario {
    pub names: &'static [&'static str],
    pub must_go: &'static [&'static str],
}

pub fn outcome(h: &PodHistory, name: &str) -> Outcome {
    let seen = h.of(name);
    let pods: Vec<&Pod> = seen
        .iter()
        .map(|s| match s {
            Seen::Applied(p) | Seen::Deleted(p) => p.as_ref(),
        })
        .collect();
    Outcome {
        deleted: h.deleted(name),
        seen_failed: pods
            .iter()
            .any(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")),
        disruption_target: pods.iter().find_map(|p| {
            let c = p
                .status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == "DisruptionTarget")?;
            Some((
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            ))
        }),
    }
}

/// Waits (up to 2 min each) for the scenario's pods that must go, then
/// `settle` for anything more the controller would do, and reads every
/// pod's outcome.
pub async fn observe(
    client: &kube::Client,
    ns: &str,
    history: &PodHistory,
    scenario: &Scenario,
    settle: Duration,
) -> BTreeMap<String, Outcome> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    for name in scenario.must_go {
        wait_gone(&pods, name, Duration::from_secs(120))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    tokio::time::sleep(settle).await;
    scenario
        .names
        .iter()
        .map(|n| (n.to_string(), outcome(history, n)))
        .collect()
}

/// Orphans (running and terminal) on a deleted node, a terminating pod on
/// an out-of-service node and one on a NotReady node without the taint, an
/// unscheduled terminating pod held by a finalizer, and a healthy pod.
pub async fn orphans_and_terminating(client: &kube::Client, ns: &str) -> Scenario {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let node = |n: &str| format!("{ns}-{n}");
    for (name, ready, taints) in [
        ("doomed", true, vec![]),
        ("healthy", true, vec![]),
        (
            "oos",
            false,
            vec![taint(
                "node.kubernetes.io/out-of-service",
                Some("nodeshutdown"),
                "NoExecute",
            )],
        ),
        ("notready", false, vec![]),
    ] {
        kubelet::create_node(client, &node(name), ready, taints)
            .await
            .expect("node");
    }
    for (pod, on, exit) in [
        ("orphan-running", "doomed", None),
        ("orphan-succeeded", "doomed", Some(0)),
        ("healthy", "healthy", None),
        ("oos-terminating", "oos", None),
        ("notready-terminating", "notready", None),
    ] {
        create_bound_pod(&pods, pod, &node(on), exit)
            .await
            .expect("pod");
    }
    // Graceful deletes of bound pods leave them terminating (no kubelet);
    // an unscheduled pod held by a finalizer stays terminating too.
    pods.create(
        &PostParams::default(),
        &simple_pod("unscheduled-terminating", true),
    )
    .await
    .expect("create");
    for pod in [
        "oos-terminating",
        "notready-terminating",
        "unscheduled-terminating",
    ] {
        pods.delete(pod, &DeleteParams::default())
            .await
            .expect("delete");
    }
    Api::<Node>::all(client.clone())
        .delete(&node("doomed"), &DeleteParams::default())
        .await
        .expect("delete node");
    Scenario {
        names: &[
            "orphan-running",
            "orphan-succeeded",
            "healthy",
            "oos-terminating",
            "notready-terminating",
            "unscheduled-terminating",
        ],
        must_go: &["orphan-running", "orphan-succeeded", "oos-terminating"],
    }
}

fn o(deleted: bool, seen_failed: bool, dt: bool) -> Outcome {
    Outcome {
        deleted,
        seen_failed,
        disruption_target: dt.then(|| {
            (
                "True".to_string(),
                "DeletionByPodGC".to_string(),
                "PodGC: node no longer exists".to_string(),
            )
        }),
    }
}

/// A running orphan fails with `DisruptionTarget` and goes; a terminal one
/// goes without a status change; a terminating pod on an out-of-service
/// node is failed and force-deleted, on a NotReady node without the taint
/// it stays; the unscheduled terminating pod is only failed (its finalizer
/// holds it); the healthy pod stays.
pub fn expect_orphans_and_terminating(out: &BTreeMap<String, Outcome>) {
    assert_eq!(out["orphan-running"], o(true, true, true), "{out:#?}");
    assert_eq!(out["orphan-succeeded"], o(true, false, false), "{out:#?}");
    assert_eq!(out["oos-terminating"], o(true, true, false), "{out:#?}");
    assert_eq!(
        out["notready-terminating"],
        o(false, false, false),
        "{out:#?}"
    );
    assert_eq!(
        out["unscheduled-terminating"],
        o(false, true, false),
        "{out:#?}"
    );
    assert_eq!(out["healthy"], o(false, false, false), "{out:#?}");
}

/// Four terminated pods a second apart and a running one (run with
/// threshold 2).
pub async fn threshold(client: &kube::Client, ns: &str) -> Scenario {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let node = format!("{ns}-n");
    kubelet::create_node(client, &node, true, vec![])
        .await
        .expect("node");
    for (i, name) in ["t0", "t1", "t2", "t3"].iter().enumerate() {
        create_bound_pod(&pods, name, &node, Some(i32::try_from(i).unwrap_or(1)))
            .await
            .expect("pod");
        // Creation timestamps have one-second resolution: space them out.
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    create_bound_pod(&pods, "running", &node, None)
        .await
        .expect("pod");
    Scenario {
        names: &["t0", "t1", "t2", "t3", "running"],
        must_go: &["t0", "t1"],
    }
}

/// The two oldest terminated pods go, the rest stay.
pub fn expect_threshold(out: &BTreeMap<String, Outcome>) {
    let gone: Vec<&str> = out
        .iter()
        .filter(|(_, o)| o.deleted)
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(gone, ["t0", "t1"], "{out:#?}");
}
