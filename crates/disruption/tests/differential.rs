//! The same PDB scenarios against upstream kube-controller-manager's
//! disruption-controller and against kcm-rs, each on its own control
//! plane; the final PDB status (all fields but times) and the events about
//! each PDB must be identical.

mod support;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use kcm_e2e::{ControlPlane, TestNamespace, UpstreamKcm, in_process};
use kcm_features::FeatureGates;
use kcm_runtime::controller::Settings;
use kube::Api;
use kube::api::EvictParams;
use serde_json::json;

use support::*;

const SCENARIOS: &[&str] = &[
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
async fn build(c: &kube::Client, ns: &str, s: &str) {
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
async fn act(cp: &ControlPlane, ns: &str, s: &str) {
    if s == "evicted" {
        let pods: Api<Pod> = Api::namespaced(cp.client().await.expect("client"), ns);
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

type Results = BTreeMap<String, (Observed, BTreeSet<String>)>;

async fn run(upstream: bool) -> Results {
    let cp = ControlPlane::start().expect("control plane");
    let c = cp.client().await.expect("client");
    let _ours;
    let _theirs;
    if upstream {
        _theirs =
            Some(UpstreamKcm::start(&cp, &["disruption-controller"], &[]).expect("upstream KCM"));
    } else {
        in_process::init_tracing();
        _ours = Some(
            in_process::start(
                &cp,
                &[kcm_disruption::SPEC],
                Settings::default(),
                FeatureGates::default(),
            )
            .await
            .expect("kcm-rs"),
        );
    }
    let runs = SCENARIOS.iter().map(|s| {
        let c = c.clone();
        let cp = &cp;
        async move {
            let ns = TestNamespace::create(&c, s).await.expect("ns").name;
            build(&c, &ns, s).await;
            settled(&c, &ns, s).await;
            act(cp, &ns, s).await;
            let p = settled(&c, &ns, s).await;
            let events = event_reasons(&c, &ns, s)
                .await
                .into_iter()
                .map(|e| e.replace(&ns, "<ns>"))
                .collect();
            (s.to_string(), (observed(&p), events))
        }
    });
    futures::future::join_all(runs).await.into_iter().collect()
}

#[tokio::test]
async fn pdb_status_matches_upstream() {
    let theirs = run(true).await;
    let ours = run(false).await;
    let mut table = String::from("scenario | upstream | kcm-rs | same\n");
    let mut diffs = Vec::new();
    for s in SCENARIOS {
        let (u, o) = (&theirs[*s], &ours[*s]);
        let short = |x: &Observed| {
            format!(
                "cur={} des={} exp={} allowed={} gen={:?} disrupted={:?} cond={:?}",
                x.current_healthy,
                x.desired_healthy,
                x.expected_pods,
                x.disruptions_allowed,
                x.observed_generation,
                x.disrupted_pods,
                x.conditions
                    .iter()
                    .map(|c| format!("{}/{}/{}", c.1, c.2, c.3))
                    .collect::<Vec<_>>()
            )
        };
        table.push_str(&format!(
            "{s} | {} | {} | {}\n",
            short(&u.0),
            short(&o.0),
            u == o
        ));
        if u != o {
            diffs.push(format!("{s}:\n  upstream {u:?}\n  kcm-rs   {o:?}"));
        }
    }
    eprintln!("{table}");
    assert!(diffs.is_empty(), "differences:\n{}", diffs.join("\n"));
}
