//! The Helm chart `charts/kcm-rs` against the kustomize layers: `helm lint
//! --strict` passes for every values case below, `helm template` of each
//! overlay's matching values renders the same objects as `kubectl kustomize`
//! of that overlay, field for field (matched by apiVersion, kind, namespace
//! and name; nothing ignored), and every rendering, the chart's and
//! kustomize's, passes `kubectl apply --server-side --dry-run=server
//! --validate=strict` on the real API server with the Prometheus Operator's
//! CRDs installed. helm is built from its Go module by
//! `e2e/harness/helm/build.sh` (cached in `target/e2e-bin` with a stamp, as
//! the control plane).

#[path = "manifests/support.rs"]
#[allow(dead_code)]
mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Instant;

use k8s_openapi::api::core::v1::Namespace;
use kcm_e2e::ControlPlane;
use kcm_e2e::binaries::{bin_dir, repo_root};
use kube::Api;
use serde_json::{Value, json};
use support::*;

/// The namespace every case installs into, as the manifests do.
const NAMESPACE: &str = "kube-system";

/// Each kustomize overlay under `manifests/` and the chart values that
/// render the same objects.
const MATCHING: &[(&str, &[&str])] = &[
    ("", &[]),
    ("base", &["--set", "monitoring.enabled=false"]),
    (
        "beside-kcm",
        &[
            "--set",
            "monitoring.enabled=false",
            "--set",
            "besideKcm.enabled=true",
        ],
    ),
    (
        "kube-prometheus-stack",
        &["-f", "charts/kcm-rs/values-kube-prometheus-stack.yaml"],
    ),
];

/// Values no overlay has: linted, rendered and dry-run only.
const CHART_ONLY: &[&[&str]] = &[
    &[
        "--set",
        "identities.perController=false",
        "--set",
        "leaderElection.enabled=false",
        "--set",
        "replicas=1",
    ],
    &[
        "--set",
        "leaderElection.enabled=false",
        "--set",
        "replicas=1",
        "--set",
        "networkPolicy.enabled=false",
    ],
    &[
        "--set",
        "controllers={job-controller,disruption-controller}",
        "--set",
        "image.repository=registry.example/kcm-rs",
        "--set",
        "image.tag=0.1.0-test",
        "--set-json",
        "extraArgs=[\"--controller-sync-timeout=10m\"]",
        "--set",
        "featureGates=null",
    ],
];

/// `kcm-e2e-helm`, built once per test process (a no-op when current).
fn helm() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let script = repo_root().join("e2e/harness/helm/build.sh");
            let status = Command::new("bash")
                .arg(&script)
                .arg(bin_dir())
                .status()
                .expect("bash");
            assert!(status.success(), "{} failed", script.display());
            bin_dir().join("kcm-e2e-helm")
        })
        .clone()
}

/// Runs helm in the repository root; its stdout, or a panic with stderr.
fn run_helm(args: &[&str]) -> String {
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
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "helm {args:?} failed:\n{stdout}\n{stderr}"
    );
    stdout
}

fn lint(values: &[&str]) -> String {
    let mut args = vec![
        "lint",
        "--strict",
        "charts/kcm-rs",
        "--namespace",
        NAMESPACE,
    ];
    args.extend(values);
    let out = run_helm(&args);
    assert!(
        out.contains("0 chart(s) failed"),
        "helm lint {values:?}:\n{out}"
    );
    out
}

fn template(values: &[&str]) -> String {
    let mut args = vec![
        "template",
        "kcm-rs",
        "charts/kcm-rs",
        "--namespace",
        NAMESPACE,
    ];
    args.extend(values);
    run_helm(&args)
}

type Key = (String, String, String, String);

fn key(doc: &Value) -> Key {
    let field = |v: &Value| text(v).to_string();
    (
        field(&doc["apiVersion"]),
        field(&doc["kind"]),
        field(&doc["metadata"]["namespace"]),
        field(&doc["metadata"]["name"]),
    )
}

fn by_key(docs: Vec<Value>, what: &str) -> BTreeMap<Key, Value> {
    let mut out = BTreeMap::new();
    for doc in docs {
        let k = key(&doc);
        assert!(out.insert(k.clone(), doc).is_none(), "{what}: {k:?} twice");
    }
    out
}

/// Every JSON pointer where `a` and `b` differ.
fn differences(a: &Value, b: &Value, at: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for k in x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))) {
                let (va, vb) = (&x.get(k), &y.get(k));
                match (va, vb) {
                    (Some(va), Some(vb)) => differences(va, vb, &format!("{at}/{k}"), out),
                    _ => out.push(format!("{at}/{k}: chart {va:?}, kustomize {vb:?}")),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                differences(va, vb, &format!("{at}/{i}"), out);
            }
        }
        _ if a != b => out.push(format!("{at}: chart {a}, kustomize {b}")),
        _ => {}
    }
}

/// The chart's objects against kustomize's: the problems found.
fn compare(chart: &[Value], kustomized: &[Value]) -> Vec<String> {
    let c = by_key(chart.to_vec(), "chart");
    let k = by_key(kustomized.to_vec(), "kustomize");
    let mut problems = Vec::new();
    for (key, doc) in &c {
        match k.get(key) {
            Some(other) => {
                let mut diffs = Vec::new();
                differences(doc, other, "", &mut diffs);
                problems.extend(diffs.iter().map(|d| format!("{key:?}: {d}")));
            }
            None => problems.push(format!("{key:?}: only in the chart")),
        }
    }
    let missing = k.keys().filter(|key| !c.contains_key(*key));
    problems.extend(missing.map(|key| format!("{key:?}: only in kustomize")));
    problems
}

/// `kubectl apply --server-side --dry-run=server --validate=strict` of
/// `yaml`: kubectl's output, or its error.
fn dry_run(kubectl: &Path, kubeconfig: &Path, yaml: &str) -> Result<String, String> {
    let mut child = Command::new(kubectl)
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args([
            "apply",
            "--server-side",
            "--dry-run=server",
            "--validate=strict",
        ])
        .args(["--field-manager=kcm-rs-chart-test", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl");
    use std::io::Write;
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(yaml.as_bytes()).expect("write");
    drop(stdin);
    let out = child.wait_with_output().expect("kubectl");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(format!("{stdout}{}", String::from_utf8_lossy(&out.stderr)))
    }
}

fn to_yaml_stream(docs: &[Value]) -> String {
    let parts: Vec<String> = docs
        .iter()
        .map(|d| serde_yaml_ng::to_string(d).expect("yaml"))
        .collect();
    parts.join("---\n")
}

#[test]
fn chart_version_is_the_workspace_version() {
    let path = repo_root().join("charts/kcm-rs/Chart.yaml");
    let chart: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&path).expect("Chart.yaml"))
            .expect("yaml");
    assert_eq!(chart["apiVersion"], "v2");
    assert_eq!(chart["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"));
    // The monitoring objects come from manifests/monitoring, not a copy.
    let link = repo_root().join("charts/kcm-rs/files/monitoring");
    let target = std::fs::read_link(&link).expect("files/monitoring is a link");
    assert_eq!(target, Path::new("../../../manifests/monitoring"));
}

#[tokio::test]
async fn chart_renders_the_kustomize_overlays_and_both_pass_a_server_side_dry_run() {
    let began = Instant::now();
    let helm_bin = helm();
    let built = began.elapsed();
    eprintln!("helm ready in {built:.1?}: {}", helm_bin.display());

    // Lint and render every case; compare the overlays' twins.
    let rendered_at = Instant::now();
    let mut streams: Vec<(String, String)> = Vec::new();
    let mut problems = Vec::new();
    for (dir, values) in MATCHING {
        lint(values);
        let chart_yaml = template(values);
        let chart = parse_docs(&chart_yaml, "helm template");
        let kustomized = kustomize(dir);
        let found = compare(&chart, &kustomized);
        eprintln!(
            "manifests/{dir} = chart {values:?}: {} objects, {} differences",
            kustomized.len(),
            found.len()
        );
        problems.extend(found.iter().map(|p| format!("manifests/{dir}: {p}")));
        streams.push((format!("helm template {values:?}"), chart_yaml));
        streams.push((
            format!("kustomize manifests/{dir}"),
            to_yaml_stream(&kustomized),
        ));
    }
    for values in CHART_ONLY {
        lint(values);
        streams.push((format!("helm template {values:?}"), template(values)));
    }
    // The packaged chart carries the linked monitoring files: it renders the
    // same as the chart directory.
    let pkg = tempfile::tempdir().expect("tempdir");
    let dest = pkg.path().display().to_string();
    run_helm(&["package", "charts/kcm-rs", "--destination", &dest]);
    let tgz = pkg
        .path()
        .join(format!("kcm-rs-{}.tgz", env!("CARGO_PKG_VERSION")));
    let tgz = tgz.display().to_string();
    let packaged = run_helm(&["template", "kcm-rs", &tgz, "--namespace", NAMESPACE]);
    let packaged = parse_docs(&packaged, "helm template of the package");
    let found = compare(&packaged, &kustomize(""));
    eprintln!("packaged chart = manifests/: {} differences", found.len());
    problems.extend(found.iter().map(|p| format!("packaged chart: {p}")));
    // The comparison sees a one-flag change, and only it.
    let changed = parse_docs(&template(&["--set", "kubeApi.qps=21"]), "helm template");
    let found = compare(&changed, &kustomize(""));
    assert!(
        found.len() == 1 && found[0].contains("/spec/template/spec/containers/0/args/2"),
        "kubeApi.qps=21: {found:?}"
    );
    eprintln!(
        "lint, template and compare in {:.1?}",
        rendered_at.elapsed()
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    // What the chart-only values change, as meant.
    let only = |i: usize| parse_docs(&streams[2 * MATCHING.len() + i].1, "chart-only");
    let single = only(0);
    let kinds: Vec<&str> = kinds(&single);
    assert!(
        !kinds.contains(&"Lease") && !kinds.contains(&"Role"),
        "{kinds:?}"
    );
    let accounts = single
        .iter()
        .filter(|d| d["kind"] == "ServiceAccount")
        .count();
    assert_eq!(accounts, 1, "one identity: only the process's account");
    let bindings = single
        .iter()
        .filter(|d| d["kind"] == "ClusterRoleBinding" && d["subjects"][0]["name"] == "kcm-rs");
    assert_eq!(
        bindings.count(),
        5,
        "system:kcm-rs and the four controller roles"
    );
    let dep = single
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("Deployment");
    let args = container_args(dep);
    for want in [
        "--leader-elect=false",
        "--use-service-account-credentials=false",
    ] {
        assert!(args.contains(&want.to_string()), "{args:?}");
    }
    assert!(
        !args
            .iter()
            .any(|a| a.starts_with("--leader-elect-resource")),
        "{args:?}"
    );
    let custom = only(2);
    let dep = custom
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("Deployment");
    let args = container_args(dep);
    assert_eq!(
        args[0],
        "--controllers=job-controller,disruption-controller"
    );
    assert_eq!(
        args.last().map(String::as_str),
        Some("--controller-sync-timeout=10m")
    );
    assert!(
        !args.iter().any(|a| a.starts_with("--feature-gates")),
        "{args:?}"
    );
    assert_eq!(
        container(dep)["image"],
        "registry.example/kcm-rs:0.1.0-test"
    );

    // Every rendering applies on the real API server (server-side, dry run,
    // strict), the CRDs of the ServiceMonitor and PrometheusRule installed.
    let dry_at = Instant::now();
    let kubectl = kcm_e2e::binaries::ensure_built_with_kubectl().expect("kubectl");
    let kubectl = kubectl.join("kcm-e2e-kubectl");
    let cp = ControlPlane::start().expect("control plane");
    let admin = cp.client().await.expect("admin client");
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    for ns in [NAMESPACE, "monitoring"] {
        if namespaces.get_opt(ns).await.expect("get").is_none() {
            create(&namespaces, json!({ "metadata": { "name": ns } })).await;
        }
    }
    install_crds(&admin).await;
    let mut failures = Vec::new();
    for (what, yaml) in &streams {
        match dry_run(&kubectl, cp.kubeconfig(), yaml) {
            Ok(out) => eprintln!(
                "dry-run ok: {what}: {} objects",
                out.lines()
                    .filter(|l| l.contains("(server dry run)"))
                    .count()
            ),
            Err(e) => failures.push(format!("{what}:\n{e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The dry run does refuse: a misspelled field fails strict validation.
    let mut broken = parse_docs(&streams[0].1, "helm template");
    let sm = broken.iter_mut().find(|d| d["kind"] == "ServiceMonitor");
    sm.expect("ServiceMonitor")["spec"]["endpoints"][0]["intervall"] = json!("30s");
    let got = dry_run(&kubectl, cp.kubeconfig(), &to_yaml_stream(&broken));
    assert!(
        matches!(&got, Err(e) if e.contains("intervall")),
        "a misspelled field passed: {got:?}"
    );
    eprintln!(
        "{} renderings passed the server-side dry run in {:.1?}; chart test {:.1?} (helm build {built:.1?})",
        streams.len(),
        dry_at.elapsed(),
        began.elapsed()
    );
}
