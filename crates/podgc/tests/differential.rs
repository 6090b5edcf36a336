//! The same pod GC scenarios against upstream kube-controller-manager's
//! pod-garbage-collector-controller and against kcm-rs, each on its own
//! control plane; the observable outcomes must be identical. Upstream's
//! 20 s period and 40 s quarantine are constants, so this takes about a
//! minute.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kcm_e2e::history::{PodHistory, Seen};
use kcm_e2e::kubelet::{self, create_bound_pod, simple_pod, taint};
use kcm_e2e::wait::wait_gone;
use kcm_e2e::{ControlPlane, TestNamespace, UpstreamKcm, in_process};
use kcm_features::FeatureGates;
use kcm_runtime::controller::Settings;
use kube::Api;
use kube::api::{DeleteParams, PostParams};

/// What a test can observe of one pod.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Outcome {
    deleted: bool,
    seen_failed: bool,
    /// DisruptionTarget (status, reason, message) if it was ever seen.
    disruption_target: Option<(String, String, String)>,
}

fn outcome(h: &PodHistory, name: &str) -> Outcome {
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

/// Scenarios without the threshold pass: orphans (running and terminal),
/// out-of-service, NotReady without the taint, unscheduled terminating,
/// healthy. Returns the pods that must disappear.
async fn setup_nodes_and_orphans(client: &kube::Client, ns: &str) -> Vec<&'static str> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    kubelet::create_node(client, "doomed", true, vec![])
        .await
        .expect("node");
    kubelet::create_node(client, "healthy", true, vec![])
        .await
        .expect("node");
    kubelet::create_node(
        client,
        "oos",
        false,
        vec![taint(
            "node.kubernetes.io/out-of-service",
            None,
            "NoExecute",
        )],
    )
    .await
    .expect("node");
    kubelet::create_node(client, "notready", false, vec![])
        .await
        .expect("node");
    create_bound_pod(&pods, "orphan-running", "doomed", None)
        .await
        .expect("pod");
    create_bound_pod(&pods, "orphan-succeeded", "doomed", Some(0))
        .await
        .expect("pod");
    create_bound_pod(&pods, "healthy", "healthy", None)
        .await
        .expect("pod");
    create_bound_pod(&pods, "oos-terminating", "oos", None)
        .await
        .expect("pod");
    create_bound_pod(&pods, "notready-terminating", "notready", None)
        .await
        .expect("pod");
    pods.delete("oos-terminating", &DeleteParams::default())
        .await
        .expect("delete");
    pods.delete("notready-terminating", &DeleteParams::default())
        .await
        .expect("delete");
    pods.create(
        &PostParams::default(),
        &simple_pod("unscheduled-terminating", true),
    )
    .await
    .expect("create");
    pods.delete("unscheduled-terminating", &DeleteParams::default())
        .await
        .expect("delete");
    Api::<Node>::all(client.clone())
        .delete("doomed", &DeleteParams::default())
        .await
        .expect("delete node");
    vec!["orphan-running", "orphan-succeeded", "oos-terminating"]
}

/// Four terminated pods a second apart and a running one; threshold 2.
async fn setup_threshold(client: &kube::Client, ns: &str) -> Vec<&'static str> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    kubelet::create_node(client, "n", true, vec![])
        .await
        .expect("node");
    for (i, name) in ["t0", "t1", "t2", "t3"].iter().enumerate() {
        create_bound_pod(&pods, name, "n", Some(i32::try_from(i).unwrap_or(1)))
            .await
            .expect("pod");
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    create_bound_pod(&pods, "running", "n", None)
        .await
        .expect("pod");
    vec!["t0", "t1"]
}

const NAMES_A: &[&str] = &[
    "orphan-running",
    "orphan-succeeded",
    "healthy",
    "oos-terminating",
    "notready-terminating",
    "unscheduled-terminating",
];
const NAMES_B: &[&str] = &["t0", "t1", "t2", "t3", "running"];

async fn run_one(upstream: bool, threshold: i64, scenario_b: bool) -> BTreeMap<String, Outcome> {
    let cp = ControlPlane::start().expect("control plane");
    let client = cp.client().await.expect("client");
    let ns = TestNamespace::create(&client, "diff").await.expect("ns");
    let history = PodHistory::start(&client, &ns.name).await;
    let must_go = if scenario_b {
        setup_threshold(&client, &ns.name).await
    } else {
        setup_nodes_and_orphans(&client, &ns.name).await
    };
    let _upstream = upstream.then(|| {
        UpstreamKcm::start(
            &cp,
            &["pod-garbage-collector-controller"],
            &[&format!("--terminated-pod-gc-threshold={threshold}")],
        )
        .expect("upstream KCM")
    });
    let _ours = if upstream {
        None
    } else {
        let settings = Settings::default().with(kcm_podgc::PodGcSettings {
            terminated_pod_gc_threshold: threshold,
            pod_gc_period: Duration::from_millis(500),
            pod_gc_quarantine: Duration::from_secs(2),
        });
        Some(
            in_process::start(&cp, &[kcm_podgc::SPEC], settings, FeatureGates::default())
                .await
                .expect("kcm-rs pod GC"),
        )
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    for name in must_go {
        wait_gone(&pods, name, Duration::from_secs(120))
            .await
            .unwrap_or_else(|e| panic!("upstream={upstream}: {e}"));
    }
    // Give either side time to do anything more it would do.
    tokio::time::sleep(Duration::from_secs(if upstream { 22 } else { 3 })).await;
    let names = if scenario_b { NAMES_B } else { NAMES_A };
    names
        .iter()
        .map(|n| (n.to_string(), outcome(&history, n)))
        .collect()
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

#[tokio::test]
async fn orphans_out_of_service_and_unscheduled_match_upstream() {
    let (theirs, ours) = tokio::join!(run_one(true, 0, false), run_one(false, 0, false));
    eprintln!("upstream: {theirs:#?}\nkcm-rs: {ours:#?}");
    assert_eq!(ours, theirs);
    assert_eq!(ours["orphan-running"], o(true, true, true));
    assert_eq!(ours["orphan-succeeded"], o(true, false, false));
    assert_eq!(ours["oos-terminating"], o(true, true, false));
    assert_eq!(ours["notready-terminating"], o(false, false, false));
    assert_eq!(ours["unscheduled-terminating"], o(false, true, false));
    assert_eq!(ours["healthy"], o(false, false, false));
}

#[tokio::test]
async fn terminated_threshold_matches_upstream() {
    let (theirs, ours) = tokio::join!(run_one(true, 2, true), run_one(false, 2, true));
    eprintln!("upstream: {theirs:#?}\nkcm-rs: {ours:#?}");
    assert_eq!(ours, theirs);
    assert!(ours["t0"].deleted && ours["t1"].deleted);
    assert!(!ours["t2"].deleted && !ours["t3"].deleted && !ours["running"].deleted);
}
