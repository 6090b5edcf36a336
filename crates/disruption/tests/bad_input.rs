//! The disruption controller against bad input on the real API server
//! (issue 14, "Bad input"; docs/bad-input.md): PDBs over pods without a
//! controller, over pods whose controller cannot be found or has no scale
//! subresource, and a pod several PDBs select. One shared control plane;
//! each test in its own namespace.

mod support;

use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kcm_e2e::in_process::{self, Detached};
use kcm_e2e::{ControlPlane, TestNamespace};
use kcm_features::FeatureGates;
use kcm_runtime::controller::Settings;
use kube::Api;
use kube::api::{DynamicObject, EvictParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::json;

use support::*;

fn plane() -> &'static ControlPlane {
    static OURS: OnceLock<Detached> = OnceLock::new();
    let cp = kcm_e2e::shared();
    OURS.get_or_init(|| {
        in_process::init_tracing();
        in_process::start_detached(
            cp,
            &[kcm_disruption::SPEC],
            Settings::default(),
            FeatureGates::default(),
        )
        .unwrap_or_else(|e| panic!("starting our disruption controller: {e}"))
    });
    cp
}

async fn setup(prefix: &str) -> (kube::Client, String) {
    let c = plane().client().await.expect("client");
    let ns = TestNamespace::create(&c, prefix).await.expect("ns").name;
    (c, ns)
}

fn condition_message(p: &k8s_openapi::api::policy::v1::PodDisruptionBudget) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "DisruptionAllowed"))
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

async fn wait_event(c: &kube::Client, ns: &str, involved: &str, part: &str) -> String {
    let start = std::time::Instant::now();
    loop {
        let evs = event_reasons(c, ns, involved).await;
        if let Some(e) = evs.iter().find(|e| e.contains(part)) {
            return e.clone();
        }
        assert!(
            start.elapsed() < T,
            "no event with {part:?} about {involved}: {evs:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A healthy PDB next to the bad input still gets its status: the
/// controller keeps working.
async fn control(c: &kube::Client, ns: &str) {
    let rs = replica_set(c, ns, "ctl", "ctl", 2).await;
    ready_pods(c, ns, "ctl", 2, &rs).await;
    pdb(
        c,
        ns,
        "ctl",
        json!({ "maxUnavailable": 1, "selector": sel("ctl") }),
    )
    .await;
    wait_pdb(c, ns, "ctl", "control PDB", |p| counts(p) == (2, 1, 2, 1)).await;
}

/// Bare pods (no controller) under a percentage: upstream warns
/// `UnmanagedPods` (percentages need the controllers' scale) and carries
/// on with what it has (nothing expected: no disruption allowed); under an
/// integer `minAvailable` no scale is needed and nothing is said.
#[tokio::test]
async fn pdb_over_bare_pods() {
    let (c, ns) = setup("pdb-bare").await;
    for i in 0..2 {
        pod(&c, &ns, &format!("bare-{i}"), "bare", None, true).await;
    }
    pdb(
        &c,
        &ns,
        "pct",
        json!({ "minAvailable": "50%", "selector": sel("bare") }),
    )
    .await;
    pdb(
        &c,
        &ns,
        "int",
        json!({ "minAvailable": 1, "selector": sel("bare") }),
    )
    .await;
    let ev = wait_event(&c, &ns, "pct", "UnmanagedPods").await;
    assert!(
        ev.contains("were found to be unmanaged") && ev.starts_with("UnmanagedPods"),
        "{ev}"
    );
    // Expected 0 (no controller), desired ceil(50% of 0) = 0; with nothing
    // expected upstream allows no disruption (the safe side).
    let p = wait_pdb(&c, &ns, "pct", "status despite the warning", |p| {
        counts(p) == (2, 0, 0, 0)
    })
    .await;
    assert_eq!(reason(&p).as_deref(), Some("InsufficientPods"));
    let p = wait_pdb(&c, &ns, "int", "integer minAvailable", |p| {
        counts(p) == (2, 1, 2, 1)
    })
    .await;
    assert_eq!(reason(&p).as_deref(), Some("SufficientPods"));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let int_events = event_reasons(&c, &ns, "int").await;
    assert!(
        !int_events.iter().any(|e| e.starts_with("UnmanagedPods")),
        "{int_events:#?}"
    );
    control(&c, &ns).await;
}

/// Pods whose controller reference dangles (a ReplicaSet that does not
/// exist) or names a custom resource without a scale subresource: the
/// expected count cannot be computed, so the PDB fails safe (0 disruptions
/// allowed, `DisruptionAllowed=False` reason `SyncFailed` with the error)
/// with a `CalculateExpectedPodCountFailed` event, and evictions are
/// refused.
#[tokio::test]
async fn pdb_over_pods_whose_controller_cannot_be_found() {
    let (c, ns) = setup("pdb-dangling").await;
    let dangling = json!({ "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "gone",
        "uid": "00000000-0000-0000-0000-00000000dead", "controller": true });
    pod(&c, &ns, "orphan-0", "dangling", Some(dangling), true).await;
    pdb(
        &c,
        &ns,
        "dangling",
        json!({ "maxUnavailable": 1, "selector": sel("dangling") }),
    )
    .await;

    // A namespaced custom resource without a scale subresource.
    let group = format!("{ns}.example.com");
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": { "name": format!("widgets.{group}") },
        "spec": { "group": group, "scope": "Namespaced",
            "names": { "plural": "widgets", "singular": "widget", "kind": "Widget" },
            "versions": [{ "name": "v1", "served": true, "storage": true,
                "schema": { "openAPIV3Schema": { "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true } } }] }
    }))
    .expect("crd");
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("create CRD");
    kcm_e2e::wait::wait_for(&crds, &format!("widgets.{group}"), T, "Established", |c| {
        c.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            })
    })
    .await
    .expect("CRD established");
    let ar = ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk(&group, "v1", "Widget"),
        "widgets",
    );
    let widgets: Api<DynamicObject> = Api::namespaced_with(c.clone(), &ns, &ar);
    let mut w = DynamicObject::new("w", &ar);
    w.data = json!({ "spec": { "replicas": 2 } });
    let w = widgets
        .create(&PostParams::default(), &w)
        .await
        .expect("widget");
    let owner = json!({ "apiVersion": format!("{group}/v1"), "kind": "Widget", "name": "w",
        "uid": w.metadata.uid, "controller": true });
    pod(&c, &ns, "widget-0", "widget", Some(owner), true).await;
    pdb(
        &c,
        &ns,
        "widget",
        json!({ "maxUnavailable": 1, "selector": sel("widget") }),
    )
    .await;

    for (name, why) in [
        (
            "dangling",
            "found no controllers for pod \"orphan-0\"".to_string(),
        ),
        (
            "widget",
            format!("widgets.{group} does not implement the scale subresource"),
        ),
    ] {
        let p = wait_pdb(&c, &ns, name, "failed safe", |p| {
            reason(p).as_deref() == Some("SyncFailed")
        })
        .await;
        assert_eq!(
            p.status.as_ref().map(|s| s.disruptions_allowed),
            Some(Some(0))
        );
        assert!(condition_message(&p).contains(&why), "{name}: {p:#?}");
        let ev = wait_event(&c, &ns, name, "CalculateExpectedPodCountFailed").await;
        assert!(ev.contains(&why), "{name}: {ev}");
    }
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    let refused = pods.evict("orphan-0", &EvictParams::default()).await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(e)) if e.code == 429),
        "eviction refused while failed safe: {refused:?}"
    );
    control(&c, &ns).await;
    crds.delete(&format!("widgets.{group}"), &Default::default())
        .await
        .ok();
}

/// A pod two PDBs select: a Warning `MultiplePodDisruptionBudgets` on the
/// pod naming the one chosen, and both PDBs still count it.
///
/// The pod exists before the PDBs: a pod event enqueues only the chosen PDB
/// (upstream's `getPdbForPod`), so a PDB whose syncs all ran before the pod
/// reached the cache would not count it until a later PDB event, upstream
/// as here. Once both PDBs have a status, a label change on the running
/// pod raises the Warning.
#[tokio::test]
async fn pod_matching_several_pdbs() {
    let (c, ns) = setup("pdb-multi").await;
    let rs = replica_set(&c, &ns, "rs", "multi", 1).await;
    pod(&c, &ns, "shared", "multi", Some(owner_ref(&rs)), true).await;
    pdb(
        &c,
        &ns,
        "pdb-a",
        json!({ "minAvailable": 1, "selector": sel("multi") }),
    )
    .await;
    pdb(
        &c,
        &ns,
        "pdb-b",
        json!({ "maxUnavailable": 0, "selector": sel("multi") }),
    )
    .await;
    wait_pdb(&c, &ns, "pdb-a", "counts the pod", |p| {
        counts(p) == (1, 1, 1, 0)
    })
    .await;
    wait_pdb(&c, &ns, "pdb-b", "counts the pod", |p| {
        counts(p) == (1, 1, 1, 0)
    })
    .await;
    // Both PDBs are in the controller's cache (their status is written):
    // a pod event now finds two.
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    pods.patch(
        "shared",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "labels": { "touched": "yes" } } })),
    )
    .await
    .expect("touch pod");
    let ev = wait_event(&c, &ns, "shared", "MultiplePodDisruptionBudgets").await;
    assert_eq!(
        ev,
        format!(
            "MultiplePodDisruptionBudgets Pod \"{ns}\"/\"shared\" matches multiple \
             PodDisruptionBudgets.  Chose \"pdb-a\" arbitrarily. [controllermanager]"
        )
    );
    control(&c, &ns).await;
}
