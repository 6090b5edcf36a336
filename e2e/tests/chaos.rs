//! The short chaos runs of `make test`: the mixed workload of `make chaos`
//! (`kcm_bench::chaos`) at a small scale, calm (no kills, no faults), with
//! five SIGKILLs of the real kcm-rs binary, and with API faults at 10% of
//! kcm-rs's requests through the fault proxy (`kcm_e2e::faults`; stalls
//! held 5 s instead of `make chaos`'s 30 s, so the test stays within about
//! three minutes). Every invariant must hold and the Jobs must end as in
//! the calm run. `make chaos` runs 50 kills, 30 s stalls and a larger scale.
//!
//! The tests share one calm run and take turns (one workload at a time on
//! the machine's cores).

use std::time::{Duration, Instant};

use kcm_bench::chaos::{ChaosConfig, ChaosReport, compare, run};
use kcm_e2e::faults::FaultSettings;
use kcm_e2e::manifests as support;

/// The calm run, made by whichever test comes first; the lock also keeps
/// the tests from running their workloads at the same time.
static CALM: tokio::sync::Mutex<Option<ChaosReport>> = tokio::sync::Mutex::const_new(None);

fn config() -> ChaosConfig {
    ChaosConfig {
        seed: 20_261_201,
        kills: 5,
        scale: 8,
        timeout: Duration::from_secs(240),
        faults: None,
        keep_dir: None,
    }
}

async fn calm(slot: &mut Option<ChaosReport>) -> ChaosReport {
    if slot.is_none() {
        let bin = support::kcm_rs_binary();
        let r = run(&config(), &bin, 0).await.expect("calm run");
        eprintln!(
            "calm: {} pods, {} with DisruptionTarget, {} kcm-rs requests ({:.1}/pod), {:?}",
            r.pods,
            r.evicted,
            r.requests,
            r.requests_per_pod(),
            r.elapsed
        );
        assert!(r.violations.is_empty(), "calm run: {:#?}", r.violations);
        assert!(
            r.exits.is_empty(),
            "calm run: kcm-rs exited: {:#?}",
            r.exits
        );
        assert_eq!(r.faults_total(), 0);
        // The workload did what it is for: evictions, FailJob, per-index.
        assert!(
            r.evicted > 0 && r.disruption_deletes > 0,
            "no disruption happened"
        );
        assert!(
            r.ends
                .values()
                .any(|e| e.condition.contains("PodFailurePolicy"))
        );
        assert!(r.ends.values().any(|e| e.failed_indexes.is_some()));
        *slot = Some(r);
    }
    slot.clone().expect("calm run made")
}

fn assert_like_calm(what: &str, r: &ChaosReport, calm: &ChaosReport) {
    assert!(
        r.violations.is_empty(),
        "{what}: {:#?}\nlogs: {:?}",
        r.violations,
        r.kept
    );
    let diff = compare(r, calm);
    assert!(
        diff.is_empty(),
        "{what}: {diff:#?}\ncalm: {:#?}\n{what}: {:#?}\nlogs: {:?}",
        calm.ends,
        r.ends,
        r.kept
    );
}

#[tokio::test]
async fn five_sigkills_lose_and_double_count_nothing() {
    let mut slot = CALM.lock().await;
    let calm = calm(&mut slot).await;
    let bin = support::kcm_rs_binary();
    let cfg = config();
    let wild = run(&cfg, &bin, cfg.kills).await.expect("run with kills");
    eprintln!(
        "with {} kills: {} pods, {} with DisruptionTarget, {} kcm-rs requests ({:.1}/pod), {:?}",
        wild.kills,
        wild.pods,
        wild.evicted,
        wild.requests,
        wild.requests_per_pod(),
        wild.elapsed
    );
    assert_eq!(wild.kills, 5);
    assert_like_calm("with kills", &wild, &calm);
}

#[tokio::test]
async fn api_faults_at_ten_percent_lose_and_double_count_nothing() {
    let mut slot = CALM.lock().await;
    let calm = calm(&mut slot).await;
    let bin = support::kcm_rs_binary();
    let cfg = ChaosConfig {
        faults: Some(FaultSettings {
            seed: 20_261_201,
            rate: 0.10,
            // Watches are few (one per informer): half of them faulted, so
            // cuts and 410s happen within the short run.
            watch_rate: Some(0.5),
            stall: Duration::from_secs(5),
            ..FaultSettings::default()
        }),
        ..config()
    };
    let began = Instant::now();
    let r = run(&cfg, &bin, 0).await.expect("run with faults");
    eprintln!(
        "with faults: {} pods, {} kcm-rs requests ({} watches, {} of them faulted; {:.1}/pod; \
         calm {:.1}/pod), faults: {}, kcm-rs exits on its own: {:?}, {:?}",
        r.pods,
        r.requests,
        r.watch_requests,
        r.faulted_watches,
        r.requests_per_pod(),
        calm.requests_per_pod(),
        r.fault_summary,
        r.exits,
        began.elapsed()
    );
    assert!(
        r.faults_total() * 20 >= r.requests,
        "about 10% of {} requests faulted, got {}",
        r.requests,
        r.faults_total()
    );
    assert!(r.faults_after_write > 0, "no error after an applied write");
    // Some watch met a fault (a cut or 410 in most runs; with about 20
    // watches at 50%, not in every one, so any fault counts here).
    let watch_faults = r.faulted_watches;
    assert!(watch_faults > 0, "no watch got a fault");
    assert_like_calm("with faults", &r, &calm);
    // Faults cost retries and relists, within bounds.
    assert!(
        r.requests_per_pod() <= 3.0 * calm.requests_per_pod(),
        "{:.1} requests per pod with faults, {:.1} without",
        r.requests_per_pod(),
        calm.requests_per_pod()
    );
}

/// The proxy itself: forwards as the admin user, streams a watch, injects
/// a fault at rate 1, and a cut drops open streams and holds new requests
/// until it ends.
#[tokio::test]
async fn fault_proxy_forwards_streams_faults_and_cuts() {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kcm_e2e::faults::{Fault, FaultProxy};
    use kube::api::{Api, Patch, PatchParams, PostParams, WatchEvent, WatchParams};

    let cp = kcm_e2e::ControlPlane::start().expect("control plane");
    let admin = cp.client().await.expect("admin client");
    let proxy = FaultProxy::start(&cp, FaultSettings::none())
        .await
        .expect("proxy");
    let client = kcm_e2e::control_plane::client_from_kubeconfig(proxy.kubeconfig())
        .await
        .expect("client through the proxy");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let direct: Api<ConfigMap> = Api::namespaced(admin, "default");
    cms.list(&Default::default())
        .await
        .expect("list through the proxy");
    // A watch streams events as they happen.
    let mut watch = cms
        .watch(&WatchParams::default().timeout(60), "0")
        .await
        .expect("watch")
        .boxed();
    let cm = |name: &str| ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    direct
        .create(&PostParams::default(), &cm("streamed"))
        .await
        .expect("create");
    let seen = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(ev) = watch.next().await {
            if let Ok(WatchEvent::Added(c)) = ev
                && c.metadata.name.as_deref() == Some("streamed")
            {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(seen, Ok(true), "the watch event came through");
    // Every write gets a fault at rate 1; the client sees a Status.
    proxy.set_rate(1.0);
    proxy.set_stall(Duration::from_millis(10));
    let p = serde_json::json!({"data": {"k": "v"}});
    let mut errors = 0;
    for _ in 0..20 {
        match cms
            .patch("streamed", &PatchParams::default(), &Patch::Merge(&p))
            .await
        {
            Err(kube::Error::Api(s)) => {
                assert!([404, 409, 429, 500, 503].contains(&s.code), "{s:?}");
                errors += 1;
            }
            Ok(_) => {} // a stall
            Err(e) => panic!("{e}"),
        }
    }
    assert!(errors > 10, "{errors} errors of 20 at rate 1");
    proxy.set_rate(0.0);
    // A cut drops the open watch and holds new requests.
    proxy.cut(true);
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(ev) = watch.next().await {
            if ev.is_err() {
                break;
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the watch ended at the cut");
    let held = tokio::time::timeout(Duration::from_secs(2), cms.get("streamed")).await;
    assert!(held.is_err(), "a request during the cut is held: {held:?}");
    proxy.cut(false);
    cms.get("streamed").await.expect("get after the cut");
    let records = proxy.records();
    assert!(records.iter().any(|r| r.watch && !r.completed));
    let faulted: Vec<_> = records.iter().filter(|r| r.fault.is_some()).collect();
    assert!(faulted.iter().all(|r| r.method == "PATCH"));
    // Errors after forwarding reached the server; before, never.
    for r in &faulted {
        let error = r.fault.and_then(Fault::code).is_some();
        assert_eq!(r.reached_server(), !error || r.after, "{r:?}");
        assert_eq!(r.sent, r.fault.and_then(Fault::code).or(r.status), "{r:?}");
    }
    let held = records
        .iter()
        .filter(|r| r.method == "GET" && !r.watch && r.path.contains("/streamed"))
        .count();
    assert_eq!(
        held, 1,
        "the request held during the cut never reached the proxy's handler"
    );
    eprintln!(
        "{} requests, faults {}",
        records.len(),
        kcm_e2e::faults::summary(&records)
    );
}

/// A kcm-rs job-controller through a fault proxy, its log in `log`.
fn job_controller_via(
    proxy: &kcm_e2e::faults::FaultProxy,
    log: &std::path::Path,
) -> std::process::Child {
    let args = [
        "--controllers=job-controller",
        "--leader-elect=false",
        "--secure-port=0",
    ];
    support::spawn_kcm_rs(proxy.kubeconfig(), &args, log)
}

/// Runs an Indexed Job of three pods whose success policy is index 0: the
/// test plays the kubelet, finishing index 0's pod; with `fault`, the next
/// status write of the Job after that fails (500, not applied). Returns
/// the terminal condition (`type reason`) and the counters.
async fn success_policy_end(
    client: &kube::Client,
    ns: &str,
    name: &str,
    fault: Option<&kcm_e2e::faults::FaultProxy>,
) -> (String, i32, i32) {
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::Pod;
    use kcm_e2e::faults::{Fault, Script, When};
    use kcm_e2e::wait::{wait_for, wait_for_list};
    use kube::api::{Api, ListParams, PostParams};

    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let job: Job = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"completions": 3, "parallelism": 3, "completionMode": "Indexed",
            "backoffLimit": 0,
            "successPolicy": {"rules": [{"succeededIndexes": "0"}]},
            "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox"}]}}}
    }))
    .expect("job");
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("create");
    let wait = Duration::from_secs(60);
    wait_for(&jobs, name, wait, "3 active", |j| {
        j.status.as_ref().and_then(|s| s.active) == Some(3)
    })
    .await
    .expect("3 active");
    if let Some(proxy) = fault {
        proxy.script(Script {
            method: "PUT".into(),
            path_contains: format!("/jobs/{name}/status"),
            fault: Fault::InternalError,
            when: When::Before,
            times: 1,
        });
    }
    let sel = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={name}"));
    let listed = wait_for_list(&pods, &sel, wait, "3 pods", |p| p.len() == 3)
        .await
        .expect("3 pods");
    let first = listed
        .iter()
        .find(|p| {
            p.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("batch.kubernetes.io/job-completion-index"))
                .is_some_and(|i| i == "0")
        })
        .and_then(|p| p.metadata.name.clone())
        .expect("index 0's pod");
    kcm_e2e::kubelet::finish_pod(&pods, &first, 0)
        .await
        .expect("index 0 succeeds");
    let done = wait_for(&jobs, name, wait, "a terminal condition", |j| {
        j.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.status == "True" && (c.type_ == "Complete" || c.type_ == "Failed"))
            })
    })
    .await
    .expect("the Job ends");
    if let Some(proxy) = fault {
        assert_eq!(proxy.scripts_left(), 0, "the status write was faulted");
    }
    let s = done.status.unwrap_or_default();
    let end = s
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.status == "True" && (c.type_ == "Complete" || c.type_ == "Failed"))
        .map(|c| format!("{} {}", c.type_, c.reason.unwrap_or_default()))
        .unwrap_or_default();
    (end, s.succeeded.unwrap_or(0), s.failed.unwrap_or(0))
}

/// Found by the fault runs of `make chaos` (success-policy Job: Failed
/// BackoffLimitExceeded instead of Complete SuccessPolicy, with and without
/// kills). When a Job's success policy is met, upstream `syncJob` deletes
/// the lingering pods first and writes the interim `SuccessCriteriaMet`
/// condition with the next status flush. If that write fails (any error:
/// 5xx, 409, 429, a timeout, or the process dying), the next sync finds no
/// `SuccessCriteriaMet`, counts the deleted pods as failed (deletionTimestamp,
/// not Succeeded), checks the backoff limit before the success policy, and
/// ends the Job Failed. kcm-rs writes the condition before the deletes
/// (`sync::tracking::record_success_before_deletes`, a listed deviation).
/// Here: backoffLimit 0, two lingering pods, one failed status write;
/// upstream's result is printed, kcm-rs's asserted.
#[tokio::test]
async fn success_policy_survives_a_failed_status_write() {
    use kcm_e2e::faults::{FaultProxy, summary};

    let cp = kcm_e2e::ControlPlane::start().expect("control plane");
    let client = cp.client().await.expect("client");
    let ns = kcm_e2e::TestNamespace::create(&client, "success-policy")
        .await
        .expect("namespace");
    let proxy = FaultProxy::start(&cp, FaultSettings::none())
        .await
        .expect("proxy");
    // Upstream KCM's job-controller first, through the same proxy, for
    // the record (printed, not asserted).
    let upstream = {
        let kc = format!("--kubeconfig={}", proxy.kubeconfig().display());
        let _kcm =
            kcm_e2e::UpstreamKcm::start(&cp, &["job-controller"], &[&kc]).expect("upstream KCM");
        let ns = kcm_e2e::TestNamespace::create(&client, "upstream-sp")
            .await
            .expect("namespace");
        (
            success_policy_end(&client, &ns.name, "calm", None).await,
            success_policy_end(&client, &ns.name, "faulted", Some(&proxy)).await,
        )
    };
    let log = cp.dir().join("kcm-rs.log");
    let mut kcm = job_controller_via(&proxy, &log);
    let control = success_policy_end(&client, &ns.name, "calm", None).await;
    let faulted = success_policy_end(&client, &ns.name, "faulted", Some(&proxy)).await;
    let _ = kcm.kill();
    let _ = kcm.wait();
    eprintln!(
        "upstream KCM: without a fault {:?}, with one failed status write {:?}\n\
         kcm-rs: without a fault {control:?}, with one failed status write {faulted:?}\n\
         faults: {}",
        upstream.0,
        upstream.1,
        summary(&proxy.records())
    );
    assert_eq!(control.0, "Complete SuccessPolicy", "{control:?}");
    assert_eq!(
        faulted.0,
        "Complete SuccessPolicy",
        "{faulted:?}\nkcm-rs log:\n{}",
        kcm_e2e::control_plane::tail(&log, 40)
    );
}
