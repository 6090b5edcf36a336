//! Shared pieces of the disruption controller's end-to-end and differential
//! tests: owners and their pods created by the test (no ReplicaSet or
//! Deployment controller runs), PDBs, the comparable status, and the
//! scenarios both suites run ([`scenarios`]).

#![allow(dead_code)]

pub mod scenarios;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod, ReplicationController};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kcm_e2e::kubelet::run_pod;
use kcm_e2e::wait::wait_for;
use kube::api::{ListParams, PostParams};
use kube::{Api, Resource};
use serde_json::{Value, json};

pub const T: Duration = Duration::from_secs(30);

fn template(app: &str) -> Value {
    json!({
        "metadata": { "labels": { "app": app } },
        "spec": { "containers": [{ "name": "main", "image": "busybox" }] }
    })
}

fn workload(kind: &str, api_version: &str, name: &str, app: &str, replicas: i32) -> Value {
    let mut spec = json!({
        "replicas": replicas,
        "selector": { "matchLabels": { "app": app } },
        "template": template(app),
    });
    if kind == "StatefulSet" {
        spec["serviceName"] = json!(name);
    }
    if kind == "ReplicationController" {
        spec["selector"] = json!({ "app": app });
    }
    json!({ "apiVersion": api_version, "kind": kind, "metadata": { "name": name }, "spec": spec })
}

async fn create<K>(client: &kube::Client, ns: &str, v: Value) -> K
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(v).expect("object");
    Api::<K>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &obj)
        .await
        .expect("create")
}

pub async fn replica_set(
    c: &kube::Client,
    ns: &str,
    name: &str,
    app: &str,
    replicas: i32,
) -> ReplicaSet {
    create(
        c,
        ns,
        workload("ReplicaSet", "apps/v1", name, app, replicas),
    )
    .await
}

pub async fn stateful_set(
    c: &kube::Client,
    ns: &str,
    name: &str,
    app: &str,
    replicas: i32,
) -> StatefulSet {
    create(
        c,
        ns,
        workload("StatefulSet", "apps/v1", name, app, replicas),
    )
    .await
}

pub async fn replication_controller(
    c: &kube::Client,
    ns: &str,
    name: &str,
    app: &str,
    replicas: i32,
) -> ReplicationController {
    create(
        c,
        ns,
        workload("ReplicationController", "v1", name, app, replicas),
    )
    .await
}

/// A Deployment and a ReplicaSet it controls (`rs_replicas` may differ, as
/// mid-rollout).
pub async fn deployment(
    c: &kube::Client,
    ns: &str,
    name: &str,
    app: &str,
    replicas: i32,
    rs_replicas: i32,
) -> (Deployment, ReplicaSet) {
    let d: Deployment = create(
        c,
        ns,
        workload("Deployment", "apps/v1", name, app, replicas),
    )
    .await;
    let mut rs = workload(
        "ReplicaSet",
        "apps/v1",
        &format!("{name}-rs"),
        app,
        rs_replicas,
    );
    rs["metadata"]["ownerReferences"] = json!([owner_ref(&d)]);
    (d.clone(), create(c, ns, rs).await)
}

/// A Job whose pods the test creates (Jobs have no scale subresource).
pub async fn job(c: &kube::Client, ns: &str, name: &str, app: &str) -> Job {
    let mut t = template(app);
    t["spec"]["restartPolicy"] = json!("Never");
    create(
        c,
        ns,
        json!({
            "apiVersion": "batch/v1", "kind": "Job", "metadata": { "name": name },
            "spec": { "manualSelector": true, "selector": { "matchLabels": { "app": app } }, "template": t }
        }),
    )
    .await
}

pub fn owner_ref<K: Resource<DynamicType = ()>>(o: &K) -> Value {
    json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "name": o.meta().name,
        "uid": o.meta().uid,
        "controller": true,
    })
}

/// Creates pod `name` labelled `app`, controlled by `owner` (if any), and
/// marks it Running and Ready (or not). Pods stay unbound, so a delete
/// removes them at once.
pub async fn pod(
    c: &kube::Client,
    ns: &str,
    name: &str,
    app: &str,
    owner: Option<Value>,
    ready: bool,
) {
    let mut p = json!({
        "metadata": { "name": name, "labels": { "app": app } },
        "spec": { "containers": [{ "name": "main", "image": "busybox" }] }
    });
    if let Some(o) = owner {
        p["metadata"]["ownerReferences"] = json!([o]);
    }
    let pods: Api<Pod> = Api::namespaced(c.clone(), ns);
    let p: Pod = serde_json::from_value(p).expect("pod");
    pods.create(&PostParams::default(), &p)
        .await
        .expect("create pod");
    run_pod(&pods, name, ready).await.expect("run pod");
}

/// `n` Ready pods `<app>-0` … labelled `app: <app>` and controlled by
/// `owner` (a ReplicaSet, or a Deployment's ReplicaSet).
pub async fn ready_pods<K: Resource<DynamicType = ()>>(
    c: &kube::Client,
    ns: &str,
    app: &str,
    n: usize,
    owner: &K,
) {
    for i in 0..n {
        let name = format!("{app}-{i}");
        pod(c, ns, &name, app, Some(owner_ref(owner)), true).await;
    }
}

/// The label selector `app: <app>`.
pub fn sel(app: &str) -> Value {
    json!({ "matchLabels": { "app": app } })
}

/// (currentHealthy, desiredHealthy, expectedPods, disruptionsAllowed).
pub fn counts(p: &PodDisruptionBudget) -> (i32, i32, i32, i32) {
    let s = p.status.clone().unwrap_or_default();
    (
        s.current_healthy.unwrap_or(0),
        s.desired_healthy.unwrap_or(0),
        s.expected_pods.unwrap_or(0),
        s.disruptions_allowed.unwrap_or(0),
    )
}

pub async fn pdb(c: &kube::Client, ns: &str, name: &str, spec: Value) -> PodDisruptionBudget {
    create(
        c,
        ns,
        json!({ "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": { "name": name }, "spec": spec }),
    )
    .await
}

/// What a differential test compares of a PDB: every status field except
/// times, and the condition without its transition time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub current_healthy: i32,
    pub desired_healthy: i32,
    pub expected_pods: i32,
    pub disruptions_allowed: i32,
    pub observed_generation: Option<i64>,
    pub disrupted_pods: Vec<String>,
    /// (type, status, reason, message, observedGeneration)
    pub conditions: Vec<(String, String, String, String, Option<i64>)>,
}

pub fn observed(p: &PodDisruptionBudget) -> Observed {
    let s = p.status.clone().unwrap_or_default();
    Observed {
        current_healthy: s.current_healthy.unwrap_or(0),
        desired_healthy: s.desired_healthy.unwrap_or(0),
        expected_pods: s.expected_pods.unwrap_or(0),
        disruptions_allowed: s.disruptions_allowed.unwrap_or(0),
        observed_generation: s.observed_generation,
        disrupted_pods: s.disrupted_pods.unwrap_or_default().into_keys().collect(),
        conditions: s
            .conditions
            .unwrap_or_default()
            .into_iter()
            .map(|c| {
                (
                    c.type_,
                    c.status,
                    c.reason,
                    c.message,
                    c.observed_generation,
                )
            })
            .collect(),
    }
}

/// The `DisruptionAllowed` reason, once the controller wrote one.
pub fn reason(p: &PodDisruptionBudget) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "DisruptionAllowed")
        .map(|c| c.reason.clone())
}

/// Waits for `pred` on PDB `name`.
pub async fn wait_pdb(
    c: &kube::Client,
    ns: &str,
    name: &str,
    what: &str,
    pred: impl Fn(&PodDisruptionBudget) -> bool,
) -> PodDisruptionBudget {
    let api: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), ns);
    wait_for(&api, name, T, what, pred)
        .await
        .expect("PDB status")
}

/// Waits until the controller processed the PDB's current spec (or failed
/// safe), then until the status stops changing for a while.
pub async fn settled(c: &kube::Client, ns: &str, name: &str) -> PodDisruptionBudget {
    let api: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), ns);
    let mut last = wait_pdb(c, ns, name, "processed", |p| reason(p).is_some()).await;
    loop {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let now = api.get(name).await.expect("get PDB");
        if observed(&now) == observed(&last) {
            return now;
        }
        last = now;
    }
}

/// The reasons of Events about `involved` in `ns`.
pub async fn event_reasons(c: &kube::Client, ns: &str, involved: &str) -> BTreeSet<String> {
    let events: Api<Event> = Api::namespaced(c.clone(), ns);
    events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(involved))
        .map(|e| {
            format!(
                "{} {} [{}]",
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default(),
                e.source.and_then(|s| s.component).unwrap_or_default()
            )
        })
        .collect()
}
