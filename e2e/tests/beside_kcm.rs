//! kcm-rs beside an unmodified kube-controller-manager (`--job-managed-by`):
//! one namespace holds Jobs with `spec.managedBy: kcm-rs.dev/job-controller`
//! and Jobs without it; upstream KCM's job-controller and the kcm-rs binary
//! (its default `--controllers` in that mode) run side by side, each under
//! a ServiceAccount of its own, so the audit log says who wrote what. Every
//! Job must finish (one of each kind fails on its backoff limit), and from
//! the audit log: no write by KCM to an opted-in Job or its pods, none by
//! kcm-rs to the others; kcm-rs's status writes pass the API server's
//! stricter validation of externally managed Jobs (a refused write would
//! leave the Job unfinished and show as a 422 here). Both write Job events
//! as `job-controller`; only kcm-rs's carry `kcm-rs.dev/mode: beside-kcm`.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kcm_e2e::manifests as support;
use kcm_e2e::{ControlPlane, TestNamespace, UpstreamKcm};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};
use support::*;

const NS: &str = "kube-system";
const NAME: &str = "kcm-rs.dev/job-controller";
const KCM_SA: &str = "beside-kcm-upstream";
const OURS_SA: &str = "beside-kcm-rs";

/// A ServiceAccount with cluster-admin and a kubeconfig with its token.
async fn identity(cp: &ControlPlane, admin: &kube::Client, who: &str) -> std::path::PathBuf {
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), NS);
    create(&sas, json!({ "metadata": { "name": who } })).await;
    let crbs: Api<ClusterRoleBinding> = Api::all(admin.clone());
    create(
        &crbs,
        json!({
            "metadata": { "name": who },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io",
                         "kind": "ClusterRole", "name": "cluster-admin" },
            "subjects": [{ "kind": "ServiceAccount", "name": who, "namespace": NS }],
        }),
    )
    .await;
    let token = sa_token(admin, NS, who).await;
    let path = cp.dir().join(format!("{who}.kubeconfig"));
    token_kubeconfig(cp.kubeconfig(), &token, &path);
    path
}

fn job(name: &str, opted_in: bool, fail: bool) -> Job {
    let mut spec = json!({
        "completions": 3, "parallelism": 2, "backoffLimit": if fail { 0 } else { 6 },
        "template": { "metadata": { "labels": { "fail": fail.to_string() } },
            "spec": { "restartPolicy": "Never",
                      "containers": [{ "name": "main", "image": "busybox" }] } }
    });
    if opted_in {
        spec["managedBy"] = NAME.into();
    }
    serde_json::from_value(json!({ "metadata": { "name": name }, "spec": spec })).expect("job")
}

fn finished(j: &Job) -> bool {
    j.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| matches!(c.type_.as_str(), "Complete" | "Failed") && c.status == "True")
        })
}

/// One audited write: user, verb, resource, subresource, name, code.
type Write = (String, String, String, String, String, i64);

fn writes(cp: &ControlPlane, ns: &str) -> Vec<Write> {
    let text = std::fs::read_to_string(cp.audit_log()).expect("audit log");
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["stage"] == "ResponseComplete" && e["objectRef"]["namespace"] == ns)
        .filter(|e| {
            let verb = e["verb"].as_str().unwrap_or("");
            matches!(verb, "create" | "update" | "patch" | "delete")
        })
        .map(|e| {
            (
                s(&e["user"]["username"]),
                s(&e["verb"]),
                s(&e["objectRef"]["resource"]),
                s(&e["objectRef"]["subresource"]),
                s(&e["objectRef"]["name"]),
                e["responseStatus"]["code"].as_i64().unwrap_or(0),
            )
        })
        .collect()
}

#[tokio::test]
async fn mixed_namespace_each_job_has_exactly_one_controller() {
    let cp = ControlPlane::start_with_audit().expect("control plane");
    let admin = cp.client().await.expect("client");
    let nss: Api<Namespace> = Api::all(admin.clone());
    if nss.get_opt(NS).await.expect("get ns").is_none() {
        create(&nss, json!({ "metadata": { "name": NS } })).await;
    }
    let kcm_kc = identity(&cp, &admin, KCM_SA).await;
    let ours_kc = identity(&cp, &admin, OURS_SA).await;
    let kc_flag = format!("--kubeconfig={}", kcm_kc.display());
    let _kcm = UpstreamKcm::start(&cp, &["job-controller"], &[&kc_flag]).expect("KCM");
    let log = std::fs::File::create(cp.dir().join("kcm-rs.log")).expect("log");
    let mut ours = Command::new(kcm_rs_binary())
        .arg(format!("--kubeconfig={}", ours_kc.display()))
        .args([
            &format!("--job-managed-by={NAME}"),
            "--leader-elect=false",
            "--secure-port=0",
            "--v=2",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .expect("spawn kcm-rs");

    let ns = TestNamespace::create(&admin, "beside").await.expect("ns");
    let jobs: Api<Job> = Api::namespaced(admin.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns.name);
    // Every pod ever seen, deleted ones included, to name each write's Job.
    let history = kcm_e2e::history::PodHistory::start(&admin, &ns.name).await;
    let mut opted = Vec::new();
    for i in 0..6 {
        let (name, opted_in, fail) = (format!("j{i}"), i % 2 == 0, i >= 4);
        jobs.create(&PostParams::default(), &job(&name, opted_in, fail))
            .await
            .expect("create job");
        if opted_in {
            opted.push(name);
        }
    }
    // Play the kubelet until every Job is finished.
    let start = Instant::now();
    loop {
        let all = jobs.list(&ListParams::default()).await.expect("jobs").items;
        if all.iter().all(finished) {
            break;
        }
        let log_tail = std::fs::read_to_string(cp.dir().join("kcm-rs.log")).unwrap_or_default();
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "unfinished: {:?}\nkcm-rs log: {}",
            all.iter()
                .filter(|j| !finished(j))
                .map(|j| &j.metadata.name)
                .collect::<Vec<_>>(),
            &log_tail[log_tail.len().saturating_sub(3000)..]
        );
        for p in pods.list(&ListParams::default()).await.expect("pods").items {
            let phase = p
                .status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .unwrap_or("");
            if matches!(phase, "Succeeded" | "Failed") || p.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let fail =
                p.metadata.labels.as_ref().and_then(|l| l.get("fail")) == Some(&"true".to_string());
            let name = p.metadata.name.clone().unwrap_or_default();
            kcm_e2e::kubelet::finish_pod(&pods, &name, if fail { 1 } else { 0 })
                .await
                .ok();
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Trailing finalizer removals and counts.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let all_pods = pods.list(&ListParams::default()).await.expect("pods").items;
    let seen: Vec<Pod> = history.all().iter().map(|e| e.pod().clone()).collect();
    let job_of: BTreeMap<String, String> = seen
        .iter()
        .map(|p| {
            let l = p.metadata.labels.clone().unwrap_or_default();
            let job = l
                .get("batch.kubernetes.io/job-name")
                .cloned()
                .unwrap_or_default();
            (p.metadata.name.clone().unwrap_or_default(), job)
        })
        .collect();
    assert!(
        all_pods
            .iter()
            .all(|p| p.metadata.finalizers.as_ref().is_none_or(|f| f.is_empty())),
        "every tracking finalizer removed"
    );
    let pods_of = |opted_in: bool| {
        job_of
            .values()
            .filter(|j| opted.contains(j) == opted_in)
            .count()
    };
    for j in jobs.list(&ListParams::default()).await.expect("jobs").items {
        let st = j.status.clone().unwrap_or_default();
        let name = j.metadata.name.clone().unwrap_or_default();
        let failed = name == "j4" || name == "j5";
        let want = if failed { "Failed" } else { "Complete" };
        assert!(
            st.conditions
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == want && c.status == "True"),
            "{name} {want}"
        );
        assert_eq!(
            st.succeeded.unwrap_or(0),
            if failed { 0 } else { 3 },
            "{name}"
        );
    }

    let ws = writes(&cp, &ns.name);
    let user = |sa: &str| format!("system:serviceaccount:{NS}:{sa}");
    let (kcm, us) = (user(KCM_SA), user(OURS_SA));
    let is_opted = |w: &Write| match w.2.as_str() {
        "jobs" => Some(opted.contains(&w.4)),
        "pods" if !w.4.is_empty() => job_of.get(&w.4).map(|j| opted.contains(j)),
        _ => None,
    };
    let mut figures: BTreeMap<String, usize> = BTreeMap::new();
    let mut wrong = Vec::new();
    for w in ws.iter().filter(|w| w.0 == kcm || w.0 == us) {
        let who = if w.0 == us { "kcm-rs" } else { "kcm" };
        let target = match is_opted(w) {
            Some(true) => "opted-in",
            Some(false) => "other",
            None => "unnamed",
        };
        let sub = if w.3.is_empty() {
            String::new()
        } else {
            format!("/{}", w.3)
        };
        *figures
            .entry(format!("{who} {} {}{sub} {target} {}", w.1, w.2, w.5))
            .or_default() += 1;
        if (who == "kcm" && target == "opted-in") || (who == "kcm-rs" && target == "other") {
            wrong.push(w.clone());
        }
        assert!(w.5 < 400 || w.5 == 404 || w.5 == 409, "refused write {w:?}");
    }
    eprintln!("audited writes (who verb resource target code: count):");
    for (k, n) in &figures {
        eprintln!("  {k}: {n}");
    }
    // Pod creations carry no name (generateName): each side created
    // exactly its own Jobs' pods.
    let creates = |u: &str| {
        ws.iter()
            .filter(|w| w.0 == u && w.1 == "create" && w.2 == "pods" && w.5 < 300)
            .count()
    };
    assert_eq!(
        creates(&us),
        pods_of(true),
        "kcm-rs created the opted-in Jobs' pods"
    );
    assert_eq!(
        creates(&kcm),
        pods_of(false),
        "KCM created the other Jobs' pods"
    );
    assert!(wrong.is_empty(), "writes across the line: {wrong:#?}");

    // Both write events as `job-controller`; kcm-rs's carry its mode.
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(admin.clone(), &ns.name);
    let mut marked = BTreeMap::<(bool, Option<String>), usize>::new();
    for e in events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
    {
        if e.involved_object.kind.as_deref() != Some("Job") {
            continue;
        }
        let job = e.involved_object.name.clone().unwrap_or_default();
        assert_eq!(
            e.source.and_then(|s| s.component).as_deref(),
            Some("job-controller"),
            "{job}"
        );
        let mode = e
            .metadata
            .annotations
            .and_then(|a| a.get("kcm-rs.dev/mode").cloned());
        *marked.entry((opted.contains(&job), mode)).or_default() += 1;
    }
    eprintln!("Job events (opted in, kcm-rs.dev/mode): {marked:?}");
    assert!(
        marked
            .keys()
            .all(|(opted_in, mode)| *opted_in == (mode.as_deref() == Some("beside-kcm"))),
        "kcm-rs's events, and only those, say beside-kcm: {marked:?}"
    );
    assert!(marked.contains_key(&(true, Some("beside-kcm".into()))));
    assert!(marked.contains_key(&(false, None)));
    ours.kill().ok();
    ours.wait().ok();
}
