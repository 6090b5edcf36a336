//! A hostile tenant against the kcm-rs binary (all four controllers) on a
//! real API server with real RBAC. The tenant is a ServiceAccount allowed
//! to create, update and delete Jobs and pods in its own namespace only (no
//! status rights). It tries, one attack after another, to stop, slow or
//! steer the controllers for another tenant, the victim, whose Jobs the
//! test runs (and whose pods it plays the kubelet for) before and after
//! each attack:
//!
//! 1. forged `managedFields` (a status write by kube-controller-manager
//!    dated 2099), which once stopped every Job;
//! 2. pods holding the Job tracking finalizer with no Job;
//! 3. pods with the victim Job's ownerReference, labels and tracking
//!    finalizer, which then fail with the exit code that fails the victim
//!    (KCM's garbage collector runs, as on any cluster: it deletes them);
//! 4. 1,000 Jobs with distinct `spec.managedBy` values;
//! 5. the largest Jobs the API server accepts (a ~1 MiB pod template);
//! 6. a flood of Jobs.
//!
//! Asserted: the victim's Jobs keep their outcomes and their latency stays
//! within [`FIRST_POD_BOUND`] (created to first pod) and [`FINISH_BOUND`]
//! (pods done to `Complete`); every attack leaves a trace an operator can
//! see (a metric or a log line); kcm-rs stays healthy and its memory
//! bounded. `make abuse` runs it (out of `make test` for its time).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod};
use kcm_e2e::https::{Credential, OPEN_PATHS, get_as};
use kcm_e2e::kubelet::finish_pod;
use kcm_e2e::manifests as support;
use kcm_e2e::procstat::rss_mib;
use kcm_e2e::prometheus::free_port;
use kcm_e2e::wait::{wait_for, wait_for_list};
use kcm_e2e::{ControlPlane, TestNamespace, UpstreamKcm};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

/// A victim Job's first pod, after its creation, under any attack.
const FIRST_POD_BOUND: Duration = Duration::from_secs(5);
/// A victim Job's `Complete`, after its last pod succeeded.
const FINISH_BOUND: Duration = Duration::from_secs(5);
/// kcm-rs's resident memory through all of it.
const RSS_BOUND_MIB: f64 = 400.0;
const WAIT: Duration = Duration::from_secs(120);
const MANAGED_BY_JOBS: usize = 1000;
const FLOOD_JOBS: usize = 500;
const FORGED_PODS: usize = 200;

fn start_kcm_rs(cp: &ControlPlane, port: u16) -> Child {
    let out = std::fs::File::create(cp.dir().join("kcm-rs.log")).expect("log");
    Command::new(support::kcm_rs_binary())
        .arg(format!("--kubeconfig={}", cp.kubeconfig().display()))
        .args(["--controllers=*", "--leader-elect=false"])
        .args(["--bind-address=127.0.0.1", &format!("--secure-port={port}")])
        .arg(OPEN_PATHS)
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("log"))
        .stderr(out)
        .spawn()
        .expect("spawn kcm-rs")
}

fn job(name: &str, extra_spec: Value) -> Job {
    let mut j = json!({
        "metadata": { "name": name },
        "spec": { "completions": 2, "parallelism": 2, "template": { "spec": {
            "restartPolicy": "Never",
            "containers": [{ "name": "main", "image": "busybox" }] } } }
    });
    if let (Some(spec), Value::Object(extra)) = (j["spec"].as_object_mut(), extra_spec) {
        spec.extend(extra);
    }
    serde_json::from_value(j).expect("job")
}

/// A client of the tenant's ServiceAccount (a bound token from the
/// TokenRequest API; RBAC as the API server grants it).
async fn tenant_client(cp: &ControlPlane, admin: &kube::Client, ns: &str) -> kube::Client {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    async fn create<K>(api: Api<K>, body: Value)
    where
        K: kube::Resource
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
    {
        let obj: K = serde_json::from_value(body).expect("object");
        api.create(&PostParams::default(), &obj)
            .await
            .expect("create RBAC object");
    }
    create::<ServiceAccount>(
        Api::namespaced(admin.clone(), ns),
        json!({ "metadata": { "name": "tenant" } }),
    )
    .await;
    let verbs = json!([
        "get",
        "list",
        "watch",
        "create",
        "update",
        "patch",
        "delete",
        "deletecollection"
    ]);
    create::<Role>(
        Api::namespaced(admin.clone(), ns),
        json!({ "metadata": { "name": "tenant" },
            "rules": [
                { "apiGroups": ["batch"], "resources": ["jobs"], "verbs": verbs },
                { "apiGroups": [""], "resources": ["pods"], "verbs": verbs } ] }),
    )
    .await;
    create::<RoleBinding>(
        Api::namespaced(admin.clone(), ns),
        json!({ "metadata": { "name": "tenant" },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant" },
            "subjects": [{ "kind": "ServiceAccount", "name": "tenant", "namespace": ns }] }),
    )
    .await;
    let sa: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(admin.clone(), ns);
    let tr: k8s_openapi::api::authentication::v1::TokenRequest =
        serde_json::from_value(json!({ "spec": { "audiences": [], "expirationSeconds": 3600 } }))
            .expect("token request");
    let token = sa
        .create_token_request("tenant", &PostParams::default(), &tr)
        .await
        .expect("token")
        .status
        .expect("token status")
        .token
        .expect("a token");
    let kc = kube::config::Kubeconfig::read_from(cp.kubeconfig()).expect("kubeconfig");
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("config");
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..Default::default()
    };
    config.default_retry = false;
    kube::Client::try_from(config).expect("tenant client")
}

/// Metrics scraped from kcm-rs.
async fn scrape(port: u16) -> String {
    let (code, body) = get_as(port, "/metrics", Credential::None)
        .await
        .expect("scrape");
    assert_eq!(code, 200);
    body
}

/// The sum of a family's samples whose line contains every `needle`.
fn sample(metrics: &str, family: &str, needles: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(family) && needles.iter().all(|n| l.contains(n)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// One victim probe's figures.
#[derive(Debug)]
struct Probe {
    first_pod: Duration,
    finish: Duration,
}

/// A victim Job from creation to `Complete`, playing the kubelet for its
/// pods; its outcome checked, its latencies returned.
async fn probe(admin: &kube::Client, ns: &str, name: &str) -> Probe {
    let jobs: Api<Job> = Api::namespaced(admin.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let policy = json!({ "backoffLimit": 0, "podFailurePolicy": { "rules": [
        { "action": "FailJob", "onExitCodes": { "operator": "In", "values": [42] } } ] } });
    let created = Instant::now();
    jobs.create(&PostParams::default(), &job(name, policy))
        .await
        .expect("create victim Job");
    let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={name}"));
    let first = wait_for_list(&pods, &lp, WAIT, "the victim's first pod", |p| {
        !p.is_empty()
    })
    .await
    .expect("victim pods");
    let first_pod = created.elapsed();
    let _ = first;
    let all = wait_for_list(&pods, &lp, WAIT, "the victim's 2 pods", |p| p.len() == 2)
        .await
        .expect("victim pods");
    for p in &all {
        finish_pod(&pods, &p.name_any(), 0).await.expect("succeed");
    }
    let done = Instant::now();
    let j = wait_for(&jobs, name, WAIT, "Complete", |j| {
        j.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
            })
    })
    .await
    .expect("the victim Job finished");
    let finish = done.elapsed();
    let st = j.status.expect("status");
    let complete = st
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Complete" && c.status == "True");
    assert!(complete, "victim {name} did not complete: {st:?}");
    assert_eq!((st.succeeded, st.failed), (Some(2), None), "{name}");
    Probe { first_pod, finish }
}

/// Probes the victim after an attack, checks the bounds, prints a row.
async fn check_victim(admin: &kube::Client, ns: &str, attack: &str, n: &mut u32) -> Probe {
    *n += 1;
    let p = probe(admin, ns, &format!("victim-{n}")).await;
    eprintln!(
        "| {attack} | {:.2} s | {:.2} s |",
        p.first_pod.as_secs_f64(),
        p.finish.as_secs_f64()
    );
    assert!(
        p.first_pod <= FIRST_POD_BOUND,
        "after {attack}: first pod after {:?}",
        p.first_pod
    );
    assert!(
        p.finish <= FINISH_BOUND,
        "after {attack}: Complete after {:?}",
        p.finish
    );
    p
}

#[tokio::test]
#[ignore = "about 2.5 minutes: make abuse"]
async fn a_hostile_tenant_cannot_stop_slow_or_steer_the_controllers() {
    let cp = ControlPlane::start().expect("control plane");
    let admin = cp.client().await.expect("client");
    let victim = TestNamespace::create(&admin, "victim")
        .await
        .expect("namespace");
    let mallory = TestNamespace::create(&admin, "mallory")
        .await
        .expect("namespace");
    let tenant = tenant_client(&cp, &admin, &mallory.name).await;
    // KCM's garbage collector, as on any cluster: it deletes pods whose
    // owner does not exist (the posing pods of attack 3).
    let _gc = UpstreamKcm::start(&cp, &["garbage-collector-controller"], &[]).expect("KCM GC");
    let port = free_port().expect("port");
    let mut kcm = start_kcm_rs(&cp, port);
    let pid = kcm.id();
    let log = cp.dir().join("kcm-rs.log");
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    let t_jobs: Api<Job> = Api::namespaced(tenant.clone(), &mallory.name);
    let t_pods: Api<Pod> = Api::namespaced(tenant.clone(), &mallory.name);
    let mut n = 0;
    eprintln!("| attack | victim: created to first pod | pods done to Complete |");
    eprintln!("|---|--:|--:|");
    tokio::time::sleep(Duration::from_secs(2)).await;
    check_victim(&admin, &victim.name, "none (baseline)", &mut n).await;

    // The tenant has no status rights, and no rights elsewhere.
    let denied = Api::<Job>::namespaced(tenant.clone(), &victim.name)
        .list(&ListParams::default())
        .await;
    assert!(denied.is_err(), "the tenant can read the victim's Jobs");

    // 1. Forged managedFields: a status write by KCM "in 2099".
    let mut forged = job("forged", json!({}));
    forged.metadata.managed_fields = Some(
        serde_json::from_value(json!([{ "manager": "kube-controller-manager",
            "operation": "Update", "apiVersion": "batch/v1", "subresource": "status",
            "time": "2099-01-01T00:00:00Z", "fieldsType": "FieldsV1",
            "fieldsV1": { "f:status": { "f:active": {} } } }]))
        .expect("entries"),
    );
    let created = t_jobs
        .create(&PostParams::default(), &forged)
        .await
        .expect("the tenant creates a Job with forged managedFields");
    assert!(
        created
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .any(|e| e.manager.as_deref() == Some("kube-controller-manager")),
        "the API server keeps managedFields as sent"
    );
    wait_for(&t_jobs, "forged", WAIT, "its pods", |j| {
        j.status.as_ref().and_then(|s| s.active) == Some(2)
    })
    .await
    .expect("the forged Job itself is synced as any other");
    check_victim(&admin, &victim.name, "1. forged managedFields", &mut n).await;
    let m = scrape(port).await;
    assert_eq!(
        sample(&m, "kcm_rs_conflicting_controller{", &[]),
        0.0,
        "no conflict: {m}"
    );
    let events: Api<Event> = Api::all(admin.clone());
    let conflicts = events
        .list(&ListParams::default().fields("reason=ConflictingController"))
        .await
        .expect("events");
    assert!(conflicts.items.is_empty(), "{:?}", conflicts.items);
    assert!(
        sample(
            &m,
            "kcm_rs_job_untrusted_input_total",
            &["future_managed_fields"]
        ) >= 1.0
    );
    assert!(
        log_text().contains("reason=\"future_managed_fields\"")
            || log_text().contains("future_managed_fields")
    );

    // 2. Pods holding the tracking finalizer with no Job.
    for i in 0..FORGED_PODS {
        let p: Pod = serde_json::from_value(json!({
            "metadata": { "name": format!("finalizer-{i}"),
                "finalizers": ["batch.kubernetes.io/job-tracking"] },
            "spec": { "restartPolicy": "Never",
                "containers": [{ "name": "main", "image": "busybox" }] } }))
        .expect("pod");
        t_pods
            .create(&PostParams::default(), &p)
            .await
            .expect("the tenant creates a pod with the tracking finalizer");
    }
    // 3. Pods posing as the victim's: its Job's name, UID, labels, the
    //    tracking finalizer; then they fail with the victim's FailJob code.
    let victim_jobs: Api<Job> = Api::namespaced(admin.clone(), &victim.name);
    let target = victim_jobs
        .create(
            &PostParams::default(),
            &job(
                "target",
                json!({
            "backoffLimit": 0, "podFailurePolicy": { "rules": [
                { "action": "FailJob", "onExitCodes": { "operator": "In", "values": [42] } } ] } }),
            ),
        )
        .await
        .expect("victim target Job");
    let uid = target.metadata.uid.clone().expect("uid");
    for i in 0..10 {
        let p: Pod = serde_json::from_value(json!({
            "metadata": { "name": format!("posing-{i}"),
                "labels": { "batch.kubernetes.io/controller-uid": uid,
                            "batch.kubernetes.io/job-name": "target",
                            "controller-uid": uid, "job-name": "target" },
                "finalizers": ["batch.kubernetes.io/job-tracking"],
                "ownerReferences": [{ "apiVersion": "batch/v1", "kind": "Job", "name": "target",
                    "uid": uid, "controller": true }] },
            "spec": { "restartPolicy": "Never",
                "containers": [{ "name": "main", "image": "busybox" }] } }))
        .expect("pod");
        t_pods
            .create(&PostParams::default(), &p)
            .await
            .expect("the tenant creates pods posing as the victim's");
    }
    // A real node would run them; the test plays its kubelet. KCM's
    // garbage collector deletes them (their owner does not exist in their
    // namespace); kcm-rs then removes the finalizer, as upstream.
    let admin_t_pods: Api<Pod> = Api::namespaced(admin.clone(), &mallory.name);
    for i in 0..10 {
        finish_pod(&admin_t_pods, &format!("posing-{i}"), 42)
            .await
            .expect("fail with 42");
    }
    let all_released = wait_for_list(
        &t_pods,
        &ListParams::default(),
        WAIT,
        "every finalizer removed (or the pod gone)",
        |ps| {
            ps.iter()
                .filter(|p| {
                    p.name_any().starts_with("finalizer-") || p.name_any().starts_with("posing-")
                })
                .all(|p| p.finalizers().is_empty())
        },
    )
    .await;
    assert!(all_released.is_ok(), "{all_released:?}");
    check_victim(
        &admin,
        &victim.name,
        "2-3. forged finalizers, owners, labels",
        &mut n,
    )
    .await;
    let t = victim_jobs.get("target").await.expect("target");
    let st = t.status.clone().unwrap_or_default();
    assert_eq!(
        (st.active, st.failed, st.conditions.as_ref().map(Vec::len)),
        (Some(2), None, None),
        "the posing pods steered the victim's Job: {st:?}"
    );
    let m = scrape(port).await;
    assert!(
        sample(
            &m,
            "kcm_rs_job_untrusted_input_total",
            &["orphan_tracking_finalizer"]
        ) >= (FORGED_PODS + 10) as f64,
        "{m}"
    );

    // 4. 1,000 Jobs with distinct managedBy values.
    let started = Instant::now();
    for i in 0..MANAGED_BY_JOBS {
        let j = job(
            &format!("mb-{i}"),
            json!({ "managedBy": format!("squat.example.com/c{i}") }),
        );
        t_jobs
            .create(&PostParams::default(), &j)
            .await
            .expect("create managedBy Job");
    }
    eprintln!(
        "created {MANAGED_BY_JOBS} managedBy Jobs in {:?}",
        started.elapsed()
    );
    check_victim(&admin, &victim.name, "4. 1,000 managedBy values", &mut n).await;
    let m = scrape(port).await;
    let family = "job_controller_jobs_by_external_controller_total{";
    let tenant_labels = m
        .lines()
        .filter(|l| l.starts_with(family) && l.contains("squat.example.com"))
        .count();
    let other = sample(&m, family, &["controller_name=\"other\""]);
    eprintln!("managedBy labels held by the tenant: {tenant_labels}; counted as other: {other}");
    assert!(tenant_labels <= 4, "{tenant_labels}");
    assert!(other >= (MANAGED_BY_JOBS - 4) as f64, "{other}");
    assert!(
        sample(
            &m,
            "kcm_rs_job_untrusted_input_total",
            &["managed_by_label_overflow"]
        ) >= (MANAGED_BY_JOBS - 4) as f64
    );
    t_jobs
        .delete_collection(&DeleteParams::background(), &ListParams::default())
        .await
        .expect("delete the tenant's Jobs");

    // 5. The largest Jobs the API server takes: a ~1 MiB pod template.
    let big_arg = "x".repeat(1 << 20);
    for i in 0..5 {
        let mut j = job(&format!("big-{i}"), json!({}));
        let spec = j.spec.as_mut().expect("spec");
        let c = &mut spec.template.spec.as_mut().expect("pod spec").containers[0];
        c.args = Some(vec![big_arg.clone()]);
        match t_jobs.create(&PostParams::default(), &j).await {
            Ok(_) => {}
            Err(e) => panic!("a 1 MiB Job refused: {e}"),
        }
    }
    for i in 0..5 {
        wait_for(&t_jobs, &format!("big-{i}"), WAIT, "its pods", |j| {
            j.status.as_ref().and_then(|s| s.active) == Some(2)
        })
        .await
        .expect("the big Jobs are synced");
    }
    check_victim(
        &admin,
        &victim.name,
        "5. 1 MiB Jobs (10 pods of 1 MiB)",
        &mut n,
    )
    .await;
    let rss = rss_mib(pid).unwrap_or_default();
    eprintln!("kcm-rs RSS after the big Jobs: {rss:.0} MiB");
    assert!(rss < RSS_BOUND_MIB, "{rss} MiB");
    t_jobs
        .delete_collection(&DeleteParams::background(), &ListParams::default())
        .await
        .expect("delete the tenant's Jobs");

    // 6. A flood: FLOOD_JOBS Jobs of one pod each, as fast as the API
    //    server takes them; the victim's Job is created mid-flood.
    let flood = {
        let t_jobs = t_jobs.clone();
        tokio::spawn(async move {
            for i in 0..FLOOD_JOBS {
                let j = job(
                    &format!("flood-{i}"),
                    json!({ "parallelism": 1, "completions": 1 }),
                );
                let _ = t_jobs.create(&PostParams::default(), &j).await;
            }
        })
    };
    let mut depth = 0.0f64;
    let begun = Instant::now();
    while begun.elapsed() < Duration::from_secs(3) {
        let m = scrape(port).await;
        depth = depth.max(sample(&m, "workqueue_depth{", &["name=\"job\""]));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let p = check_victim(&admin, &victim.name, "6. a flood of 500 Jobs", &mut n).await;
    flood.await.expect("flood");
    let m = scrape(port).await;
    depth = depth.max(sample(&m, "workqueue_depth{", &["name=\"job\""]));
    eprintln!("flood: peak job queue depth seen {depth}; victim {p:?}");
    assert!(
        depth >= 50.0,
        "the flood is visible on workqueue_depth: {depth}"
    );

    // Through all of it: healthy, bounded memory, no panics.
    let (code, _) = get_as(port, "/healthz", Credential::None)
        .await
        .expect("healthz");
    assert_eq!(code, 200);
    let rss = rss_mib(pid).unwrap_or_default();
    eprintln!("kcm-rs RSS at the end: {rss:.0} MiB");
    assert!(rss < RSS_BOUND_MIB, "{rss} MiB");
    let text = log_text();
    assert!(!text.contains("panicked"), "kcm-rs panicked");
    let _ = kcm.kill();
    let _ = kcm.wait();
}
