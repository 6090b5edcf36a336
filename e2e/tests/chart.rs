//! The Helm chart `charts/kcm-rs` against the kustomize layers: `helm lint
//! --strict` passes for every values case below, `helm template` of each
//! overlay's matching values renders the same objects as `kubectl kustomize`
//! of that overlay, field for field (matched by apiVersion, kind, namespace
//! and name; nothing ignored but Helm's four standard labels, which must be
//! on every object the chart renders), and every rendering, the chart's and
//! kustomize's, passes `kubectl apply --server-side --dry-run=server
//! --validate=strict` on the real API server with the Prometheus Operator's
//! CRDs installed. The chart-only values do what values.yaml says, and each
//! impossible combination (and a misspelled value) fails with its message.
//! helm is built from its Go module by `e2e/harness/helm/build.sh` (cached
//! in `target/e2e-bin` with a stamp, as the control plane).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use k8s_openapi::api::core::v1::Namespace;
use kcm_e2e::ControlPlane;
use kcm_e2e::binaries::repo_root;
use kcm_e2e::manifests as support;
use kube::Api;
use serde_json::{Value, json};
use support::*;

/// The namespace every case installs into, as the manifests do.
const NAMESPACE: &str = "kube-system";

/// What `helm template` is told the cluster serves where an overlay assumes
/// the Prometheus Operator's CRDs (the chart renders the ServiceMonitor and
/// PrometheusRule only where the cluster serves their kinds).
const CRDS_SERVED: &[&str] = &[
    "--api-versions",
    "monitoring.coreos.com/v1/ServiceMonitor",
    "--api-versions",
    "monitoring.coreos.com/v1/PrometheusRule",
];

/// Helm's standard labels: on every object the chart renders (and its pod
/// template), not in the kustomize layers.
const HELM_LABELS: &[&str] = &[
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
];

/// Each kustomize overlay under `manifests/`, the chart values that render
/// the same objects, and whether it needs the Prometheus Operator's CRDs.
const MATCHING: &[(&str, &[&str], bool)] = &[
    ("", &[], true),
    ("base", &["--set", "monitoring.enabled=false"], false),
    (
        "beside-kcm",
        &[
            "--set",
            "monitoring.enabled=false",
            "--set",
            "besideKcm.enabled=true",
        ],
        false,
    ),
    (
        "kube-prometheus-stack",
        &["-f", "charts/kcm-rs/values-kube-prometheus-stack.yaml"],
        true,
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
    // Everything a well-kept chart lets you set, two controllers only.
    &[
        "--set",
        "controllers={job,podgc}",
        "--set-json",
        concat!(
            r#"image={"repository": "registry.example/kcm-rs", "tag": "0.1.0-test", "#,
            r#""digest": "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}"#
        ),
        "--set-json",
        r#"imagePullSecrets=[{"name": "regcred"}]"#,
        "--set-json",
        r#"serviceAccount={"annotations": {"example.com/role": "kcm-rs"}}"#,
        "--set-json",
        r#"extraEnv=[{"name": "RUST_BACKTRACE", "value": "1"}]"#,
        "--set-json",
        r#"extraVolumes=[{"name": "tls", "secret": {"secretName": "kcm-rs-tls"}}]"#,
        "--set-json",
        r#"extraVolumeMounts=[{"name": "tls", "mountPath": "/etc/kcm-rs/tls", "readOnly": true}]"#,
        "--set-json",
        r#"extraArgs=["--tls-cert-file=/etc/kcm-rs/tls/tls.crt", "--tls-private-key-file=/etc/kcm-rs/tls/tls.key"]"#,
        "--set-json",
        "nodeSelector={}",
        "--set-json",
        "affinity={}",
        "--set-json",
        r#"topologySpreadConstraints=[{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}]"#,
        "--set",
        "podDisruptionBudget.enabled=true",
        "--set",
        "podDisruptionBudget.maxUnavailable=50%",
        "--set",
        "leaderElection.leaseName=controllers",
        "--set-json",
        r#"podAnnotations={"example.com/scrape": "no"}"#,
        "--set-json",
        r#"podLabels={"example.com/team": "platform"}"#,
        "--set-json",
        r#"resources={"requests": {"cpu": "100m", "memory": "128Mi", "ephemeral-storage": "1Gi"}, "limits": {"memory": 1073741824}}"#,
        "--set-json",
        r#"tolerations=[{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoExecute", "tolerationSeconds": 60}]"#,
    ],
    // Outside kube-system (GKE admits system-cluster-critical pods there
    // only under a ResourceQuota scoped to the class): the chart's quota.
    &["--namespace", "kcm-system"],
];

/// The ServiceAccount the ServiceMonitor scrapes with (its token Secret is
/// `<SCRAPER>-token`), bound to system:kcm-rs:metrics-reader.
const SCRAPER: &str = "kcm-rs-metrics-scraper";

/// Values that cannot work, and what the failure must say.
const REFUSED: &[(&[&str], &str)] = &[
    (
        &["--set", "leaderElection.enabled=false"],
        "leaderElection.enabled=false with replicas=2",
    ),
    (
        &["--set", "identities.prefix="],
        "identities.prefix is empty",
    ),
    (
        &[
            "--set",
            "besideKcm.enabled=true",
            "--set",
            "controllers={job,podgc}",
        ],
        "besideKcm.enabled runs kcm-rs beside a complete kube-controller-manager",
    ),
    (
        &[
            "--set",
            "besideKcm.enabled=true",
            "--set",
            "besideKcm.managedBy=",
        ],
        "besideKcm.enabled needs besideKcm.managedBy",
    ),
    (
        &[
            "--set",
            "controllers={*,-job,-podgc,-disruption,-taint-eviction-controller}",
        ],
        "select no controller",
    ),
    (
        &["--set", "controllers={pod-gc}"],
        "unknown controller \"pod-gc\"",
    ),
    // values.schema.json: a misspelled key or a bad value.
    (
        &["--set", "replica=3"],
        "additional properties 'replica' not allowed",
    ),
    (
        &["--set", "monitoring.relase=x"],
        "additional properties 'relase' not allowed",
    ),
    (&["--set", "image.digest=abc"], "does not match pattern"),
    (&["--set", "logging.format=yaml"], "logging/format"),
    // The schema is strict where Kubernetes' types are: resources,
    // affinity, tolerations, extraEnv, the PDB.
    (
        &["--set", "resources.request.cpu=1"],
        "additional properties 'request' not allowed",
    ),
    (
        &["--set", "resources.limits.cpu=lots"],
        "resources/limits/cpu",
    ),
    (
        &["--set-json", r#"affinity={"podAntiAfinity": {}}"#],
        "additional properties 'podAntiAfinity' not allowed",
    ),
    (
        &[
            "--set-json",
            r#"tolerations=[{"key": "a", "operator": "In"}]"#,
        ],
        "tolerations/0/operator",
    ),
    (
        &[
            "--set-json",
            r#"tolerations=[{"key": "a", "efect": "NoSchedule"}]"#,
        ],
        "additional properties 'efect' not allowed",
    ),
    (
        &["--set-json", r#"extraEnv=[{"value": "1"}]"#],
        "missing property 'name'",
    ),
    (
        &[
            "--set-json",
            r#"extraEnv=[{"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]"#,
        ],
        "extraEnv/0",
    ),
    (
        &[
            "--set-json",
            r#"extraEnv=[{"name": "A", "valueFrom": {"secretRef": {"name": "s"}}}]"#,
        ],
        "additional properties 'secretRef' not allowed",
    ),
    (
        &["--set", "podDisruptionBudget.maxUnavailable=0"],
        "podDisruptionBudget/maxUnavailable",
    ),
    (
        &["--set-string", "podDisruptionBudget.maxUnavailable=0%"],
        "podDisruptionBudget/maxUnavailable",
    ),
    (
        &[
            "--set-json",
            r#"podLabels={"app.kubernetes.io/name": "other"}"#,
        ],
        "podLabels: app.kubernetes.io/name is set by the chart",
    ),
];

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

fn template_args<'a>(values: &[&'a str], crds: bool) -> Vec<&'a str> {
    let mut args = vec![
        "template",
        "kcm-rs",
        "charts/kcm-rs",
        "--namespace",
        NAMESPACE,
    ];
    args.extend(values);
    if crds {
        args.extend(CRDS_SERVED);
    }
    args
}

fn template(values: &[&str], crds: bool) -> String {
    run_helm(&template_args(values, crds))
}

/// Removes Helm's standard labels from the chart's objects (metadata and the
/// pod template): the objects that lack one.
fn strip_helm_labels(docs: &mut [Value]) -> Vec<String> {
    let mut missing = Vec::new();
    for doc in docs.iter_mut() {
        let what = format!("{} {}", text(&doc["kind"]), text(&doc["metadata"]["name"]));
        let mut places = vec!["/metadata/labels"];
        if doc["kind"] == "Deployment" {
            places.push("/spec/template/metadata/labels");
        }
        for at in places {
            let Some(labels) = doc.pointer_mut(at).and_then(Value::as_object_mut) else {
                missing.push(format!("{what}: no {at}"));
                continue;
            };
            for l in HELM_LABELS {
                if labels.remove(*l).is_none() {
                    missing.push(format!("{what}: no {l} in {at}"));
                }
            }
        }
    }
    missing
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
    let mut chart = chart.to_vec();
    let mut problems = strip_helm_labels(&mut chart);
    let c = by_key(chart, "chart");
    let k = by_key(kustomized.to_vec(), "kustomize");
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

/// Chart.yaml.
fn chart_yaml() -> Value {
    let path = repo_root().join("charts/kcm-rs/Chart.yaml");
    serde_yaml_ng::from_str(&std::fs::read_to_string(&path).expect("Chart.yaml")).expect("yaml")
}

/// The chart's appVersion (the image tag it defaults to) is the workspace
/// version; its own version moves on every change of the chart
/// (hack/release-checks.py, charts/kcm-rs.versions).
#[test]
fn chart_app_version_is_the_workspace_version() {
    let chart = chart_yaml();
    assert_eq!(chart["apiVersion"], "v2");
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"));
    // The monitoring objects come from manifests/monitoring, not a copy.
    let link = repo_root().join("charts/kcm-rs/files/monitoring");
    let target = std::fs::read_link(&link).expect("files/monitoring is a link");
    assert_eq!(target, Path::new("../../../manifests/monitoring"));
}

/// The one of `docs` of `kind` named `name`.
fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    let found = docs
        .iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name);
    found.unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn names(docs: &[Value], kind: &str) -> Vec<String> {
    let of_kind = docs.iter().filter(|d| d["kind"] == kind);
    of_kind
        .map(|d| text(&d["metadata"]["name"]).to_string())
        .collect()
}

/// CHART_ONLY's last case: each value where it belongs.
fn everything_set(docs: &[Value]) {
    let dep = find(docs, "Deployment", "kcm-rs");
    let pod = &dep["spec"]["template"]["spec"];
    let ctr = container(dep);
    assert_eq!(
        ctr["image"],
        "registry.example/kcm-rs:0.1.0-test@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    );
    assert_eq!(pod["imagePullSecrets"], json!([{ "name": "regcred" }]));
    assert_eq!(
        ctr["env"][3],
        json!({ "name": "RUST_BACKTRACE", "value": "1" })
    );
    assert_eq!(pod["volumes"][0]["secret"]["secretName"], "kcm-rs-tls");
    assert_eq!(ctr["volumeMounts"][0]["mountPath"], "/etc/kcm-rs/tls");
    assert!(
        pod.get("nodeSelector").is_none() && pod.get("affinity").is_none(),
        "{pod}"
    );
    let spread = &pod["topologySpreadConstraints"][0];
    assert_eq!(
        spread["labelSelector"]["matchLabels"]["app.kubernetes.io/name"],
        "kcm-rs"
    );
    assert_eq!(
        find(docs, "PodDisruptionBudget", "kcm-rs")["spec"]["maxUnavailable"],
        "50%"
    );
    let meta = &dep["spec"]["template"]["metadata"];
    assert_eq!(meta["annotations"], json!({"example.com/scrape": "no"}));
    assert_eq!(meta["labels"]["example.com/team"], "platform");
    assert_eq!(meta["labels"]["app.kubernetes.io/name"], "kcm-rs");
    // Merged with the defaults (cpu "1"), as helm merges maps.
    assert_eq!(
        ctr["resources"]["limits"],
        json!({"cpu": "1", "memory": 1073741824})
    );
    assert_eq!(pod["tolerations"][0]["tolerationSeconds"], 60);
    let sa = find(docs, "ServiceAccount", "kcm-rs");
    assert_eq!(sa["metadata"]["annotations"]["example.com/role"], "kcm-rs");
    // Only the two controllers' identities (and the scraper's), and what
    // their informers read.
    let mut accounts = names(docs, "ServiceAccount");
    accounts.sort();
    assert_eq!(
        accounts,
        [
            "kcm-rs",
            "kcm-rs-job-controller",
            SCRAPER,
            "kcm-rs-pod-garbage-collector"
        ]
    );
    let role = find(docs, "Role", "system:kcm-rs");
    assert_eq!(
        role["rules"][0]["resourceNames"],
        json!(["kcm-rs-job-controller", "kcm-rs-pod-garbage-collector"])
    );
    assert_eq!(role["rules"][1]["resourceNames"], json!(["controllers"]));
    let reads = &find(docs, "ClusterRole", "system:kcm-rs")["rules"];
    assert_eq!(reads[0]["resources"], json!(["pods", "nodes"]));
    assert_eq!(reads[1]["resources"], json!(["jobs"]));
    assert_eq!(reads.as_array().map(Vec::len), Some(4), "{reads}");
    let mut roles = names(docs, "ClusterRole");
    roles.sort();
    assert_eq!(
        roles,
        [
            "system:kcm-rs",
            "system:kcm-rs:job-controller",
            "system:kcm-rs:metrics-reader",
            "system:kcm-rs:pod-garbage-collector"
        ]
    );
    // The Lease is the one named, and the alerts follow any Lease name.
    assert!(names(docs, "Lease") == ["controllers"]);
    let args = container_args(dep);
    assert!(args.contains(&"--leader-elect-resource-name=controllers".to_string()));
    let rules =
        serde_json::to_string(&find(docs, "PrometheusRule", "kcm-rs")["spec"]).expect("json");
    assert!(
        !rules.contains("name=\\\"kcm-rs\\\""),
        "a Lease name in the alerts"
    );
}

/// Each impossible combination and misspelled value fails with its
/// message; the monitoring objects that need the Prometheus Operator's CRDs
/// only where the cluster serves them; beside KCM, only the Job controller's
/// identity and no control-plane nodeSelector.
#[test]
fn impossible_values_fail_and_crd_objects_need_their_crds() {
    for (values, needle) in REFUSED {
        let got = try_helm(&template_args(values, false));
        assert!(
            matches!(&got, Err(e) if e.contains(needle)),
            "{values:?} should fail with {needle:?}: {got:?}"
        );
        let first = got.err().unwrap_or_default();
        eprintln!(
            "refused {values:?}: {}",
            first.lines().find(|l| l.contains(needle)).unwrap_or("")
        );
    }
    // `helm upgrade --reuse-values` from an older chart keeps that chart's
    // defaults: a key this chart added is missing, and refused with what to
    // run (the chart as helm sees it then: these templates, older values).
    let older = tempfile::tempdir().expect("tempdir");
    let copy = older.path().join("kcm-rs");
    let status = Command::new("cp")
        .args(["-rL", "charts/kcm-rs"])
        .arg(&copy)
        .current_dir(repo_root())
        .status()
        .expect("cp");
    assert!(status.success());
    let values = std::fs::read_to_string(copy.join("values.yaml")).expect("values");
    let mut inside = false;
    let kept: Vec<&str> = values
        .lines()
        .filter(|l| {
            inside = l.starts_with("priorityClassQuota:") || (inside && l.starts_with("  "));
            !inside
        })
        .collect();
    assert!(
        kept.len() < values.lines().count(),
        "priorityClassQuota in values.yaml"
    );
    std::fs::write(copy.join("values.yaml"), kept.join("\n")).expect("write");
    let got = try_helm(&[
        "template",
        "kcm-rs",
        &copy.display().to_string(),
        "--namespace",
        "kcm-system",
    ]);
    assert!(
        matches!(&got, Err(e) if e.contains("the values have no priorityClassQuota") && e.contains("--reset-then-reuse-values")),
        "values without priorityClassQuota: {got:?}"
    );
    let monitoring = |crds: bool, values: &[&str]| {
        let docs = parse_docs(&template(values, crds), "helm template");
        let mut kinds: Vec<String> = docs
            .iter()
            .filter(|d| {
                let kind = text(&d["kind"]);
                let name = text(&d["metadata"]["name"]);
                kind == "ServiceMonitor"
                    || kind == "PrometheusRule"
                    || name == "kcm-rs-dashboard"
                    || name.starts_with("kcm-rs-metrics-scraper")
                    || name == "system:kcm-rs:metrics-reader" && kind == "ClusterRoleBinding"
            })
            .map(|d| text(&d["kind"]).to_string())
            .collect();
        kinds.sort();
        kinds
    };
    // The scraper's identity (ServiceAccount, token Secret, metrics-reader
    // binding) only with the ServiceMonitor that names its token.
    let all = [
        "ClusterRoleBinding",
        "ConfigMap",
        "PrometheusRule",
        "Secret",
        "ServiceAccount",
        "ServiceMonitor",
    ];
    assert_eq!(monitoring(true, &[]), all);
    assert_eq!(monitoring(false, &[]), ["ConfigMap"]);
    assert!(monitoring(true, &["--set", "monitoring.enabled=false"]).is_empty());

    let beside = parse_docs(
        &template(&["--set", "besideKcm.enabled=true"], false),
        "helm template",
    );
    assert_eq!(
        names(&beside, "ServiceAccount"),
        ["kcm-rs", "kcm-rs-job-controller"]
    );
    let pod = &find(&beside, "Deployment", "kcm-rs")["spec"]["template"]["spec"];
    assert!(pod.get("nodeSelector").is_none(), "{pod}");
    let replacing = parse_docs(&template(&[], false), "helm template");
    let pod = &find(&replacing, "Deployment", "kcm-rs")["spec"]["template"]["spec"];
    assert_eq!(
        pod["nodeSelector"],
        json!({ "node-role.kubernetes.io/control-plane": "" })
    );
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
    for (dir, values, crds) in MATCHING {
        lint(values);
        let chart_yaml = template(values, *crds);
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
        streams.push((format!("helm template {values:?}"), template(values, true)));
    }
    // The packaged chart carries the linked monitoring files: it renders the
    // same as the chart directory.
    let pkg = tempfile::tempdir().expect("tempdir");
    let dest = pkg.path().display().to_string();
    run_helm(&["package", "charts/kcm-rs", "--destination", &dest]);
    let tgz = pkg
        .path()
        .join(format!("kcm-rs-{}.tgz", text(&chart_yaml()["version"])));
    let tgz = tgz.display().to_string();
    let mut args = vec!["template", "kcm-rs", &tgz, "--namespace", NAMESPACE];
    args.extend(CRDS_SERVED);
    let packaged = run_helm(&args);
    let packaged = parse_docs(&packaged, "helm template of the package");
    let found = compare(&packaged, &kustomize(""));
    eprintln!("packaged chart = manifests/: {} differences", found.len());
    problems.extend(found.iter().map(|p| format!("packaged chart: {p}")));
    // The comparison sees a one-flag change, and only it.
    let changed = template(&["--set", "kubeApi.qps=21"], true);
    let changed = parse_docs(&changed, "helm template");
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
        .filter(|d| d["kind"] == "ServiceAccount" && d["metadata"]["name"] != SCRAPER)
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
    everything_set(&only(3));
    // Outside kube-system, a ResourceQuota for the PriorityClass; none in
    // kube-system (the defaults above), nor without a system-*-critical class.
    let outside = only(4);
    let quota = find(&outside, "ResourceQuota", "kcm-rs-critical-pods");
    assert_eq!(quota["metadata"]["namespace"], "kcm-system");
    assert_eq!(
        quota["spec"],
        json!({"hard": {"pods": "10"}, "scopeSelector": {"matchExpressions": [
            {"scopeName": "PriorityClass", "operator": "In", "values": ["system-cluster-critical"]}]}})
    );
    for values in [
        &["--set", "priorityClassName="][..],
        &[
            "--set",
            "priorityClassQuota.enabled=false",
            "--namespace",
            "kcm-system",
        ],
        &["--set", "priorityClassName=", "--namespace", "kcm-system"],
    ] {
        let docs = parse_docs(&template(values, false), "helm template");
        assert!(names(&docs, "ResourceQuota").is_empty(), "{values:?}");
    }

    // Every rendering applies on the real API server (server-side, dry run,
    // strict), the CRDs of the ServiceMonitor and PrometheusRule installed.
    let dry_at = Instant::now();
    let kubectl = kcm_e2e::binaries::ensure_built_with_kubectl().expect("kubectl");
    let kubectl = kubectl.join("kcm-e2e-kubectl");
    let cp = ControlPlane::start().expect("control plane");
    let admin = cp.client().await.expect("admin client");
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    for ns in [NAMESPACE, "monitoring", "kcm-system"] {
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
