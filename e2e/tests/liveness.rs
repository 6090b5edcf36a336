//! Liveness that can fail, on the real binary against a real API server:
//! pod creates in one namespace are held by a validating admission webhook
//! whose server accepts connections and never answers, so the Job
//! controller's sync of a Job there hangs in its pod create.
//! `/healthz/job-controller` then fails with the stuck sync as its reason
//! (the public `/healthz` withholds it, as KCM), the other controllers stay
//! healthy, and once the webhook is gone the sync finishes, the pod exists
//! and every check passes again. kcm-rs runs with a 5 s stall bound
//! (`--controller-stall-timeout`); the sync timeout keeps its 5 min default.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kcm_e2e::ControlPlane;
use kcm_e2e::https::{self, OPEN_PATHS};
use kcm_e2e::manifests as support;
use kcm_e2e::prometheus::free_port;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use parking_lot::Mutex;
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};

const NS: &str = "liveness";
const WEBHOOK: &str = "kcm-rs-liveness-hang";
const JOB: &str = "held";

/// kcm-rs, killed on drop.
struct Kcm {
    child: Child,
    log: std::path::PathBuf,
}

impl Drop for Kcm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Kcm {
    fn log_tail(&self) -> String {
        kcm_e2e::control_plane::tail(&self.log, 40)
    }
}

/// A "webhook" that accepts connections and never answers; dropping the
/// returned task's handle (after `abort`) and the held connections ends it.
struct SilentServer {
    port: u16,
    held: Arc<Mutex<Vec<TcpStream>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl SilentServer {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let held: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let h = Arc::clone(&held);
        let accept = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                h.lock().push(conn);
            }
        });
        SilentServer { port, held, accept }
    }

    fn connections(&self) -> usize {
        self.held.lock().len()
    }

    /// Stops listening and closes every held connection: the API server's
    /// calls fail at once, and the webhook's `Ignore` policy admits.
    fn stop(&self) {
        self.accept.abort();
        self.held.lock().clear();
    }
}

fn webhook(port: u16) -> ValidatingWebhookConfiguration {
    serde_json::from_value(json!({
        "metadata": { "name": WEBHOOK },
        "webhooks": [{
            "name": "hang.liveness.kcm-rs.io",
            "clientConfig": { "url": format!("https://127.0.0.1:{port}/hang") },
            "rules": [{ "operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                        "resources": ["pods"], "scope": "Namespaced" }],
            "namespaceSelector": { "matchLabels": { "kcm-rs.io/liveness": "hang" } },
            "failurePolicy": "Ignore",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 30,
        }],
    }))
    .expect("webhook")
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": { "containers": [{ "name": "c", "image": "busybox" }] },
    }))
    .expect("pod")
}

fn job() -> Job {
    serde_json::from_value(json!({
        "metadata": { "name": JOB },
        "spec": {
            "template": { "spec": { "restartPolicy": "Never",
                                    "containers": [{ "name": "c", "image": "busybox" }] } },
        },
    }))
    .expect("job")
}

fn start_kcm_rs(cp: &ControlPlane, port: u16) -> Kcm {
    let bin = support::kcm_rs_binary();
    let log = cp.dir().join("kcm-rs-liveness.log");
    let out = std::fs::File::create(&log).expect("log");
    let child = Command::new(bin)
        .arg(format!("--kubeconfig={}", cp.kubeconfig().display()))
        .args(["--leader-elect=false", "--bind-address=127.0.0.1"])
        .arg(format!("--secure-port={port}"))
        .arg(OPEN_PATHS)
        .arg("--controller-stall-timeout=5s")
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("log"))
        .stderr(out)
        .spawn()
        .expect("spawn kcm-rs");
    Kcm { child, log }
}

/// Polls `path` until `done(code, body)`, at most `within`; the last answer.
async fn poll(
    port: u16,
    path: &str,
    within: Duration,
    done: impl Fn(u16, &str) -> bool,
) -> Option<(u16, String)> {
    let deadline = Instant::now() + within;
    loop {
        if let Ok((code, body)) = https::get(port, path).await
            && done(code, &body)
        {
            return Some((code, body));
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_controller_whose_syncs_hang_turns_unhealthy_and_recovers() {
    let began = Instant::now();
    let cp = ControlPlane::start().expect("control plane");
    let admin = cp.client().await.expect("admin client");
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let ns = json!({ "metadata": { "name": NS, "labels": { "kcm-rs.io/liveness": "hang" } } });
    let ns: Namespace = serde_json::from_value(ns).expect("namespace");
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");

    // The webhook, in force once a dry-run pod create reaches its server.
    let server = SilentServer::start().await;
    let hooks: Api<ValidatingWebhookConfiguration> = Api::all(admin.clone());
    hooks
        .create(&PostParams::default(), &webhook(server.port))
        .await
        .expect("webhook configuration");
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.connections() == 0 {
        assert!(Instant::now() < deadline, "the webhook never took effect");
        let (pods, dry_run) = (pods.clone(), dry_run.clone());
        // Held for the webhook timeout once in force; not awaited.
        tokio::spawn(async move { pods.create(&dry_run, &pod("probe")).await });
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let port = free_port().expect("port");
    let kcm = start_kcm_rs(&cp, port);
    let up = poll(port, "/healthz?verbose", Duration::from_secs(30), |c, _| {
        c == 200
    })
    .await;
    let (_, body) = up.unwrap_or_else(|| panic!("kcm-rs not healthy:\n{}", kcm.log_tail()));
    for c in ["job-controller", "pod-garbage-collector-controller"] {
        assert!(body.contains(&format!("[+]{c} ok")), "{body}");
    }

    // The Job's first sync hangs in its pod create.
    let jobs: Api<Job> = Api::namespaced(admin.clone(), NS);
    jobs.create(&PostParams::default(), &job())
        .await
        .expect("job");
    let created = Instant::now();
    let failing = poll(
        port,
        "/healthz/job-controller",
        Duration::from_secs(25),
        |c, _| c == 500,
    )
    .await;
    let (_, reason) = failing.unwrap_or_else(|| panic!("never unhealthy:\n{}", kcm.log_tail()));
    eprintln!(
        "unhealthy {:.1} s after the Job was created: {}",
        created.elapsed().as_secs_f64(),
        reason.trim()
    );
    assert!(
        reason.starts_with("internal server error: queue \"job\": sync of \"liveness/held\""),
        "{reason}"
    );
    assert!(reason.contains("(stall bound 5s)"), "{reason}");
    let (code, all) = https::get(port, "/healthz?verbose").await.expect("healthz");
    assert_eq!(code, 500, "{all}");
    assert!(
        all.contains("[-]job-controller failed: reason withheld"),
        "{all}"
    );
    for c in [
        "pod-garbage-collector-controller",
        "taint-eviction-controller",
        "disruption-controller",
    ] {
        assert!(all.contains(&format!("[+]{c} ok")), "{all}");
    }

    // Without the webhook the create goes through, the sync finishes.
    hooks
        .delete(WEBHOOK, &DeleteParams::default())
        .await
        .expect("delete webhook");
    server.stop();
    let stopped = Instant::now();
    let healthy = poll(
        port,
        "/healthz/job-controller",
        Duration::from_secs(40),
        |c, _| c == 200,
    )
    .await;
    assert!(
        healthy.is_some(),
        "never healthy again:\n{}",
        kcm.log_tail()
    );
    eprintln!(
        "healthy again {:.1} s after the webhook went away",
        stopped.elapsed().as_secs_f64()
    );
    let (code, all) = https::get(port, "/healthz").await.expect("healthz");
    assert_eq!((code, all.as_str()), (200, "ok"));
    let list = ListParams::default().labels(&format!("job-name={JOB}"));
    let made = pods.list(&list).await.expect("pods").items;
    assert_eq!(made.len(), 1, "the Job's pod was created");

    let (_, metrics) = https::get(port, "/metrics").await.expect("metrics");
    for family in [
        "kcm_rs_controller_sync_panics_total",
        "kcm_rs_controller_sync_timeouts_total",
    ] {
        let series = format!("{family}{{controller=\"job-controller\"}} 0");
        assert!(metrics.contains(&series), "no {series} in /metrics");
    }
    eprintln!("done in {:.1} s", began.elapsed().as_secs_f64());
}
