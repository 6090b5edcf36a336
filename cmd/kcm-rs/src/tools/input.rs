//! What the tools read: a Job with its pods and events, from manifests
//! (YAML or JSON, one or many documents, `List`s) or from the API server.

use std::path::Path;

use k8s_openapi::api::batch::v1::{Job, PodFailurePolicy};
use k8s_openapi::api::core::v1::{Event, Pod};
use kcm_job::explain::WhatIf;
use kcm_pod::meta::is_controlled_by;
use kube::api::{Api, ListParams};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::ToolError;

pub struct Snapshot {
    pub job: Job,
    pub pods: Vec<Pod>,
    pub events: Vec<Event>,
}

/// Every document of a YAML or JSON file (`-`: stdin), `List`s flattened
/// (`kcm_yaml_docs::documents`).
pub fn documents(path: &Path) -> Result<Vec<Value>, ToolError> {
    let text = if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin())
            .map_err(|e| ToolError(format!("reading stdin: {e}")))?
    } else {
        std::fs::read_to_string(path)
            .map_err(|e| ToolError(format!("reading {}: {e}", path.display())))?
    };
    kcm_yaml_docs::documents(&text)
        .map_err(|e| ToolError(format!("{}: not YAML or JSON: {e}", path.display())))
}

fn decode<T: DeserializeOwned>(v: Value, what: &str, path: &Path) -> Result<T, ToolError> {
    serde_json::from_value(v)
        .map_err(|e| ToolError(format!("{}: not a {what}: {e}", path.display())))
}

fn of_kind<T: DeserializeOwned>(path: &Path, kind: &str) -> Result<Vec<T>, ToolError> {
    documents(path)?
        .into_iter()
        .filter(|d| d["kind"].as_str().is_none_or(|k| k == kind))
        .map(|d| decode(d, kind, path))
        .collect()
}

pub fn from_files(
    job: &Path,
    pods: Option<&Path>,
    events: Option<&Path>,
) -> Result<Snapshot, ToolError> {
    let mut jobs: Vec<Job> = of_kind(job, "Job")?;
    if jobs.len() != 1 {
        return Err(ToolError(format!(
            "{}: expected one Job, found {}",
            job.display(),
            jobs.len()
        )));
    }
    let job = jobs.remove(0);
    let uid = job.metadata.uid.clone();
    let pods: Vec<Pod> = match pods {
        Some(p) => of_kind(p, "Pod")?,
        None => Vec::new(),
    };
    Ok(Snapshot {
        pods: owned_by(pods, uid.as_deref()),
        events: match events {
            Some(e) => of_kind(e, "Event")?,
            None => Vec::new(),
        },
        job,
    })
}

/// Pods whose controller is the Job (all of them when the Job has no UID,
/// as in a hand-written file).
fn owned_by(pods: Vec<Pod>, uid: Option<&str>) -> Vec<Pod> {
    let Some(uid) = uid else { return pods };
    pods.into_iter()
        .filter(|p| is_controlled_by(&p.metadata, uid))
        .collect()
}

/// The proposed policy: a file holding a `podFailurePolicy` (`rules:` at
/// the top, or under `podFailurePolicy:`) or a Job whose spec has one.
pub fn what_if(
    path: &Path,
    backoff_limit: Option<i32>,
    backoff_limit_per_index: Option<i32>,
) -> Result<WhatIf, ToolError> {
    let mut docs = documents(path)?;
    if docs.len() != 1 {
        return Err(ToolError(format!(
            "{}: expected one document with a podFailurePolicy, found {}",
            path.display(),
            docs.len()
        )));
    }
    let doc = docs.remove(0);
    let (policy, spec) = if doc["kind"].as_str() == Some("Job") {
        (doc["spec"]["podFailurePolicy"].clone(), doc["spec"].clone())
    } else if !doc["podFailurePolicy"].is_null() {
        (doc["podFailurePolicy"].clone(), doc.clone())
    } else {
        (doc.clone(), Value::Null)
    };
    let policy: Option<PodFailurePolicy> = if policy.is_null() {
        None
    } else {
        Some(decode(policy, "podFailurePolicy", path)?)
    };
    let int = |v: &Value| v.as_i64().and_then(|n| i32::try_from(n).ok());
    Ok(WhatIf {
        policy,
        backoff_limit: backoff_limit.or_else(|| int(&spec["backoffLimit"])),
        backoff_limit_per_index: backoff_limit_per_index
            .or_else(|| int(&spec["backoffLimitPerIndex"])),
    })
}

/// A client for `--kubeconfig`/`--context` (else in-cluster or
/// `$KUBECONFIG`), and the namespace that configuration names (the
/// context's `namespace`, in-cluster the pod's own, else `default`), as
/// kubectl picks it when `-n` is not given.
pub async fn client(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> Result<(kube::Client, String), ToolError> {
    let config = match context {
        None => crate::kubeconfig::load_or_infer(kubeconfig)
            .await
            .map_err(ToolError)?,
        Some(ctx) => {
            let opts = kube::config::KubeConfigOptions {
                context: Some(ctx.to_string()),
                ..Default::default()
            };
            let loaded = match kubeconfig {
                Some(p) => {
                    let kc = kube::config::Kubeconfig::read_from(p).map_err(|e| {
                        ToolError(format!("reading kubeconfig {}: {e}", p.display()))
                    })?;
                    kube::Config::from_custom_kubeconfig(kc, &opts).await
                }
                None => kube::Config::from_kubeconfig(&opts).await,
            };
            loaded.map_err(|e| ToolError(format!("--context {ctx}: {e}")))?
        }
    };
    let namespace = config.default_namespace.clone();
    let client =
        kube::Client::try_from(config).map_err(|e| ToolError(format!("building a client: {e}")))?;
    Ok((client, namespace))
}

/// The Job, the pods it controls and its namespace's events.
pub async fn from_cluster(
    client: kube::Client,
    ns: &str,
    name: &str,
) -> Result<Snapshot, ToolError> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let job = jobs
        .get_opt(name)
        .await
        .map_err(|e| ToolError(format!("reading Job {ns}/{name}: {e}")))?
        .ok_or_else(|| ToolError(format!("Job {ns}/{name} not found")))?;
    let uid = job.metadata.uid.clone().unwrap_or_default();
    // Job pods carry their Job's UID as a label (1.27+); ownership decides.
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let selected = pods
        .list(&ListParams::default().labels(&format!("batch.kubernetes.io/controller-uid={uid}")))
        .await
        .map_err(|e| ToolError(format!("listing pods of Job {ns}/{name}: {e}")))?;
    let events: Api<Event> = Api::namespaced(client, ns);
    let events = events
        .list(&ListParams::default())
        .await
        .map_err(|e| ToolError(format!("listing events in {ns}: {e}")))?;
    Ok(Snapshot {
        pods: owned_by(selected.items, Some(&uid)),
        events: events.items,
        job,
    })
}
