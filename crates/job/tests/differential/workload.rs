//! `WorkloadWithJob` (1.37): the same Jobs with the gate on, upstream KCM
//! and kcm-rs each with an API server that serves
//! `scheduling.k8s.io/v1beta1` under the same gates (as upstream's
//! integration tests run). The Workloads and PodGroups each side creates
//! (names checked against the Job's UID, then normalized; owner references,
//! specs), the pods' `spec.schedulingGroup`, the Job outcome and events
//! must be identical. Only from 1.37 (1.36's v1alpha2 is d39).

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1beta1::{PodGroup, Workload};
use kcm_e2e::{ControlPlane, TestNamespace};
use kcm_features::{FeatureGates, KubeVersion};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::*;

const GATES: &str = "WorkloadWithJob=true,GenericWorkload=true";

/// The gates as kcm-rs takes them on the suite's minor (None: skipped).
fn gates() -> Option<FeatureGates> {
    let minor = kcm_e2e::binaries::k8s_minor();
    if minor < 37 {
        // 1.36 takes the gate but serves v1alpha2 only: d39.
        eprintln!("skipped on 1.{minor}: no scheduling.k8s.io/v1beta1 (d39 covers 1.36)");
        return None;
    }
    let parsed = KubeVersion::new(minor)
        .map_err(|e| e.to_string())
        .and_then(|v| FeatureGates::parse_for(v, GATES).map_err(|e| e.to_string()));
    match parsed {
        Ok(g) => Some(g),
        Err(e) => {
            eprintln!("skipped on 1.{minor}: {e}");
            None
        }
    }
}

async fn wait_for<T>(what: &str, mut get: impl AsyncFnMut() -> Option<T>) -> T {
    let start = std::time::Instant::now();
    loop {
        if let Some(t) = get().await {
            return t;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "no {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `v` with the run's names and UIDs replaced by placeholders.
fn normalized(v: Value, names: &[(String, &str)]) -> Value {
    let mut s = v.to_string();
    for (from, to) in names {
        if !from.is_empty() {
            s = s.replace(from.as_str(), to);
        }
    }
    serde_json::from_str(&s).unwrap_or(Value::Null)
}

/// The objects' shape: metadata's name, owners, spec.
fn shape<T: serde::Serialize>(obj: &T) -> Value {
    let v = serde_json::to_value(obj).unwrap_or(Value::Null);
    json!({ "name": v["metadata"]["name"], "owners": v["metadata"]["ownerReferences"],
            "spec": v["spec"] })
}

/// What one side produced.
type Seen = (
    Vec<Value>,
    Vec<Value>,
    Vec<String>,
    Outcome,
    Vec<(String, String, String, i32)>,
);

async fn run(upstream: bool, gates: FeatureGates) -> Seen {
    let args = format!("--feature-gates={GATES} --runtime-config=scheduling.k8s.io/v1beta1=true");
    let cp = ControlPlane::start_version_with_args(&kcm_e2e::binaries::k8s_version(), &args)
        .expect("cp");
    let flags = [format!("--feature-gates={GATES}")];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let _c = start_side(&cp, Side::of(upstream), gates, &flags).await;
    let client = cp.client().await.expect("client");
    let ns = TestNamespace::create(&client, "wwj").await.expect("ns");
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let wls: Api<Workload> = Api::namespaced(client.clone(), &ns.name);
    let pgs: Api<PodGroup> = Api::namespaced(client.clone(), &ns.name);
    let pp = PostParams::default();

    // A parent controller's Workload, and its Job delegating the template.
    let parent: Workload = serde_json::from_value(json!({
        "metadata": { "name": "parent-workload" },
        "spec": { "controllerRef": { "apiGroup": "example.com", "kind": "SuperJob", "name": "parent" },
                  "podGroupTemplates": [{ "name": "workers", "schedulingPolicy": { "gang": { "minCount": 2 } } }] }
    }))
    .expect("parent");
    wls.create(&pp, &parent).await.expect("parent workload");
    let mut child = job(
        "child",
        json!({"completions": 2, "parallelism": 2, "completionMode": "Indexed"}),
    );
    child.metadata.annotations = Some(
        [(
            kcm_job::workload::GROUP_TEMPLATE_ANNOTATION.into(),
            "workers".into(),
        )]
        .into(),
    );
    child.metadata.owner_references =
        serde_json::from_value(json!([{ "apiVersion": "example.com/v1",
        "kind": "SuperJob", "name": "parent", "uid": "parent-uid", "controller": true }]))
        .expect("owner");
    let child = jobs.create(&pp, &child).await.expect("child");

    // A root gang Job, resized once its objects exist.
    let spec = json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed",
        "scheduling": { "schedulingPolicy": { "gang": { "minCount": 2 } },
                        "disruptionMode": { "all": {} },
                        "schedulingConstraints": { "topology": [{ "key": "topology.kubernetes.io/zone" }] } }});
    let root = jobs.create(&pp, &job("j", spec)).await.expect("job");
    let owned = async |uid: &str| -> Option<(Workload, PodGroup)> {
        let owns = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            kcm_pod::meta::is_controlled_by(m, uid)
        };
        let w = wls
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|w| owns(&w.metadata))?;
        let p = pgs
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|p| owns(&p.metadata))?;
        Some((w, p))
    };
    let root_uid = root.metadata.uid.clone().unwrap_or_default();
    wait_for("root Workload and PodGroup", async || {
        owned(&root_uid).await
    })
    .await;
    let patch = json!({"spec": {"scheduling": {"schedulingPolicy": {"gang": {"minCount": 3}}}}});
    jobs.patch("j", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect("resize");
    wait_for("minCount 3 on both", async || {
        let (w, p) = owned(&root_uid).await?;
        let gang = |v: Value| v.as_i64();
        let wv = serde_json::to_value(&w).ok()?;
        let pv = serde_json::to_value(&p).ok()?;
        (gang(wv["spec"]["podGroupTemplates"][0]["schedulingPolicy"]["gang"]["minCount"].clone())
            == Some(3)
            && gang(pv["spec"]["schedulingPolicy"]["gang"]["minCount"].clone()) == Some(3))
        .then_some(())
    })
    .await;
    let child_uid = child.metadata.uid.clone().unwrap_or_default();
    wait_for("delegated PodGroup", async || {
        let all = pgs.list(&ListParams::default()).await.ok()?.items;
        all.into_iter()
            .find(|p| kcm_pod::meta::is_controlled_by(&p.metadata, &child_uid))
    })
    .await;
    let all_pods = job_pods(&pods, "j")
        .await
        .into_iter()
        .chain(job_pods(&pods, "child").await);
    let groups: Vec<String> = {
        let mut g: Vec<String> = all_pods
            .map(|p| format!("{:?}", p.spec.and_then(|s| s.scheduling_group)))
            .collect();
        g.sort();
        g
    };
    drive(&jobs, &pods, "j", Duration::from_secs(90), |_, _| Some(0)).await;
    drive(&jobs, &pods, "child", Duration::from_secs(90), |_, _| {
        Some(0)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Names are checked against the Job's UID, then replaced.
    let root_job = jobs.get("j").await.expect("job");
    let wl_name = kcm_job::workload::workload_name(&root_job);
    let pg_name = kcm_job::workload::pod_group_name(&wl_name, "j-pgt-0");
    let child_pg = kcm_job::workload::pod_group_name("parent-workload", "workers");
    let uids = |list: Vec<Value>| {
        list.into_iter()
            .map(|v| {
                normalized(
                    v,
                    &[
                        (pg_name.clone(), "<pg>"),
                        (child_pg.clone(), "<child-pg>"),
                        (wl_name.clone(), "<wl>"),
                        (root_uid.clone(), "<job-uid>"),
                        (child_uid.clone(), "<child-uid>"),
                    ],
                )
            })
            .collect::<Vec<_>>()
    };
    let mut workloads: Vec<Value> = wls
        .list(&ListParams::default())
        .await
        .expect("wl")
        .items
        .iter()
        .map(shape)
        .collect();
    let mut pod_groups: Vec<Value> = pgs
        .list(&ListParams::default())
        .await
        .expect("pg")
        .items
        .iter()
        .map(|p| {
            let mut s = shape(p);
            // The Workload's UID in the PodGroup's owner reference.
            for o in s["owners"].as_array_mut().into_iter().flatten() {
                if o["kind"] == "Workload" {
                    o["uid"] = json!("<wl-uid>");
                }
            }
            s
        })
        .collect();
    workloads.sort_by_key(|v| v.to_string());
    pod_groups.sort_by_key(|v| v.to_string());
    let groups = groups
        .into_iter()
        .map(|g| g.replace(&pg_name, "<pg>").replace(&child_pg, "<child-pg>"))
        .collect();
    let events = event_summary(&client, &ns.name, "j")
        .await
        .into_iter()
        .map(|(t, r, m, n)| {
            (
                t,
                r,
                m.replace(&pg_name, "<pg>").replace(&wl_name, "<wl>"),
                n,
            )
        })
        .collect();
    (
        uids(workloads),
        uids(pod_groups),
        groups,
        normalize(outcome(&root_job), &ns.name),
        events,
    )
}

#[tokio::test]
async fn d38_workloads_and_pod_groups_with_workload_with_job() {
    let Some(gates) = gates() else {
        return;
    };
    let (theirs, ours) = tokio::join!(run(true, gates.clone()), run(false, gates));
    eprintln!("kcm-rs: {ours:#?}");
    assert_eq!(
        ours.0, theirs.0,
        "Workloads: kcm-rs (left) vs upstream (right)"
    );
    assert_eq!(
        ours.1, theirs.1,
        "PodGroups: kcm-rs (left) vs upstream (right)"
    );
    assert_eq!(
        ours.2, theirs.2,
        "pods' schedulingGroup: kcm-rs (left) vs upstream (right)"
    );
    assert_eq!(
        ours.3, theirs.3,
        "Job outcome: kcm-rs (left) vs upstream (right)"
    );
    assert_eq!(
        ours.4, theirs.4,
        "events: kcm-rs (left) vs upstream (right)"
    );
    // What both did: two Workloads (the parent's, the Job's), two PodGroups,
    // every pod in its group, the gang resized to 3.
    assert_eq!(ours.0.len(), 2, "{:#?}", ours.0);
    assert_eq!(ours.1.len(), 2, "{:#?}", ours.1);
    assert!(
        ours.2
            .iter()
            .all(|g| g.contains("<pg>") || g.contains("<child-pg>")),
        "{:?}",
        ours.2
    );
    assert_eq!(ours.2.len(), 5);
    let root_pg = ours
        .1
        .iter()
        .find(|p| p["name"] == "<pg>")
        .expect("root PodGroup");
    assert_eq!(root_pg["spec"]["schedulingPolicy"]["gang"]["minCount"], 3);
    assert_eq!(ours.3.succeeded, 3);
}
