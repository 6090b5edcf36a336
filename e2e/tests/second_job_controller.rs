//! Upstream KCM's job-controller and kcm-rs on one API server: kcm-rs sees
//! the other controller's status writes in the Job's managedFields, logs an
//! error, records a Warning event, sets `kcm_rs_conflicting_controller` to
//! 1 and (`--on-conflict=stop`, the default) stops syncing Jobs.

#[path = "manifests/support.rs"]
#[allow(dead_code)]
mod support;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod};
use kcm_e2e::https::{Credential, OPEN_PATHS, get_as};
use kcm_e2e::prometheus::free_port;
use kcm_e2e::wait::{wait_for, wait_for_list};
use kcm_e2e::{ControlPlane, TestNamespace, UpstreamKcm};
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

fn job(name: &str) -> Job {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": { "completions": 2, "parallelism": 2, "template": { "spec": {
            "restartPolicy": "Never",
            "containers": [{ "name": "main", "image": "busybox" }] } } }
    }))
    .expect("job")
}

/// The field managers of an object, as `manager/operation[/subresource]`.
fn managers(m: &kube::core::ObjectMeta) -> Vec<String> {
    m.managed_fields
        .iter()
        .flatten()
        .map(|f| {
            let mut s = format!(
                "{}/{}",
                f.manager.as_deref().unwrap_or(""),
                f.operation.as_deref().unwrap_or("")
            );
            if let Some(sub) = f.subresource.as_deref().filter(|s| !s.is_empty()) {
                s = format!("{s}/{sub}");
            }
            s
        })
        .collect()
}

fn start_kcm_rs(cp: &ControlPlane, port: u16) -> Child {
    let bin = support::kcm_rs_binary();
    let out = std::fs::File::create(cp.dir().join("kcm-rs.log")).expect("log");
    Command::new(bin)
        .arg(format!("--kubeconfig={}", cp.kubeconfig().display()))
        .args(["--controllers=job-controller", "--leader-elect=false"])
        .args(["--bind-address=127.0.0.1", &format!("--secure-port={port}")])
        .arg(OPEN_PATHS)
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("log"))
        .stderr(out)
        .spawn()
        .expect("spawn kcm-rs")
}

fn gauge(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[tokio::test]
async fn a_second_job_controller_is_detected_and_kcm_rs_stops() {
    let cp = ControlPlane::start().expect("control plane");
    let upstream = UpstreamKcm::start(&cp, &["job-controller"], &[]).expect("upstream KCM");
    let client = cp.client().await.expect("client");
    let ns = TestNamespace::create(&client, "second")
        .await
        .expect("namespace");
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    // kcm-rs first: KCM's writes from before it started are no conflict
    // (a hand-over), only those made while it runs.
    let port = free_port().expect("port");
    let mut kcm = start_kcm_rs(&cp, port);
    tokio::time::sleep(Duration::from_secs(3)).await;
    jobs.create(&PostParams::default(), &job("first"))
        .await
        .expect("create");
    let synced = wait_for(&jobs, "first", WAIT, "a status", |j| {
        j.status.as_ref().and_then(|s| s.active).is_some()
    })
    .await
    .expect("the Job synced");
    eprintln!("Job first, managedFields: {:?}", managers(&synced.metadata));
    let events: Api<Event> = Api::namespaced(client.clone(), &ns.name);
    let lp = ListParams::default().fields("reason=ConflictingController");
    let found = wait_for_list(&events, &lp, WAIT, "a ConflictingController event", |e| {
        !e.is_empty()
    })
    .await;
    let log = cp.dir().join("kcm-rs.log");
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    let found = found.unwrap_or_else(|e| {
        let _ = kcm.kill();
        panic!("{e}\nkcm-rs log:\n{}", text())
    });
    let ev = &found[0];
    eprintln!(
        "event: {} {} on {}/{}: {}",
        ev.type_.as_deref().unwrap_or(""),
        ev.reason.as_deref().unwrap_or(""),
        ev.involved_object.kind.as_deref().unwrap_or(""),
        ev.involved_object.name.as_deref().unwrap_or(""),
        ev.message.as_deref().unwrap_or("")
    );
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    let (code, metrics) = get_as(port, "/metrics", Credential::None)
        .await
        .expect("scrape");
    assert_eq!(code, 200);
    let g = gauge(&metrics, "kcm_rs_conflicting_controller ");
    eprintln!("kcm_rs_conflicting_controller {g:?}");
    assert_eq!(g, Some(1.0));
    let logged: Vec<String> = text()
        .lines()
        .filter(|l| l.contains("another controller"))
        .take(2)
        .map(str::to_string)
        .collect();
    eprintln!("kcm-rs log: {logged:#?}");
    assert!(!logged.is_empty(), "no error logged");

    // Syncing stopped: a new Job's pods all come from upstream.
    jobs.create(&PostParams::default(), &job("second"))
        .await
        .expect("create");
    let lp = ListParams::default().labels("batch.kubernetes.io/job-name=second");
    let second = wait_for_list(&pods, &lp, WAIT, "2 pods", |p| p.len() >= 2)
        .await
        .expect("pods of the second Job");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let second = pods.list(&lp).await.map(|l| l.items).unwrap_or(second);
    let by: Vec<String> = second
        .iter()
        .map(|p| format!("{}: {:?}", p.name_any(), managers(&p.metadata)))
        .collect();
    eprintln!("pods of Job second: {by:#?}");
    assert_eq!(second.len(), 2, "one controller created pods: {by:#?}");
    assert!(
        second.iter().all(|p| !managers(&p.metadata)
            .iter()
            .any(|m| m.starts_with("kcm-rs/"))),
        "kcm-rs created or changed pods while stopped: {by:#?}"
    );
    let _ = kcm.kill();
    let _ = kcm.wait();
    drop(upstream);
}
