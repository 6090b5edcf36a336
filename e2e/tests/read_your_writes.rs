//! KCM 1.36's read-your-writes check for the Job controller
//! (`StaleControllerConsistencyJob`), on the real API server: the Job
//! watch of kcm-rs is held back by the fault proxy (stalled 8 s after a
//! network cut) while one of the Job's pods succeeds. As 1.36, kcm-rs
//! skips the syncs that would run on a Job older than its own status write
//! and counts them in `job_controller_stale_sync_skips_total{group="batch",
//! resource="jobs"}`; as 1.35 (the minor before), the metric does not exist
//! and the syncs run on the Job as the stalled cache has it. Both count the
//! pod once, and neither writes a status on the stale Job that the API
//! server refuses (409). `--emulated-version` picks the minor on the
//! control plane of `KCM_E2E_K8S_VERSION` (a skew warning when newer).

use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kcm_e2e::faults::{Fault, FaultProxy, FaultSettings, Script, When};
use kcm_e2e::https::{self, OPEN_PATHS};
use kcm_e2e::manifests as support;
use kcm_e2e::prometheus::free_port;
use kcm_e2e::wait::{wait_for, wait_for_list};
use kube::Api;
use kube::api::{ListParams, PostParams};

const STALL: Duration = Duration::from_secs(8);
const METRIC: &str = "job_controller_stale_sync_skips_total";

struct Outcome {
    /// The skip counter for batch/jobs; None: the metric is not exported.
    skips: Option<u64>,
    /// Job status writes answered 409 by the API server.
    conflicts: usize,
    succeeded: i32,
    /// The end of kcm-rs's log and the proxy's summary, for a failure.
    log: String,
}

fn job(name: &str) -> Job {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"completions": 2, "parallelism": 2, "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox"}]}}}
    }))
    .expect("job")
}

fn skips(metrics: &str) -> Option<u64> {
    let series = format!("{METRIC}{{group=\"batch\",resource=\"jobs\"}} ");
    let registered = metrics.contains(&format!("# TYPE {METRIC} counter"));
    let value = metrics
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.trim().parse::<f64>().ok());
    // A registered counter without this series has counted nothing.
    registered.then(|| value.unwrap_or(0.0) as u64)
}

async fn run_as(cp: &kcm_e2e::ControlPlane, client: &kube::Client, minor: &str) -> Outcome {
    let ns = kcm_e2e::TestNamespace::create(client, &format!("ryw-{}", minor.replace('.', "-")))
        .await
        .expect("namespace");
    let proxy = FaultProxy::start(cp, FaultSettings::none())
        .await
        .expect("proxy");
    let port = free_port().expect("port");
    let log_path = cp.dir().join(format!("kcm-rs-ryw-{minor}.log"));
    let emulated = format!("--emulated-version={minor}");
    let secure_port = format!("--secure-port={port}");
    let args = [
        emulated.as_str(),
        "--controllers=job-controller",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        OPEN_PATHS,
        secure_port.as_str(),
    ];
    let mut kcm = support::spawn_kcm_rs(proxy.kubeconfig(), &args, &log_path);

    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    jobs.create(&PostParams::default(), &job("ryw"))
        .await
        .expect("create");
    let wait = Duration::from_secs(60);
    let sel = ListParams::default().labels("batch.kubernetes.io/job-name=ryw");
    let log_tail = || kcm_e2e::control_plane::tail(&log_path, 30);
    let listed = wait_for_list(&pods, &sel, wait, "2 pods", |p| p.len() == 2)
        .await
        .unwrap_or_else(|e| panic!("{minor}: {e}\n{}", log_tail()));
    wait_for(&jobs, "ryw", wait, "2 active", |j| {
        j.status.as_ref().and_then(|s| s.active) == Some(2)
    })
    .await
    .unwrap_or_else(|e| panic!("{minor}: {e}\n{}", log_tail()));

    // Hold the Job watch back: cut every connection, and stall the Job
    // watch that replaces the cut one.
    proxy.set_stall(STALL);
    proxy.script(Script {
        method: "GET".into(),
        path_contains: "/apis/batch/v1/jobs?".into(),
        fault: Fault::Stall,
        when: When::Before,
        times: 1,
    });
    proxy.cut(true);
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.cut(false);
    let began = Instant::now();
    while proxy.scripts_left() > 0 {
        assert!(began.elapsed() < wait, "the Job watch never came back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let first = listed[0].metadata.name.clone().expect("name");
    kcm_e2e::kubelet::finish_pod(&pods, &first, 0)
        .await
        .expect("pod succeeds");
    let done = wait_for(&jobs, "ryw", wait + STALL, "1 succeeded", |j| {
        j.status.as_ref().and_then(|s| s.succeeded) == Some(1)
            && j.status
                .as_ref()
                .and_then(|s| s.uncounted_terminated_pods.as_ref())
                .is_none_or(|u| u.succeeded.as_ref().is_none_or(Vec::is_empty))
    })
    .await;
    // The next sync comes after the pod's finalizer removal is seen (a
    // 1 s batch); watch the counter until the stalled watch delivers.
    let until = Instant::now() + STALL + Duration::from_secs(3);
    let mut metrics = String::new();
    while Instant::now() < until {
        metrics = https::get(port, "/metrics").await.expect("metrics").1;
        if skips(&metrics).is_some_and(|n| n > 0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let _ = kcm.kill();
    let _ = kcm.wait();
    let text = kcm_e2e::control_plane::tail(&log_path, 30);
    let done = done.unwrap_or_else(|e| panic!("{minor}: {e}\n{text}"));
    let conflicts = proxy
        .records()
        .iter()
        .filter(|r| r.method == "PUT" && r.path.contains("/jobs/ryw/status"))
        .filter(|r| r.status == Some(409))
        .count();
    Outcome {
        skips: skips(&metrics),
        conflicts,
        succeeded: done.status.and_then(|s| s.succeeded).unwrap_or(0),
        log: format!(
            "{text}\nrequests: {:#?}",
            proxy
                .records()
                .iter()
                .map(|r| format!("{} {} {:?} {:?}", r.method, r.path, r.sent, r.fault))
                .collect::<Vec<_>>()
        ),
    }
}

#[tokio::test]
async fn job_syncs_wait_for_their_own_writes_from_1_36() {
    let cp = kcm_e2e::ControlPlane::start().expect("control plane");
    let client = cp.client().await.expect("client");
    let before = run_as(&cp, &client, "1.35").await;
    let after = run_as(&cp, &client, "1.36").await;
    eprintln!(
        "as 1.35: skips {:?}, 409 on status writes {}, succeeded {}\n\
         as 1.36: skips {:?}, 409 on status writes {}, succeeded {}",
        before.skips,
        before.conflicts,
        before.succeeded,
        after.skips,
        after.conflicts,
        after.succeeded
    );
    assert_eq!(before.skips, None, "1.35 exports no {METRIC}");
    assert!(
        after.skips.is_some_and(|n| n > 0),
        "1.36 skipped no sync on the stale Job: {:?}\n{}",
        after.skips,
        after.log
    );
    assert_eq!(after.conflicts, 0, "1.36 wrote on a stale Job");
    assert_eq!((before.succeeded, after.succeeded), (1, 1));
}
