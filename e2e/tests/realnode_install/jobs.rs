//! The Jobs the installs run as real containers and how they ended: the
//! example Jobs (`manifests/examples/job.yaml` and the real-node form of the
//! pod failure policy examples, whose outcomes docs/real-node.md gives), the
//! stream of small Jobs that runs through an upgrade, every pod seen (a
//! watch: evicted pods are deleted) and the evictions the examples ask for.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kcm_e2e::binaries::repo_root;
use kube::api::{EvictParams, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

pub const NS: &str = "default";
const TRACKING: &str = "batch.kubernetes.io/job-tracking";

/// Every pod of `NS` seen, by UID: its last state, and whether it is gone.
/// A deleted pod keeps the state its deletion event carried: when the
/// controller's removal of the last finalizer is what deletes a pod (one
/// whose deletion the kubelet had asked for), the API server deletes it
/// instead of storing the change, so that state still shows the finalizer.
#[derive(Clone, Default)]
pub struct Seen(Arc<parking_lot::Mutex<HashMap<String, (Pod, bool)>>>);

impl Seen {
    pub fn watch(client: kube::Client) -> Self {
        let seen = Seen::default();
        let map = seen.0.clone();
        tokio::spawn(async move {
            let api: Api<Pod> = Api::namespaced(client, NS);
            let mut events =
                std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
            // An error (the watch expired, the connection dropped) is
            // followed by a relist: keep going.
            while let Some(event) = events.next().await {
                let (p, gone) = match event {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => (p, false),
                    Ok(watcher::Event::Delete(p)) => (p, true),
                    _ => continue,
                };
                if let Some(uid) = p.metadata.uid.clone() {
                    let mut map = map.lock();
                    if !map.get(&uid).is_some_and(|(_, was_gone)| *was_gone) {
                        map.insert(uid, (p, gone));
                    }
                }
            }
        });
        seen
    }

    /// The pods that exist now, as a list gives them (the watch may lag); a
    /// pod the watch saw deleted stays deleted.
    async fn refresh(&self, client: &kube::Client) {
        let api: Api<Pod> = Api::namespaced(client.clone(), NS);
        if let Ok(list) = api.list(&ListParams::default()).await {
            let mut map = self.0.lock();
            for p in list.items {
                if let Some(uid) = p.metadata.uid.clone()
                    && !map.get(&uid).is_some_and(|(_, gone)| *gone)
                {
                    map.insert(uid, (p, false));
                }
            }
        }
    }

    /// The pods of the Job with UID `uid`, each with whether it is gone.
    fn of_job(&self, uid: &str) -> Vec<(Pod, bool)> {
        let map = self.0.lock();
        let mine = |(p, _): &&(Pod, bool)| {
            p.labels()
                .get("batch.kubernetes.io/controller-uid")
                .map(String::as_str)
                == Some(uid)
        };
        map.values().filter(mine).cloned().collect()
    }
}

/// Evicts every pod that asks for it (a file `<ns>_<pod>` in the examples'
/// hostPath directory, written by `policy-count-ignore`'s third pod) through
/// the Eviction API, as `kcm-dev --evict-requests` does for `make run-real`.
pub fn evict_on_request(client: kube::Client, state: PathBuf) {
    let dir = state.join("hostpath/examples/evict");
    tokio::spawn(async move {
        loop {
            let names: Vec<String> = std::fs::read_dir(&dir)
                .map(|d| {
                    d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                        .collect()
                })
                .unwrap_or_default();
            for name in names {
                let Some((ns, pod)) = name.split_once('_') else {
                    continue;
                };
                let api: Api<Pod> = Api::namespaced(client.clone(), ns);
                match api.evict(pod, &EvictParams::default()).await {
                    Ok(_) => eprintln!("evicted {ns}/{pod} (it asked to be)"),
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => {
                        eprintln!("evicting {ns}/{pod}: {e}; again");
                        continue;
                    }
                }
                let _ = std::fs::remove_file(dir.join(&name));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
}

fn yaml_docs(rel: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(repo_root().join(rel)).expect(rel);
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// The example Jobs as `make run-real` runs them; `managed_by` sets
/// `spec.managedBy` (beside KCM).
pub fn examples(managed_by: Option<&str>) -> Vec<Value> {
    let mut docs = yaml_docs("manifests/examples/job.yaml");
    docs.extend(yaml_docs("e2e/realnode/examples/pod-failure-policy.yaml"));
    for d in &mut docs {
        if let Some(m) = managed_by {
            d["spec"]["managedBy"] = json!(m);
        }
    }
    docs
}

/// Each example Job's end as docs/real-node.md gives it.
pub const EXAMPLES_END: &[(&str, &str)] = &[
    (
        "policy-count-ignore",
        "Complete (CompletionsReached) succeeded=6 failed=2 pods=9 pods-succeeded=6 pods-failed=3 ignored=1",
    ),
    (
        "policy-failjob",
        "Failed (PodFailurePolicy) succeeded=0 failed=1 pods=1 pods-succeeded=0 pods-failed=1 ignored=0",
    ),
    (
        "sample",
        "Complete (CompletionsReached) succeeded=6 failed=0 pods=6 pods-succeeded=6 pods-failed=0 ignored=0",
    ),
];

/// A Job of the stream that runs through an upgrade: three pods, the second
/// to start (by ticket) exits 1, so it ends Complete with succeeded=3,
/// failed=1 and four pods.
pub fn stream_job(n: usize) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": format!("stream-{n:03}"), "namespace": NS },
        "spec": { "completions": 3, "parallelism": 3, "backoffLimit": 6,
            "template": { "spec": {
                "restartPolicy": "Never", "terminationGracePeriodSeconds": 5,
                "containers": [{ "name": "main", "image": "busybox:1.36", "imagePullPolicy": "IfNotPresent",
                    "env": [{ "name": "JOB_UID", "valueFrom": { "fieldRef":
                        { "fieldPath": "metadata.labels['batch.kubernetes.io/controller-uid']" } } }],
                    "command": ["sh", "-c", "d=/node/tickets/$JOB_UID; mkdir -p $d; n=1; \
                        while ! mkdir $d/$n 2>/dev/null; do n=$((n + 1)); done; sleep 2; \
                        if [ $n = 2 ]; then exit 1; fi"],
                    "volumeMounts": [{ "name": "node", "mountPath": "/node" }] }],
                "volumes": [{ "name": "node", "hostPath":
                    { "path": "/run/kcm-rs-node/hostpath/examples", "type": "DirectoryOrCreate" } }] } } }
    })
}
pub const STREAM_END: &str = "Complete (CompletionsReached) succeeded=3 failed=1 pods=4 pods-succeeded=3 pods-failed=1 ignored=0";

pub async fn create(client: &kube::Client, job: &Value) -> Job {
    let api: Api<Job> = Api::namespaced(client.clone(), NS);
    let job: Job = serde_json::from_value(job.clone()).expect("a Job");
    api.create(&PostParams::default(), &job)
        .await
        .expect("create Job")
}

/// How a Job ended, and its pods.
#[derive(Debug, Clone)]
pub struct End {
    pub name: String,
    /// `Complete (CompletionsReached) succeeded=.. failed=.. pods=..
    /// pods-succeeded=.. pods-failed=.. ignored=..`, as `make run-real`.
    pub line: String,
    /// Pods still holding the tracking finalizer.
    pub finalizers: usize,
    /// Pods neither Succeeded nor Failed at the end.
    pub unfinished: usize,
    pub exit_codes: Vec<i32>,
    /// The Job's status counts (succeeded, failed).
    pub status: (i32, i32),
    /// Its pods seen Succeeded and Failed.
    pub pods_ended: (usize, usize),
}

impl End {
    /// Pods whose end the status does not count (lost), and counts no pod
    /// accounts for (counted twice), summed over succeeded and failed.
    pub fn lost_and_twice(&self) -> (usize, usize) {
        let mut lost = 0;
        let mut twice = 0;
        for (status, pods) in [
            (self.status.0, self.pods_ended.0),
            (self.status.1, self.pods_ended.1),
        ] {
            let status = usize::try_from(status).unwrap_or(0);
            lost += pods.saturating_sub(status);
            twice += status.saturating_sub(pods);
        }
        (lost, twice)
    }
}

fn finished(j: &Job) -> Option<String> {
    let conds = j.status.as_ref()?.conditions.as_ref()?;
    let c = conds
        .iter()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")?;
    Some(format!(
        "{} ({})",
        c.type_,
        c.reason.clone().unwrap_or_default()
    ))
}

/// Waits until every Job named has ended and its pods have let go of the
/// tracking finalizer (or `timeout`), then says how each ended.
pub async fn wait_ends(
    client: &kube::Client,
    seen: &Seen,
    names: &[String],
    timeout: Duration,
) -> BTreeMap<String, End> {
    let api: Api<Job> = Api::namespaced(client.clone(), NS);
    let deadline = Instant::now() + timeout;
    loop {
        let jobs = api.list(&ListParams::default()).await.expect("list Jobs");
        seen.refresh(client).await;
        let mut ends = BTreeMap::new();
        for j in jobs.items.iter().filter(|j| names.contains(&j.name_any())) {
            if let Some(end) = finished(j) {
                ends.insert(j.name_any(), end_of(j, end, seen));
            }
        }
        let settled = ends.len() == names.len()
            && ends
                .values()
                .all(|e| e.finalizers == 0 && e.unfinished == 0);
        if settled || Instant::now() > deadline {
            for n in names {
                ends.entry(n.clone()).or_insert_with(|| End {
                    name: n.clone(),
                    line: "not finished".into(),
                    finalizers: 0,
                    unfinished: 0,
                    exit_codes: vec![],
                    status: (0, 0),
                    pods_ended: (0, 0),
                });
            }
            return ends;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn end_of(j: &Job, end: String, seen: &Seen) -> End {
    let st = j.status.clone().unwrap_or_default();
    let all = seen.of_job(&j.uid().unwrap_or_default());
    // Left with the tracking finalizer: pods that still exist and hold it.
    let finalizers = all
        .iter()
        .filter(|(p, gone)| !gone && p.finalizers().iter().any(|f| f == TRACKING))
        .count();
    let pods: Vec<Pod> = all.into_iter().map(|(p, _)| p).collect();
    let phase = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default()
    };
    let disrupted = |p: &Pod| {
        let conds = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        conds
            .iter()
            .any(|c| c.type_ == "DisruptionTarget" && c.status == "True")
    };
    let ok = pods.iter().filter(|p| phase(p) == "Succeeded").count();
    let failed = pods.iter().filter(|p| phase(p) == "Failed").count();
    let ignored = pods
        .iter()
        .filter(|p| phase(p) == "Failed" && disrupted(p))
        .count();
    let mut exit_codes: Vec<i32> = pods
        .iter()
        .filter_map(|p| {
            let cs = p
                .status
                .as_ref()?
                .container_statuses
                .as_ref()?
                .first()?
                .clone();
            Some(cs.state?.terminated?.exit_code)
        })
        .collect();
    exit_codes.sort();
    End {
        name: j.name_any(),
        line: format!(
            "{end} succeeded={} failed={} pods={} pods-succeeded={ok} pods-failed={failed} ignored={ignored}",
            st.succeeded.unwrap_or(0),
            st.failed.unwrap_or(0),
            pods.len()
        ),
        finalizers,
        unfinished: pods.len() - ok - failed,
        exit_codes,
        status: (st.succeeded.unwrap_or(0), st.failed.unwrap_or(0)),
        pods_ended: (ok, failed),
    }
}

/// Markdown rows: `| Job | end | finalizers left | exit codes |`.
pub fn ends_markdown(ends: &BTreeMap<String, End>) -> String {
    let mut s = String::from(
        "| Job | end (status counts; pods seen) | tracking finalizers left | exit codes |\n|---|---|---|---|\n",
    );
    for e in ends.values() {
        s.push_str(&format!(
            "| {} | {} | {} | {:?} |\n",
            e.name, e.line, e.finalizers, e.exit_codes
        ));
    }
    s
}
