//! PDB scenarios, run against whichever disruption controller watches the
//! cluster of the client (ours or upstream's): [`build`] makes a
//! scenario's owners, pods and PDB in a namespace of its own, [`act`] does
//! its steps after the first settle, [`run`] does both and reads the
//! settled status and events, and [`expect`] says what each scenario's
//! status must be, for both implementations (upstream 1.34-1.37 shows the
//! same).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use kcm_e2e::TestNamespace;
use kube::Api;
use kube::api::EvictParams;
use serde_json::json;

use super::*;

pub const SCENARIOS: &[&str] = &[
    "rs-min-int",
    "deploy-max-pct",
    "sts-min-pct",
    "rc-max-zero-pct",
    "unmanaged-min-pct",
    "job-owned-max-int",
    "no-pods",
    "rs-of-missing-deployment",
    "evicted",
];

fn sel(app: &str) -> serde_json::Value {
    json!({ "matchLabels": { "app": app } })
}

async fn pods_of(
    c: &kube::Client,
    ns: &str,
    app: &str,
    owner: Option<serde_json::Value>,
    ready: &[bool],
) {
    for (i, r) in ready.iter().enumerate() {
        pod(c, ns, &format!("{app}-{i}"), app, owner.clone(), *r).await;
    }
}

/// Builds scenario `s` in `ns`; returns when its PDB exists.
pub async fn build(c: &kube::Client, ns: &str, s: &str) {
    match s {
        "rs-min-int" => {
            let rs = replica_set(c, ns, "rs", "a", 3).await;
            pods_of(c, ns, "a", Some(owner_ref(&rs)), &[true, true, true]).await;
            pdb(c, ns, s, json!({ "minAvailable": 2, "selector": sel("a") })).await;
        }
        "deploy-max-pct" => {
            let (_, rs) = deployment(c, ns, "d", "a", 4, 4).await;
            pods_of(c, ns, "a", Some(owner_ref(&rs)), &[true, true, true]).await;
            pdb(
                c,
                ns,
                s,
                json!({ "maxUnavailable": "25%", "selector": sel("a") }),
            )
            .await;
        }
        "sts-min-pct" => {
            let sts = stateful_set(c, ns, "s", "a", 3).await;
            pods_of(c, ns, "a", Some(owner_ref(&sts)), &[true, false, true]).await;
            pdb(
                c,
                ns,
                s,
                json!({ "minAvailable": "50%", "selector": sel("a") }),
            )
            .await;
        }
        "rc-max-zero-pct" => {
            let rc = replication_controller(c, ns, "r", "a", 2).await;
            pods_of(c, ns, "a", Some(owner_ref(&rc)), &[true, true]).await;
            pdb(
                c,
                ns,
                s,
                json!({ "maxUnavailable": "0%", "selector": sel("a") }),
            )
            .await;
        }
        "unmanaged-min-pct" => {
            let rs = replica_set(c, ns, "rs", "a", 2).await;
            pods_of(c, ns, "a", Some(owner_ref(&rs)), &[true, true]).await;
            pod(c, ns, "bare", "a", None, true).await;
            pdb(
                c,
                ns,
                s,
                json!({ "minAvailable": "50%", "selector": sel("a") }),
            )
            .await;
        }
        "job-owned-max-int" => {
            let j = job(c, ns, "j", "a").await;
            pods_of(c, ns, "a", Some(owner_ref(&j)), &[true, true]).await;
            pdb(
                c,
                ns,
                s,
                json!({ "maxUnavailable": 1, "selector": sel("a") }),
            )
            .await;
        }
        "no-pods" => {
            pdb(
                c,
                ns,
                s,
                json!({ "minAvailable": 1, "selector": sel("nothing") }),
            )
            .await;
        }
        "rs-of-missing-deployment" => {
            let mut rs = json!({
                "apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": { "name": "rs", "ownerReferences": [{
                    "apiVersion": "apps/v1", "kind": "Deployment", "name": "gone",
                    "uid": "00000000-0000-0000-0000-000000000001", "controller": true }] },
                "spec": { "replicas": 2, "selector": sel("a"), "template": {
                    "metadata": { "labels": { "app": "a" } },
                    "spec": { "containers": [{ "name": "main", "image": "busybox" }] } } }
            });
            rs["spec"]["replicas"] = json!(2);
            let rs: k8s_openapi::api::apps::v1::ReplicaSet =
                serde_json::from_value(rs).expect("rs");
            let rs = Api::namespaced(c.clone(), ns)
                .create(&Default::default(), &rs)
                .await
                .expect("rs");
            pods_of(c, ns, "a", Some(owner_ref(&rs)), &[true, true]).await;
            pdb(
                c,
                ns,
                s,
                json!({ "maxUnavailable": 1, "selector": sel("a") }),
            )
            .await;
        }
        "evicted" => {
            let rs = replica_set(c, ns, "rs", "a", 3).await;
            pods_of(c, ns, "a", Some(owner_ref(&rs)), &[true, true, true]).await;
            pdb(c, ns, s, json!({ "minAvailable": 2, "selector": sel("a") })).await;
        }
        other => panic!("unknown scenario {other}"),
    }
}

/// Steps after the first settle.
pub async fn act(c: &kube::Client, ns: &str, s: &str) {
    if s == "evicted" {
        let pods: Api<Pod> = Api::namespaced(c.clone(), ns);
        pods.evict("a-0", &EvictParams::default())
            .await
            .expect("eviction allowed");
        let refused = pods.evict("a-1", &EvictParams::default()).await;
        assert!(
            matches!(&refused, Err(kube::Error::Api(e)) if e.code == 429),
            "{refused:?}"
        );
    }
}

/// Builds, settles, acts and settles scenario `s` in a fresh namespace;
/// the settled status and the events about the PDB (namespace replaced by
/// `<ns>`).
pub async fn run(c: &kube::Client, s: &str) -> (Observed, BTreeSet<String>) {
    let ns = TestNamespace::create(c, s).await.expect("ns").name;
    build(c, &ns, s).await;
    settled(c, &ns, s).await;
    act(c, &ns, s).await;
    let p = settled(c, &ns, s).await;
    let events = event_reasons(c, &ns, s)
        .await
        .into_iter()
        .map(|e| e.replace(&ns, "<ns>"))
        .collect();
    (observed(&p), events)
}

/// (currentHealthy, desiredHealthy, expectedPods, disruptionsAllowed,
/// DisruptionAllowed status, reason) scenario `s` settles at.
fn expected(s: &str) -> (i32, i32, i32, i32, &'static str, &'static str) {
    match s {
        "rs-min-int" => (3, 2, 3, 1, "True", "SufficientPods"),
        // 25 % of 4 rounds up: 3 desired of the 3 ready.
        "deploy-max-pct" => (3, 3, 4, 0, "False", "InsufficientPods"),
        "sts-min-pct" => (2, 2, 3, 0, "False", "InsufficientPods"),
        "rc-max-zero-pct" => (2, 2, 2, 0, "False", "InsufficientPods"),
        // The bare pod is healthy but not expected: 50 % of the ReplicaSet's 2.
        "unmanaged-min-pct" => (3, 1, 2, 2, "True", "SufficientPods"),
        // A Job has no scale subresource: the sync fails safe.
        "job-owned-max-int" => (0, 0, 0, 0, "False", "SyncFailed"),
        "no-pods" => (0, 1, 0, 0, "False", "InsufficientPods"),
        // The ReplicaSet's own scale counts when its Deployment is gone.
        "rs-of-missing-deployment" => (2, 1, 2, 1, "True", "SufficientPods"),
        // One eviction allowed (2 of 3 must stay), the next refused.
        "evicted" => (2, 2, 2, 0, "False", "InsufficientPods"),
        other => panic!("unknown scenario {other}"),
    }
}

/// Scenario `s`'s settled status is what it must be.
pub fn expect(s: &str, o: &Observed) {
    let (cur, des, exp, allowed, status, reason) = expected(s);
    let cond = o
        .conditions
        .iter()
        .find(|c| c.0 == "DisruptionAllowed")
        .map(|c| (c.1.as_str(), c.2.as_str()));
    assert_eq!(
        (
            o.current_healthy,
            o.desired_healthy,
            o.expected_pods,
            o.disruptions_allowed,
            cond
        ),
        (cur, des, exp, allowed, Some((status, reason))),
        "{s}: {o:?}"
    );
    assert!(o.disrupted_pods.is_empty(), "{s}: {o:?}");
}
