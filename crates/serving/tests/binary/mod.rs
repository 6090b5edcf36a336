//! Helpers of the tests that run the kcm-rs binary's HTTPS endpoints
//! against a real API server.

#![allow(dead_code)]

pub mod flood;
pub mod tenant;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kcm_e2e::ControlPlane;
use kcm_e2e::https::{Credential, get_as};
use kcm_e2e::upstream::UpstreamKcm;
use kube::Api;
use kube::api::{PatchParams, PostParams};
use serde_json::json;

/// The kcm-rs binary of this profile, built if needed.
pub fn kcm_rs_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("KCM_RS_BIN").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    // This test runs as target/<profile>/deps/<name>-<hash>.
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe.parent().and_then(Path::parent).expect("profile");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "-p", "kcm-rs", "--bin", "kcm-rs"]);
    if profile_dir.ends_with("release") {
        cmd.arg("--release");
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    assert!(cmd.current_dir(root).status().expect("cargo").success());
    profile_dir.join("kcm-rs")
}

/// kcm-rs, killed on drop (the e2e crate's handle).
pub use kcm_e2e::manifests::KcmRs as Kcm;

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// kcm-rs against `cp` with delegated authentication and authorization as
/// the admin, `/metrics` not always-allowed, plus `args`; ready. A port
/// taken between picking and binding is picked again.
pub async fn start(cp: &ControlPlane, name: &str, args: &[String]) -> Kcm {
    for _ in 0..3 {
        if let Some(kcm) = try_start(cp, name, args).await {
            return kcm;
        }
    }
    panic!("kcm-rs did not start");
}

async fn try_start(cp: &ControlPlane, name: &str, args: &[String]) -> Option<Kcm> {
    let port = free_port();
    let log = cp.dir().join(format!("kcm-rs-{name}.log"));
    let out = std::fs::File::create(&log).expect("log");
    let kc = cp.kubeconfig().display().to_string();
    let child = Command::new(kcm_rs_binary())
        .arg(format!("--kubeconfig={kc}"))
        .arg(format!("--authentication-kubeconfig={kc}"))
        .arg(format!("--authorization-kubeconfig={kc}"))
        .args(["--leader-elect=false", "--bind-address=127.0.0.1"])
        .arg(format!("--secure-port={port}"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("log"))
        .stderr(out)
        .spawn()
        .expect("spawn kcm-rs");
    let mut kcm = Kcm { child, port, log };
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok((200, _)) = get_as(port, "/readyz", Credential::None).await {
            return Some(kcm);
        }
        if let Ok(Some(_)) = kcm.child.try_wait() {
            let tail = kcm.log_tail();
            assert!(
                tail.contains("Address already in use"),
                "kcm-rs exited:\n{tail}"
            );
            return None;
        }
        assert!(
            Instant::now() < end,
            "kcm-rs not ready:\n{}",
            kcm.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Lets `subject` (a JSON RBAC subject) GET /metrics.
pub async fn grant_metrics(admin: &kube::Client, name: &str, subject: serde_json::Value) {
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let role = json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": { "name": name },
        "rules": [{ "nonResourceURLs": ["/metrics"], "verbs": ["get"] }] });
    let pp = PatchParams::apply("kcm-serving-test").force();
    roles
        .patch(name, &pp, &kube::api::Patch::Apply(role))
        .await
        .expect("role");
    let bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
    let binding = json!({ "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding", "metadata": { "name": name },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name },
        "subjects": [subject] });
    bindings
        .patch(name, &pp, &kube::api::Patch::Apply(binding))
        .await
        .expect("binding");
}

/// A ServiceAccount `default/<name>` allowed to GET /metrics, and a token
/// for it.
pub async fn scraper_token(admin: &kube::Client, name: &str) -> String {
    let subject = json!({ "kind": "ServiceAccount", "name": name, "namespace": "default" });
    let token = service_account_token(admin, "default", name).await;
    grant_metrics(admin, name, subject).await;
    token
}

/// Sum of every sample of `family` in a Prometheus text exposition.
pub fn sum(metrics: &str, family: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| {
            l.strip_prefix(family)
                .is_some_and(|r| r.starts_with('{') || r.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `GET path` with `cred` until `done(code)`, at most `within`.
pub async fn until(
    port: u16,
    path: &str,
    cred: Credential<'_>,
    within: Duration,
    done: impl Fn(u16) -> bool,
) -> u16 {
    let end = Instant::now() + within;
    loop {
        let code = get_as(port, path, cred).await.map(|(c, _)| c).unwrap_or(0);
        if done(code) || Instant::now() > end {
            return code;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Upstream KCM (the API server's version) with its secure port on
/// 127.0.0.1 and delegated authentication and authorization, ready.
pub async fn upstream(cp: &kcm_e2e::ControlPlane) -> (UpstreamKcm, u16) {
    let port = free_port();
    let kc = cp.kubeconfig().display().to_string();
    let flags = [
        format!("--secure-port={port}"),
        "--bind-address=127.0.0.1".to_string(),
        format!("--authentication-kubeconfig={kc}"),
        format!("--authorization-kubeconfig={kc}"),
    ];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let kcm = UpstreamKcm::start(cp, &["job-controller"], &flags).expect("upstream KCM");
    let code = until(
        port,
        "/healthz",
        Credential::None,
        Duration::from_secs(60),
        |c| c == 200,
    )
    .await;
    assert_eq!(
        code,
        200,
        "KCM not serving:\n{}",
        kcm_e2e::control_plane::tail(kcm.log(), 30)
    );
    (kcm, port)
}

/// A ServiceAccount `<namespace>/<name>` (created if missing) and a token
/// for it, valid an hour.
pub async fn service_account_token(admin: &kube::Client, namespace: &str, name: &str) -> String {
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), namespace);
    let sa: ServiceAccount =
        serde_json::from_value(json!({ "metadata": { "name": name } })).expect("sa");
    let _ = sas.create(&PostParams::default(), &sa).await;
    let req: TokenRequest =
        serde_json::from_value(json!({ "spec": { "audiences": [], "expirationSeconds": 3600 } }))
            .expect("token request");
    let tr: TokenRequest = sas
        .create_subresource("token", name, &PostParams::default(), &req)
        .await
        .expect("token");
    tr.status.and_then(|s| s.token).expect("token")
}
