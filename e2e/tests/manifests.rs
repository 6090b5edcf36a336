//! The deployment manifests (`manifests/`): every document parses with the
//! expected kinds, kustomize builds them, the Deployment, Service and
//! dashboard pass server-side dry-run, kind's KCM patch is accepted by KCM;
//! and kcm-rs, run with the Deployment's flags as the `kube-system/kcm-rs`
//! ServiceAccount bound by `rbac.yaml`, works in all four controllers (and
//! leader election and events) without a single 403.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Namespace, Pod, PodCondition, Secret, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kcm_e2e::binaries::{ensure_built, ensure_built_with_kubectl, repo_root};
use kcm_e2e::control_plane::{client_from_kubeconfig, tail};
use kcm_e2e::kubelet;
use kcm_e2e::wait::{wait_for, wait_for_list, wait_gone};
use kcm_e2e::{ControlPlane, TestNamespace};
use kube::api::{DynamicObject, ListParams, PostParams};
use kube::config::Kubeconfig;
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WAIT: Duration = Duration::from_secs(60);

fn manifests() -> PathBuf {
    repo_root().join("manifests")
}

fn parse_docs(text: &str, what: &str) -> Vec<Value> {
    use serde::Deserialize;
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{what}: {e}")))
        .filter(|v| !v.is_null())
        .collect()
}

/// Every YAML document of `manifests/<file>`, as JSON values.
fn docs(file: &str) -> Vec<Value> {
    let path = manifests().join(file);
    let text = std::fs::read_to_string(&path).expect("read manifest");
    parse_docs(&text, &path.display().to_string())
}

fn kinds(docs: &[Value]) -> Vec<&str> {
    docs.iter().map(|d| text(&d["kind"])).collect()
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

fn container(deployment: &Value) -> &Value {
    &deployment["spec"]["template"]["spec"]["containers"][0]
}

fn container_args(deployment: &Value) -> Vec<String> {
    let args = container(deployment)["args"].as_array().expect("args");
    args.iter().map(|a| text(a).to_string()).collect()
}

const RBAC_KINDS: &str = "ServiceAccount ClusterRole ClusterRoleBinding Role RoleBinding";

/// Which kinds each manifest holds; the first six are kustomize resources.
const KINDS: &[(&str, &str)] = &[
    ("rbac.yaml", RBAC_KINDS),
    ("deployment.yaml", "Deployment"),
    ("service.yaml", "Service"),
    ("servicemonitor.yaml", "ServiceMonitor"),
    ("prometheusrule.yaml", "PrometheusRule"),
    ("dashboard.yaml", "ConfigMap"),
    ("kustomization.yaml", "Kustomization"),
    ("kind-cluster.yaml", "Cluster"),
];

/// Values that must agree across files: `left = right`, each a literal, a
/// Deployment flag (`--name`) or `file#doc/json-pointer` (`pod/...` is the
/// Deployment's pod template, `ctr/...` its container).
const AGREE: &[&str] = &[
    "pod/spec/serviceAccountName = rbac.yaml#0/metadata/name",
    "pod/spec/priorityClassName = system-cluster-critical",
    "deployment.yaml#0/spec/replicas = 2",
    "--leader-elect = true",
    "--leader-elect-resource-namespace = rbac.yaml#3/metadata/namespace",
    "--leader-elect-resource-name = rbac.yaml#3/rules/1/resourceNames/0",
    "--leader-elect-resource-namespace = rbac.yaml#4/metadata/namespace",
    "ctr/image = kcm-rs:dev",
    "ctr/ports/0/containerPort = --secure-port",
    "ctr/livenessProbe/httpGet/path = /livez",
    "ctr/readinessProbe/httpGet/path = /readyz",
    "ctr/livenessProbe/httpGet/port = ctr/ports/0/name",
    "ctr/securityContext/readOnlyRootFilesystem = true",
    "pod/spec/securityContext/runAsNonRoot = true",
    "service.yaml#0/spec/ports/0/targetPort = ctr/ports/0/name",
    "servicemonitor.yaml#0/spec/endpoints/0/port = service.yaml#0/spec/ports/0/name",
    "servicemonitor.yaml#0/spec/endpoints/0/scheme = http",
    "servicemonitor.yaml#0/apiVersion = monitoring.coreos.com/v1",
    "prometheusrule.yaml#0/apiVersion = monitoring.coreos.com/v1",
    "dashboard.yaml#0/metadata/labels/grafana_dashboard = 1",
];

/// One side of an [`AGREE`] line, rendered as text.
fn resolve(side: &str) -> String {
    let dep = "deployment.yaml#0/spec/template";
    let path = match side.split_once('/') {
        Some(("pod", rest)) => format!("{dep}/{rest}"),
        Some(("ctr", rest)) => format!("{dep}/spec/containers/0/{rest}"),
        _ => side.to_string(),
    };
    let value = if let Some(flag) = side.strip_prefix("--") {
        let args = container_args(&docs("deployment.yaml")[0]);
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

#[test]
fn every_manifest_parses_with_the_expected_kinds() {
    let mut on_disk: Vec<String> = std::fs::read_dir(manifests())
        .expect("manifests/")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    on_disk.sort();
    let mut listed: Vec<&str> = KINDS.iter().map(|(f, _)| *f).collect();
    listed.sort();
    assert_eq!(on_disk, listed, "every manifests/*.yaml is checked here");
    for (file, want) in KINDS {
        let want: Vec<&str> = want.split(' ').collect();
        assert_eq!(kinds(&docs(file)), want, "{file}");
    }
    for line in AGREE {
        let (left, right) = line.split_once(" = ").expect("left = right");
        assert_eq!(resolve(left), resolve(right), "{line}");
    }
    let labels = &docs("deployment.yaml")[0]["spec"]["template"]["metadata"]["labels"];
    let svc = &docs("service.yaml")[0];
    let sm = &docs("servicemonitor.yaml")[0];
    for (selector, target) in [
        (&svc["spec"]["selector"], labels),
        (
            &sm["spec"]["selector"]["matchLabels"],
            &svc["metadata"]["labels"],
        ),
    ] {
        let selector = selector.as_object().expect("selector");
        assert!(
            selector.iter().all(|(k, v)| &target[k] == v),
            "{selector:?}"
        );
    }
    let cm = &docs("dashboard.yaml")[0];
    let dash: Value = serde_json::from_str(text(&cm["data"]["kcm-rs.json"])).expect("JSON");
    assert!(dash["panels"].as_array().is_some_and(|p| p.len() > 10));

    // The kustomization lists the resource files; kustomize (kubectl's) builds
    // exactly their objects.
    let resources = docs("kustomization.yaml")[0]["resources"].clone();
    let files: Vec<&str> = KINDS[..6].iter().map(|(f, _)| *f).collect();
    assert_eq!(resources, json!(files));
    let kubectl = ensure_built_with_kubectl().expect("kubectl");
    let mut cmd = Command::new(kubectl.join("kcm-e2e-kubectl"));
    let out = cmd
        .arg("kustomize")
        .arg(manifests())
        .output()
        .expect("kubectl");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let built = parse_docs(&String::from_utf8_lossy(&out.stdout), "kustomize");
    let all: Vec<Value> = files.iter().flat_map(|f| docs(f)).collect();
    let (mut got, mut want) = (kinds(&built), kinds(&all));
    got.sort();
    want.sort();
    assert_eq!(got, want);
}

/// kind's controllers patch is accepted by upstream KCM (v1.34) and names
/// exactly kcm-rs's four controllers; KCM rejects a wrong name.
#[test]
fn kind_config_switches_off_the_four_controllers_in_kcm() {
    let cluster = &docs("kind-cluster.yaml")[0];
    let patch = text(&cluster["kubeadmConfigPatches"][0]);
    let cfg: Value = serde_yaml_ng::from_str(patch).expect("patch YAML");
    let controllers = text(&cfg["controllerManager"]["extraArgs"]["controllers"]);
    let split = controllers.split(',');
    let off: BTreeSet<&str> = split.filter_map(|c| c.strip_prefix('-')).collect();
    let ours = "disruption-controller job-controller pod-garbage-collector-controller \
                taint-eviction-controller";
    assert_eq!(off, ours.split_whitespace().collect());
    let kcm = ensure_built().expect("binaries");
    let run = |value: &str| {
        let mut cmd = Command::new(kcm.join("kcm-e2e-controller-manager"));
        cmd.arg("--kubeconfig=/nonexistent/kubeconfig");
        let out = cmd.arg(format!("--controllers={value}")).output();
        String::from_utf8_lossy(&out.expect("run KCM").stderr).into_owned()
    };
    // KCM validates flags before it reads the kubeconfig.
    let err = run(controllers);
    let accepted = err.contains("/nonexistent/kubeconfig") && !err.contains("known controllers");
    assert!(accepted, "{err}");
    let err = run("*,-pod-garbage-collector");
    let msg = "pod-garbage-collector\\\" is not in the list of known controllers";
    assert!(err.contains(msg), "{err}");
}

/// Creates every document of `file` with server-side dry-run (`dryRun=All`):
/// validation, defaulting and admission (PriorityClass included), nothing stored.
async fn dry_run(client: &kube::Client, file: &str) {
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
fn kcm_rs_binary() -> PathBuf {
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

/// Writes a kubeconfig with a bearer `token` for the admin kubeconfig's
/// server and CA.
fn token_kubeconfig(admin: &Path, token: &str, out: &Path) {
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

async fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let req = format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).await?;
    let code = buf.split_whitespace().nth(1).and_then(|c| c.parse().ok());
    let body = buf.split_once("\r\n\r\n").map(|(_, b)| b.to_string());
    Ok((code.unwrap_or(0), body.unwrap_or_default()))
}

/// The kcm-rs process under test; killed on drop.
struct KcmRs {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Drop for KcmRs {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl KcmRs {
    /// Panics with `what` and the end of kcm-rs's log unless `ok`.
    fn check(&self, ok: bool, what: impl std::fmt::Display) {
        if !ok {
            panic!(
                "{what}\n--- kcm-rs log, last lines:\n{}",
                tail(&self.log, 40)
            );
        }
    }

    fn ok<T, E: std::fmt::Display>(&self, r: Result<T, E>) -> T {
        r.unwrap_or_else(|e| {
            self.check(false, e);
            unreachable!()
        })
    }

    /// [`wait_for`], failing with kcm-rs's log.
    async fn until<K>(&self, api: &Api<K>, name: &str, pred: impl Fn(&K) -> bool) -> K
    where
        K: Resource + Clone + DeserializeOwned + Serialize + Debug,
    {
        self.ok(wait_for(api, name, WAIT, name, pred).await)
    }
}

fn obj<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("valid object")
}

async fn create<K>(api: &Api<K>, v: Value) -> K
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let o: K = obj(v);
    let res = api.create(&PostParams::default(), &o).await;
    res.unwrap_or_else(|e| panic!("creating {}: {e}", o.name_any()))
}

fn pod_condition<'a>(p: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    let conds = p.status.as_ref().and_then(|s| s.conditions.as_ref())?;
    conds.iter().find(|c| c.type_ == type_)
}

fn job_has(job: &Job, type_: &str) -> bool {
    let conds = job.status.as_ref().and_then(|s| s.conditions.as_ref());
    conds.is_some_and(|cs| cs.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

fn job(name: &str, fail_on_42: bool) -> Value {
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
async fn finish_job_pod(kcm: &KcmRs, pods: &Api<Pod>, job: &str, node: &str, code: i32) {
    let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}"));
    let found = wait_for_list(pods, &lp, WAIT, job, |ps| ps.len() == 1).await;
    end_pod(kcm, pods, &kcm.ok(found)[0].name_any(), node, code).await;
}

/// Binds pod `name` to `node`, ends it with `code` and waits for the Job
/// controller to remove its tracking finalizer.
async fn end_pod(kcm: &KcmRs, pods: &Api<Pod>, name: &str, node: &str, code: i32) {
    kubelet::bind_pod(pods, name, node).await.expect("bind");
    let finished = kubelet::finish_pod(pods, name, code).await;
    finished.expect("finish");
    kcm.until(pods, name, |p| p.finalizers().is_empty()).await;
}

/// A pod labelled `app`, controlled by the ReplicaSet `owner` (name, uid).
fn pod(name: &str, app: &str, owner: Option<(&str, &str)>) -> Value {
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
fn replica_set(name: &str, replicas: i32, orphaned: bool) -> Value {
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
fn referenced_metrics() -> BTreeSet<String> {
    const PREFIXES: &str = "leader_election_ workqueue_ rest_client_ job_controller_ \
                            pod_gc_collector_ taint_eviction_controller_ process_";
    let rules = serde_json::to_string(&docs("prometheusrule.yaml")).expect("json");
    let dash = text(&docs("dashboard.yaml")[0]["data"]["kcm-rs.json"]).to_string();
    let words = (rules + &dash).replace(|c: char| !(c.is_ascii_alphanumeric() || c == '_'), " ");
    let known = |w: &&str| PREFIXES.split_whitespace().any(|p| w.starts_with(p));
    words
        .split_whitespace()
        .filter(known)
        .map(str::to_string)
        .collect()
}

/// Applies rbac.yaml, mints a ServiceAccount token and starts kcm-rs with
/// the Deployment's flags under that identity (local address, port and
/// credentials; short pod GC and stale-condition timers).
async fn start_kcm_rs(cp: &ControlPlane, admin: &kube::Client, bin: &Path) -> KcmRs {
    let ns_api: Api<Namespace> = Api::all(admin.clone());
    if ns_api.get_opt("kube-system").await.expect("get").is_none() {
        create(&ns_api, json!({ "metadata": { "name": "kube-system" } })).await;
    }
    let rbac = manifests().join("rbac.yaml");
    let created = kcm_e2e::apply::create_from_file(admin, &rbac, "kube-system").await;
    eprintln!("applied {:?}", created.expect("apply rbac.yaml"));

    // A token of the ServiceAccount, through the TokenRequest API.
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), "kube-system");
    let req: TokenRequest = obj(json!({ "spec": { "audiences": [], "expirationSeconds": 3600 } }));
    let pp = PostParams::default();
    let tr: TokenRequest = sas
        .create_subresource("token", "kcm-rs", &pp, &req)
        .await
        .expect("token");
    let token = tr.status.expect("token status").token;
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
    let mut args = container_args(&docs("deployment.yaml")[0]);
    args.retain(|a| !overridden.iter().any(|o| a.starts_with(o)));
    args.extend([
        format!("--kubeconfig={}", kubeconfig.display()),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
        "--pod-gc-period=1s".into(),
        "--pod-gc-quarantine=1s".into(),
        "--stale-pod-disruption-timeout=2s".into(),
    ]);
    let log = cp.dir().join("kcm-rs.log");
    let out = std::fs::File::create(&log).expect("log");
    let mut cmd = Command::new(bin);
    cmd.args(&args).stdin(Stdio::null());
    cmd.stdout(out.try_clone().expect("log")).stderr(out);
    let child = cmd.spawn().expect("spawn kcm-rs");
    KcmRs { child, port, log }
}

fn holder(l: &Lease) -> String {
    let spec = l.spec.as_ref();
    spec.and_then(|s| s.holder_identity.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn kcm_rs_runs_under_the_manifests_rbac() {
    let began = Instant::now();
    let bin = kcm_rs_binary();
    let cp = ControlPlane::start().expect("control plane");
    let admin = cp.client().await.expect("admin client");
    let mut kcm = start_kcm_rs(&cp, &admin, &bin).await;
    for file in ["deployment.yaml", "service.yaml", "dashboard.yaml"] {
        dry_run(&admin, file).await;
    }

    // (f) Leadership: kcm-rs creates and holds the Lease kube-system/kcm-rs.
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "kube-system");
    let lease = kcm
        .until(&leases, "kcm-rs", |l| !holder(l).is_empty())
        .await;
    let deadline = Instant::now() + WAIT;
    while !matches!(http_get(kcm.port, "/readyz").await, Ok((200, _))) {
        kcm.check(Instant::now() < deadline, "/readyz never 200");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let ns = TestNamespace::create(&admin, "manifests")
        .await
        .expect("ns");
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns.name);
    let jobs: Api<Job> = Api::namespaced(admin.clone(), &ns.name);
    // Created early, so kcm-rs has seen it when Job "ok" arrives.
    create(&pods, pod("ok-orphan", "ok", None)).await;
    let node = format!("{}-node", ns.name);
    let tainted = format!("{}-tainted", ns.name);
    let no_execute = vec![kubelet::taint("example.com/evict", None, "NoExecute")];
    kubelet::create_node(&admin, &node, true, vec![])
        .await
        .expect("node");
    let created = kubelet::create_node(&admin, &tainted, true, no_execute).await;
    created.expect("tainted node");

    // (a) FailJob on exit code 42: FailureTarget, then Failed.
    // (b) A Job that adopts an orphan pod (a live GET of the Job first, then
    // a pod patch) and completes.
    create(&jobs, job("fail42", true)).await;
    let mut ok = job("ok", false);
    ok["spec"]["manualSelector"] = json!(true);
    ok["spec"]["selector"] = json!({ "matchLabels": { "app": "ok" } });
    ok["spec"]["template"]["metadata"] = json!({ "labels": { "app": "ok" } });
    create(&jobs, ok).await;
    finish_job_pod(&kcm, &pods, "fail42", &node, 42).await;
    let adopted = |p: &Pod| p.owner_references().iter().any(|o| o.kind == "Job");
    kcm.until(&pods, "ok-orphan", adopted).await;
    end_pod(&kcm, &pods, "ok-orphan", &node, 0).await;
    kcm.until(&jobs, "fail42", |j| job_has(j, "FailureTarget"))
        .await;
    kcm.until(&jobs, "fail42", |j| job_has(j, "Failed")).await;
    kcm.until(&jobs, "ok", |j| job_has(j, "Complete")).await;

    // (c) Pod GC: a pod bound to a node that does not exist is deleted.
    let mut orphan = pod("orphan", "orphan", None);
    orphan["spec"]["nodeName"] = json!(format!("{}-ghost", ns.name));
    create(&pods, orphan).await;
    kcm.ok(wait_gone(&pods, "orphan", WAIT).await);

    // (d) Taint eviction: a running pod without toleration on a NoExecute node.
    let bound = kubelet::create_bound_pod(&pods, "victim", &tainted, None).await;
    bound.expect("victim");
    kcm.until(&pods, "victim", |p| {
        let cond = pod_condition(p, "DisruptionTarget");
        let reason = cond.and_then(|c| c.reason.as_deref());
        p.metadata.deletion_timestamp.is_some() && reason == Some("DeletionByTaintManager")
    })
    .await;

    // (e) Disruption: a PDB over a ReplicaSet's pod (owner from the informer
    // cache), one over the pod of a ReplicaSet whose Deployment is gone (the
    // generic finder GETs replicasets/scale), one selecting nothing; and a
    // stale DisruptionTarget condition reset.
    let rss: Api<ReplicaSet> = Api::namespaced(admin.clone(), &ns.name);
    for (name, replicas, orphaned) in [("plain", 3, false), ("scaled", 2, true)] {
        let rs = create(&rss, replica_set(name, replicas, orphaned)).await;
        let uid = rs.uid().expect("uid");
        create(&pods, pod(&format!("{name}-0"), name, Some((name, &uid)))).await;
    }
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(admin.clone(), &ns.name);
    let budgets = [
        ("plain", "maxUnavailable", json!(1), 3, 2),
        ("scaled", "minAvailable", json!("50%"), 2, 1),
        ("empty", "minAvailable", json!(1), 0, 1),
    ];
    for (name, budget, value, expected, desired) in budgets {
        let mut spec = json!({ "selector": { "matchLabels": { "app": name } } });
        spec[budget] = value;
        create(&pdbs, json!({ "metadata": { "name": name }, "spec": spec })).await;
        let synced = |p: &PodDisruptionBudget| {
            let status = p.status.as_ref();
            status.is_some_and(|s| s.observed_generation == Some(1))
        };
        let pdb = kcm.until(&pdbs, name, synced).await;
        let status = serde_json::to_value(pdb.status).expect("status");
        let (s, c) = (&status, &status["conditions"][0]);
        let got = json!({
            "expected, desired, healthy, allowed": [s["expectedPods"], s["desiredHealthy"],
                s["currentHealthy"], s["disruptionsAllowed"]],
            "condition": [c["type"], c["status"], c["reason"]],
        });
        let want = json!({
            "expected, desired, healthy, allowed": [expected, desired, 0, 0],
            "condition": ["DisruptionAllowed", "False", "InsufficientPods"],
        });
        assert_eq!(got, want, "PDB {name}: {status}");
    }
    create(&pods, pod("stale", "stale", None)).await;
    let evicting = kubelet::condition("DisruptionTarget", true, "EvictionByEvictionAPI", "");
    let added = kubelet::add_pod_condition(&pods, "stale", evicting).await;
    added.expect("condition");
    kcm.until(&pods, "stale", |p| {
        let cond = pod_condition(p, "DisruptionTarget");
        cond.is_some_and(|c| c.status == "False")
    })
    .await;

    // Events from the recorder, from three controllers.
    let events: Api<Event> = Api::namespaced(admin.clone(), &ns.name);
    let lp = ListParams::default();
    let found = wait_for_list(&events, &lp, WAIT, "events", |es| {
        let reasons: BTreeSet<&str> = es.iter().filter_map(|e| e.reason.as_deref()).collect();
        let want = ["TaintManagerEviction", "SuccessfulCreate", "NoPods"];
        want.iter().all(|r| reasons.contains(r))
    });
    kcm.ok(found.await);

    // (f) The same leader, having renewed (update) in between.
    let now = leases.get("kcm-rs").await.expect("lease");
    assert_eq!(holder(&now), holder(&lease));
    let spec = now.spec.expect("spec");
    assert!(spec.renew_time != spec.acquire_time, "renewed: {spec:?}");

    // No request was refused; every metric of the alerts and dashboard exists.
    let (code, metrics) = http_get(kcm.port, "/metrics").await.expect("/metrics");
    assert_eq!(code, 200);
    let requests = metrics
        .lines()
        .filter(|l| l.starts_with("rest_client_requests_total{"));
    let requests: Vec<&str> = requests.collect();
    eprintln!("{}", requests.join("\n"));
    let refused = |l: &&&str| l.contains("code=\"403\"") || l.contains("code=\"401\"");
    let refused: Vec<&&str> = requests.iter().filter(refused).collect();
    kcm.check(refused.is_empty(), format!("refused: {refused:?}"));
    let leader = "leader_election_master_status{name=\"kcm-rs\"} 1";
    assert!(!requests.is_empty() && metrics.lines().any(|l| l == leader));
    let exposed = metrics.lines().filter_map(|l| l.split(['{', ' ']).next());
    let exposed: BTreeSet<&str> = exposed.collect();
    // Families with samples only after an error or a retry.
    let after_errors = [
        "pod_gc_collector_force_delete_pod_errors_total",
        "rest_client_request_retries_total",
    ];
    let mut missing = referenced_metrics();
    missing.retain(|m| !exposed.contains(m.as_str()) && !after_errors.contains(&m.as_str()));
    assert!(
        missing.is_empty(),
        "alerts/dashboard use unknown metrics: {missing:?}"
    );

    // SIGTERM: a clean exit that releases the Lease (update under the Role).
    let pid = kcm.child.id().to_string();
    let sent = Command::new("kill").args(["-TERM", &pid]).status();
    assert!(sent.expect("kill").success());
    let deadline = Instant::now() + WAIT;
    let status = loop {
        if let Some(s) = kcm.child.try_wait().expect("wait") {
            break s;
        }
        kcm.check(Instant::now() < deadline, "no exit after SIGTERM");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    kcm.check(status.success(), format!("exit {status}"));
    let released = leases.get("kcm-rs").await.expect("lease");
    kcm.check(holder(&released).is_empty(), "the Lease was not released");
    eprintln!(
        "kcm-rs under rbac.yaml: no 403, {:?} in all",
        began.elapsed()
    );
}
