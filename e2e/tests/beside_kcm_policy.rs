//! `manifests/beside-kcm/admission-policy.yaml` on the local control plane:
//! on 1.34 and 1.35 (v1beta1, gate and runtime-config on), 1.36 and 1.37
//! (v1), a Job
//! created in a labelled namespace gets `spec.managedBy` naming kcm-rs, a
//! Job naming a controller itself keeps it, and a Job in an unlabelled
//! namespace gets nothing.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use kcm_e2e::binaries::repo_root;
use kcm_e2e::{ControlPlane, TestNamespace};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

const NAME: &str = "kcm-rs.dev/job-controller";

fn job(name: &str, managed_by: Option<&str>) -> Job {
    let mut j = json!({ "metadata": { "name": name }, "spec": { "template": { "spec": {
        "restartPolicy": "Never", "containers": [{ "name": "c", "image": "busybox" }] } },
        "suspend": true } });
    if let Some(m) = managed_by {
        j["spec"]["managedBy"] = m.into();
    }
    serde_json::from_value(j).expect("job")
}

async fn apply_policy(client: &kube::Client, version: &str) {
    let text =
        std::fs::read_to_string(repo_root().join("manifests/beside-kcm/admission-policy.yaml"))
            .expect("policy");
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let mut v: Value = serde::Deserialize::deserialize(doc).expect("yaml");
        let api_version = format!("admissionregistration.k8s.io/{version}");
        v["apiVersion"] = api_version.clone().into();
        let kind = v["kind"].as_str().expect("kind").to_string();
        let ar = ApiResource {
            group: "admissionregistration.k8s.io".into(),
            version: version.into(),
            api_version,
            plural: format!("{}s", kind.to_lowercase()).replace("policys", "policies"),
            kind,
        };
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let obj: DynamicObject = serde_json::from_value(v).expect("object");
        api.create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("create {}: {e}", ar.kind));
    }
}

async fn check(cp: ControlPlane, version: &str) {
    let client = cp.client().await.expect("client");
    apply_policy(&client, version).await;
    let labelled = TestNamespace::create(&client, "optin").await.expect("ns");
    let plain = TestNamespace::create(&client, "plain").await.expect("ns");
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    nss.patch(
        &labelled.name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "labels": { "kcm-rs.dev/job-managed-by": "true" } } })),
    )
    .await
    .expect("label");
    let managed_by = |j: Job| j.spec.and_then(|s| s.managed_by);
    // The policy takes effect once the API server has loaded it.
    let jobs: Api<Job> = Api::namespaced(client.clone(), &labelled.name);
    let start = std::time::Instant::now();
    let mut n = 0;
    let first = loop {
        let j = jobs
            .create(&PostParams::default(), &job(&format!("j{n}"), None))
            .await
            .expect("create");
        n += 1;
        if managed_by(j.clone()).is_some() || start.elapsed() > Duration::from_secs(30) {
            break j;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(
        managed_by(first).as_deref(),
        Some(NAME),
        "{version}: labelled namespace"
    );
    let own = jobs
        .create(
            &PostParams::default(),
            &job("own", Some("example.com/other")),
        )
        .await
        .expect("create");
    assert_eq!(
        managed_by(own).as_deref(),
        Some("example.com/other"),
        "{version}: kept"
    );
    let other: Api<Job> = Api::namespaced(client.clone(), &plain.name);
    let j = other
        .create(&PostParams::default(), &job("j", None))
        .await
        .expect("create");
    assert_eq!(managed_by(j), None, "{version}: unlabelled namespace");
    eprintln!("{version}: policy applied after {n} create(s)");
}

#[tokio::test]
async fn policy_on_1_34_v1beta1() {
    let cp = ControlPlane::start_version_with_args(
        "1.34",
        "--feature-gates=MutatingAdmissionPolicy=true --runtime-config=admissionregistration.k8s.io/v1beta1=true",
    )
    .expect("control plane");
    check(cp, "v1beta1").await;
}

/// 1.35 and 1.36 need their own control planes (a cold Go build each, too
/// long for `make test`): `make beside-kcm-versions` builds them and runs
/// these.
#[tokio::test]
#[ignore = "needs the 1.35 control plane: make beside-kcm-versions"]
async fn policy_on_1_35_v1beta1() {
    let cp = ControlPlane::start_version_with_args(
        "1.35",
        "--feature-gates=MutatingAdmissionPolicy=true --runtime-config=admissionregistration.k8s.io/v1beta1=true",
    )
    .expect("control plane");
    check(cp, "v1beta1").await;
}

#[tokio::test]
#[ignore = "needs the 1.36 control plane: make beside-kcm-versions"]
async fn policy_on_1_36_v1() {
    let cp = ControlPlane::start_version("1.36").expect("control plane");
    check(cp, "v1").await;
}

#[tokio::test]
async fn policy_on_1_37_v1() {
    let cp = ControlPlane::start_version("1.37").expect("control plane");
    check(cp, "v1").await;
}
