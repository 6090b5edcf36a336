//! Rolling back to upstream KCM's job-controller and forward again, with
//! Jobs in flight: kcm-rs (the real binary) runs them for a while and stops
//! on SIGTERM, upstream kube-controller-manager's job-controller takes over,
//! then kcm-rs again until every Job has finished. Both track pods with the
//! same finalizer (`batch.kubernetes.io/job-tracking`) and the same status
//! fields, so no state is lost: every Job completes with exactly its
//! completions, each succeeded pod counted once, each failed pod counted
//! once unless its pod failure policy ignores it, and no pod keeps the
//! finalizer. This is the rollback procedure of docs/operating.md, on the local control
//! plane.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kcm_e2e::manifests as support;
use kcm_e2e::prometheus::free_port;
use kcm_e2e::{ControlPlane, UpstreamKcm};
use kcm_sim::{self as sim, SimConfig, SimStats};
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use serde_json::json;
use support::*;

const JOBS: usize = 6;
const COMPLETIONS: i32 = 8;
const FINALIZER: &str = "batch.kubernetes.io/job-tracking";

fn workload_job(name: &str) -> Job {
    obj(json!({
        "metadata": { "name": name },
        "spec": {
            "completions": COMPLETIONS, "parallelism": 3, "backoffLimit": 20,
            "podFailurePolicy": { "rules": [
                { "action": "Ignore", "onPodConditions": [{ "type": "DisruptionTarget" }] },
                { "action": "Count", "onExitCodes": { "operator": "In", "values": [1] } },
            ]},
            "template": {
                "metadata": { "annotations": {
                    "sim.kcm-rs.io/run": "1s..3s",
                    "sim.kcm-rs.io/outcomes": "80=0,10=1,10=condition:DisruptionTarget:TerminationByKubelet",
                }},
                "spec": { "restartPolicy": "Never",
                          "containers": [{ "name": "main", "image": "busybox" }] },
            },
        },
    }))
}

/// kcm-rs running only the Job controller, as the admin.
fn start_kcm_rs(cp: &ControlPlane, bin: &std::path::Path, log: &str) -> Child {
    let out = std::fs::File::create(cp.dir().join(log)).expect("log");
    Command::new(bin)
        .arg(format!("--kubeconfig={}", cp.kubeconfig().display()))
        .args(["--controllers=job-controller", "--leader-elect=false"])
        .args([
            "--bind-address=127.0.0.1",
            &format!("--secure-port={}", free_port().expect("port")),
        ])
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("log"))
        .stderr(out)
        .spawn()
        .expect("spawn kcm-rs")
}

fn sigterm_and_wait(child: &mut Child) {
    let pid = child.id().to_string();
    let sent = Command::new("kill").args(["-TERM", &pid]).status();
    assert!(sent.expect("kill").success());
    let status = child.wait().expect("wait");
    assert!(status.success(), "kcm-rs exit on SIGTERM: {status}");
}

fn finished(j: &Job) -> bool {
    job_has(j, "Complete") || job_has(j, "Failed")
}

/// (unfinished Jobs, succeeded counted, pods not yet finished).
async fn progress(jobs: &Api<Job>, pods: &Api<Pod>) -> (usize, i32, usize) {
    let list = jobs.list(&ListParams::default()).await.expect("jobs").items;
    let open = list.iter().filter(|j| !finished(j)).count();
    let done: i32 = list
        .iter()
        .filter_map(|j| j.status.as_ref()?.succeeded)
        .sum();
    let pods = pods.list(&ListParams::default()).await.expect("pods").items;
    let phase = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default()
    };
    let running = pods
        .iter()
        .filter(|p| !["Succeeded", "Failed"].contains(&phase(p).as_str()));
    (open, done, running.count())
}

/// Waits until the Jobs together count `target` succeeded pods (or all end).
async fn run_until(
    jobs: &Api<Job>,
    pods: &Api<Pod>,
    target: i32,
    who: &str,
) -> (usize, i32, usize) {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let p = progress(jobs, pods).await;
        if p.1 >= target || p.0 == 0 {
            eprintln!(
                "{who}: {} Jobs in flight, {} pods succeeded, {} pods running",
                p.0, p.1, p.2
            );
            return p;
        }
        assert!(Instant::now() < deadline, "{who}: stuck at {p:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test]
async fn kcm_rs_to_upstream_kcm_and_back_with_jobs_in_flight() {
    let began = Instant::now();
    let bin = kcm_rs_binary();
    let cp = ControlPlane::start().expect("control plane");
    let admin = cp.client().await.expect("admin");
    let stats = Arc::new(SimStats::default());
    let sim_cfg = SimConfig {
        nodes: 3,
        ..SimConfig::default()
    };
    sim::create_nodes(&admin, &sim_cfg).await.expect("nodes");
    let sim_task = tokio::spawn(sim::run(admin.clone(), sim_cfg, Arc::clone(&stats)));
    let jobs: Api<Job> = Api::namespaced(admin.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");

    let mut kcm = start_kcm_rs(&cp, &bin, "kcm-rs-1.log");
    for i in 0..JOBS {
        let pp = Default::default();
        jobs.create(&pp, &workload_job(&format!("rollback-{i}")))
            .await
            .expect("job");
    }
    let total = JOBS as i32 * COMPLETIONS;
    // 1. kcm-rs until a quarter of the pods succeeded; SIGTERM (graceful).
    let first = run_until(&jobs, &pods, total / 4, "kcm-rs").await;
    sigterm_and_wait(&mut kcm);
    // 2. Rollback: upstream KCM's job-controller until half succeeded.
    let upstream = UpstreamKcm::start(&cp, &["job-controller"], &[]).expect("upstream KCM");
    let second = run_until(&jobs, &pods, total / 2, "upstream KCM").await;
    drop(upstream);
    // 3. Forward again: kcm-rs until every Job ended.
    let mut kcm = start_kcm_rs(&cp, &bin, "kcm-rs-2.log");
    let third = run_until(&jobs, &pods, i32::MAX, "kcm-rs again").await;
    assert!(
        first.0 > 0 && second.0 > 0,
        "no Jobs in flight at a switch: {first:?} {second:?}"
    );
    assert_eq!(third.0, 0);

    // Every pod counted once; tracking finalizers all removed.
    let deadline = Instant::now() + WAIT;
    let (mut ignored, mut counted) = (0, 0);
    for job in jobs.list(&ListParams::default()).await.expect("jobs").items {
        let name = job.name_any();
        let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={name}"));
        let (list, status) = loop {
            let list = pods.list(&lp).await.expect("pods").items;
            let job = jobs.get(&name).await.expect("job");
            let status = job.status.clone().unwrap_or_default();
            let uncounted = status.uncounted_terminated_pods.as_ref();
            let settled = uncounted.is_none_or(|u| {
                u.succeeded.as_ref().is_none_or(Vec::is_empty)
                    && u.failed.as_ref().is_none_or(Vec::is_empty)
            });
            if settled
                && list
                    .iter()
                    .all(|p| !p.finalizers().iter().any(|f| f == FINALIZER))
            {
                break (list, status);
            }
            assert!(
                Instant::now() < deadline,
                "{name}: finalizers or uncounted pods remain"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
        assert!(
            job_has(&jobs.get(&name).await.expect("job"), "Complete"),
            "{name} did not complete"
        );
        let phase = |p: &Pod| {
            p.status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default()
        };
        let disrupted =
            |p: &Pod| pod_condition(p, "DisruptionTarget").is_some_and(|c| c.status == "True");
        let succeeded = list.iter().filter(|p| phase(p) == "Succeeded").count() as i32;
        let failed: Vec<&Pod> = list.iter().filter(|p| phase(p) == "Failed").collect();
        let ignored_here = failed.iter().filter(|p| disrupted(p)).count() as i32;
        let counted_here = failed.len() as i32 - ignored_here;
        assert_eq!(status.succeeded, Some(COMPLETIONS), "{name}: succeeded");
        assert_eq!(succeeded, COMPLETIONS, "{name}: succeeded pods");
        assert_eq!(
            status.failed.unwrap_or(0),
            counted_here,
            "{name}: failed (Ignore left out)"
        );
        ignored += ignored_here;
        counted += counted_here;
    }
    sigterm_and_wait(&mut kcm);
    sim_task.abort();
    eprintln!(
        "rollback: {JOBS} Jobs, {total} pods succeeded, {counted} failed pods counted, {ignored} \
         ignored, each once; in flight at kcm-rs -> KCM: {} Jobs / {} pods running, at KCM -> \
         kcm-rs: {} Jobs / {} pods running; {:.1?}",
        first.0,
        first.2,
        second.0,
        second.2,
        began.elapsed()
    );
}
