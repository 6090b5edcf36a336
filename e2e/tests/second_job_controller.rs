//! A second writer of Job status, against the kcm-rs binary on a real API
//! server. Upstream KCM's job-controller beside kcm-rs is found at its
//! first status write of a Job both sync: a warning, a Warning
//! `ConflictingController` event on that Job naming the writer, and
//! `kcm_rs_conflicting_controller{writer}`. With `--on-conflict=stop` (the
//! default) its next write stops that Job only (an error and a second
//! event): with KCM gone, a new Job syncs at once while the contested one
//! stays untouched. A status writer under any field manager name is found
//! the same way.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Event;
use kcm_e2e::https::{Credential, OPEN_PATHS, get_as};
use kcm_e2e::manifests as support;
use kcm_e2e::prometheus::free_port;
use kcm_e2e::wait::{wait_for, wait_for_list};
use kcm_e2e::{ControlPlane, TestNamespace, UpstreamKcm};
use kube::Api;
use kube::api::{ListParams, PostParams};
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

/// `kcm_rs_conflicting_controller{writer="<writer>"}`.
fn gauge(metrics: &str, writer: &str) -> Option<f64> {
    let series = format!("kcm_rs_conflicting_controller{{writer=\"{writer}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.trim().parse().ok())
}

/// The ConflictingController events on `name`.
async fn conflict_events(events: &Api<Event>, name: &str) -> Vec<Event> {
    let lp = ListParams::default().fields(&format!(
        "reason=ConflictingController,involvedObject.name={name}"
    ));
    events.list(&lp).await.map(|l| l.items).unwrap_or_default()
}

/// The Job's resourceVersion and status as stored.
async fn stored(jobs: &Api<Job>, name: &str) -> (String, serde_json::Value) {
    let j = jobs.get(name).await.expect("get job");
    (
        j.metadata.resource_version.unwrap_or_default(),
        serde_json::to_value(j.status).expect("status"),
    )
}

#[tokio::test]
async fn a_second_status_writer_is_named_and_stops_only_its_job() {
    let cp = ControlPlane::start().expect("control plane");
    let client = cp.client().await.expect("client");
    let ns = TestNamespace::create(&client, "second")
        .await
        .expect("namespace");
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    let events: Api<Event> = Api::namespaced(client.clone(), &ns.name);
    let port = free_port().expect("port");
    let mut kcm = start_kcm_rs(&cp, port);
    let log = cp.dir().join("kcm-rs.log");
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    tokio::time::sleep(Duration::from_secs(3)).await;

    // 1. Upstream KCM's job-controller starts beside kcm-rs; both sync the
    //    Job created now.
    let upstream = UpstreamKcm::start(&cp, &["job-controller"], &[]).expect("upstream KCM");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let created = Instant::now();
    jobs.create(&PostParams::default(), &job("both"))
        .await
        .expect("create");
    let lp = ListParams::default().fields("reason=ConflictingController,involvedObject.name=both");
    let found = wait_for_list(&events, &lp, WAIT, "a ConflictingController event", |e| {
        !e.is_empty()
    })
    .await
    .unwrap_or_else(|e| {
        let _ = kcm.kill();
        panic!("{e}\nkcm-rs log:\n{}", text())
    });
    let detected = created.elapsed();
    let ev = &found[0];
    let message = ev.message.clone().unwrap_or_default();
    eprintln!("found after {detected:?}: {message}");
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    // The harness's KCM binary is kcm-e2e-controller-manager: its user
    // agent, hence its field manager.
    let writer = "kcm-e2e-controller-manager";
    assert!(
        message.contains(writer),
        "the event names the writer: {message}"
    );
    assert!(
        detected < Duration::from_secs(20),
        "found within a sync or two"
    );
    let (code, metrics) = get_as(port, "/metrics", Credential::None)
        .await
        .expect("scrape");
    assert_eq!(code, 200);
    assert_eq!(gauge(&metrics, writer), Some(1.0), "{metrics}");
    // KCM keeps writing: on its next change kcm-rs stops syncing the Job,
    // with an error logged and a second event.
    let stopped = Instant::now();
    while !text()
        .lines()
        .any(|l| l.contains("another controller writes this Job") && l.contains(writer))
    {
        assert!(
            stopped.elapsed() < WAIT,
            "no error naming the writer:\n{}",
            text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("stopped {:?} after the Job's creation", created.elapsed());
    let evs = conflict_events(&events, "both").await;
    assert!(
        evs.iter().any(|e| e
            .message
            .as_deref()
            .is_some_and(|m| m.contains("stops syncing this Job"))),
        "{evs:?}"
    );

    // 2. KCM goes away. Only the contested Job waits: a new Job syncs at
    //    once, the contested one is not written by kcm-rs while the
    //    contest lasts (2 minutes from the last foreign change).
    drop(upstream);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = stored(&jobs, "both").await;
    let t = Instant::now();
    jobs.create(&PostParams::default(), &job("alone"))
        .await
        .expect("create");
    wait_for(&jobs, "alone", WAIT, "a status", |j| {
        j.status.as_ref().and_then(|s| s.active) == Some(2)
    })
    .await
    .expect("a Job nobody else writes syncs");
    eprintln!("an uncontested Job synced in {:?}", t.elapsed());
    assert!(t.elapsed() < Duration::from_secs(10));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        stored(&jobs, "both").await,
        before,
        "kcm-rs wrote the contested Job"
    );
    assert!(conflict_events(&events, "alone").await.is_empty());

    // 3. A status writer under any field manager name is found (one edit:
    //    reported, not stopped).
    let other = "acme-batch-operator";
    let mut j = jobs.get_status("alone").await.expect("get");
    let st = j.status.get_or_insert_with(Default::default);
    // A change the API server accepts (ready <= active) and kcm-rs did not make.
    st.ready = Some(if st.ready == Some(1) { 2 } else { 1 });
    let pp = PostParams {
        field_manager: Some(other.into()),
        ..Default::default()
    };
    jobs.replace_status("alone", &pp, &j)
        .await
        .expect("status write");
    let lp = ListParams::default().fields("reason=ConflictingController,involvedObject.name=alone");
    let found = wait_for_list(&events, &lp, WAIT, "an event on alone", |e| !e.is_empty())
        .await
        .expect("a writer named acme-batch-operator is found");
    let message = found[0].message.clone().unwrap_or_default();
    assert!(message.contains(other), "{message}");
    let (_, metrics) = get_as(port, "/metrics", Credential::None)
        .await
        .expect("scrape");
    assert_eq!(gauge(&metrics, other), Some(1.0), "{metrics}");
    let _ = kcm.kill();
    let _ = kcm.wait();
}
