//! `kcm-rs explain` and `kcm-rs lint` end to end: the kcm-rs binary runs
//! all four controllers against the real API server; a Job with FailJob
//! (exit 42), Ignore (DisruptionTarget) and Count rules gets pods failed by
//! an exit code, by a taint eviction and by pod GC; `explain` must name the
//! rule of each pod and agree with the Job's condition and counters.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kcm_e2e::kubelet::{self, PodStatusUpdate};
use kcm_e2e::{TestNamespace, shared};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_kcm-rs");
const T: Duration = Duration::from_secs(60);
/// Keeps evicted and collected pods in the API after the Job lets go.
const HOLD: &str = "kcm-rs.io/explain-e2e";

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_kcm_rs(kubeconfig: &Path, log: &Path) -> Running {
    let out = std::fs::File::create(log).expect("log file");
    let child = Command::new(BIN)
        .args([
            &format!("--kubeconfig={}", kubeconfig.display()),
            "--leader-elect=false",
            "--secure-port=0",
            "--pod-gc-period=1s",
            "--pod-gc-quarantine=1s",
        ])
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("log"))
        .stderr(out)
        .spawn()
        .expect("spawn kcm-rs");
    Running(child)
}

fn tool(args: &[&str]) -> Output {
    let out = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run kcm-rs tool");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "no panic:\n{err}");
    out
}

/// Runs a tool that must succeed (its stderr shown if not).
fn tool_ok(args: &[&str]) -> Output {
    let out = tool(args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

async fn until<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(start.elapsed() < T, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn job_condition(j: &Job, t: &str) -> Option<(String, String)> {
    j.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == t && c.status == "True")
        .map(|c| {
            (
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

async fn job_pods(pods: &Api<Pod>) -> Vec<Pod> {
    let lp = ListParams::default().labels("batch.kubernetes.io/job-name=explained");
    pods.list(&lp).await.expect("list pods").items
}

async fn active_pods(pods: &Api<Pod>, n: usize) -> Vec<Pod> {
    until(&format!("{n} active pods"), || async {
        let ps: Vec<Pod> = job_pods(pods)
            .await
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && phase(p) != "Failed")
            .filter(|p| phase(p) != "Succeeded")
            .collect();
        (ps.len() >= n).then_some(ps)
    })
    .await
}

/// The kubelet's part: bind, run, and (when asked) hold with `HOLD`.
async fn place(pods: &Api<Pod>, pod: &str, node: &str, hold: bool) {
    kubelet::bind_pod(pods, pod, node).await.expect("bind");
    kubelet::run_pod(pods, pod, true).await.expect("run");
    if hold {
        let patch = json!({"metadata": {"finalizers": [HOLD]}});
        pods.patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("hold");
    }
}

/// What a kubelet does for a pod being deleted: containers killed (137).
async fn kill(pods: &Api<Pod>, pod: &str) {
    let now = jiff::Timestamp::now();
    let update = PodStatusUpdate::default()
        .phase("Failed")
        .containers(vec![kubelet::terminated("main", 137, now)])
        .ready(false);
    kubelet::update_pod_status(pods, pod, &update)
        .await
        .expect("kill");
}

/// Drops `HOLD` and, as the kubelet confirms a stopped pod, deletes it
/// with no grace.
async fn release(pods: &Api<Pod>, pod: &str) {
    let patch = json!({"metadata": {"finalizers": null}});
    let _ = pods
        .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await;
    let _ = pods
        .delete(pod, &DeleteParams::default().grace_period(0))
        .await;
}

fn data(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(file)
}

/// Creates Job `name`: one `main` container, `restartPolicy: Never`, and
/// `spec` on top.
async fn create_job(jobs: &Api<Job>, name: &str, spec: Value) {
    let mut body = json!({"metadata": {"name": name}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}}});
    if let (Some(dst), Some(src)) = (body["spec"].as_object_mut(), spec.as_object()) {
        dst.extend(src.clone());
    }
    let job: Job = serde_json::from_value(body).expect("job");
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("create");
}

fn policy(with_ignore: bool) -> Value {
    let mut rules = vec![
        json!({"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}}),
        json!({"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}),
        json!({"action": "Count", "onExitCodes": {"operator": "In", "values": [1, 2]}}),
    ];
    if !with_ignore {
        rules.remove(1);
    }
    json!({ "rules": rules })
}

fn failure<'a>(report: &'a Value, pod: &str) -> &'a Value {
    report["failures"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|f| f["pod"] == pod)
        .unwrap_or_else(|| panic!("no failure entry for {pod} in {report:#}"))
}

#[tokio::test]
async fn explain_names_every_rule_and_agrees_with_the_job() {
    let cp = shared();
    let client = cp.client().await.expect("client");
    let ns = TestNamespace::create(&client, "explain").await.expect("ns");
    let kc = cp.kubeconfig().display().to_string();
    let log = std::env::temp_dir().join(format!("kcm-rs-explain-{}.log", std::process::id()));
    let _kcm = start_kcm_rs(cp.kubeconfig(), &log);
    let node_names = ["explain-n1", "explain-n2", "explain-n3"];
    for n in node_names {
        kubelet::create_node(&client, n, true, vec![])
            .await
            .expect("node");
    }
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let spec = json!({"completions": 8, "parallelism": 4, "backoffLimit": 6,
        "podFailurePolicy": policy(true)});
    create_job(&jobs, "explained", spec).await;

    let first = active_pods(&pods, 4).await;
    let names: Vec<String> = first.iter().map(name).collect();
    let (evicted, collected, counted, fatal) = (&names[0], &names[1], &names[2], &names[3]);
    place(&pods, evicted, "explain-n1", true).await;
    place(&pods, collected, "explain-n2", true).await;
    place(&pods, counted, "explain-n3", false).await;
    place(&pods, fatal, "explain-n3", false).await;

    // Count: exit code 1.
    kubelet::finish_pod(&pods, counted, 1).await.expect("fail");
    until("failed=1", || async {
        let j = jobs.get("explained").await.ok()?;
        (j.status?.failed == Some(1)).then_some(())
    })
    .await;

    // Ignore: the taint manager evicts the pod on explain-n1.
    let nodes: Api<Node> = Api::all(client.clone());
    let taint =
        json!({"spec": {"taints": [{"key": "explain", "value": "go", "effect": "NoExecute"}]}});
    nodes
        .patch("explain-n1", &PatchParams::default(), &Patch::Merge(&taint))
        .await
        .expect("taint");
    until("eviction of the pod on explain-n1", || async {
        let p = pods.get(evicted).await.ok()?;
        p.metadata.deletion_timestamp.is_some().then_some(())
    })
    .await;
    kill(&pods, evicted).await;

    // Ignore: pod GC collects the pod of a deleted node.
    nodes
        .delete("explain-n2", &DeleteParams::default())
        .await
        .expect("delete node");
    until("pod GC of the pod on explain-n2", || async {
        let p = pods.get(collected).await.ok()?;
        (p.metadata.deletion_timestamp.is_some() && phase(&p) == "Failed").then_some(())
    })
    .await;

    // FailJob: exit 42. The Job fails; its other pods are stopped.
    kubelet::finish_pod(&pods, fatal, 42)
        .await
        .expect("fail 42");
    let failed = until("Job Failed", || async {
        let j = jobs.get("explained").await.ok()?;
        for p in job_pods(&pods).await {
            let bound = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
            if p.metadata.deletion_timestamp.is_some() && phase(&p) == "Running" && bound {
                kill(&pods, &name(&p)).await;
            }
        }
        job_condition(&j, "Failed").map(|_| j)
    })
    .await;
    let (ft_reason, ft_message) = job_condition(&failed, "FailureTarget").expect("FailureTarget");
    assert_eq!(ft_reason, "PodFailurePolicy");

    let target = format!("{}/explained", ns.name);
    let kcarg = format!("--kubeconfig={kc}");
    let out = tool_ok(&["explain", "job", &target, &kcarg, "-o", "json"]);
    let report: Value = serde_json::from_slice(&out.stdout).expect("json report");
    eprintln!(
        "--- kcm-rs explain job {target} -o json\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let rule_of = |pod: &str| {
        let f = failure(&report, pod);
        (
            f["rule"].as_u64(),
            f["action"].as_str().unwrap_or("").to_string(),
        )
    };
    assert_eq!(rule_of(counted), (Some(2), "Count".to_string()));
    assert_eq!(rule_of(evicted), (Some(1), "Ignore".to_string()));
    assert_eq!(rule_of(collected), (Some(1), "Ignore".to_string()));
    assert_eq!(rule_of(fatal), (Some(0), "FailJob".to_string()));
    let reason_of =
        |pod: &str| failure(&report, pod)["evidence"]["conditions"][0]["reason"].clone();
    assert_eq!(reason_of(evicted), "DeletionByTaintManager");
    assert_eq!(reason_of(collected), "DeletionByPodGC");
    // The verdict is the Job's own condition, reached by the replay too.
    let v = &report["verdict"];
    assert_eq!(v["state"], "Failed");
    assert_eq!(v["condition"]["reason"], "PodFailurePolicy");
    assert_eq!(v["condition"]["message"], ft_message.as_str());
    assert_eq!(v["replay"]["message"], ft_message.as_str());
    assert_eq!(v["agrees"], true);
    assert_eq!(v["decided_by"], fatal.as_str());
    let ends = &failure(&report, fatal)["effect"]["ends_job"];
    assert_eq!(ends["message"], ft_message.as_str());
    // Counters: what explain counted is what the Job counted.
    let counted_here = |list: &Value| {
        list.as_array()
            .into_iter()
            .flatten()
            .filter(|f| f["action"] != "Ignore")
            .count() as u64
    };
    let status_failed = failed.status.as_ref().and_then(|s| s.failed).unwrap_or(0);
    let total = counted_here(&report["failures"])
        + counted_here(&report["stopped"])
        + report["gone"]["counted_failures"].as_u64().unwrap_or(0);
    assert_eq!(
        total,
        u64::try_from(status_failed).unwrap_or(0),
        "{report:#}"
    );
    assert_eq!(report["status"]["failed"], status_failed);

    let human = stdout(&tool(&["explain", "job", &target, &kcarg]));
    eprintln!("--- kcm-rs explain job {target}\n{human}");
    for needle in [
        "POD",
        "RULE",
        "ACTION",
        "Verdict: Failed",
        "DeletionByTaintManager",
        "FailJob",
    ] {
        assert!(human.contains(needle), "{needle:?} missing:\n{human}");
    }
    assert!(!human.contains('\x1b'), "no colour off a terminal");

    // What if the Ignore rule were removed: both disruptions count.
    let proposal = std::env::temp_dir().join(format!("kcm-rs-policy-{}.yaml", std::process::id()));
    std::fs::write(
        &proposal,
        serde_yaml_ng::to_string(&json!({"podFailurePolicy": policy(false)})).expect("yaml"),
    )
    .expect("write policy");
    let out = tool_ok(&[
        "explain",
        "job",
        &target,
        &kcarg,
        "-o",
        "json",
        &format!("--policy={}", proposal.display()),
    ]);
    let what_if: Value = serde_json::from_slice(&out.stdout).expect("json");
    let changed: Vec<&str> = what_if["what_if"]["changed"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["before"] == "Ignore (rule 1)" && c["after"] == "default (counted)")
        .filter_map(|c| c["pod"].as_str())
        .collect();
    assert_eq!(changed.len(), 2, "{what_if:#}");
    assert!(changed.contains(&evicted.as_str()) && changed.contains(&collected.as_str()));
    let text = stdout(&tool(&[
        "explain",
        "job",
        &target,
        &kcarg,
        &format!("--policy={}", proposal.display()),
    ]));
    eprintln!("--- with --policy (Ignore removed)\n{text}");
    assert!(text.contains("decided differently"), "{text}");

    // Once the evicted pod is gone, its eviction event still names the rule.
    release(&pods, evicted).await;
    until("evicted pod gone", || async {
        pods.get_opt(evicted).await.ok()?.is_none().then_some(())
    })
    .await;
    let out = tool_ok(&["explain", "job", &target, &kcarg, "-o", "json"]);
    let report: Value = serde_json::from_slice(&out.stdout).expect("json");
    let gone = report["gone"]["pods"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|g| g["pod"] == evicted.as_str())
        .unwrap_or_else(|| panic!("{evicted} not reported as gone: {report:#}"));
    assert_eq!(gone["inferred"]["rule"], 1);
    assert_eq!(gone["inferred"]["action"], "Ignore");
    release(&pods, collected).await;

    // Offline: the same Job and pods from files give the same verdict.
    let dir = std::env::temp_dir().join(format!("kcm-rs-explain-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let job_now = jobs.get("explained").await.expect("job");
    let pod_list = json!({"kind": "List", "apiVersion": "v1", "items": job_pods(&pods).await});
    std::fs::write(
        dir.join("job.yaml"),
        serde_yaml_ng::to_string(&job_now).expect("yaml"),
    )
    .expect("write");
    std::fs::write(dir.join("pods.json"), pod_list.to_string()).expect("write");
    let out = tool(&[
        "explain",
        "-f",
        &dir.join("job.yaml").display().to_string(),
        "--pods",
        &dir.join("pods.json").display().to_string(),
        "-o",
        "yaml",
    ]);
    let offline: Value = serde_yaml_ng::from_slice(&out.stdout).expect("yaml report");
    assert_eq!(
        offline["verdict"]["condition"],
        report["verdict"]["condition"]
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&proposal);

    // Bad input: a clear error, exit 2.
    let out = tool(&["explain", "job", &format!("{}/nope", ns.name), &kcarg]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not found"));
}

#[tokio::test]
async fn lint_finds_each_planted_mistake_and_nothing_in_a_clean_file() {
    let out = tool(&[
        "lint",
        &data("lint-mistakes.yaml").display().to_string(),
        "-o",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let findings: Value = serde_json::from_slice(&out.stdout).expect("json");
    let got: Vec<(String, String)> = findings
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| {
            (
                f["path"].as_str().unwrap_or("").to_string(),
                f["check"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    // Each `# check` comment in the sample is a finding at that place.
    let planted = [
        ("spec.template.spec.restartPolicy", "restart-policy"),
        ("spec.podFailurePolicy.rules[1]", "shadowed-rule"),
        (
            "spec.podFailurePolicy.rules[2].onExitCodes.values",
            "exit-code-zero",
        ),
        (
            "spec.podFailurePolicy.rules[3].onExitCodes.containerName",
            "unknown-container",
        ),
        (
            "spec.podFailurePolicy.rules[4].onPodConditions[0].type",
            "unknown-condition",
        ),
        (
            "spec.podFailurePolicy.rules[5].action",
            "failindex-without-per-index",
        ),
        (
            "spec.podFailurePolicy.rules[6].onExitCodes.values",
            "empty-values",
        ),
        (
            "spec.jobTemplate.spec.podFailurePolicy.rules[1]",
            "shadowed-rule",
        ),
        (
            "spec.replicatedJobs[0].template.spec.podFailurePolicy.rules[0].onExitCodes.containerName",
            "unknown-container",
        ),
    ];
    for (path, check) in planted {
        assert!(
            got.iter().any(|(p, c)| p == path && c == check),
            "{check} at {path} not found in {got:#?}"
        );
    }
    let human = stdout(&tool(&[
        "lint",
        &data("lint-mistakes.yaml").display().to_string(),
    ]));
    eprintln!("--- kcm-rs lint lint-mistakes.yaml\n{human}");
    assert!(human.contains("fix: "), "{human}");

    let out = tool(&["lint", &data("lint-clean.yaml").display().to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).contains("0 finding(s) in 2 object(s)"));

    let out = tool(&["lint", "/nonexistent.yaml"]);
    assert_eq!(out.status.code(), Some(2));

    // From the cluster: a shadowed rule passes API validation; lint finds it.
    let cp = shared();
    let client = cp.client().await.expect("client");
    let ns = TestNamespace::create(&client, "lint").await.expect("ns");
    let jobs: Api<Job> = Api::namespaced(client, &ns.name);
    let spec = json!({"suspend": true, "podFailurePolicy": {"rules": [
        {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [1]}},
        {"action": "Count", "onExitCodes": {"operator": "In", "values": [42]}}]}});
    create_job(&jobs, "shadowed", spec).await;
    let kc = format!("--kubeconfig={}", cp.kubeconfig().display());
    let out = tool(&["lint", "-n", &ns.name, &kc]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "Job {}/shadowed: spec.podFailurePolicy.rules[1]",
            ns.name
        )),
        "{text}"
    );
}

/// kcm-rs beside KCM (`--job-managed-by`), with leader election on a Lease
/// of the test's namespace: the Lease and the Job's events say the mode;
/// `explain` on an opted-in Job reads as on a classic one, with managedBy
/// shown; `lint` is silent about opted-in Jobs while the Lease is held,
/// and warns once it has expired (kcm-rs killed) or when it names a Lease
/// that does not exist.
#[tokio::test]
async fn beside_kcm_explain_lint_and_mode_marks() {
    const MANAGED_BY: &str = "kcm-rs.dev/job-controller";
    const LEASE: &str = "kcm-rs-beside";
    let cp = shared();
    let client = cp.client().await.expect("client");
    let ns = TestNamespace::create(&client, "beside-tools")
        .await
        .expect("ns");
    let kc = cp.kubeconfig().display().to_string();
    let kcarg = format!("--kubeconfig={kc}");
    let log = std::env::temp_dir().join(format!("kcm-rs-beside-tools-{}.log", std::process::id()));
    let out = std::fs::File::create(&log).expect("log file");
    let mut kcm_rs = Running(
        Command::new(BIN)
            .args([
                kcarg.as_str(),
                &format!("--job-managed-by={MANAGED_BY}"),
                "--leader-elect=true",
                &format!("--leader-elect-resource-namespace={}", ns.name),
                &format!("--leader-elect-resource-name={LEASE}"),
                "--secure-port=0",
            ])
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .spawn()
            .expect("spawn kcm-rs"),
    );

    // The Lease says the mode.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), &ns.name);
    let marks = until("the Lease held and marked", || async {
        let l = leases.get_opt(LEASE).await.ok()??;
        let held = !l.spec.as_ref()?.holder_identity.as_deref()?.is_empty();
        held.then_some(l.metadata.annotations?)
    })
    .await;
    assert_eq!(marks["kcm-rs.dev/mode"], "beside-kcm", "{marks:?}");
    assert_eq!(marks["kcm-rs.dev/job-managed-by"], MANAGED_BY, "{marks:?}");

    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let fatal_rule = json!({"rules": [{"action": "FailJob",
        "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}}]});
    create_job(
        &jobs,
        "opted",
        json!({"managedBy": MANAGED_BY, "backoffLimit": 2, "podFailurePolicy": fatal_rule}),
    )
    .await;
    create_job(
        &jobs,
        "classic",
        json!({"suspend": true, "backoffLimit": 2, "podFailurePolicy": fatal_rule}),
    )
    .await;
    create_job(
        &jobs,
        "waiting",
        json!({"managedBy": MANAGED_BY, "suspend": true}),
    )
    .await;
    create_job(
        &jobs,
        "elsewhere",
        json!({"managedBy": "example.com/batch", "suspend": true}),
    )
    .await;

    // kcm-rs runs the opted-in Job: its pod exits 42, FailJob ends it.
    let pod = until("the opted-in Job's pod", || async {
        let lp = ListParams::default().labels("batch.kubernetes.io/job-name=opted");
        pods.list(&lp).await.ok()?.items.into_iter().next()
    })
    .await;
    kubelet::finish_pod(&pods, &name(&pod), 42)
        .await
        .expect("exit 42");
    let failed = until("the opted-in Job Failed", || async {
        let j = jobs.get("opted").await.ok()?;
        job_condition(&j, "Failed").map(|_| j)
    })
    .await;
    let (reason, message) = job_condition(&failed, "Failed").expect("Failed");
    assert_eq!(reason, "PodFailurePolicy");

    // Its events say the mode; source and reporting component stay
    // upstream's.
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), &ns.name);
    let created = until("the SuccessfulCreate event", || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| {
                e.involved_object.name.as_deref() == Some("opted")
                    && e.reason.as_deref() == Some("SuccessfulCreate")
            })
    })
    .await;
    let ann = created.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        ann.get("kcm-rs.dev/mode").map(String::as_str),
        Some("beside-kcm")
    );
    assert_eq!(
        ann.get("kcm-rs.dev/job-managed-by").map(String::as_str),
        Some(MANAGED_BY)
    );
    assert_eq!(
        created.source.and_then(|s| s.component).as_deref(),
        Some("job-controller")
    );
    assert_eq!(
        created.reporting_component.as_deref(),
        Some("job-controller")
    );

    // explain: the opted-in Job reads as a classic one, plus managedBy.
    let explain_json = |job: &str| {
        let out = tool_ok(&[
            "explain",
            "job",
            &format!("{}/{job}", ns.name),
            &kcarg,
            "-o",
            "json",
        ]);
        serde_json::from_slice::<Value>(&out.stdout).expect("json report")
    };
    let keys = |v: &Value| {
        v.as_object()
            .map(|o| o.keys().cloned().collect::<Vec<_>>())
            .unwrap_or_default()
    };
    let opted = explain_json("opted");
    let classic = explain_json("classic");
    assert_eq!(keys(&opted), keys(&classic), "same document shape");
    assert_eq!(opted["verdict"]["state"], "Failed", "{opted:#}");
    assert_eq!(opted["verdict"]["condition"]["message"], message.as_str());
    assert_eq!(opted["verdict"]["agrees"], true);
    assert_eq!(failure(&opted, &name(&pod))["rule"], 0);
    assert_eq!(failure(&opted, &name(&pod))["action"], "FailJob");
    let text = |job: &str| {
        stdout(&tool_ok(&[
            "explain",
            "job",
            &format!("{}/{job}", ns.name),
            &kcarg,
        ]))
    };
    let (opted_text, classic_text) = (text("opted"), text("classic"));
    eprintln!("--- kcm-rs explain job opted\n{opted_text}--- classic\n{classic_text}");
    assert!(opted_text.contains(&format!("managedBy {MANAGED_BY}")));
    assert!(!classic_text.contains("managedBy"));
    for needle in ["rule 0: FailJob", "status: ", "Verdict: "] {
        assert!(opted_text.contains(needle), "{needle:?}:\n{opted_text}");
        assert!(classic_text.contains(needle), "{needle:?}:\n{classic_text}");
    }
    assert!(opted_text.contains("Verdict: Failed") && opted_text.contains("POD"));

    // lint while the Lease is held: only the Job no controller is known for.
    let lint = |lease: &str| {
        let out = tool(&[
            "lint",
            "-n",
            &ns.name,
            &kcarg,
            &format!("--leader-elect-resource-namespace={}", ns.name),
            &format!("--leader-elect-resource-name={lease}"),
            "-o",
            "json",
        ]);
        let findings: Value = serde_json::from_slice(&out.stdout).expect("json findings");
        let got: Vec<(String, String, String)> = findings
            .as_array()
            .into_iter()
            .flatten()
            .map(|f| {
                let s = |k: &str| f[k].as_str().unwrap_or("").to_string();
                (s("object"), s("check"), s("problem"))
            })
            .collect();
        (out.status.code(), got)
    };
    let job_ref = |j: &str| format!("Job {}/{j}", ns.name);
    let (code, held) = lint(LEASE);
    eprintln!("--- lint, Lease held: {held:#?}");
    assert_eq!(code, Some(1));
    assert_eq!(held.len(), 1, "{held:#?}");
    assert_eq!(
        (held[0].0.as_str(), held[0].1.as_str()),
        (job_ref("elsewhere").as_str(), "managed-by-unknown")
    );
    // Without the namespace flag, lint finds kcm-rs's Lease where it is, by
    // the label the manifests and the chart give it (not in kube-system).
    let label = json!({"metadata": {"labels": {"app.kubernetes.io/name": "kcm-rs"}}});
    leases
        .patch(LEASE, &PatchParams::default(), &Patch::Merge(&label))
        .await
        .expect("label the Lease");
    let found = tool(&[
        "lint",
        "-n",
        &ns.name,
        &kcarg,
        &format!("--leader-elect-resource-name={LEASE}"),
        "-o",
        "json",
    ]);
    let found: Value = serde_json::from_slice(&found.stdout).expect("json findings");
    let objects: Vec<&str> = found
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["object"].as_str())
        .collect();
    assert_eq!(objects, [job_ref("elsewhere")], "{found:#}");
    // A Lease that does not exist: the opted-in, unfinished Job waits.
    let (_, missing) = lint("no-such-lease");
    let waiting: Vec<_> = missing
        .iter()
        .filter(|f| f.0 == job_ref("waiting"))
        .collect();
    assert_eq!(waiting.len(), 1, "{missing:#?}");
    assert_eq!(waiting[0].1, "managed-by-not-running");
    assert!(
        waiting[0].2.contains("no Lease held for it") && waiting[0].2.contains("does not exist"),
        "{}",
        waiting[0].2
    );
    assert!(
        !missing.iter().any(|f| f.0 == job_ref("opted")),
        "finished Jobs need no controller: {missing:#?}"
    );

    // Killed (no release): the Lease stays held until it expires; then
    // lint warns.
    let _ = kcm_rs.0.kill();
    let _ = kcm_rs.0.wait();
    let expired = until("lint to see the Lease expired", || async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (_, got) = lint(LEASE);
        got.into_iter()
            .find(|f| f.0 == job_ref("waiting") && f.1 == "managed-by-not-running")
    })
    .await;
    eprintln!("--- lint after kcm-rs was killed: {}", expired.2);
    assert!(
        expired.2.contains("no Lease held for it") && expired.2.contains("expired at"),
        "{}",
        expired.2
    );
}
