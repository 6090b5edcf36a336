//! `kcm-rs explain -o json` against its documented schema
//! (docs/explain-output.schema.json), and the tools' namespace: `-n`, else
//! the kubeconfig context's (`--context`), as kubectl.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use k8s_openapi::api::batch::v1::Job;
use kcm_e2e::{TestNamespace, shared};
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_kcm-rs");

fn tool(args: &[&str]) -> Output {
    let out = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run kcm-rs tool");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    out
}

fn schema() -> Value {
    let path = kcm_e2e::binaries::repo_root().join("docs/explain-output.schema.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("schema")).expect("schema JSON")
}

/// The subset of JSON Schema the file uses: type (one or a list), properties,
/// required, additionalProperties false, items, minItems/maxItems, minimum,
/// anyOf and local `$ref`s. Returns every violation with its JSON path.
fn validate(root: &Value, s: &Value, v: &Value, at: &str, errs: &mut Vec<String>) {
    if let Some(r) = s["$ref"].as_str() {
        let name = r.trim_start_matches("#/$defs/");
        return validate(root, &root["$defs"][name], v, at, errs);
    }
    if let Some(any) = s["anyOf"].as_array() {
        let ok = any.iter().any(|alt| {
            let mut e = Vec::new();
            validate(root, alt, v, at, &mut e);
            e.is_empty()
        });
        if !ok {
            errs.push(format!("{at}: matches no anyOf alternative: {v}"));
        }
        return;
    }
    let types: Vec<&str> = match &s["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    let is = |t: &str| match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        _ => false,
    };
    if !types.is_empty() && !types.iter().any(|t| is(t)) {
        errs.push(format!("{at}: {v} is not {types:?}"));
        return;
    }
    if let (Some(min), Some(n)) = (s["minimum"].as_i64(), v.as_i64())
        && n < min
    {
        errs.push(format!("{at}: {n} < {min}"));
    }
    if let Some(o) = v.as_object() {
        for req in s["required"].as_array().into_iter().flatten() {
            let key = req.as_str().unwrap_or_default();
            if !o.contains_key(key) {
                errs.push(format!("{at}: missing {key}"));
            }
        }
        for (k, x) in o {
            match s["properties"].get(k) {
                Some(p) => validate(root, p, x, &format!("{at}.{k}"), errs),
                None if s["additionalProperties"] == false => {
                    errs.push(format!("{at}: {k} is not in the schema"))
                }
                None => {}
            }
        }
    }
    if let Some(a) = v.as_array() {
        let len = a.len() as u64;
        if s["minItems"].as_u64().is_some_and(|m| len < m)
            || s["maxItems"].as_u64().is_some_and(|m| len > m)
        {
            errs.push(format!("{at}: {len} items"));
        }
        for (i, x) in a.iter().enumerate() {
            validate(root, &s["items"], x, &format!("{at}[{i}]"), errs);
        }
    }
}

fn check(report: &Value) {
    let schema = schema();
    let mut errs = Vec::new();
    validate(&schema, &schema, report, "$", &mut errs);
    assert!(errs.is_empty(), "{errs:#?}\n{report:#}");
}

fn failed_job_files(dir: &Path) -> (PathBuf, PathBuf) {
    let uid = "3b1c9a2e-0000-4000-8000-000000000001";
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "flaky", "namespace": "team", "uid": uid},
        "spec": {
            "completions": 3, "parallelism": 2, "completionMode": "Indexed",
            "backoffLimitPerIndex": 1, "maxFailedIndexes": 2,
            "podFailurePolicy": {"rules": [
                {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}},
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
            ]},
            "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox"}]}}
        },
        "status": {"failed": 1, "active": 1}
    });
    let pod = |name: &str, index: &str, exit: i32, disrupted: bool| {
        let mut conditions = vec![];
        if disrupted {
            conditions.push(json!({"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}));
        }
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "team",
                "labels": {"batch.kubernetes.io/controller-uid": uid,
                    "batch.kubernetes.io/job-completion-index": index},
                "annotations": {"batch.kubernetes.io/job-completion-index": index},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "flaky",
                    "uid": uid, "controller": true}]},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]},
            "status": {"phase": "Failed", "conditions": conditions,
                "containerStatuses": [{"name": "main", "image": "busybox", "imageID": "", "ready": false,
                    "restartCount": 0, "state": {"terminated": {"exitCode": exit,
                        "finishedAt": "2026-01-01T00:00:00Z", "startedAt": "2026-01-01T00:00:00Z"}}}]}
        })
    };
    let pods = json!({"apiVersion": "v1", "kind": "List",
        "items": [pod("flaky-0-a", "0", 1, false), pod("flaky-1-b", "1", 137, true)]});
    let (j, p) = (dir.join("job.json"), dir.join("pods.json"));
    std::fs::write(&j, job.to_string()).expect("write");
    std::fs::write(&p, pods.to_string()).expect("write");
    (j, p)
}

#[test]
fn explain_json_follows_the_documented_schema() {
    let dir = tempfile::tempdir().expect("dir");
    let (job, pods) = failed_job_files(dir.path());
    let (job, pods) = (job.display().to_string(), pods.display().to_string());
    for extra in [&[][..], &["--backoff-limit-per-index", "3"][..]] {
        let mut args = vec!["explain", "-f", &job, "--pods", &pods, "-o", "json"];
        args.extend_from_slice(extra);
        let out = tool(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(report["job"], "team/flaky");
        assert!(
            !report["failures"].as_array().is_none_or(Vec::is_empty),
            "{report:#}"
        );
        assert_eq!(report.get("what_if").is_some(), !extra.is_empty());
        check(&report);
    }
    // A field the schema does not know is caught (the check is not vacuous).
    let mut errs = Vec::new();
    let s = schema();
    validate(&s, &s, &json!({"job": 1, "extra": true}), "$", &mut errs);
    assert!(errs.iter().any(|e| e.contains("extra")) && errs.iter().any(|e| e.contains("$.job")));
}

/// The shared control plane's kubeconfig plus a context `in-ns` whose
/// namespace is `ns`.
fn kubeconfig_with_context(dir: &Path, ns: &str) -> PathBuf {
    let text = std::fs::read_to_string(shared().kubeconfig()).expect("kubeconfig");
    let mut kc: Value = serde_yaml_ng::from_str(&text).expect("yaml");
    let ctx = json!({"name": "in-ns", "context": {"cluster": "kcm-e2e", "user": "admin", "namespace": ns}});
    kc["contexts"].as_array_mut().expect("contexts").push(ctx);
    let path = dir.join("kubeconfig");
    std::fs::write(&path, serde_yaml_ng::to_string(&kc).expect("yaml")).expect("write");
    path
}

#[tokio::test]
async fn tools_default_to_the_contexts_namespace() {
    let client = shared().client().await.expect("client");
    let ns = TestNamespace::create(&client, "ctxns").await.expect("ns");
    let empty = TestNamespace::create(&client, "ctxempty")
        .await
        .expect("ns");
    // A rule shadowed by the one before it: a lint finding the API accepts.
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "shadowed"},
        "spec": {"suspend": true, "podFailurePolicy": {"rules": [
            {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}},
            {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [3]}}
        ]}, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox"}]}}}
    }))
    .expect("job");
    Api::<Job>::namespaced(client.clone(), &ns.name)
        .create(&PostParams::default(), &job)
        .await
        .expect("create");
    let dir = tempfile::tempdir().expect("dir");
    let kc = kubeconfig_with_context(dir.path(), &ns.name);
    let kc = format!("--kubeconfig={}", kc.display());

    let out = tool(&[
        "explain",
        "job",
        "shadowed",
        &kc,
        "--context",
        "in-ns",
        "-o",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(report["job"], format!("{}/shadowed", ns.name));
    check(&report);
    // The current context has no namespace: `default`, as kubectl.
    let out = tool(&["explain", "job", "shadowed", &kc]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("default/shadowed not found"));
    // -n wins over the context.
    let out = tool(&[
        "explain",
        "job",
        "shadowed",
        &kc,
        "--context",
        "in-ns",
        "-n",
        &empty.name,
    ]);
    assert_eq!(out.status.code(), Some(2));

    let out = tool(&["lint", &kc, "--context", "in-ns", "-o", "json"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("shadowed-rule"));
    let out = tool(&["lint", &kc, "--context", "in-ns", "-n", &empty.name]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = tool(&["lint", &kc, "-A", "-o", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let out = tool(&["explain", "job", "x", &kc, "--context", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--context nope"));
}
