//! Every object `kubectl kustomize manifests/` builds (base and the
//! monitoring component) and every example passes a server-side apply
//! dry-run with `fieldValidation=Strict` on the real API server, with the
//! Prometheus Operator's own CRDs installed (from its Go module, pinned
//! below, fetched through the Go module proxy): a misspelled or misplaced
//! field in the ServiceMonitor, PrometheusRule or any other object fails.

use k8s_openapi::api::core::v1::Namespace;
use kcm_e2e::ControlPlane;
use kcm_e2e::manifests as support;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use support::*;

/// Server-side apply, dry-run, strict field validation: the API server's
/// answer.
async fn apply_strict(admin: &kube::Client, doc: &Value) -> Result<(), String> {
    let obj: DynamicObject = serde_json::from_value(doc.clone()).map_err(|e| e.to_string())?;
    let types = obj.types.as_ref().ok_or("no apiVersion/kind")?;
    let gvk = GroupVersionKind::try_from(types).map_err(|e| e.to_string())?;
    let (ar, caps) = discovery::pinned_kind(admin, &gvk)
        .await
        .map_err(|e| e.to_string())?;
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Namespaced => {
            let ns = obj.namespace().unwrap_or_else(|| "default".into());
            Api::namespaced_with(admin.clone(), &ns, &ar)
        }
        Scope::Cluster => Api::all_with(admin.clone(), &ar),
    };
    let pp = PatchParams::apply("kcm-rs-manifests-test")
        .dry_run()
        .validation_strict();
    let res = api.patch(&obj.name_any(), &pp, &Patch::Apply(doc)).await;
    res.map(|_| ()).map_err(|e| e.to_string())
}

fn describe(doc: &Value) -> String {
    format!("{}/{}", text(&doc["kind"]), text(&doc["metadata"]["name"]))
}

#[tokio::test]
async fn every_manifest_passes_a_strict_server_side_dry_run() {
    let cp = ControlPlane::start().expect("control plane");
    let admin = cp.client().await.expect("admin client");
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    if namespaces
        .get_opt("kube-system")
        .await
        .expect("get")
        .is_none()
    {
        create(
            &namespaces,
            json!({ "metadata": { "name": "kube-system" } }),
        )
        .await;
    }
    install_crds(&admin).await;

    let mut objects = kustomize("");
    for example in ["job.yaml", "pod-failure-policy.yaml"] {
        let path = manifests().join("examples").join(example);
        let text = std::fs::read_to_string(&path).expect("example");
        objects.extend(parse_docs(&text, example));
    }
    let mut failures = Vec::new();
    for doc in &objects {
        match apply_strict(&admin, doc).await {
            Ok(()) => eprintln!("strict dry-run ok: {}", describe(doc)),
            Err(e) => failures.push(format!("{}: {e}", describe(doc))),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let kinds: Vec<&str> = objects.iter().map(|d| text(&d["kind"])).collect();
    for kind in ["ServiceMonitor", "PrometheusRule", "Deployment", "Job"] {
        assert!(kinds.contains(&kind), "{kind} not checked: {kinds:?}");
    }

    // A misspelled or misplaced field in either monitoring object fails,
    // naming the field.
    let find = |kind: &str| objects.iter().find(|d| d["kind"] == kind).cloned();
    let mut sm = find("ServiceMonitor").expect("ServiceMonitor");
    let endpoint = sm["spec"]["endpoints"][0]
        .as_object_mut()
        .expect("endpoint");
    let scheme = endpoint.remove("scheme").expect("scheme");
    endpoint.insert("shceme".into(), scheme);
    let mut rule = find("PrometheusRule").expect("PrometheusRule");
    rule["spec"]["groups"][0]["interval_seconds"] = json!(30);
    let with_policy = objects
        .iter()
        .find(|d| d["spec"]["podFailurePolicy"].is_object());
    let mut job = with_policy
        .cloned()
        .expect("a Job with a pod failure policy");
    job["spec"]["podFailurePolicy"]["rules"][0]["onExitCode"] = json!({});
    let cases = [
        (sm, "shceme"),
        (rule, "interval_seconds"),
        (job, "onExitCode"),
    ];
    for (doc, field) in cases {
        let got = apply_strict(&admin, &doc).await;
        eprintln!("{} with {field:?}: {got:?}", describe(&doc));
        assert!(
            matches!(&got, Err(e) if e.contains(field)),
            "{} with {field:?} should be refused: {got:?}",
            describe(&doc)
        );
    }
    eprintln!(
        "{} objects passed a strict dry-run; 3 misspellings refused",
        objects.len()
    );
}
