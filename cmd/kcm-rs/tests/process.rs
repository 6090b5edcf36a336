//! The kcm-rs process against the real API server: bad input, leader
//! election handover, and the HTTP endpoints.

use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kcm_e2e::{TestNamespace, shared};
use kube::Api;

const BIN: &str = env!("CARGO_BIN_EXE_kcm-rs");

fn run_to_end(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run kcm-rs")
}

fn assert_user_error(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "exit code; stderr:\n{err}");
    assert!(err.contains(needle), "stderr lacks {needle:?}:\n{err}");
    assert!(!err.contains("panicked"), "no panic:\n{err}");
    assert!(!err.contains("stack backtrace"), "no stack trace:\n{err}");
}

/// Transient failures at start for the whole retry bound: exit 1, one line.
fn assert_gave_up(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "exit code; stderr:\n{err}");
    assert!(err.contains(needle), "stderr lacks {needle:?}:\n{err}");
    assert!(err.contains("gave up after 15s"), "bounded retries:\n{err}");
    assert!(!err.contains("panicked"), "no panic:\n{err}");
}

#[test]
fn bad_input_is_a_clear_error_with_exit_code_2() {
    let kc = shared().kubeconfig().display().to_string();
    let out = run_to_end(&["--kubeconfig=/nonexistent/kubeconfig", "--secure-port=0"]);
    assert_user_error(&out, "reading kubeconfig /nonexistent/kubeconfig");

    let out = run_to_end(&[
        &format!("--kubeconfig={kc}"),
        "--controllers=*,deployment-controller",
    ]);
    assert_user_error(&out, "unknown controller \"deployment-controller\"");

    let out = run_to_end(&[
        &format!("--kubeconfig={kc}"),
        "--feature-gates=NoSuchGate=true",
    ]);
    assert_user_error(&out, "NoSuchGate");

    let out = run_to_end(&[
        &format!("--kubeconfig={kc}"),
        "--feature-gates=JobPodFailurePolicy=maybe",
    ]);
    assert_eq!(out.status.code(), Some(2));

    // A port nobody listens on: transient, retried with back-off for a
    // bounded time, then exit 1 (not the user's error), not retried forever.
    let free = TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let out = run_to_end(&[
        &format!("--kubeconfig={kc}"),
        &format!("--master=https://127.0.0.1:{free}"),
        "--secure-port=0",
    ]);
    assert_gave_up(&out, "asking the API server at https://127.0.0.1");

    let garbage = tempfile_with("this is: [not a kubeconfig");
    let out = run_to_end(&[
        &format!("--kubeconfig={}", garbage.display()),
        "--secure-port=0",
    ]);
    assert_user_error(&out, "kubeconfig");
}

/// A request-shape stand-in for an API server that reports `git_version`
/// on `/version` (the only request kcm-rs makes before refusing it).
fn version_server(git_version: &'static str) -> u16 {
    use std::io::{Read, Write};
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let body = format!(
                r#"{{"major":"1","minor":"38","gitVersion":"{git_version}","gitCommit":"","gitTreeState":"clean","buildDate":"","goVersion":"","compiler":"gc","platform":"linux/amd64"}}"#
            );
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

#[test]
fn versions_outside_1_34_to_1_37_are_refused_naming_the_override() {
    let kc = shared().kubeconfig().display().to_string();
    let out = run_to_end(&[
        &format!("--kubeconfig={kc}"),
        "--secure-port=0",
        "--emulated-version=1.40",
    ]);
    assert_user_error(
        &out,
        "--emulated-version=1.40: Kubernetes 1.40 is not supported",
    );
    let out = run_to_end(&[&format!("--kubeconfig={kc}"), "--emulated-version=soon"]);
    assert_user_error(&out, "cannot read a Kubernetes version");

    for (server, says) in [
        ("v1.39.0", "Kubernetes 1.39 is not supported"),
        ("v1.33.7", "Kubernetes 1.33 is not supported"),
        ("not-a-version", "cannot read a Kubernetes version"),
    ] {
        let port = version_server(server);
        let out = run_to_end(&[
            &format!("--kubeconfig={kc}"),
            &format!("--master=http://127.0.0.1:{port}"),
            "--secure-port=0",
        ]);
        assert_user_error(&out, says);
        assert_user_error(&out, "set --emulated-version=1.N");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            err.lines().filter(|l| l.starts_with("error:")).count(),
            1,
            "one error line:\n{err}"
        );
    }
}

/// Serving and identity flags: one clear line and exit 2 at start.
#[test]
fn bad_security_input_is_a_clear_error_with_exit_code_2() {
    let kc = format!("--kubeconfig={}", shared().kubeconfig().display());
    let port = format!("--secure-port={}", free_port());
    let local = "--bind-address=127.0.0.1";
    let out = run_to_end(&[
        &kc,
        local,
        &port,
        "--tls-cert-file=/nonexistent.crt",
        "--tls-private-key-file=/nonexistent.key",
    ]);
    assert_user_error(&out, "reading --tls-cert-file /nonexistent.crt");
    let out = run_to_end(&[&kc, local, &port, "--tls-cert-file=/nonexistent.crt"]);
    assert_user_error(
        &out,
        "--tls-cert-file and --tls-private-key-file go together",
    );
    let garbage = tempfile_with("not a certificate");
    let ca = format!("--client-ca-file={}", garbage.display());
    let out = run_to_end(&[&kc, local, &port, &ca]);
    assert_user_error(&out, "--client-ca-file");
    // An authentication kubeconfig whose server does not answer.
    let free = free_port();
    let unreachable = tempfile_with(&format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{free}\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: x\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n"
    ));
    let authn = format!("--authentication-kubeconfig={}", unreachable.display());
    let out = run_to_end(&[&kc, local, &port, &authn]);
    assert_gave_up(
        &out,
        "--authentication-kubeconfig: asking the API server at https://127.0.0.1",
    );
    // No ServiceAccount kube-system/kcm-rs-job-controller on this control
    // plane: refused before the Lease is sought, so no Lease is ever taken.
    let lease = format!("tokens-first-{}", std::process::id());
    let out = run_to_end(&[
        &kc,
        "--secure-port=0",
        "--leader-elect-resource-namespace=default",
        &format!("--leader-elect-resource-name={lease}"),
        "--controllers=job-controller",
        "--use-service-account-credentials",
    ]);
    assert_user_error(
        &out,
        "TokenRequest for ServiceAccount kube-system/kcm-rs-job-controller refused",
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stderr)
            .matches("error:")
            .count(),
        1
    );
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let leases: Api<Lease> =
        Api::namespaced(rt.block_on(shared().client()).expect("client"), "default");
    let got = rt.block_on(leases.get_opt(&lease)).expect("get lease");
    assert!(
        got.is_none(),
        "the Lease was sought before the tokens: {got:?}"
    );
}

/// The controllers' accounts: an empty prefix in kube-system (KCM's own
/// accounts, which kube-apiserver binds to its broad bootstrap roles) is
/// refused before anything is asked of the API server, unless opted in; the
/// namespace follows POD_NAMESPACE (the Deployment's downward API), then
/// the flag.
#[test]
fn the_accounts_namespace_follows_the_pod_and_kcm_names_need_an_opt_in() {
    let kc = format!("--kubeconfig={}", shared().kubeconfig().display());
    let run = |extra: &[&str], pod_ns: Option<&str>| {
        let mut cmd = Command::new(BIN);
        cmd.args([&kc, "--secure-port=0", "--leader-elect=false"])
            .args([
                "--controllers=job-controller",
                "--use-service-account-credentials",
            ])
            .args(extra)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("POD_NAME")
            .env_remove("POD_UID")
            .env_remove("POD_NAMESPACE")
            .stdin(Stdio::null());
        if let Some(ns) = pod_ns {
            cmd.env("POD_NAMESPACE", ns);
        }
        cmd.output().expect("run kcm-rs")
    };
    let empty = "--controller-service-account-prefix=";
    let out = run(&[empty], None);
    assert_user_error(&out, "--controller-service-account-prefix is empty");
    assert_user_error(&out, "--allow-kcm-service-accounts");
    let out = run(&[empty], Some("kube-system"));
    assert_user_error(&out, "--controller-service-account-prefix is empty");
    // Opted in, or in another namespace: the check passes, and the
    // TokenRequest is what fails (no such account on this control plane).
    let out = run(&[empty, "--allow-kcm-service-accounts"], None);
    assert_user_error(
        &out,
        "TokenRequest for ServiceAccount kube-system/job-controller refused",
    );
    let out = run(&[empty], Some("kcm-rs-nowhere"));
    assert_user_error(
        &out,
        "TokenRequest for ServiceAccount kcm-rs-nowhere/job-controller refused",
    );
    let out = run(&[], Some("kcm-rs-nowhere"));
    assert_user_error(
        &out,
        "TokenRequest for ServiceAccount kcm-rs-nowhere/kcm-rs-job-controller refused",
    );
    let flag = "--controller-service-account-namespace=elsewhere";
    let out = run(&[flag], Some("kcm-rs-nowhere"));
    assert_user_error(
        &out,
        "TokenRequest for ServiceAccount elsewhere/kcm-rs-job-controller refused",
    );
}

fn tempfile_with(content: &str) -> std::path::PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("kcm-rs-bad-{}-{n}.yaml", std::process::id()));
    std::fs::write(&path, content).expect("write");
    path
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

struct Proc(Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(lease: &str, port: u16, extra: &[&str]) -> Proc {
    let log =
        std::fs::File::create(std::env::temp_dir().join(format!("kcm-rs-{lease}-{port}.log")))
            .expect("log");
    Proc(
        Command::new(BIN)
            .arg(format!("--kubeconfig={}", shared().kubeconfig().display()))
            .arg(format!("--leader-elect-resource-name={lease}"))
            .arg("--leader-elect-resource-namespace=default")
            .arg("--leader-elect-lease-duration=4s")
            .arg("--leader-elect-renew-deadline=3s")
            .arg("--leader-elect-retry-period=500ms")
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={port}"))
            .arg(kcm_e2e::https::OPEN_PATHS)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn kcm-rs"),
    )
}

async fn holder(leases: &Api<Lease>, name: &str) -> Option<String> {
    leases
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
        .filter(|h| !h.is_empty())
}

/// The pid a holder identity names (`host_<pid as 8 hex digits><nanos>`).
fn holder_pid(identity: &str) -> Option<u32> {
    let tail = identity.rsplit('_').next()?;
    u32::from_str_radix(tail.get(..8)?, 16).ok()
}

async fn wait_holder(
    leases: &Api<Lease>,
    name: &str,
    not: Option<&str>,
    timeout: Duration,
) -> (String, Duration) {
    let start = Instant::now();
    loop {
        if let Some(h) = holder(leases, name).await
            && Some(h.as_str()) != not
        {
            return (h, start.elapsed());
        }
        assert!(
            start.elapsed() < timeout,
            "no new holder of {name} within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `GET path` over plain HTTP on a new connection: the status (0: none).
async fn plain_get(port: u16, path: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return 0;
    };
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut out = String::new();
    if s.write_all(req.as_bytes()).await.is_err() || s.read_to_string(&mut out).await.is_err() {
        return 0;
    }
    out.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

async fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    kcm_e2e::https::get(port, path).await
}

async fn wait_http(port: u16, path: &str, code: u16) -> String {
    let start = Instant::now();
    loop {
        if let Ok(Ok((c, body))) =
            tokio::time::timeout(Duration::from_secs(2), http_get(port, path)).await
            && c == code
        {
            return body;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{path} never returned {code}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn one_leader_and_handover_when_the_leader_dies() {
    let client = shared().client().await.expect("client");
    let ns = TestNamespace::create(&client, "lease").await.expect("ns");
    let lease = ns.name.clone();
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let (pa, pb) = (free_port(), free_port());
    let a = start(&lease, pa, &[]);
    let b = start(&lease, pb, &[]);
    let (first, took) = wait_holder(&leases, &lease, None, Duration::from_secs(20)).await;
    eprintln!("first leader {first} after {took:?}");
    let first_pid = holder_pid(&first).expect("pid in identity");
    assert!(
        first_pid == a.0.id() || first_pid == b.0.id(),
        "{first} is one of ours"
    );
    // Exactly one leads: the standby reports 0, the leader 1.
    let (lp, sp) = if first_pid == a.0.id() {
        (pa, pb)
    } else {
        (pb, pa)
    };
    let name = format!("leader_election_master_status{{name=\"{lease}\"}}");
    let leader_metrics = wait_http(lp, "/metrics", 200).await;
    assert!(
        leader_metrics.contains(&format!("{name} 1")),
        "{leader_metrics}"
    );
    let standby_metrics = wait_http(sp, "/metrics", 200).await;
    assert!(
        standby_metrics.contains(&format!("{name} 0")),
        "{standby_metrics}"
    );
    let readyz = wait_http(sp, "/readyz", 200).await;
    assert!(readyz.contains("standby"), "{readyz}");

    // Kill the leader without a chance to release: the standby takes over
    // once the lease has not been renewed for a lease duration (4 s).
    let (mut leader, other) = if first_pid == a.0.id() {
        (a, b)
    } else {
        (b, a)
    };
    let killed_at = Instant::now();
    let _ = leader.0.kill();
    let _ = leader.0.wait();
    let (second, _) = wait_holder(&leases, &lease, Some(&first), Duration::from_secs(15)).await;
    let handover = killed_at.elapsed();
    eprintln!("handover after SIGKILL: {handover:?}");
    assert_eq!(holder_pid(&second), Some(other.0.id()));
    // Lease duration 4 s, plus at most one jittered retry (≤ 1.1 s) and slack.
    assert!(
        handover < Duration::from_secs(7),
        "handover took {handover:?}"
    );
    drop(other);
}

#[tokio::test]
async fn sigterm_releases_the_lease_for_a_fast_handover() {
    let client = shared().client().await.expect("client");
    let ns = TestNamespace::create(&client, "release").await.expect("ns");
    let lease = ns.name.clone();
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let a = start(&lease, free_port(), &[]);
    let (first, _) = wait_holder(&leases, &lease, None, Duration::from_secs(20)).await;
    assert_eq!(holder_pid(&first), Some(a.0.id()));
    let b = start(&lease, free_port(), &[]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let t = Instant::now();
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(a.0.id().to_string())
        .status()
        .expect("kill");
    assert!(status.success());
    let (second, _) = wait_holder(&leases, &lease, Some(&first), Duration::from_secs(10)).await;
    let handover = t.elapsed();
    eprintln!("handover after SIGTERM: {handover:?}");
    assert_eq!(holder_pid(&second), Some(b.0.id()));
    assert!(
        handover < Duration::from_secs(4),
        "released, not expired: {handover:?}"
    );
    let mut a = a;
    let code = a.0.wait().expect("wait").code();
    assert_eq!(code, Some(0), "graceful exit");
}

#[tokio::test]
async fn endpoints_serve_health_readiness_and_upstream_metric_families() {
    let client = shared().client().await.expect("client");
    let ns = TestNamespace::create(&client, "endpoints")
        .await
        .expect("ns");
    let port = free_port();
    let health_port = free_port();
    let _p = start(&ns.name, port, &[&format!("--health-port={health_port}")]);
    let health = wait_http(port, "/healthz?verbose", 200).await;
    assert!(health.contains("[+]ping ok"), "{health}");
    assert!(health.contains("[+]runtime ok"), "{health}");
    // The health port: the probes' paths alone, in plain HTTP.
    for (path, want) in [
        ("/livez", 200),
        ("/readyz", 200),
        ("/healthz", 200),
        ("/metrics", 404),
    ] {
        assert_eq!(plain_get(health_port, path).await, want, "{path}");
    }
    // A path the secure port does not serve: 404 before any review.
    assert_eq!(http_get(port, "/apis/anything").await.expect("get").0, 404);
    wait_http(port, "/readyz", 200).await;
    let health = wait_http(port, "/healthz?verbose", 200).await;
    assert!(
        health.contains("[+]pod-garbage-collector-controller ok"),
        "{health}"
    );
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    wait_holder(&leases, &ns.name, None, Duration::from_secs(20)).await;
    // Lease renewals go through the rate-limited client: give it one.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let metrics = wait_http(port, "/metrics", 200).await;
    for family in [
        "leader_election_master_status",
        "rest_client_requests_total",
        "rest_client_request_duration_seconds",
        "rest_client_rate_limiter_duration_seconds",
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "workqueue_depth",
        "workqueue_adds_total",
        "workqueue_queue_duration_seconds",
        "workqueue_work_duration_seconds",
        "workqueue_unfinished_work_seconds",
        "workqueue_longest_running_processor_seconds",
        "workqueue_retries_total",
    ] {
        assert!(
            metrics.contains(&format!("# TYPE {family} ")),
            "{family} missing:\n{metrics}"
        );
    }
    assert!(
        metrics.contains("rest_client_requests_total{code=\"200\",host=\"127.0.0.1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("workqueue_depth{name=\"orphaned_pods_nodes\"}"),
        "{metrics}"
    );
    let mut families: Vec<&str> = metrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    families.sort_unstable();
    eprintln!("metric families: {}", families.join(" "));
    let (code, _) = http_get(port, "/healthz/pod-garbage-collector-controller")
        .await
        .expect("get");
    assert_eq!(code, 200);
    let (code, _) = http_get(port, "/healthz/no-such-check").await.expect("get");
    assert_eq!(code, 404);
}

#[tokio::test]
async fn losing_the_lease_exits_non_zero() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    let client = shared().client().await.expect("client");
    let ns = TestNamespace::create(&client, "lost").await.expect("ns");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let port = free_port();
    let mut p = start(&ns.name, port, &[]);
    wait_holder(&leases, &ns.name, None, Duration::from_secs(20)).await;
    // Another candidate takes the lease over (as after a long partition).
    let mut lease = leases.get(&ns.name).await.expect("lease");
    if let Some(spec) = lease.spec.as_mut() {
        spec.holder_identity = Some("thief".into());
        spec.lease_duration_seconds = Some(60);
        spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
    }
    leases
        .replace(&ns.name, &Default::default(), &lease)
        .await
        .expect("steal");
    let start = Instant::now();
    let status = loop {
        if let Some(s) = p.0.try_wait().expect("wait") {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "kept running without the lease"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(status.code(), Some(1), "{status}");
    let log = std::fs::read_to_string(
        std::env::temp_dir().join(format!("kcm-rs-{}-{port}.log", ns.name)),
    )
    .unwrap_or_default();
    assert!(log.contains("leaderelection lost"), "{log}");
}
