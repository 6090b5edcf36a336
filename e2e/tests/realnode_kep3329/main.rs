//! KEP-3329 end to end on a real node, with every real source of
//! `DisruptionTarget` (`make realnode-kep`; ignored by `cargo test`: it needs
//! a node session, see docs/real-node.md).
//!
//! One Job (`e2e/realnode/scenarios/job.yaml`: FailJob on exit code 42,
//! Ignore on DisruptionTarget, backoffLimit 1, two real pods) per cause:
//!
//! | cause | who writes DisruptionTarget | reason |
//! |---|---|---|
//! | a higher-priority pod that does not fit | kube-scheduler (preemption) | PreemptionByScheduler |
//! | the Eviction API under a PDB (minAvailable 1) | kube-apiserver | EvictionByEvictionAPI |
//! | a `NoExecute` taint on the node | taint eviction (the controller under test) | DeletionByTaintManager |
//! | the node's kubelet stops and its Node is deleted | pod GC (under test) | DeletionByPodGC |
//! | a critical pod bound to the full node | kubelet (admission preemption) | TerminationByKubelet |
//! | a container past its ephemeral-storage limit | kubelet (eviction manager) | none: upstream sets no condition there |
//!
//! Each time: the victim carries upstream's reason, the Job does not count
//! it (except the last: no condition, so Count), replaces it, and a real
//! exit 42 then fails the Job: `FailureTarget` first, `Failed` once the
//! other pod is gone. The same with KCM's four controllers instead of
//! kcm-rs on the same node; both must give the same reasons, counts and
//! conditions. The table goes to bench/results/realnode-kep/<minor>-kep3329.md.

mod kep_report;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod, ResourceRequirements, Taint};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kcm_e2e::realnode::{
    self, PodEnd, RealNode, Scenario, accounted, bare_pod, between, main_container, pod_spec,
    procs, scenario_job, terminal, wait_seen,
};
use kube::api::{Api, DeleteParams, EvictParams, Patch, PatchParams, PostParams};
use serde_json::json;

const JOB: &str = "kep";
const TAINT: &str = "kcm-scenario/disrupt";
const LOW: &str = "kcm-scenario-low";
const HIGH: &str = "kcm-scenario-high";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Cause {
    SchedulerPreemption,
    EvictionApi,
    Taint,
    KubeletPreemption,
    KubeletStorage,
    // Last: it restarts the kubelet.
    NodeGone,
}

impl Cause {
    const ALL: [Cause; 6] = [
        Cause::SchedulerPreemption,
        Cause::EvictionApi,
        Cause::Taint,
        Cause::KubeletPreemption,
        Cause::KubeletStorage,
        Cause::NodeGone,
    ];

    fn slug(self) -> &'static str {
        match self {
            Cause::SchedulerPreemption => "preempt",
            Cause::EvictionApi => "evict",
            Cause::Taint => "taint",
            Cause::KubeletPreemption => "kubelet-preempt",
            Cause::KubeletStorage => "kubelet-storage",
            Cause::NodeGone => "node-gone",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Cause::SchedulerPreemption => {
                "(a) kube-scheduler preempts it for a higher-priority pod (node full by requests)"
            }
            Cause::EvictionApi => "(b) Eviction API under a PDB (minAvailable 1)",
            Cause::Taint => "(c) NoExecute taint on the node",
            Cause::NodeGone => "(d) kubelet stopped, Node deleted: pod GC (orphaned)",
            Cause::KubeletPreemption => {
                "(e) kubelet preempts it to admit a critical pod (system-node-critical, nodeName set)"
            }
            Cause::KubeletStorage => {
                "(e) kubelet evicts it: container past its ephemeral-storage limit"
            }
        }
    }

    /// Upstream's reason (the same in 1.34 to 1.37), `-` for none.
    fn expected_reason(self) -> &'static str {
        match self {
            Cause::SchedulerPreemption => "PreemptionByScheduler",
            Cause::EvictionApi => "EvictionByEvictionAPI",
            Cause::Taint => "DeletionByTaintManager",
            Cause::NodeGone => "DeletionByPodGC",
            Cause::KubeletPreemption => "TerminationByKubelet",
            Cause::KubeletStorage => "-",
        }
    }

    /// Whether the Job counts the victims (no DisruptionTarget: no Ignore).
    fn counted(self) -> bool {
        self == Cause::KubeletStorage
    }
}

#[derive(Debug, Clone, Default)]
struct Outcome {
    victims: Vec<PodEnd>,
    failed_after: Option<i32>,
    conditions: Vec<String>,
    failed_end: i32,
    succeeded_end: i32,
    notes: Vec<String>,
    t_disrupted: Option<Duration>,
    t_replaced: Option<Duration>,
    t_target: Option<Duration>,
    t_failed: Option<Duration>,
    error: Option<String>,
}

type Key = (Vec<PodEnd>, Option<i32>, Vec<String>, i32, i32, Vec<String>);

impl Outcome {
    /// What must be the same under kcm-rs and KCM (timings need not). A
    /// victim's 143 or 137 is one: whether a pod the kubelet kills with its
    /// minimum grace (2 s, the ephemeral-storage eviction) runs its SIGTERM
    /// trap in time is the loaded machine's doing, not a controller's, and
    /// no rule of the Job matches either.
    fn key(&self) -> Key {
        let mut v = self.victims.clone();
        for p in &mut v {
            if p.exit == "137" || p.exit == "143" {
                p.exit = "143|137".into();
            }
        }
        v.sort();
        (
            v,
            self.failed_after,
            self.conditions.clone(),
            self.failed_end,
            self.succeeded_end,
            self.notes.clone(),
        )
    }
}

async fn ensure_priority_classes(client: &kube::Client) {
    let api: Api<PriorityClass> = Api::all(client.clone());
    for (name, value) in [(LOW, 100), (HIGH, 1000)] {
        let pc: PriorityClass = serde_json::from_value(json!({
            "metadata": {"name": name}, "value": value,
            "description": "real-node scenarios (e2e/tests/realnode_kep3329/)"
        }))
        .expect("priority class");
        match api.create(&PostParams::default(), &pc).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("create PriorityClass {name}: {e}"),
        }
    }
}

fn cpu_requests(milli: i64) -> ResourceRequirements {
    ResourceRequirements {
        requests: Some([("cpu".to_string(), Quantity(format!("{milli}m")))].into()),
        ..Default::default()
    }
}

/// Adds (or removes) our NoExecute taint, keeping every other taint; retried
/// on conflicts with node-lifecycle.
async fn set_taint(node: &RealNode, present: bool) -> Result<(), String> {
    let api: Api<Node> = Api::all(node.client.clone());
    for _ in 0..20 {
        let Some(n) = node.node().await else {
            return Err("no node".into());
        };
        let mut taints = n.spec.and_then(|s| s.taints).unwrap_or_default();
        let had = taints.iter().any(|t| t.key == TAINT);
        if had == present {
            return Ok(());
        }
        taints.retain(|t| t.key != TAINT);
        if present {
            taints.push(Taint {
                key: TAINT.into(),
                value: Some("now".into()),
                effect: "NoExecute".into(),
                time_added: None,
            });
        }
        let patch = json!({
            "metadata": {"resourceVersion": n.metadata.resource_version},
            "spec": {"taints": taints}
        });
        match api
            .patch(&node.name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(format!("taint: {e}")),
        }
    }
    Err("taint: conflicts".into())
}

/// The first of `pods` the watch shows disrupted (DisruptionTarget, being
/// deleted, or terminal).
async fn first_disrupted(
    sc: &Scenario<'_>,
    pods: &[String],
    timeout: Duration,
) -> Result<String, String> {
    let end = Instant::now() + timeout;
    loop {
        for p in pods {
            if let Some(last) = sc.history.last(p, None)
                && (realnode::disruption_reason(&last).is_some()
                    || last.metadata.deletion_timestamp.is_some()
                    || terminal(&last))
            {
                return Ok(p.clone());
            }
        }
        if Instant::now() > end {
            return Err(format!("none of {pods:?} disrupted within {timeout:?}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs one cause against whichever controllers are up.
async fn run(node: &RealNode, cause: Cause, alloc_milli: i64) -> Outcome {
    let sc = Scenario::new(node, &format!("kep-{}", cause.slug())).await;
    let mut out = Outcome::default();
    let mut frozen = None;
    if let Err(e) = drive(&sc, cause, alloc_milli, &mut out, &mut frozen).await {
        out.error = Some(e);
    }
    // Whatever happened: the node back as it was.
    if let Some(mut k) = frozen.take()
        && let Err(e) = k.restart()
    {
        out.error.get_or_insert(e);
    }
    if cause == Cause::Taint
        && let Err(e) = set_taint(node, false).await
    {
        out.error.get_or_insert(e);
    }
    if let Err(e) = node.wait_ready_untainted(Duration::from_secs(120)).await {
        out.error.get_or_insert(e);
    }
    if let Err(e) = sc.cleanup().await {
        out.error.get_or_insert(e);
    }
    out
}

async fn drive(
    sc: &Scenario<'_>,
    cause: Cause,
    alloc_milli: i64,
    out: &mut Outcome,
    frozen: &mut Option<procs::FrozenKubelet>,
) -> Result<(), String> {
    let node = sc.node;
    // Two pods fill 90% of the node's CPU: a third of the same size fits nowhere.
    let cpu = alloc_milli * 45 / 100;
    let mut job = scenario_job(node, &sc.ns, JOB);
    match cause {
        Cause::SchedulerPreemption => {
            ensure_priority_classes(&node.client).await;
            pod_spec(&mut job).priority_class_name = Some(LOW.into());
            main_container(&mut job).resources = Some(cpu_requests(cpu));
        }
        Cause::KubeletPreemption => main_container(&mut job).resources = Some(cpu_requests(cpu)),
        Cause::KubeletStorage => {
            main_container(&mut job).resources = Some(ResourceRequirements {
                limits: Some([("ephemeral-storage".to_string(), Quantity("16Mi".into()))].into()),
                ..Default::default()
            })
        }
        _ => {}
    }
    sc.create_job(&job).await;
    let first = sc.wait_running(JOB, 2, Duration::from_secs(120)).await?;
    let t0 = Instant::now();
    let victims: Vec<String> = match cause {
        Cause::SchedulerPreemption => {
            let mut p = bare_pod("preemptor", "echo preemptor; sleep 3");
            let spec = p.spec.as_mut().expect("spec");
            spec.priority_class_name = Some(HIGH.into());
            spec.containers[0].resources = Some(cpu_requests(cpu));
            sc.pods
                .create(&PostParams::default(), &p)
                .await
                .map_err(|e| format!("create preemptor: {e}"))?;
            vec![first_disrupted(sc, &first, Duration::from_secs(60)).await?]
        }
        Cause::KubeletPreemption => {
            let mut p = bare_pod("critical", "echo critical; sleep 3");
            let spec = p.spec.as_mut().expect("spec");
            spec.priority_class_name = Some("system-node-critical".into());
            spec.node_name = Some(node.name.clone());
            spec.containers[0].resources = Some(cpu_requests(cpu));
            sc.pods
                .create(&PostParams::default(), &p)
                .await
                .map_err(|e| format!("create critical pod: {e}"))?;
            vec![first_disrupted(sc, &first, Duration::from_secs(60)).await?]
        }
        Cause::EvictionApi => evict_under_pdb(sc, &first, out).await?,
        Cause::Taint => {
            set_taint(node, true).await?;
            first.clone()
        }
        Cause::NodeGone => {
            *frozen = Some(procs::freeze_kubelet(node));
            Api::<Node>::all(node.client.clone())
                .delete(&node.name, &DeleteParams::default())
                .await
                .map_err(|e| format!("delete node: {e}"))?;
            first.clone()
        }
        Cause::KubeletStorage => {
            node.signal(&sc.ns, &first[0], "fill");
            vec![first[0].clone()]
        }
    };

    // The victims end (terminal, or gone: pod GC deletes at once).
    for v in &victims {
        wait_seen(&sc.history, v, Duration::from_secs(180), terminal)
            .await
            .or_else(|| sc.history.deleted(v).then(Instant::now))
            .ok_or_else(|| {
                format!(
                    "victim {v} did not end: {:?}",
                    sc.history.last(v, None).map(|p| p.status)
                )
            })?;
    }
    out.t_disrupted = Some(t0.elapsed());
    // The Job accounted for them and replaced them.
    let end = Instant::now() + Duration::from_secs(120);
    let job = loop {
        let j = sc.jobs.get(JOB).await.map_err(|e| e.to_string())?;
        let st = j.status.clone().unwrap_or_default();
        let uncounted = st.uncounted_terminated_pods.as_ref().is_some_and(|u| {
            u.failed.as_ref().is_some_and(|f| !f.is_empty())
                || u.succeeded.as_ref().is_some_and(|s| !s.is_empty())
        });
        if victims.iter().all(|v| accounted(&sc.history, v)) && !uncounted && st.active == Some(2) {
            break j;
        }
        if Instant::now() > end {
            return Err(format!(
                "the Job did not account for and replace {victims:?}: {st:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    out.failed_after = Some(job.status.as_ref().and_then(|s| s.failed).unwrap_or(0));
    out.t_replaced = Some(t0.elapsed());
    out.victims = victims.iter().map(|v| PodEnd::of(&sc.history, v)).collect();

    // The node back for the replacements.
    match cause {
        Cause::Taint => set_taint(node, false).await?,
        Cause::NodeGone => {
            frozen.take().expect("frozen kubelet").restart()?;
            node.wait_ready_untainted(Duration::from_secs(120)).await?;
        }
        _ => {}
    }

    // A real exit 42.
    let runner = sc.wait_running(JOB, 1, Duration::from_secs(120)).await?[0].clone();
    node.signal(&sc.ns, &runner, "42");
    let t42 = Instant::now();
    sc.wait_job(JOB, Duration::from_secs(120), "Failed", |j| {
        realnode::job_has(j, "Failed")
    })
    .await?;
    let conds = sc.jobw.conditions(JOB);
    let at = |label: &str| {
        conds
            .iter()
            .find(|(_, l)| l.starts_with(label))
            .map(|(t, _)| *t)
    };
    out.t_target = between(Some(t42), at("FailureTarget("));
    out.t_failed = between(at("FailureTarget("), at("Failed("));
    out.conditions = conds.into_iter().map(|(_, l)| l).collect();
    // Every pod of the Job ended and accounted for, then the final counts.
    let end = Instant::now() + Duration::from_secs(90);
    loop {
        let pods: Vec<Pod> = sc.job_pods(JOB).await;
        if pods.iter().all(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| accounted(&sc.history, n))
        }) {
            break;
        }
        if Instant::now() > end {
            out.notes.push("pods left after Failed".into());
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let st = sc
        .jobs
        .get(JOB)
        .await
        .map_err(|e| e.to_string())?
        .status
        .unwrap_or_default();
    out.failed_end = st.failed.unwrap_or(0);
    out.succeeded_end = st.succeeded.unwrap_or(0);
    if runner_exit(sc, &runner) != Some(42) {
        out.notes.push(format!(
            "exit-42 pod ended with {:?}",
            runner_exit(sc, &runner)
        ));
    }
    Ok(())
}

fn runner_exit(sc: &Scenario<'_>, pod: &str) -> Option<i32> {
    sc.history
        .of(pod)
        .iter()
        .rev()
        .find_map(|s| realnode::exit_code(s.pod()))
}

/// A PDB (minAvailable 1) the disruption controller under test computes;
/// once it allows one disruption, the first pod is evicted and a second
/// eviction at once must be refused (429).
async fn evict_under_pdb(
    sc: &Scenario<'_>,
    pods: &[String],
    out: &mut Outcome,
) -> Result<Vec<String>, String> {
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(sc.node.client.clone(), &sc.ns);
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "kep"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"batch.kubernetes.io/job-name": JOB}}}
    }))
    .expect("pdb");
    pdbs.create(&PostParams::default(), &pdb)
        .await
        .map_err(|e| format!("create PDB: {e}"))?;
    kcm_e2e::wait::wait_for(&pdbs, "kep", Duration::from_secs(60), "PDB status", |p| {
        let st = p.status.as_ref();
        st.and_then(|s| s.observed_generation) == p.metadata.generation
            && st.is_some_and(|s| s.current_healthy == Some(2) && s.disruptions_allowed == Some(1))
    })
    .await
    .map_err(|e| e.to_string())?;
    sc.pods
        .evict(&pods[0], &EvictParams::default())
        .await
        .map_err(|e| format!("first eviction refused: {e}"))?;
    let second = match sc.pods.evict(&pods[1], &EvictParams::default()).await {
        Ok(_) => "allowed".to_string(),
        Err(kube::Error::Api(e)) => format!("{}", e.code),
        Err(e) => format!("error {e}"),
    };
    out.notes.push(format!("second eviction: {second}"));
    Ok(vec![pods[0].clone()])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real node session: make realnode-kep"]
async fn kep3329_every_source_of_disruption_target_kcm_rs_as_kcm() {
    let node = RealNode::from_session().await;
    let causes = procs::selected("KCM_KEP_CAUSES", &Cause::ALL, Cause::slug);
    node.wait_ready_untainted(Duration::from_secs(60))
        .await
        .expect("node");
    let alloc = node.allocatable_cpu_milli().await;
    let (results, mut failures) = procs::both_passes(&node, "kep3329", &causes, Cause::slug, |c| {
        run(&node, c, alloc)
    })
    .await;
    let table = kep_report::render(&node, &results, &causes);
    realnode::write_result(&format!("{}-kep3329.md", node.version), &table);

    failures.extend(kep_report::failures(&results, &causes));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
