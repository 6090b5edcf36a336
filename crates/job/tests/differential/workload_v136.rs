//! `WorkloadWithJob` on 1.36 (`scheduling.k8s.io/v1alpha2`): upstream KCM
//! 1.36 and kcm-rs, each with an API server serving v1alpha2 under the same
//! gates, given the same four Jobs: a gang candidate (Indexed 4/4), a Job
//! that is not one (NonIndexed), a suspended candidate (its objects before
//! its pods, as upstream's `TestJobGangScheduling`), and a candidate whose
//! single matching Workload it does not control (default scheduling).
//! Workloads and PodGroups (names checked against the Job's UID, then
//! normalized; owners, specs), the pods' `spec.schedulingGroup`, outcomes
//! and events must be identical. Only on 1.36 (1.37 is d38).

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kcm_e2e::{ControlPlane, TestNamespace};
use kcm_features::{FeatureGates, KubeVersion};
use kcm_pod::meta::is_controlled_by;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::*;

const GATES: &str = "WorkloadWithJob=true,GenericWorkload=true";
const GANG: &str = r#"{"completions": 4, "parallelism": 4, "completionMode": "Indexed"}"#;

/// The gates on 1.36 (None elsewhere: skipped).
fn gates() -> Option<FeatureGates> {
    let minor = kcm_e2e::binaries::k8s_minor();
    if minor != 36 {
        eprintln!("skipped on 1.{minor}: 1.36's v1alpha2 objects (d38 covers 1.37)");
        return None;
    }
    let v = KubeVersion::new(minor).expect("minor");
    Some(FeatureGates::parse_for(v, GATES).expect("gates"))
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "scheduling.k8s.io".into(),
        version: "v1alpha2".into(),
        api_version: "scheduling.k8s.io/v1alpha2".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

async fn list(api: &Api<DynamicObject>) -> Vec<Value> {
    let items = api.list(&ListParams::default()).await.expect("list").items;
    items
        .into_iter()
        .map(|o| serde_json::to_value(o).unwrap_or(Value::Null))
        .collect()
}

/// Whether `v`'s controller owner has `uid`.
fn controlled_by(v: &Value, uid: &str) -> bool {
    serde_json::from_value::<ObjectMeta>(v["metadata"].clone())
        .is_ok_and(|m| is_controlled_by(&m, uid))
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

/// Per Job: its pods' schedulingGroup (sorted), outcome, events.
type PerJob = (
    String,
    Vec<String>,
    Outcome,
    Vec<(String, String, String, i32)>,
);

/// What one side produced: Workloads, PodGroups (shapes), per Job.
type Seen = (Vec<Value>, Vec<Value>, Vec<PerJob>);

async fn run(upstream: bool, gates: FeatureGates) -> Seen {
    let args = format!("--feature-gates={GATES} --runtime-config=scheduling.k8s.io/v1alpha2=true");
    let cp = ControlPlane::start_version_with_args(&kcm_e2e::binaries::k8s_version(), &args)
        .expect("cp");
    let flags = [format!("--feature-gates={GATES}")];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let side = Side::of(upstream);
    let _c = start_side(&cp, side, gates, &flags).await;
    let client = cp.client().await.expect("client");
    let ns = TestNamespace::create(&client, "wwj136").await.expect("ns");
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let wls: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns.name, &resource("Workload", "workloads"));
    let pgs: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns.name, &resource("PodGroup", "podgroups"));
    let pp = PostParams::default();
    let gang: Value = serde_json::from_str(GANG).expect("spec");

    // A Workload naming Job "foreign" that no Job controls, in the caches
    // before that Job's first sync.
    let foreign_wl: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "Workload",
        "metadata": { "name": "someone-elses" },
        "spec": { "controllerRef": { "apiGroup": "batch", "kind": "Job", "name": "foreign" },
                  "podGroupTemplates": [{ "name": "t", "schedulingPolicy": { "basic": {} } }] }
    }))
    .expect("workload");
    wls.create(&pp, &foreign_wl)
        .await
        .expect("foreign workload");
    tokio::time::sleep(Duration::from_secs(2)).await;

    let mut created = Vec::new();
    for (name, spec) in [
        ("gang", gang.clone()),
        ("plain", json!({"parallelism": 3})),
        ("foreign", gang.clone()),
    ] {
        created.push(
            jobs.create(&pp, &job_on(side, name, spec))
                .await
                .expect("job"),
        );
    }
    let mut held_spec = gang.clone();
    held_spec["suspend"] = json!(true);
    let held = jobs
        .create(&pp, &job_on(side, "held", held_spec))
        .await
        .expect("held");
    let held_uid = held.metadata.uid.clone().unwrap_or_default();
    // Suspended: the Workload and PodGroup come before any pod.
    wait_for("held's Workload and PodGroup", async || {
        let w = list(&wls)
            .await
            .into_iter()
            .any(|w| controlled_by(&w, &held_uid));
        let p = list(&pgs)
            .await
            .into_iter()
            .any(|p| controlled_by(&p, &held_uid));
        (w && p).then_some(())
    })
    .await;
    assert!(job_pods(&pods, "held").await.is_empty(), "held has pods");
    let resume = json!({"spec": {"suspend": false}});
    jobs.patch("held", &PatchParams::default(), &Patch::Merge(resume))
        .await
        .expect("resume");
    created.push(held);

    let mut names: Vec<(String, String)> = Vec::new();
    let mut grouped = Vec::new();
    for j in &created {
        let name = j.metadata.name.clone().unwrap_or_default();
        // Each pod's group is read while it runs (drive ends them).
        wait_for("pods", async || {
            (job_pods(&pods, &name).await.len() >= 3).then_some(())
        })
        .await;
        let mut groups: Vec<String> = job_pods(&pods, &name)
            .await
            .into_iter()
            .map(|p| format!("{:?}", p.spec.and_then(|s| s.scheduling_group)))
            .collect();
        groups.sort();
        drive(&jobs, &pods, &name, Duration::from_secs(90), |_, _| Some(0)).await;
        let wl = kcm_job::workload::workload_name(j);
        let pg = kcm_job::workload::pod_group_name(&wl, &format!("{name}-pgt-0"));
        names.push((pg.clone(), format!("<pg:{name}>")));
        names.push((wl, format!("<wl:{name}>")));
        names.push((
            j.metadata.uid.clone().unwrap_or_default(),
            format!("<uid:{name}>"),
        ));
        grouped.push((name, groups));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let norm = |s: String| {
        names.iter().fold(s, |s, (from, to)| {
            if from.is_empty() {
                s
            } else {
                s.replace(from, to)
            }
        })
    };
    let mut per_job = Vec::new();
    for (name, groups) in grouped {
        let groups = groups.into_iter().map(&norm).collect();
        let done = normalize(outcome(&jobs.get(&name).await.expect("job")), &ns.name);
        let events = event_summary(&client, &ns.name, &name)
            .await
            .into_iter()
            .map(|(t, r, m, n)| (t, r, norm(m), n))
            .collect();
        per_job.push((name, groups, done, events));
    }
    let shape = |mut v: Value| {
        // The Workload's UID in a PodGroup's owner reference.
        for o in v["metadata"]["ownerReferences"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            if o["kind"] == "Workload" {
                o["uid"] = json!("<wl-uid>");
            }
        }
        let s = json!({ "name": v["metadata"]["name"], "owners": v["metadata"]["ownerReferences"],
            "spec": v["spec"] });
        serde_json::from_str(&norm(s.to_string())).unwrap_or(Value::Null)
    };
    let mut workloads: Vec<Value> = list(&wls).await.into_iter().map(shape).collect();
    let mut pod_groups: Vec<Value> = list(&pgs).await.into_iter().map(shape).collect();
    workloads.sort_by_key(|v| v.to_string());
    pod_groups.sort_by_key(|v| v.to_string());
    (workloads, pod_groups, per_job)
}

#[tokio::test]
async fn d39_workload_with_job_on_1_36() {
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
    for (o, t) in ours.2.iter().zip(&theirs.2) {
        assert_eq!(o, t, "Job {}: kcm-rs (left) vs upstream (right)", o.0);
    }
    // What both did: the foreign Workload and one per candidate Job it
    // controls (gang, held), one PodGroup each; their pods in the group,
    // the others' not.
    assert_eq!(ours.0.len(), 3, "{:#?}", ours.0);
    assert_eq!(ours.1.len(), 2, "{:#?}", ours.1);
    for (name, groups, outcome, _) in &ours.2 {
        let grouped = matches!(name.as_str(), "gang" | "held");
        assert!(
            groups
                .iter()
                .all(|g| g.contains(&format!("<pg:{name}>")) == grouped),
            "{name}: {groups:?}"
        );
        assert!(outcome.succeeded >= 3, "{name}: {outcome:?}");
    }
}
