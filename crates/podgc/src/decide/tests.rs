use k8s_openapi::api::core::v1::{
    NodeCondition, NodeSpec, NodeStatus, Pod, PodSpec, PodStatus, Taint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::*;

fn ts(s: i64) -> Timestamp {
    Timestamp::from_second(s).expect("ts")
}

fn pod(name: &str, phase: &str, created: i64, node: &str) -> Arc<CachedPod> {
    Arc::new(full(name, phase, created, node).into())
}

/// The API pod [`pod`] caches.
fn full(name: &str, phase: &str, created: i64, node: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            uid: Some(format!("uid-{name}")),
            generation: Some(3),
            creation_timestamp: Some(Time(ts(created))),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: (!node.is_empty()).then(|| node.to_string()),
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: (!phase.is_empty()).then(|| phase.to_string()),
            ..Default::default()
        }),
    }
}

fn deleting(mut p: Pod) -> Arc<CachedPod> {
    p.metadata.deletion_timestamp = Some(Time(ts(1)));
    Arc::new(p.into())
}

fn evicted(mut p: Pod) -> Arc<CachedPod> {
    if let Some(s) = p.status.as_mut() {
        s.reason = Some("Evicted".into());
    }
    Arc::new(p.into())
}

fn node(name: &str, ready: bool, taints: &[&str]) -> Arc<Node> {
    Arc::new(Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: Some(
                taints
                    .iter()
                    .map(|k| Taint {
                        key: k.to_string(),
                        effect: "NoExecute".into(),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    })
}

const CFG: Config = Config {
    terminated_pod_threshold: 2,
    disruption_conditions: true,
};

fn names(c: &[Collect]) -> Vec<&str> {
    c.iter().map(|c| c.name.as_str()).collect()
}

#[test]
fn terminated_over_threshold_evicted_first_then_oldest_then_name() {
    let pods = vec![
        pod("new", "Succeeded", 30, "n"),
        pod("b-old", "Failed", 10, "n"),
        pod("a-old", "Succeeded", 10, "n"),
        evicted(full("evicted", "Failed", 99, "n")),
        pod("running", "Running", 1, "n"),
        pod("pending", "Pending", 1, "n"),
        pod("unknown", "Unknown", 1, "n"),
        pod("no-phase", "", 50, "n"),
    ];
    // 5 terminated (no-phase counts), threshold 2: remove 3.
    let plan = decide(&pods, &[node("n", true, &[])], ts(100), CFG);
    assert_eq!(names(&plan.terminated), vec!["evicted", "a-old", "b-old"]);
    assert!(
        plan.terminated
            .iter()
            .all(|c| c.reason == Reason::Terminated)
    );
    // Already terminal: no status patch.
    assert!(plan.terminated.iter().all(|c| c.status_patch.is_none()));
}

#[test]
fn threshold_zero_or_not_exceeded_collects_nothing() {
    let pods = vec![pod("a", "Succeeded", 1, "n"), pod("b", "Failed", 2, "n")];
    let nodes = [node("n", true, &[])];
    assert!(decide(&pods, &nodes, ts(9), CFG).terminated.is_empty());
    let off = Config {
        terminated_pod_threshold: 0,
        ..CFG
    };
    assert!(decide(&pods, &nodes, ts(9), off).terminated.is_empty());
    let one = Config {
        terminated_pod_threshold: 1,
        ..CFG
    };
    assert_eq!(
        names(&decide(&pods, &nodes, ts(9), one).terminated),
        vec!["a"]
    );
}

#[test]
fn out_of_service_needs_deleting_pod_not_ready_node_and_the_taint() {
    let pods = vec![
        deleting(full("oos", "Running", 2, "down")),
        deleting(full("oos-old", "Running", 1, "down")),
        pod("not-deleting", "Running", 1, "down"),
        deleting(full("ready-node", "Running", 1, "up-tainted")),
        deleting(full("no-taint", "Running", 1, "down-plain")),
        deleting(full("unknown-node", "Running", 1, "ghost")),
    ];
    let nodes = [
        node("down", false, &[TAINT_OUT_OF_SERVICE]),
        node("up-tainted", true, &[TAINT_OUT_OF_SERVICE]),
        node("down-plain", false, &["other"]),
    ];
    let plan = decide(&pods, &nodes, ts(9), CFG);
    assert_eq!(names(&plan.out_of_service), vec!["oos-old", "oos"]);
    let patch = plan.out_of_service[0]
        .status_patch
        .as_ref()
        .expect("running pod is patched");
    assert_eq!(patch["status"]["phase"], "Failed");
    assert_eq!(patch["status"]["observedGeneration"], 3);
    assert!(
        patch["status"].get("conditions").is_none(),
        "no condition: {patch}"
    );
}

#[test]
fn missing_nodes_and_orphans_get_disruption_target() {
    let pods = vec![
        pod("orphan", "Running", 1, "gone"),
        pod("done-orphan", "Succeeded", 1, "gone"),
        pod("fine", "Running", 1, "n"),
        pod("unbound", "Pending", 1, ""),
    ];
    let plan = decide(&pods, &[node("n", true, &[])], ts(9), CFG);
    assert_eq!(plan.missing_nodes, BTreeSet::from(["gone".to_string()]));
    let orphans = decide_orphans(&pods, &plan.missing_nodes, ts(9), CFG);
    assert_eq!(names(&orphans), vec!["orphan", "done-orphan"]);
    let patch = orphans[0].status_patch.as_ref().expect("patch");
    assert_eq!(patch["metadata"]["uid"], "uid-orphan");
    let cond = &patch["status"]["conditions"][0];
    assert_eq!(cond["type"], "DisruptionTarget");
    assert_eq!(cond["status"], "True");
    assert_eq!(cond["reason"], "DeletionByPodGC");
    assert_eq!(cond["message"], "PodGC: node no longer exists");
    assert_eq!(cond["observedGeneration"], 3);
    assert!(
        orphans[1].status_patch.is_none(),
        "terminal orphans get no condition"
    );
}

#[test]
fn gate_off_orphans_fail_without_the_condition() {
    let pods = vec![pod("orphan", "Running", 1, "gone")];
    let off = Config {
        disruption_conditions: false,
        ..CFG
    };
    let orphans = decide_orphans(&pods, &BTreeSet::from(["gone".to_string()]), ts(9), off);
    let patch = orphans[0].status_patch.as_ref().expect("patch");
    assert_eq!(patch["status"]["phase"], "Failed");
    assert!(patch["status"].get("conditions").is_none(), "{patch}");
}

#[test]
fn unscheduled_terminating_pods() {
    let pods = vec![
        deleting(full("u", "Pending", 1, "")),
        pod("pending", "Pending", 1, ""),
        deleting(full("bound", "Running", 1, "n")),
    ];
    let plan = decide(&pods, &[node("n", true, &[])], ts(9), CFG);
    assert_eq!(names(&plan.unscheduled), vec!["u"]);
    assert_eq!(plan.unscheduled[0].reason.label(), "unscheduled");
}
