//! kcm-rs as installed, for the tests of the manifests, the chart and the
//! binary beside a control plane: reading the YAML (`manifests/`,
//! kustomize), dry runs, ServiceAccount kubeconfigs, running the kcm-rs
//! binary or a pod of it, Helm and the Prometheus operator's CRDs, small
//! object builders.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod, PodCondition, Secret, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, ListParams, PostParams};
use kube::config::Kubeconfig;
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::ControlPlane;
use crate::binaries::repo_root;
use crate::control_plane::{client_from_kubeconfig, tail};
use crate::kubelet;
use crate::wait::{wait_for, wait_for_list};

pub const WAIT: Duration = Duration::from_secs(60);

pub fn manifests() -> PathBuf {
    repo_root().join("manifests")
}

pub fn parse_docs(text: &str, what: &str) -> Vec<Value> {
    use serde::Deserialize;
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{what}: {e}")))
        .filter(|v| !v.is_null())
        .collect()
}

/// Every YAML document of `manifests/<file>`, as JSON values.
pub fn docs(file: &str) -> Vec<Value> {
    let path = manifests().join(file);
    let text = std::fs::read_to_string(&path).expect("read manifest");
    parse_docs(&text, &path.display().to_string())
}

pub fn kinds(docs: &[Value]) -> Vec<&str> {
    docs.iter().map(|d| text(&d["kind"])).collect()
}

pub fn text(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

pub fn container(deployment: &Value) -> &Value {
    &deployment["spec"]["template"]["spec"]["containers"][0]
}

pub fn container_args(deployment: &Value) -> Vec<String> {
    let args = container(deployment)["args"].as_array().expect("args");
    args.iter().map(|a| text(a).to_string()).collect()
}

/// `args` as the kubelet passes them to the container: each `$(NAME)` of
/// `env` replaced by its value, `$$` by `$` (a `$(NAME)` not in `env` stays).
pub fn kubelet_expand(args: Vec<String>, env: &[(&str, &str)]) -> Vec<String> {
    args.into_iter()
        .map(|arg| {
            let mut out = String::new();
            let mut rest = arg.as_str();
            while let Some(at) = rest.find('$') {
                out.push_str(&rest[..at]);
                rest = &rest[at..];
                if let Some(after) = rest.strip_prefix("$$") {
                    out.push('$');
                    rest = after;
                    continue;
                }
                let known = rest.strip_prefix("$(").and_then(|r| {
                    let (name, after) = r.split_once(')')?;
                    let (_, value) = env.iter().find(|(n, _)| *n == name)?;
                    Some((*value, after))
                });
                match known {
                    Some((value, after)) => {
                        out.push_str(value);
                        rest = after;
                    }
                    None => {
                        out.push('$');
                        rest = &rest[1..];
                    }
                }
            }
            out.push_str(rest);
            out
        })
        .collect()
}

pub const RBAC_KINDS: &str = "ServiceAccount ServiceAccount ServiceAccount ServiceAccount \
    ServiceAccount ClusterRole ClusterRoleBinding Role RoleBinding Lease ClusterRole ClusterRole \
    ClusterRole ClusterRole ClusterRoleBinding ClusterRoleBinding ClusterRoleBinding \
    ClusterRoleBinding ClusterRole";

/// Which kinds each manifest holds (paths under `manifests/`, `examples/`
/// aside); the first four are base's resources, the next four the
/// monitoring component's, the next the pdb component's.
pub const KINDS: &[(&str, &str)] = &[
    ("base/rbac.yaml", RBAC_KINDS),
    ("base/deployment.yaml", "Deployment"),
    ("base/service.yaml", "Service"),
    ("base/networkpolicy.yaml", "NetworkPolicy"),
    ("monitoring/servicemonitor.yaml", "ServiceMonitor"),
    ("monitoring/prometheusrule.yaml", "PrometheusRule"),
    ("monitoring/dashboard.yaml", "ConfigMap"),
    (
        "monitoring/metrics-reader.yaml",
        "ServiceAccount Secret ClusterRoleBinding",
    ),
    ("pdb/pdb.yaml", "PodDisruptionBudget"),
    ("kustomization.yaml", "Kustomization"),
    ("base/kustomization.yaml", "Kustomization"),
    ("monitoring/kustomization.yaml", "Component"),
    ("pdb/kustomization.yaml", "Component"),
    ("beside-kcm/kustomization.yaml", "Kustomization"),
    ("kube-prometheus-stack/kustomization.yaml", "Kustomization"),
    (
        "beside-kcm/admission-policy.yaml",
        "MutatingAdmissionPolicy MutatingAdmissionPolicyBinding",
    ),
    ("kind/1.34.yaml", "Cluster"),
    ("kind/1.35.yaml", "Cluster"),
    ("kind/1.36.yaml", "Cluster"),
    ("kind/1.37.yaml", "Cluster"),
];

/// `manifests/**/*.yaml` but `examples/`, relative to `manifests/`, sorted.
pub fn manifest_files() -> Vec<String> {
    fn walk(dir: &Path, rel: &str, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir)
            .expect("read manifests dir")
            .flatten()
        {
            let name = e.file_name().to_string_lossy().into_owned();
            let path = format!("{rel}{name}");
            if e.path().is_dir() && name != "examples" {
                walk(&e.path(), &format!("{path}/"), out);
            } else if name.ends_with(".yaml") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&manifests(), "", &mut out);
    out.sort();
    out
}

/// `kubectl kustomize manifests/<dir>` with the harness's kubectl: the
/// built objects.
pub fn kustomize(dir: &str) -> Vec<Value> {
    let kubectl = crate::binaries::ensure_built_with_kubectl().expect("kubectl");
    let mut cmd = Command::new(kubectl.join("kcm-e2e-kubectl"));
    let out = cmd
        .arg("kustomize")
        .arg(manifests().join(dir))
        .output()
        .expect("kubectl");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "kustomize {dir}: {stderr}");
    parse_docs(&String::from_utf8_lossy(&out.stdout), "kustomize")
}

/// Values that must agree across files: `left = right`, each a literal, a
/// Deployment flag (`--name`) or `file#doc/json-pointer` (`pod/...` is the
/// Deployment's pod template, `ctr/...` its container).
pub const AGREE: &[&str] = &[
    "pod/spec/serviceAccountName = base/rbac.yaml#0/metadata/name",
    "pod/spec/priorityClassName = system-cluster-critical",
    // The downward API: the pod's name, namespace and UID (the controllers'
    // accounts are in its namespace; their tokens are bound to its Secret).
    "ctr/env/0/name = POD_NAME",
    "ctr/env/0/valueFrom/fieldRef/fieldPath = metadata.name",
    "ctr/env/1/name = POD_NAMESPACE",
    "ctr/env/1/valueFrom/fieldRef/fieldPath = metadata.namespace",
    "ctr/env/2/name = POD_UID",
    "ctr/env/2/valueFrom/fieldRef/fieldPath = metadata.uid",
    "base/rbac.yaml#7/rules/2/resources/0 = secrets",
    "base/rbac.yaml#7/rules/2/verbs = [\"create\"]",
    "pdb/pdb.yaml#0/spec/maxUnavailable = 1",
    "pdb/pdb.yaml#0/metadata/namespace = base/deployment.yaml#0/metadata/namespace",
    "base/deployment.yaml#0/spec/replicas = 2",
    "--leader-elect = true",
    // The Lease is in the pod's namespace (the kubelet expands the flag from
    // the downward API), where its Role, RoleBinding and object are.
    "--leader-elect-resource-namespace = $(POD_NAMESPACE)",
    "base/rbac.yaml#7/metadata/namespace = base/deployment.yaml#0/metadata/namespace",
    "--leader-elect-resource-name = base/rbac.yaml#7/rules/1/resourceNames/0",
    "--leader-elect-resource-name = base/rbac.yaml#9/metadata/name",
    "base/rbac.yaml#9/metadata/namespace = base/deployment.yaml#0/metadata/namespace",
    "base/rbac.yaml#8/metadata/namespace = base/deployment.yaml#0/metadata/namespace",
    "--use-service-account-credentials = true",
    // A placeholder that base/kustomization.yaml's images: entry replaces
    // with the release's repository and version.
    "ctr/image = kcm-rs",
    "base/kustomization.yaml#0/images/0/name = kcm-rs",
    concat!(
        "base/kustomization.yaml#0/images/0/newTag = ",
        env!("CARGO_PKG_VERSION")
    ),
    "ctr/ports/0/containerPort = --secure-port",
    "ctr/livenessProbe/httpGet/path = /livez",
    "ctr/readinessProbe/httpGet/path = /readyz",
    // The probes ask the health port (plain HTTP, a thread of its own).
    "ctr/ports/1/containerPort = --health-port",
    "ctr/livenessProbe/httpGet/port = ctr/ports/1/name",
    "ctr/readinessProbe/httpGet/port = ctr/ports/1/name",
    "ctr/livenessProbe/httpGet/scheme = HTTP",
    "ctr/securityContext/readOnlyRootFilesystem = true",
    "pod/spec/securityContext/runAsNonRoot = true",
    "base/service.yaml#0/spec/ports/0/targetPort = ctr/ports/0/name",
    "monitoring/servicemonitor.yaml#0/spec/endpoints/0/port = base/service.yaml#0/spec/ports/0/name",
    "monitoring/servicemonitor.yaml#0/spec/endpoints/0/scheme = https",
    "monitoring/servicemonitor.yaml#0/apiVersion = monitoring.coreos.com/v1",
    // The ServiceMonitor scrapes with the scraper's token (a Secret in its
    // namespace, filled in by KCM's token controller), not Prometheus's own.
    "monitoring/servicemonitor.yaml#0/spec/endpoints/0/authorization/type = Bearer",
    "monitoring/servicemonitor.yaml#0/spec/endpoints/0/authorization/credentials/name = monitoring/metrics-reader.yaml#1/metadata/name",
    "monitoring/servicemonitor.yaml#0/spec/endpoints/0/authorization/credentials/key = token",
    "monitoring/servicemonitor.yaml#0/metadata/namespace = monitoring/metrics-reader.yaml#1/metadata/namespace",
    "monitoring/metrics-reader.yaml#1/type = kubernetes.io/service-account-token",
    "monitoring/metrics-reader.yaml#1/metadata/annotations/kubernetes.io~1service-account.name = monitoring/metrics-reader.yaml#0/metadata/name",
    "monitoring/metrics-reader.yaml#0/metadata/namespace = monitoring/metrics-reader.yaml#1/metadata/namespace",
    "monitoring/metrics-reader.yaml#2/subjects/0/name = monitoring/metrics-reader.yaml#0/metadata/name",
    "monitoring/metrics-reader.yaml#2/subjects/0/namespace = monitoring/metrics-reader.yaml#0/metadata/namespace",
    "monitoring/metrics-reader.yaml#2/roleRef/name = base/rbac.yaml#18/metadata/name",
    "monitoring/prometheusrule.yaml#0/apiVersion = monitoring.coreos.com/v1",
    "monitoring/dashboard.yaml#0/metadata/labels/grafana_dashboard = 1",
];

/// One side of an [`AGREE`] line, rendered as text.
pub fn resolve(side: &str) -> String {
    let dep = "base/deployment.yaml#0/spec/template";
    let path = match side.split_once('/') {
        Some(("pod", rest)) => format!("{dep}/{rest}"),
        Some(("ctr", rest)) => format!("{dep}/spec/containers/0/{rest}"),
        _ => side.to_string(),
    };
    let value = if let Some(flag) = side.strip_prefix("--") {
        let args = container_args(&docs("base/deployment.yaml")[0]);
        let prefix = format!("--{flag}=");
        let found = args.iter().find_map(|a| a.strip_prefix(&prefix));
        json!(found.unwrap_or_else(|| panic!("no {side} flag")))
    } else if let Some((file, pointer)) = path.split_once('#') {
        let (doc, pointer) = pointer.split_once('/').expect("doc/pointer");
        let doc = &docs(file)[doc.parse::<usize>().expect("doc index")];
        let found = doc.pointer(&format!("/{pointer}"));
        found.unwrap_or_else(|| panic!("{side} not found")).clone()
    } else {
        return side.to_string();
    };
    value
        .as_str()
        .map_or_else(|| value.to_string(), str::to_string)
}

/// Creates every document of `file` with server-side dry-run (`dryRun=All`):
/// validation, defaulting and admission (PriorityClass included), nothing stored.
pub async fn dry_run(client: &kube::Client, file: &str) {
    for doc in docs(file) {
        let obj: DynamicObject = serde_json::from_value(doc).expect("object");
        let gvk = GroupVersionKind::try_from(obj.types.as_ref().expect("types")).expect("gvk");
        let (ar, caps) = discovery::pinned_kind(client, &gvk)
            .await
            .expect("discovery");
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Namespaced => {
                Api::namespaced_with(client.clone(), &obj.namespace().expect("ns"), &ar)
            }
            Scope::Cluster => Api::all_with(client.clone(), &ar),
        };
        let pp = PostParams {
            dry_run: true,
            ..Default::default()
        };
        let res = api.create(&pp, &obj).await;
        res.unwrap_or_else(|e| panic!("{file}: dry-run of {}: {e}", obj.name_any()));
    }
}

/// Builds kcm-rs (a no-op when current) with this test binary's profile and
/// returns its path; `$KCM_RS_BIN` instead if set.
pub fn kcm_rs_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("KCM_RS_BIN") {
        return PathBuf::from(p);
    }
    // This test runs as target/<profile>/deps/manifests-<hash>.
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe.parent().and_then(Path::parent).expect("profile");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "-p", "kcm-rs", "--bin", "kcm-rs"]);
    if profile_dir.ends_with("release") {
        cmd.arg("--release");
    }
    let built = cmd.current_dir(repo_root()).status().expect("cargo");
    assert!(built.success(), "cargo build -p kcm-rs failed");
    let bin = profile_dir.join("kcm-rs");
    assert!(bin.exists(), "{} missing after the build", bin.display());
    bin
}

/// The kcm-rs binary against `kubeconfig` with `args`, its log (stderr) in
/// `log`: for tests that run it through the fault proxy (not manifests.rs).
pub fn spawn_kcm_rs(kubeconfig: &Path, args: &[&str], log: &Path) -> std::process::Child {
    let log = std::fs::File::create(log).expect("log file");
    Command::new(kcm_rs_binary())
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("kcm-rs")
}

/// Writes a kubeconfig with a bearer `token` for the admin kubeconfig's
/// server and CA.
pub fn token_kubeconfig(admin: &Path, token: &str, out: &Path) {
    let kc = Kubeconfig::read_from(admin).expect("admin kubeconfig");
    let cluster = kc.clusters.first().and_then(|c| c.cluster.clone());
    let cluster = cluster.expect("cluster");
    let mut c = json!({ "server": cluster.server.expect("server") });
    if let Some(data) = cluster.certificate_authority_data {
        c["certificate-authority-data"] = json!(data);
    }
    if let Some(file) = cluster.certificate_authority {
        c["certificate-authority"] = json!(file);
    }
    let doc = json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "kcm-rs",
        "clusters": [{ "name": "local", "cluster": c }],
        "users": [{ "name": "kcm-rs", "user": { "token": token } }],
        "contexts": [{ "name": "kcm-rs", "context": { "cluster": "local", "user": "kcm-rs" } }],
    });
    std::fs::write(out, serde_yaml_ng::to_string(&doc).expect("yaml")).expect("write kubeconfig");
}

pub async fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    crate::https::get(port, path).await
}

/// The kcm-rs process under test; killed on drop.
pub struct KcmRs {
    pub child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl Drop for KcmRs {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl KcmRs {
    /// The last 30 lines of kcm-rs's log.
    pub fn log_tail(&self) -> String {
        tail(&self.log, 30)
    }

    /// Panics with `what` and the end of kcm-rs's log unless `ok`.
    pub fn check(&self, ok: bool, what: impl std::fmt::Display) {
        if !ok {
            panic!(
                "{what}\n--- kcm-rs log, last lines:\n{}",
                tail(&self.log, 40)
            );
        }
    }

    pub fn ok<T, E: std::fmt::Display>(&self, r: Result<T, E>) -> T {
        r.unwrap_or_else(|e| {
            self.check(false, e);
            unreachable!()
        })
    }

    /// [`wait_for`], failing with kcm-rs's log.
    pub async fn until<K>(&self, api: &Api<K>, name: &str, pred: impl Fn(&K) -> bool) -> K
    where
        K: Resource + Clone + DeserializeOwned + Serialize + Debug,
    {
        self.ok(wait_for(api, name, WAIT, name, pred).await)
    }
}

pub fn obj<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("valid object")
}

pub async fn create<K>(api: &Api<K>, v: Value) -> K
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let o: K = obj(v);
    let res = api.create(&PostParams::default(), &o).await;
    res.unwrap_or_else(|e| panic!("creating {}: {e}", o.name_any()))
}

pub fn pod_condition<'a>(p: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    let conds = p.status.as_ref().and_then(|s| s.conditions.as_ref())?;
    conds.iter().find(|c| c.type_ == type_)
}

pub fn job_has(job: &Job, type_: &str) -> bool {
    let conds = job.status.as_ref().and_then(|s| s.conditions.as_ref());
    conds.is_some_and(|cs| cs.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

pub fn job(name: &str, fail_on_42: bool) -> Value {
    let container = json!({ "name": "main", "image": "busybox" });
    let mut spec = json!({
        "backoffLimit": 6,
        "template": { "spec": { "restartPolicy": "Never", "containers": [container] } }
    });
    if fail_on_42 {
        let exit_42 = json!({ "operator": "In", "values": [42] });
        let rule = json!({ "action": "FailJob", "onExitCodes": exit_42 });
        spec["podFailurePolicy"] = json!({ "rules": [rule] });
    }
    json!({ "metadata": { "name": name }, "spec": spec })
}

/// Waits for the Job's one pod and ends it with `code` on `node`.
pub async fn finish_job_pod(kcm: &KcmRs, pods: &Api<Pod>, job: &str, node: &str, code: i32) {
    let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}"));
    let found = wait_for_list(pods, &lp, WAIT, job, |ps| ps.len() == 1).await;
    end_pod(kcm, pods, &kcm.ok(found)[0].name_any(), node, code).await;
}

/// Binds pod `name` to `node`, ends it with `code` and waits for the Job
/// controller to remove its tracking finalizer.
pub async fn end_pod(kcm: &KcmRs, pods: &Api<Pod>, name: &str, node: &str, code: i32) {
    kubelet::bind_pod(pods, name, node).await.expect("bind");
    let finished = kubelet::finish_pod(pods, name, code).await;
    finished.expect("finish");
    kcm.until(pods, name, |p| p.finalizers().is_empty()).await;
}

/// A pod labelled `app`, controlled by the ReplicaSet `owner` (name, uid).
pub fn pod(name: &str, app: &str, owner: Option<(&str, &str)>) -> Value {
    let mut p = json!({
        "metadata": { "name": name, "labels": { "app": app } },
        "spec": { "containers": [{ "name": "main", "image": "busybox" }] }
    });
    if let Some((rs, uid)) = owner {
        let r = json!({ "kind": "ReplicaSet", "name": rs, "uid": uid, "controller": true });
        p["metadata"]["ownerReferences"] = json!([r]);
        p["metadata"]["ownerReferences"][0]["apiVersion"] = json!("apps/v1");
    }
    p
}

/// A ReplicaSet nobody reconciles (no replicaset controller runs here),
/// controlled by a Deployment that does not exist if `orphaned`.
pub fn replica_set(name: &str, replicas: i32, orphaned: bool) -> Value {
    let labels = json!({ "app": name });
    let template =
        json!({ "metadata": { "labels": labels }, "spec": pod(name, name, None)["spec"] });
    let spec = json!({ "replicas": replicas, "selector": { "matchLabels": labels }, "template": template });
    let mut rs = json!({ "metadata": { "name": name }, "spec": spec });
    if orphaned {
        let uid = "00000000-0000-0000-0000-000000000001";
        let d = json!({ "kind": "Deployment", "name": "gone", "uid": uid, "controller": true });
        rs["metadata"]["ownerReferences"] = json!([d]);
        rs["metadata"]["ownerReferences"][0]["apiVersion"] = json!("apps/v1");
    }
    rs
}

/// Metric names used by the alerts and the dashboard.
pub fn referenced_metrics() -> BTreeSet<String> {
    const PREFIXES: &str = "leader_election_ workqueue_ rest_client_ job_controller_ \
                            pod_gc_collector_ taint_eviction_controller_ process_";
    let rules = serde_json::to_string(&docs("monitoring/prometheusrule.yaml")).expect("json");
    let dash = text(&docs("monitoring/dashboard.yaml")[0]["data"]["kcm-rs.json"]).to_string();
    let words = (rules + &dash).replace(|c: char| !(c.is_ascii_alphanumeric() || c == '_'), " ");
    let known = |w: &&str| PREFIXES.split_whitespace().any(|p| w.starts_with(p));
    words
        .split_whitespace()
        .filter(known)
        .map(str::to_string)
        .collect()
}

/// Applies base/rbac.yaml, mints a ServiceAccount token and starts kcm-rs with
/// the Deployment's flags under that identity (local address, port and
/// credentials; short pod GC and stale-condition timers).
/// A one-hour token of ServiceAccount `ns/name` (TokenRequest API).
pub async fn sa_token(admin: &kube::Client, ns: &str, name: &str) -> String {
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), ns);
    let req: TokenRequest = obj(json!({ "spec": { "audiences": [], "expirationSeconds": 3600 } }));
    let tr: TokenRequest = sas
        .create_subresource("token", name, &PostParams::default(), &req)
        .await
        .expect("token");
    tr.status.and_then(|s| s.token).expect("token")
}

/// The controllers' ServiceAccounts in `base/rbac.yaml`: none of them is a
/// name kube-apiserver's bootstrap policy binds, so the API server's
/// bootstrap bindings stay in place in these tests.
pub const CONTROLLER_ACCOUNTS: &[&str] = &[
    "kcm-rs-job-controller",
    "kcm-rs-pod-garbage-collector",
    "kcm-rs-taint-eviction-controller",
    "kcm-rs-disruption-controller",
];

/// The pod kcm-rs plays running in (created, never scheduled): its name,
/// namespace and UID reach kcm-rs as the Deployment's downward API passes
/// them, so the controllers' tokens are bound to the Secret it owns.
pub const POD: &str = "kcm-rs-e2e";

/// Creates [`POD`] in kube-system, running as kcm-rs (or finds it); its UID.
pub async fn kcm_rs_pod(admin: &kube::Client) -> String {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "kube-system");
    let pod = match pods.get_opt(POD).await.expect("get pod") {
        Some(p) => p,
        None => {
            let spec = json!({ "serviceAccountName": "kcm-rs",
                "containers": [{ "name": "kcm-rs", "image": "kcm-rs:e2e" }] });
            create(&pods, json!({ "metadata": { "name": POD }, "spec": spec })).await
        }
    };
    pod.metadata.uid.expect("uid")
}

/// Starts kcm-rs with the Deployment's flags as `kube-system/kcm-rs`.
/// `secure`: `/metrics` behind TokenReview and SubjectAccessReview (made as
/// kcm-rs); otherwise every endpoint is open (tests about metrics only).
pub async fn start_kcm_rs(
    cp: &ControlPlane,
    admin: &kube::Client,
    bin: &Path,
    secure: bool,
) -> KcmRs {
    let ns_api: Api<Namespace> = Api::all(admin.clone());
    if ns_api.get_opt("kube-system").await.expect("get").is_none() {
        create(&ns_api, json!({ "metadata": { "name": "kube-system" } })).await;
    }
    let rbac = manifests().join("base/rbac.yaml");
    let created = crate::apply::create_from_file(admin, &rbac, "kube-system").await;
    eprintln!("applied {:?}", created.expect("apply base/rbac.yaml"));

    // A token of the ServiceAccount, through the TokenRequest API.
    let token = sa_token(admin, "kube-system", "kcm-rs").await;
    let kubeconfig = cp.dir().join("kcm-rs.kubeconfig");
    token_kubeconfig(cp.kubeconfig(), &token, &kubeconfig);
    // That identity is not the admin: anything outside the role is refused.
    let sa = client_from_kubeconfig(&kubeconfig).await.expect("client");
    match Api::<Secret>::all(sa).list(&ListParams::default()).await {
        Err(kube::Error::Api(e)) if e.code == 403 => {}
        other => panic!("listing secrets as kcm-rs must be forbidden: {other:?}"),
    }

    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    let overridden = ["--kubeconfig=", "--bind-address=", "--secure-port="];
    let args = container_args(&docs("base/deployment.yaml")[0]);
    let mut args = kubelet_expand(args, &[("POD_NAMESPACE", "kube-system")]);
    args.retain(|a| !overridden.iter().any(|o| a.starts_with(o)));
    args.extend([
        format!("--kubeconfig={}", kubeconfig.display()),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
        "--pod-gc-period=1s".into(),
        "--pod-gc-quarantine=1s".into(),
        "--stale-pod-disruption-timeout=2s".into(),
    ]);
    if secure {
        // The most verbose logs, so the test can show they hold no token.
        args.retain(|a| !a.starts_with("--v="));
        args.push("--v=10".into());
        // Renew the controllers' tokens every few seconds, to see it happen.
        args.push("--service-account-token-renewal=3s".into());
        let ca = cp.dir().join("state/ca.crt");
        args.push(format!("--client-ca-file={}", ca.display()));
        args.push(format!(
            "--authentication-kubeconfig={}",
            kubeconfig.display()
        ));
        args.push(format!(
            "--authorization-kubeconfig={}",
            kubeconfig.display()
        ));
    } else {
        args.push(crate::https::OPEN_PATHS.into());
    }
    let uid = kcm_rs_pod(admin).await;
    let log = cp.dir().join("kcm-rs.log");
    let out = std::fs::File::create(&log).expect("log");
    let mut cmd = Command::new(bin);
    cmd.args(&args).stdin(Stdio::null());
    // The Deployment's downward API (base/deployment.yaml's env).
    cmd.env_remove("KUBERNETES_SERVICE_HOST")
        .env("POD_NAME", POD)
        .env("POD_NAMESPACE", "kube-system")
        .env("POD_UID", uid);
    if secure {
        // -v raises only kcm-rs's own targets; the clients' wire traces
        // (hyper, h2, rustls, kube) need RUST_LOG, and they must hold no
        // token either.
        cmd.env("RUST_LOG", "trace");
    }
    cmd.stdout(out.try_clone().expect("log")).stderr(out);
    let child = cmd.spawn().expect("spawn kcm-rs");
    KcmRs { child, port, log }
}

pub fn holder(l: &Lease) -> String {
    let spec = l.spec.as_ref();
    spec.and_then(|s| s.holder_identity.clone())
        .unwrap_or_default()
}

/// The Prometheus Operator release whose CRDs the manifests are checked
/// against in `manifests_strict.rs` and `chart.rs` (the module holds them in
/// `example/prometheus-operator-crd/`).
pub const OPERATOR: &str = "github.com/prometheus-operator/prometheus-operator@v0.85.0";
pub const CRDS: &[&str] = &["servicemonitors", "prometheusrules"];

/// The operator's module directory in the Go module cache, downloaded if
/// needed.
pub fn operator_module() -> PathBuf {
    let scratch = tempfile::tempdir().expect("tempdir");
    let out = Command::new("go")
        .args(["mod", "download", "-json", OPERATOR])
        // Outside any module, so no go.mod is consulted or changed.
        .current_dir(scratch.path())
        .env("GOFLAGS", "-mod=mod")
        .output()
        .expect("run go (needed for the control plane anyway)");
    let info: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        let stderr = String::from_utf8_lossy(&out.stderr);
        panic!("go mod download {OPERATOR}: {e}: {stderr}")
    });
    let dir = info["Dir"]
        .as_str()
        .unwrap_or_else(|| panic!("go mod download {OPERATOR}: {info}"));
    PathBuf::from(dir)
}

pub async fn install_crds(admin: &kube::Client) {
    let dir = operator_module().join("example/prometheus-operator-crd");
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    for plural in CRDS {
        let file = dir.join(format!("monitoring.coreos.com_{plural}.yaml"));
        let made = crate::apply::create_from_file(admin, &file, "default").await;
        made.unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let name = format!("{plural}.monitoring.coreos.com");
        let established = |c: &CustomResourceDefinition| {
            let conds = c.status.as_ref().and_then(|s| s.conditions.as_ref());
            conds.is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            })
        };
        let wait = wait_for(&crds, &name, Duration::from_secs(60), &name, established).await;
        wait.expect("CRD established");
    }
}

/// `kcm-e2e-helm`, built once per test process (a no-op when current).
pub fn helm() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let script = repo_root().join("e2e/harness/helm/build.sh");
            let status = Command::new("bash")
                .arg(&script)
                .arg(crate::binaries::bin_dir())
                .status()
                .expect("bash");
            assert!(status.success(), "{} failed", script.display());
            crate::binaries::bin_dir().join("kcm-e2e-helm")
        })
        .clone()
}

/// Runs helm in the repository root: its stdout, or its stderr as the error.
pub fn try_helm(args: &[&str]) -> Result<String, String> {
    let out = Command::new(helm())
        .args(args)
        .current_dir(repo_root())
        // No user configuration or caches: nothing outside the repository.
        .env("HELM_CONFIG_HOME", repo_root().join("target/helm/config"))
        .env("HELM_CACHE_HOME", repo_root().join("target/helm/cache"))
        .env("HELM_DATA_HOME", repo_root().join("target/helm/data"))
        .output()
        .expect("run helm");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(format!("{stdout}{stderr}"))
    }
}

/// Runs helm in the repository root; its stdout, or a panic with stderr.
pub fn run_helm(args: &[&str]) -> String {
    try_helm(args).unwrap_or_else(|e| panic!("helm {args:?} failed:\n{e}"))
}
