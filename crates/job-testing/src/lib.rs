//! kcm-job-testing: the shared pieces of the Job controller's
//! integration and differential tests (`crates/job/tests`, each binary
//! imports it as `support`), compiled once rather than into every test
//! binary.
//!
//! Layout:
//! - `lib.rs`: start kcm-rs's or upstream's job-controller (or both,
//!   beside each other), play the kubelet, and read back what a user can
//!   observe (outcomes, events, pod shapes, metrics);
//! - `script.rs`: scripted runs with checkpoints ([`script::Script`]),
//!   played against one side or both and compared;
//! - `scenarios.rs` and `scenarios/`: the scenarios the e2e suite plays
//!   alone and the differential suite against upstream.

pub mod scenarios;
pub mod script;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kcm_e2e::in_process::{self, InProcess};
use kcm_e2e::{ControlPlane, TestNamespace, UpstreamKcm};
use kcm_features::FeatureGates;
use kcm_runtime::controller::Settings;
use kube::Api;
use kube::api::ListParams;

/// A Job named `name` with a one-container `restartPolicy: Never` template
/// and the given spec fields on top.
pub fn job(name: &str, spec: serde_json::Value) -> Job {
    let mut j = serde_json::json!({
        "metadata": { "name": name },
        "spec": {
            "template": { "spec": {
                "restartPolicy": "Never",
                "containers": [{ "name": "main", "image": "busybox" }]
            }}
        }
    });
    if let (Some(dst), Some(src)) = (j["spec"].as_object_mut(), spec.as_object()) {
        for (k, v) in src {
            dst.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(j).expect("job")
}

pub enum Controller {
    Ours(InProcess),
    Upstream(UpstreamKcm),
    /// Upstream's job-controller and kcm-rs with `--job-managed-by`.
    Beside(UpstreamKcm, InProcess),
}

/// The `spec.managedBy` kcm-rs answers to beside KCM in these tests.
pub const MANAGED_BY: &str = "kcm-rs.dev/job-controller";

/// Who runs the Job controller in one differential run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Upstream KCM's job-controller alone.
    Upstream,
    /// kcm-rs replacing it.
    Ours,
    /// Upstream's job-controller and kcm-rs with `--job-managed-by`, every
    /// Job created with `spec.managedBy` naming kcm-rs.
    Beside,
}

impl Side {
    /// kcm-rs's side: [`Side::Beside`] under `KCM_DIFF_BESIDE=1`, which
    /// plays the whole differential suite the third way.
    pub fn ours() -> Side {
        if std::env::var("KCM_DIFF_BESIDE").is_ok_and(|v| v == "1") {
            Side::Beside
        } else {
            Side::Ours
        }
    }

    pub fn of(upstream: bool) -> Side {
        if upstream {
            Side::Upstream
        } else {
            Side::ours()
        }
    }
}

/// [`job`], with `spec.managedBy` naming kcm-rs on [`Side::Beside`]
/// (unless the spec names a controller itself).
pub fn job_on(side: Side, name: &str, spec: serde_json::Value) -> Job {
    let mut j = job(name, spec);
    if let Some(s) = j.spec.as_mut()
        && side == Side::Beside
        && s.managed_by.is_none()
    {
        s.managed_by = Some(MANAGED_BY.into());
    }
    j
}

/// A control plane of the test's own (the controller must not see other
/// tests' objects), a namespace on it and that namespace's Jobs and pods;
/// the test starts the controller.
pub struct Plane {
    pub cp: ControlPlane,
    pub client: kube::Client,
    pub ns: TestNamespace,
    pub jobs: Api<Job>,
    pub pods: Api<Pod>,
}

/// A [`Plane`] whose namespace is named after `prefix`.
pub async fn plane(prefix: &str) -> Plane {
    let cp = ControlPlane::start().expect("cp");
    let client = cp.client().await.expect("client");
    let ns = TestNamespace::create(&client, prefix).await.expect("ns");
    Plane {
        jobs: Api::namespaced(client.clone(), &ns.name),
        pods: Api::namespaced(client.clone(), &ns.name),
        cp,
        client,
        ns,
    }
}

pub async fn start(cp: &ControlPlane, upstream: bool, gates: FeatureGates) -> Controller {
    start_with(cp, upstream, gates, &[]).await
}

/// [`start`] with flags for upstream KCM (`--emulated-version`,
/// `--feature-gates`) that `gates` says the same way to kcm-rs.
pub async fn start_with(
    cp: &ControlPlane,
    upstream: bool,
    gates: FeatureGates,
    upstream_flags: &[&str],
) -> Controller {
    start_side(cp, Side::of(upstream), gates, upstream_flags).await
}

/// [`start_with`] for one [`Side`].
pub async fn start_side(
    cp: &ControlPlane,
    side: Side,
    gates: FeatureGates,
    upstream_flags: &[&str],
) -> Controller {
    let kcm = || UpstreamKcm::start(cp, &["job-controller"], upstream_flags).expect("upstream KCM");
    let settings = match side {
        Side::Beside => Settings::default().with(kcm_job::JobSettings {
            job_managed_by: Some(MANAGED_BY.into()),
            ..Default::default()
        }),
        _ => Settings::default(),
    };
    let ours = || async {
        in_process::start(cp, &[kcm_job::SPEC], settings, gates)
            .await
            .expect("kcm-rs job controller")
    };
    match side {
        Side::Upstream => Controller::Upstream(kcm()),
        Side::Ours => Controller::Ours(ours().await),
        Side::Beside => {
            let k = kcm();
            Controller::Beside(k, ours().await)
        }
    }
}

pub fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

pub async fn job_pods(pods: &Api<Pod>, job: &str) -> Vec<Pod> {
    pods.list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

/// What a user sees of a Job's outcome (no times, no UIDs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub succeeded: i32,
    pub failed: i32,
    pub active: i32,
    pub ready: i32,
    pub terminating: i32,
    /// `status.terminating` written at all (not with JobPodReplacementPolicy off).
    pub terminating_set: bool,
    pub completed_indexes: String,
    pub failed_indexes: Option<String>,
    /// (type, status, reason, message) in order.
    pub conditions: Vec<(String, String, String, String)>,
    pub completion_time_set: bool,
    pub uncounted_empty: bool,
}

pub fn outcome(job: &Job) -> Outcome {
    let s = job.status.clone().unwrap_or_default();
    Outcome {
        succeeded: s.succeeded.unwrap_or(0),
        failed: s.failed.unwrap_or(0),
        active: s.active.unwrap_or(0),
        ready: s.ready.unwrap_or(0),
        terminating: s.terminating.unwrap_or(0),
        terminating_set: s.terminating.is_some(),
        completed_indexes: s.completed_indexes.unwrap_or_default(),
        failed_indexes: s.failed_indexes,
        conditions: s
            .conditions
            .unwrap_or_default()
            .into_iter()
            .map(|c| {
                (
                    c.type_,
                    c.status,
                    c.reason.unwrap_or_default(),
                    c.message.unwrap_or_default(),
                )
            })
            .collect(),
        completion_time_set: s.completion_time.is_some(),
        uncounted_empty: s.uncounted_terminated_pods.is_none_or(|u| {
            u.succeeded.unwrap_or_default().is_empty() && u.failed.unwrap_or_default().is_empty()
        }),
    }
}

/// Replaces run-specific names (namespace, pod names) in messages.
pub fn normalize(mut o: Outcome, ns: &str) -> Outcome {
    for c in &mut o.conditions {
        c.3 = normalize_message(&c.3, ns);
    }
    o
}

/// `<ns>` for the namespace, `<pod>` for the pod name in "pod <ns>/<name>"
/// and in "...pod: <name>".
pub fn normalize_message(msg: &str, ns: &str) -> String {
    if let Some((head, _)) = msg.split_once("pod: ") {
        return format!("{head}pod: <pod>");
    }
    // API errors name the pod: `pods "j-x7k2p" is forbidden: ...`.
    if let Some((head, rest)) = msg.split_once("pods \"")
        && let Some((_, tail)) = rest.split_once('"')
    {
        return format!("{head}pods \"<pod>\"{}", tail.replace(ns, "<ns>"));
    }
    let msg = msg.replace(ns, "<ns>");
    match msg.find("<ns>/") {
        Some(i) => {
            let rest = &msg[i + 5..];
            let end = rest.find(' ').unwrap_or(rest.len());
            format!("{}<ns>/<pod>{}", &msg[..i], &rest[end..])
        }
        None => msg,
    }
}

pub fn finished(job: &Job) -> bool {
    kcm_job::pods::is_finished(job)
}

/// Plays the kubelet: every pending pod of the Job gets `decide(pod)`:
/// Some(exit code) to finish it, None to leave it running. Returns when the
/// Job finished, with the final Job.
/// A `drive` verdict: the kubelet fails the pod with exit code 137 and the
/// condition `DisruptionTarget=True` (reason `TerminationByKubelet`).
pub const FAIL_DISRUPTED: i32 = -1;

pub async fn drive(
    jobs: &Api<Job>,
    pods: &Api<Pod>,
    name: &str,
    timeout: Duration,
    decide: impl Fn(&Pod, usize) -> Option<i32>,
) -> Job {
    let start = std::time::Instant::now();
    let mut handled: BTreeMap<String, ()> = BTreeMap::new();
    loop {
        let job = jobs.get(name).await.expect("job");
        if finished(&job) {
            // Let in-flight finalizer removals settle.
            return job;
        }
        assert!(
            start.elapsed() < timeout,
            "job {name} did not finish: {:#?}",
            job.status
        );
        for p in job_pods(pods, name).await {
            let pname = p.metadata.name.clone().unwrap_or_default();
            if p.metadata.deletion_timestamp.is_some() {
                // The kubelet stops a deleted pod: phase Failed, exit 137.
                if !matches!(phase(&p), "Failed" | "Succeeded") {
                    kcm_e2e::kubelet::finish_pod(pods, &pname, 137).await.ok();
                }
                continue;
            }
            if phase(&p) != "Pending" && !phase(&p).is_empty() || handled.contains_key(&pname) {
                continue;
            }
            let n = handled.len();
            match decide(&p, n) {
                Some(FAIL_DISRUPTED) => {
                    let now = jiff::Timestamp::now();
                    let update = kcm_e2e::kubelet::PodStatusUpdate::default()
                        .phase("Failed")
                        .containers(vec![kcm_e2e::kubelet::terminated("main", 137, now)])
                        .condition(kcm_e2e::kubelet::condition(
                            "DisruptionTarget",
                            true,
                            "TerminationByKubelet",
                            "evicted by the test",
                        ));
                    kcm_e2e::kubelet::update_pod_status(pods, &pname, &update)
                        .await
                        .expect("fail disrupted");
                    handled.insert(pname, ());
                }
                Some(code) => {
                    kcm_e2e::kubelet::finish_pod(pods, &pname, code)
                        .await
                        .expect("finish");
                    handled.insert(pname, ());
                }
                None => {
                    match kcm_e2e::kubelet::run_pod(pods, &pname, true).await {
                        Ok(_) => {}
                        // Deleted (a FailJob sibling) between list and run.
                        Err(kcm_e2e::HarnessError::Kube(kube::Error::Api(s))) if s.code == 404 => {
                            continue;
                        }
                        Err(e) => panic!("run: {e:?}"),
                    }
                    handled.insert(pname, ());
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

/// Starts kcm-rs's job controller in this process.
pub async fn ours(cp: &ControlPlane, gates: FeatureGates) -> InProcess {
    in_process::start(cp, &[kcm_job::SPEC], Settings::default(), gates)
        .await
        .expect("kcm-rs job controller")
}

/// The tracking finalizer the controller puts on every pod it owns.
pub const TRACKING: &str = "batch.kubernetes.io/job-tracking";

pub fn has_tracking(p: &Pod) -> bool {
    p.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == TRACKING))
}

/// Not terminal and not being deleted.
pub fn is_active(p: &Pod) -> bool {
    !matches!(phase(p), "Succeeded" | "Failed") && p.metadata.deletion_timestamp.is_none()
}

/// Polls Job `name` until `pred` holds.
pub async fn wait_job(jobs: &Api<Job>, name: &str, what: &str, pred: impl Fn(&Job) -> bool) -> Job {
    kcm_e2e::wait::wait_for(jobs, name, Duration::from_secs(30), what, pred)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Polls the pods of Job `name` until `pred` holds for them.
pub async fn wait_pods(
    pods: &Api<Pod>,
    name: &str,
    what: &str,
    pred: impl Fn(&[Pod]) -> bool,
) -> Vec<Pod> {
    let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={name}"));
    kcm_e2e::wait::wait_for_list(pods, &lp, Duration::from_secs(30), what, pred)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Marks every pending pod of Job `name` Running and Ready; returns how many.
pub async fn run_pending(pods: &Api<Pod>, name: &str) -> usize {
    let mut n = 0;
    for p in job_pods(pods, name).await {
        if phase(&p) == "Pending" || phase(&p).is_empty() {
            let pname = p.metadata.name.clone().unwrap_or_default();
            kcm_e2e::kubelet::run_pod(pods, &pname, true)
                .await
                .expect("run pod");
            n += 1;
        }
    }
    n
}

/// The name of a pod.
pub fn name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

/// `status.startTime` of a Job, if set.
pub fn start_time(j: &Job) -> Option<jiff::Timestamp> {
    j.status.as_ref()?.start_time.as_ref().map(|t| t.0)
}

/// A condition of the Job as (status, reason), if present.
pub fn condition(j: &Job, type_: &str) -> Option<(String, String)> {
    j.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
}

/// core/v1 Events about the Job `name`, as (reason, message, component).
pub async fn job_events(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> Vec<(String, String, String)> {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), ns);
    events
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some("Job")
                && e.involved_object.name.as_deref() == Some(name)
        })
        .map(|e| {
            (
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default(),
                e.source.and_then(|s| s.component).unwrap_or_default(),
            )
        })
        .collect()
}

/// Polls until an event with `reason` about Job `name` exists.
pub async fn wait_event(
    client: &kube::Client,
    ns: &str,
    name: &str,
    reason: &str,
) -> Vec<(String, String, String)> {
    let start = std::time::Instant::now();
    loop {
        let evs = job_events(client, ns, name).await;
        if evs.iter().any(|e| e.0 == reason) {
            return evs;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no {reason} event for {name}: {evs:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Sum of the samples of metric `name` whose labels include all `labels`
/// (`key="value"` pairs), from the registry of controllers started in
/// this process (`InProcess::metrics`).
pub fn metric(metrics: &kcm_runtime::metrics::Metrics, name: &str, labels: &[(&str, &str)]) -> f64 {
    metrics
        .render()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (n, rest) = series.split_once('{').unwrap_or((series, ""));
            (n == name
                && labels
                    .iter()
                    .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\""))))
            .then(|| value.parse::<f64>().ok())
            .flatten()
        })
        .sum()
}

/// Job events as (type, reason, message) with pod names replaced by
/// `<pod>`, each with its total `count`, sorted: what a user reading
/// `kubectl describe job` sees, minus run-specific names and client-go's
/// similar-event aggregation.
pub async fn event_summary(
    client: &kube::Client,
    ns: &str,
    job: &str,
) -> Vec<(String, String, String, i32)> {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), ns);
    let mut sum: BTreeMap<(String, String, String), i32> = BTreeMap::new();
    for e in events
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        if e.involved_object.kind.as_deref() != Some("Job")
            || e.involved_object.name.as_deref() != Some(job)
        {
            continue;
        }
        // client-go's aggregator rewrites the 11th+ similar event (same
        // reason, other message) as "(combined from similar events): ...";
        // kcm-runtime's recorder only folds identical events. Compare the
        // totals, not the aggregation.
        let raw = e.message.unwrap_or_default();
        let raw = raw
            .strip_prefix("(combined from similar events): ")
            .unwrap_or(&raw);
        let msg = normalize_message(raw, ns);
        *sum.entry((
            e.type_.unwrap_or_default(),
            e.reason.unwrap_or_default(),
            msg,
        ))
        .or_default() += e.count.unwrap_or(1);
    }
    sum.into_iter().map(|((t, r, m), n)| (t, r, m, n)).collect()
}

/// The shape of pods the controller created, without run-specific names:
/// generateName, labels and annotations (the owner's UID replaced),
/// finalizers, controller ownerReference flags, hostname/subdomain and
/// container env.
pub fn pod_shapes(pods: &[Pod]) -> Vec<String> {
    let mut out: Vec<String> = pods
        .iter()
        .map(|p| {
            let m = &p.metadata;
            let controller = kcm_pod::meta::controller_of(m);
            let owner =
                controller.map(|r| (r.kind.clone(), r.name.clone(), r.block_owner_deletion));
            // The UID the pod was created for (its labels keep it after a
            // release or the Job's deletion).
            let uid = m
                .labels
                .as_ref()
                .and_then(|l| l.get("batch.kubernetes.io/controller-uid").cloned())
                .or_else(|| controller.map(|r| r.uid.clone()))
                .unwrap_or_default();
            let spec = p.spec.clone().unwrap_or_default();
            let env: Vec<_> = spec
                .containers
                .iter()
                .chain(spec.init_containers.iter().flatten())
                .map(|c| serde_json::to_string(&c.env).unwrap_or_default())
                .collect();
            let text = format!(
                "generateName={:?} labels={:?} annotations={:?} finalizers={:?} owner={:?} \
                 hostname={:?} subdomain={:?} env={:?}",
                m.generate_name,
                m.labels,
                m.annotations,
                m.finalizers,
                owner,
                spec.hostname,
                spec.subdomain,
                env
            );
            if uid.is_empty() {
                text
            } else {
                text.replace(&uid, "<uid>")
            }
        })
        .collect();
    out.sort();
    out
}
