use serde_json::json;

use super::*;

fn job(v: serde_json::Value) -> Job {
    serde_json::from_value(v).expect("job")
}

fn root(spec: serde_json::Value) -> Job {
    let mut spec = spec;
    spec["template"] = json!({ "spec": { "containers": [] } });
    job(
        json!({ "metadata": { "name": "pi", "namespace": "ns", "uid": "5f0a5b3e-1111-2222-3333-444455556666" }, "spec": spec }),
    )
}

fn owned_by(uid: &str) -> serde_json::Value {
    json!([{ "apiVersion": "batch/v1", "kind": "Job", "name": "pi", "uid": uid, "controller": true }])
}

#[test]
fn names_match_upstreams_hashes() {
    // Expected values from upstream's computeWorkloadName/computePodGroupName.
    let j = root(json!({}));
    assert_eq!(workload_name(&j), "pi-5d676b754d");
    let mut j = job(json!({ "metadata": { "name": "job" } }));
    assert_eq!(workload_name(&j), "job-69ddf977d7");
    j.metadata.name = Some("a".repeat(250));
    j.metadata.uid = Some("u-1".into());
    let long = workload_name(&j);
    assert_eq!(long, format!("{}-576f4bf868", "a".repeat(242)));
    assert_eq!(long.len(), 253);
    assert_eq!(
        pod_group_name("pi-abc", "pi-pgt-0"),
        "pi-abc-pi-pgt-0-8469f59b95"
    );
    let (w, t) = ("w".repeat(100), "t".repeat(200));
    assert_eq!(
        pod_group_name(&w, &t),
        format!("{w}-{}-7766888445", "t".repeat(141))
    );
    let (w, t) = ("w".repeat(200), "t".repeat(100));
    assert_eq!(
        pod_group_name(&w, &t),
        format!("{}-{t}-967c4f7df", "w".repeat(142))
    );
    let (w, t) = ("w".repeat(200), "t".repeat(200));
    assert_eq!(
        pod_group_name(&w, &t),
        format!("{}-{}-6f9f45db49", "w".repeat(121), "t".repeat(120))
    );
    assert_eq!(template_name(&root(json!({}))), "pi-pgt-0");
}

#[test]
fn management_mode_follows_gate_group_owner_and_delegation() {
    let j = root(json!({}));
    assert_eq!(mode(&j, false), Mode::None);
    assert_eq!(mode(&j, true), Mode::Both);
    let mut grouped = j.clone();
    if let Some(s) = grouped.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
        s.scheduling_group = Some(Default::default());
    }
    assert_eq!(mode(&grouped, true), Mode::None);
    let mut child = j.clone();
    child.metadata.owner_references = serde_json::from_value(json!([{
        "apiVersion": "example.com/v1", "kind": "SuperJob", "name": "p", "uid": "pu", "controller": true
    }]))
    .expect("refs");
    assert_eq!(mode(&child, true), Mode::None);
    child.metadata.annotations = Some([(GROUP_TEMPLATE_ANNOTATION.into(), "w".into())].into());
    assert_eq!(mode(&child, true), Mode::PodGroupOnly);
    // A non-controller owner leaves the Job a root.
    let mut weak = j;
    weak.metadata.owner_references = serde_json::from_value(json!([{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "cu"
    }]))
    .expect("refs");
    assert_eq!(mode(&weak, true), Mode::Both);
}

#[test]
fn only_a_job_that_never_started_is_new() {
    let j = root(json!({}));
    assert!(is_new_job(&j, 0));
    assert!(!is_new_job(&j, 1));
    for status in [
        json!({ "startTime": "2026-01-01T00:00:00Z" }),
        json!({ "succeeded": 1 }),
        json!({ "failed": 1 }),
        json!({ "conditions": [{ "type": "Suspended", "status": "False" }] }),
    ] {
        let mut s = j.clone();
        s.status = Some(serde_json::from_value(status.clone()).expect("status"));
        assert!(!is_new_job(&s, 0), "{status}");
    }
    let mut s = j;
    s.status = Some(serde_json::from_value(json!({ "active": 0 })).expect("status"));
    assert!(is_new_job(&s, 0));
}

#[test]
fn basic_by_default_with_the_templates_priority_class() {
    let mut j = root(json!({ "parallelism": 3 }));
    if let Some(s) = j.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
        s.priority_class_name = Some("high".into());
    }
    let w = serde_json::to_value(desired_workload(&j)).expect("json");
    assert_eq!(
        w,
        json!({
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "Workload",
            "metadata": { "name": "pi-5d676b754d", "namespace": "ns", "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": "Job", "name": "pi",
                "uid": "5f0a5b3e-1111-2222-3333-444455556666",
                "controller": true, "blockOwnerDeletion": true }] },
            "spec": {
                "controllerRef": { "apiGroup": "batch", "kind": "Job", "name": "pi" },
                "podGroupTemplates": [{ "name": "pi-pgt-0", "priorityClassName": "high",
                    "schedulingPolicy": { "basic": {} } }]
            }
        })
    );
    assert_eq!(desired_min_count(&j), None);
}

#[test]
fn gang_min_count_defaults_to_parallelism_at_least_one() {
    let gang = |spec: serde_json::Value| desired_min_count(&root(spec));
    let g = json!({ "schedulingPolicy": { "gang": {} } });
    assert_eq!(gang(json!({ "parallelism": 8, "scheduling": g })), Some(8));
    assert_eq!(gang(json!({ "parallelism": 0, "scheduling": g })), Some(1));
    assert_eq!(gang(json!({ "scheduling": g })), Some(1));
    let g4 = json!({ "schedulingPolicy": { "gang": { "minCount": 4 } } });
    assert_eq!(gang(json!({ "parallelism": 8, "scheduling": g4 })), Some(4));
    let both = json!({ "schedulingPolicy": { "basic": {}, "gang": { "minCount": 4 } } });
    assert_eq!(gang(json!({ "scheduling": both })), None);
}

#[test]
fn topology_disruption_and_claims_reach_template_and_pod_group() {
    let j = root(json!({ "parallelism": 6, "scheduling": {
        "schedulingPolicy": { "gang": { "minCount": 6 } },
        "disruptionMode": { "all": {} },
        "schedulingConstraints": { "topology": [{ "key": "topology.kubernetes.io/zone" }] },
        "resourceClaims": [{ "name": "gpu", "resourceClaimTemplateName": "t" }]
    }}));
    let mut w = desired_workload(&j);
    w.metadata.uid = Some("wuid".into());
    let pg = new_pod_group(&j, &w, "", true).expect("template");
    let v = serde_json::to_value(&pg).expect("json");
    assert_eq!(
        v["metadata"]["name"],
        pod_group_name("pi-5d676b754d", "pi-pgt-0")
    );
    assert_eq!(
        v["metadata"]["ownerReferences"][1],
        json!({ "apiVersion": API_VERSION, "kind": "Workload", "name": "pi-5d676b754d", "uid": "wuid" })
    );
    assert_eq!(
        v["spec"],
        json!({
            "workloadRef": { "workloadName": "pi-5d676b754d", "templateName": "pi-pgt-0" },
            "schedulingPolicy": { "gang": { "minCount": 6 } },
            "schedulingConstraints": { "topology": [{ "key": "topology.kubernetes.io/zone" }] },
            "disruptionMode": { "all": {} },
            "resourceClaims": [{ "name": "gpu", "resourceClaimTemplateName": "t" }]
        })
    );
    let delegated = new_pod_group(&j, &w, "pi-pgt-0", false).expect("named");
    assert_eq!(
        delegated.metadata.owner_references.map(|o| o.len()),
        Some(1)
    );
    assert!(new_pod_group(&j, &w, "nope", false).is_none());
}

#[test]
fn min_count_patches_only_when_it_differs() {
    let j = root(json!({ "scheduling": { "schedulingPolicy": { "gang": { "minCount": 4 } } } }));
    let w = desired_workload(&j);
    assert_eq!(workload_min_count_patch(&w, 4), None);
    let p = workload_min_count_patch(&w, 6).expect("patch");
    assert_eq!(
        p,
        json!({ "spec": { "podGroupTemplates": [{ "name": "pi-pgt-0",
            "schedulingPolicy": { "gang": { "minCount": 6 } } }] } })
    );
    let basic = desired_workload(&root(json!({})));
    assert_eq!(workload_min_count_patch(&basic, 6), None);
    let pg = new_pod_group(&j, &w, "", true).expect("pg");
    assert_eq!(pod_group_min_count_patch(&pg, 4), None);
    assert_eq!(
        pod_group_min_count_patch(&pg, 6),
        Some(json!({ "spec": { "schedulingPolicy": { "gang": { "minCount": 6 } } } }))
    );
}

#[test]
fn owned_objects_and_the_parent_workload_are_found() {
    let j = root(json!({}));
    let uid = "5f0a5b3e-1111-2222-3333-444455556666";
    let meta = |refs: serde_json::Value| -> ObjectMeta {
        serde_json::from_value(json!({ "ownerReferences": refs })).expect("meta")
    };
    let items = vec![meta(owned_by("other")), meta(owned_by(uid))];
    let controlled = |items: &[ObjectMeta]| Found::controlled(items, |m| m, uid);
    assert_eq!(controlled(&items), Found::One(items[1].clone()));
    assert_eq!(controlled(&items[..1]), Found::None);
    let twice = vec![items[1].clone(), items[1].clone(), items[1].clone()];
    assert_eq!(controlled(&twice), Found::Many(3));

    let wl = |group: &str, kind: &str, name: &str| -> Workload {
        serde_json::from_value(json!({ "metadata": { "name": name }, "spec": {
            "controllerRef": { "apiGroup": group, "kind": kind, "name": name },
            "podGroupTemplates": [] } }))
        .expect("wl")
    };
    let all = vec![
        wl("example.com", "Other", "p"),
        wl("example.com", "SuperJob", "p"),
    ];
    let mut child = j;
    child.metadata.owner_references = serde_json::from_value(json!([{
        "apiVersion": "example.com/v1", "kind": "SuperJob", "name": "p", "uid": "pu", "controller": true
    }]))
    .expect("refs");
    assert_eq!(parent_workload(&child, &all), Some(&all[1]));
    if let Some(r) = child.metadata.owner_references.as_mut() {
        r[0].api_version = "a/b/c".into();
    }
    assert_eq!(parent_workload(&child, &all), None);
    assert_eq!(V137::workload_job_key(&all[0]), None);
    let mut own = desired_workload(&root(json!({})));
    assert_eq!(V137::workload_job_key(&own).as_deref(), Some("ns/pi"));
    own.metadata.uid = Some("x".into());
    let pg = new_pod_group(&root(json!({})), &own, "", true).expect("pg");
    assert_eq!(
        V137::pod_group_workload_key(&pg).as_deref(),
        Some("ns/pi-5d676b754d")
    );
}
