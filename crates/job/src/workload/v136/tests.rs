use serde_json::{Value, json};

use super::*;

const UID: &str = "5f0a5b3e-1111-2222-3333-444455556666";

fn job(spec: Value) -> Job {
    let mut spec = spec;
    if spec.get("template").is_none() {
        spec["template"] = json!({ "spec": { "containers": [] } });
    }
    serde_json::from_value(
        json!({ "metadata": { "name": "pi", "namespace": "ns", "uid": UID }, "spec": spec }),
    )
    .expect("job")
}

fn gang(p: i32, c: Option<i32>, mode: &str) -> Job {
    let mut spec = json!({ "parallelism": p, "completionMode": mode });
    if let Some(c) = c {
        spec["completions"] = json!(c);
    }
    job(spec)
}

#[test]
fn only_gang_candidates_are_eligible() {
    // TestJobGangScheduling's cases.
    assert!(eligible(&gang(4, Some(4), "Indexed"), true));
    assert!(!eligible(&gang(4, Some(4), "Indexed"), false));
    assert!(!eligible(&gang(3, None, "NonIndexed"), true));
    assert!(!eligible(&gang(3, Some(3), "NonIndexed"), true));
    assert!(!eligible(&gang(1, Some(1), "Indexed"), true));
    assert!(!eligible(&gang(2, Some(5), "Indexed"), true));
    assert!(!eligible(&gang(2, None, "Indexed"), true));
    let grouped = job(
        json!({ "parallelism": 4, "completions": 4, "completionMode": "Indexed",
        "template": { "spec": { "containers": [],
            "schedulingGroup": { "podGroupName": "external-pod-group" } } } }),
    );
    assert!(!eligible(&grouped, true));
    // A controller owner changes nothing on 1.36 (no delegation).
    let mut owned = gang(4, Some(4), "Indexed");
    owned.metadata.owner_references =
        serde_json::from_value(json!([{ "apiVersion": "example.com/v1",
        "kind": "SuperJob", "name": "parent", "uid": "p", "controller": true }]))
        .expect("owner");
    assert!(eligible(&owned, true));
}

#[test]
fn the_workload_is_one_gang_template_of_the_parallelism() {
    let w = desired_workload(&gang(4, Some(4), "Indexed"));
    assert_eq!(
        serde_json::to_value(&w).expect("json"),
        json!({
            "metadata": { "name": "pi-5d676b754d", "namespace": "ns", "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": "Job", "name": "pi", "uid": UID,
                "controller": true, "blockOwnerDeletion": true }] },
            "spec": {
                "controllerRef": { "apiGroup": "batch", "kind": "Job", "name": "pi" },
                "podGroupTemplates": [{ "name": "pi-pgt-0",
                    "schedulingPolicy": { "gang": { "minCount": 4 } } }]
            }
        })
    );
    assert_eq!(V136::workload_job_key(&w).as_deref(), Some("ns/pi"));
    assert!(usable(&w));
}

#[test]
fn the_pod_group_points_at_its_template_and_copies_the_policy() {
    let j = gang(4, Some(4), "Indexed");
    let mut w = desired_workload(&j);
    w.metadata.uid = Some("wl-uid".into());
    let pg = new_pod_group(&j, &w).expect("pg");
    assert_eq!(
        serde_json::to_value(&pg).expect("json"),
        json!({
            "metadata": { "name": pod_group_name("pi-5d676b754d", "pi-pgt-0"), "namespace": "ns",
                "ownerReferences": [
                    { "apiVersion": "batch/v1", "kind": "Job", "name": "pi", "uid": UID,
                      "controller": true, "blockOwnerDeletion": true },
                    { "apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "Workload",
                      "name": "pi-5d676b754d", "uid": "wl-uid" }] },
            "spec": {
                "podGroupTemplateRef": { "workload": { "workloadName": "pi-5d676b754d",
                    "podGroupTemplateName": "pi-pgt-0" } },
                "schedulingPolicy": { "gang": { "minCount": 4 } }
            }
        })
    );
    assert_eq!(
        V136::pod_group_workload_key(&pg).as_deref(),
        Some("ns/pi-5d676b754d")
    );
    // A basic template (someone else's Workload) is copied as it is.
    w.spec.pod_group_templates[0].scheduling_policy = json!({ "basic": {} });
    let pg = new_pod_group(&j, &w).expect("pg");
    assert_eq!(pg.spec.scheduling_policy, json!({ "basic": {} }));
    w.spec.pod_group_templates.clear();
    assert!(new_pod_group(&j, &w).is_none());
    assert!(!usable(&w));
}

#[test]
fn every_match_counts_before_ownership() {
    let j = gang(4, Some(4), "Indexed");
    let mine = desired_workload(&j);
    let mut foreign = mine.clone();
    foreign.metadata.owner_references = None;
    let lookup = |found: &[Workload]| V136::workload(&j, found, true).expect("lookup");
    let quietly = |l: Lookup<Workload>| matches!(l, Lookup::Default { error: false, .. });
    let loudly = |l: Lookup<Workload>| matches!(l, Lookup::Default { error: true, .. });
    assert_eq!(lookup(&[]), Lookup::Create(mine.clone()));
    assert_eq!(
        lookup(std::slice::from_ref(&mine)),
        Lookup::Use(mine.clone())
    );
    assert!(quietly(lookup(std::slice::from_ref(&foreign))));
    // 1.37 would pick the one it controls; 1.36 falls back.
    assert!(loudly(lookup(&[mine.clone(), foreign])));
    assert!(loudly(lookup(&[mine.clone(), mine])));
}

#[test]
fn index_keys_need_a_job_controller_ref_and_a_workload_name() {
    let mut w = desired_workload(&gang(4, Some(4), "Indexed"));
    w.spec.controller_ref = Some(TypedLocalObjectReference {
        api_group: "example.com".into(),
        kind: "Job".into(),
        name: "pi".into(),
    });
    assert_eq!(V136::workload_job_key(&w), None);
    w.spec.controller_ref = None;
    assert_eq!(V136::workload_job_key(&w), None);
    let pg: PodGroup =
        serde_json::from_value(json!({ "metadata": { "name": "g", "namespace": "ns" },
        "spec": { "podGroupTemplateRef": { "workload": { "workloadName": "",
            "podGroupTemplateName": "t" } }, "schedulingPolicy": { "basic": {} } } }))
        .expect("pg");
    assert_eq!(V136::pod_group_workload_key(&pg), None);
}
