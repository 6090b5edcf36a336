//! Each kcm-rs identity's effective rights, as the API server reports them
//! with its RBAC bootstrap policy intact (no binding deleted), next to the
//! bootstrap role upstream KCM's controller runs under: one
//! SubjectAccessReview per verb and resource, for both accounts. The rows
//! must be the table of docs/security.md, and kcm-rs's rights must be
//! exactly what `manifests/base/rbac.yaml` grants: no bootstrap binding
//! reaches kcm-rs's accounts.

use futures::StreamExt;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Namespace;
use kcm_e2e::ControlPlane;
use kcm_e2e::manifests as support;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};
use support::*;

const VERBS: &[&str] = &[
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];

/// (group, resource[/subresource], namespaced): every resource any of the
/// compared roles names, plus a few sensitive ones no role should reach.
const RESOURCES: &[(&str, &str, bool)] = &[
    ("", "pods", true),
    ("", "pods/status", true),
    ("", "nodes", false),
    ("", "nodes/status", false),
    ("", "events", true),
    ("events.k8s.io", "events", true),
    ("", "replicationcontrollers", true),
    ("", "replicationcontrollers/scale", true),
    ("", "secrets", true),
    ("", "serviceaccounts", true),
    ("", "serviceaccounts/token", true),
    ("batch", "jobs", true),
    ("batch", "jobs/status", true),
    ("batch", "jobs/finalizers", true),
    ("policy", "poddisruptionbudgets", true),
    ("policy", "poddisruptionbudgets/status", true),
    ("apps", "deployments", true),
    ("apps", "deployments/scale", true),
    ("apps", "replicasets", true),
    ("apps", "statefulsets", true),
    ("coordination.k8s.io", "leases", true),
    ("authentication.k8s.io", "tokenreviews", false),
    ("authorization.k8s.io", "subjectaccessreviews", false),
];

/// (kcm-rs account, upstream KCM's account for the same controller).
const PAIRS: &[(&str, &str)] = &[
    ("kcm-rs-job-controller", "job-controller"),
    ("kcm-rs-pod-garbage-collector", "pod-garbage-collector"),
    // Upstream's taint eviction runs as the node lifecycle controller.
    ("kcm-rs-taint-eviction-controller", "node-controller"),
    ("kcm-rs-disruption-controller", "disruption-controller"),
];

/// Named checks the process's Role grants (resourceNames), and names it
/// must not reach: (verb, group, resource, name).
const NAMED: &[(&str, &str, &str, &str)] = &[
    (
        "create",
        "",
        "serviceaccounts/token",
        "kcm-rs-job-controller",
    ),
    (
        "create",
        "",
        "serviceaccounts/token",
        "kcm-rs-pod-garbage-collector",
    ),
    (
        "create",
        "",
        "serviceaccounts/token",
        "kcm-rs-taint-eviction-controller",
    ),
    (
        "create",
        "",
        "serviceaccounts/token",
        "kcm-rs-disruption-controller",
    ),
    ("create", "", "serviceaccounts/token", "job-controller"),
    ("create", "", "serviceaccounts/token", "kcm-rs"),
    ("get", "coordination.k8s.io", "leases", "kcm-rs"),
    ("update", "coordination.k8s.io", "leases", "kcm-rs"),
    ("watch", "coordination.k8s.io", "leases", "kcm-rs"),
    (
        "update",
        "coordination.k8s.io",
        "leases",
        "kube-controller-manager",
    ),
];

fn review(account: &str, verb: &str, group: &str, res: &str, ns: bool, name: &str) -> Value {
    let (resource, sub) = res.split_once('/').unwrap_or((res, ""));
    let attrs = ResourceAttributes {
        verb: Some(verb.into()),
        group: Some(group.into()),
        resource: Some(resource.into()),
        subresource: (!sub.is_empty()).then(|| sub.into()),
        namespace: ns.then(|| "kube-system".into()),
        name: (!name.is_empty()).then(|| name.into()),
        ..Default::default()
    };
    // A ServiceAccount's groups, as the token authenticator sets them; a
    // `system:` user (KCM's own) is taken as it is.
    let (user, groups) = if account.starts_with("system:") {
        (account.to_string(), &["system:authenticated"][..])
    } else {
        let user = format!("system:serviceaccount:kube-system:{account}");
        let groups = &[
            "system:serviceaccounts",
            "system:serviceaccounts:kube-system",
            "system:authenticated",
        ][..];
        (user, groups)
    };
    json!(SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user),
            groups: Some(groups.iter().map(|g| g.to_string()).collect()),
            resource_attributes: Some(attrs),
            ..Default::default()
        },
        ..Default::default()
    })
}

async fn allowed(sars: &Api<SubjectAccessReview>, body: Value) -> bool {
    let sar: SubjectAccessReview = obj(body);
    let got = sars
        .create(&PostParams::default(), &sar)
        .await
        .expect("SAR");
    got.status.is_some_and(|s| s.allowed)
}

/// `account`'s rights over [`RESOURCES`] as "resource verbs; ...".
async fn rights(sars: &Api<SubjectAccessReview>, account: &str) -> String {
    let mut parts = Vec::new();
    for (group, res, ns) in RESOURCES {
        let checks = VERBS
            .iter()
            .map(|v| allowed(sars, review(account, v, group, res, *ns, "")));
        let answers: Vec<bool> = futures::stream::iter(checks).buffered(8).collect().await;
        let verbs: Vec<&str> = VERBS
            .iter()
            .zip(answers)
            .filter_map(|(v, a)| a.then_some(*v))
            .collect();
        if !verbs.is_empty() {
            let name = if group.is_empty() || *group == "batch" || *group == "apps" {
                res.to_string()
            } else {
                format!("{group}/{res}")
            };
            parts.push(format!("{name} {}", verbs.join(", ")));
        }
    }
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join("; ")
    }
}

/// The same rights from `base/rbac.yaml`'s ClusterRole for the account.
fn granted(role: &str) -> String {
    let rbac = docs("base/rbac.yaml");
    let d = rbac
        .iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == role)
        .expect("role");
    let mut parts = Vec::new();
    for (group, res, _) in RESOURCES {
        let verbs: Vec<&str> = VERBS
            .iter()
            .copied()
            .filter(|v| {
                d["rules"].as_array().expect("rules").iter().any(|r| {
                    let has = |k: &str, want: &str| {
                        r[k].as_array().is_some_and(|a| {
                            a.iter().any(|x| {
                                let x = x.as_str().unwrap_or("");
                                x == want
                                    || x == "*"
                                    || (x.starts_with("*/") && want.ends_with(&x[1..]))
                            })
                        })
                    };
                    has("apiGroups", group) && has("resources", res) && has("verbs", v)
                })
            })
            .collect();
        if !verbs.is_empty() {
            let name = if group.is_empty() || *group == "batch" || *group == "apps" {
                res.to_string()
            } else {
                format!("{group}/{res}")
            };
            parts.push(format!("{name} {}", verbs.join(", ")));
        }
    }
    parts.join("; ")
}

#[tokio::test]
async fn effective_rights_with_the_bootstrap_policy_intact() {
    let cp = ControlPlane::start().expect("control plane");
    let admin = cp.client().await.expect("admin client");
    let ns_api: Api<Namespace> = Api::all(admin.clone());
    if ns_api.get_opt("kube-system").await.expect("get").is_none() {
        create(&ns_api, json!({ "metadata": { "name": "kube-system" } })).await;
    }
    let rbac = manifests().join("base/rbac.yaml");
    kcm_e2e::apply::create_from_file(&admin, &rbac, "kube-system")
        .await
        .expect("apply base/rbac.yaml");
    // The bootstrap bindings for KCM's names are there, untouched.
    let crbs: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = Api::all(admin.clone());
    for b in [
        "system:controller:job-controller",
        "system:controller:pod-garbage-collector",
        "system:controller:node-controller",
        "system:controller:disruption-controller",
    ] {
        assert!(crbs.get_opt(b).await.expect("get").is_some(), "{b}");
    }
    let sars: Api<SubjectAccessReview> = Api::all(admin.clone());
    let mut rows = Vec::new();
    for (ours, upstream) in PAIRS {
        let mine = rights(&sars, ours).await;
        let theirs = rights(&sars, upstream).await;
        let role = format!(
            "system:kcm-rs:{}",
            ours.strip_prefix("kcm-rs-").expect("prefix")
        );
        assert_eq!(mine, granted(&role), "{ours}: effective != {role}");
        rows.push(format!(
            "| `{ours}` | {mine} | `{upstream}` (`system:controller:{upstream}`) | {theirs} |"
        ));
    }
    let process = rights(&sars, "kcm-rs").await;
    let mut named = Vec::new();
    for (verb, group, res, name) in NAMED {
        let ok = allowed(&sars, review("kcm-rs", verb, group, res, true, name)).await;
        let shown = if group.is_empty() {
            res.to_string()
        } else {
            format!("{group}/{res}")
        };
        named.push(format!(
            "{verb} {shown} {name}: {}",
            if ok { "yes" } else { "no" }
        ));
    }
    let kcm = rights(&sars, "system:kube-controller-manager").await;
    let may = |n: &str| named.iter().any(|l| l == n);
    assert!(may(
        "create serviceaccounts/token kcm-rs-job-controller: yes"
    ));
    assert!(may("create serviceaccounts/token job-controller: no"));
    assert!(may(
        "update coordination.k8s.io/leases kube-controller-manager: no"
    ));
    rows.push(format!(
        "| `kcm-rs` (process) | {process}; in kube-system by name: {} | KCM's own user `system:kube-controller-manager` | {kcm} (and tokens for any account) |",
        named.join(", ")
    ));
    let table = rows.join("\n");
    eprintln!("{table}");
    let security = std::fs::read_to_string(kcm_e2e::binaries::repo_root().join("docs/security.md"))
        .expect("docs/security.md");
    let missing: Vec<&String> = rows
        .iter()
        .filter(|r| !security.contains(r.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "rows not in docs/security.md: {missing:#?}"
    );
}
