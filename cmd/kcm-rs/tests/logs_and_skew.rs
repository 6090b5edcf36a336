//! The kcm-rs process's logs and version skew, against the real API server:
//! `--logging-format=json -v=4` writes klog's flat lines, and an API server
//! one minor newer than the newest kcm-rs knows is accepted with a warning
//! and `kcm_rs_version_skew`, two minors newer refused.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kcm_e2e::{ControlPlane, TestNamespace, shared};
use kcm_features::KubeVersion;
use kube::Api;
use kube::api::PostParams;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_kcm-rs");

struct Proc(Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(kubeconfig: &std::path::Path, extra: &[&str]) -> Proc {
    Proc(
        Command::new(BIN)
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg("--leader-elect=false")
            .arg("--secure-port=0")
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn kcm-rs"),
    )
}

/// SIGTERM, then every stderr line.
fn stop(mut p: Proc) -> Vec<String> {
    let pid = p.0.id().to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let mut text = String::new();
    if let Some(mut err) = p.0.stderr.take() {
        let _ = err.read_to_string(&mut text);
    }
    text.lines().map(str::to_string).collect()
}

fn job(name: &str) -> Job {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox"}]
        }}}
    }))
    .expect("job")
}

#[tokio::test(flavor = "multi_thread")]
async fn json_logs_at_v4_are_klogs_flat_lines() {
    let cp = shared();
    let client = cp.client().await.expect("client");
    let ns = TestNamespace::create(&client, "jsonlog").await.expect("ns");
    let p = spawn(
        cp.kubeconfig(),
        &[
            "--logging-format=json",
            "-v=4",
            "--controllers=job-controller,disruption-controller",
        ],
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    jobs.create(&PostParams::default(), &job("logged"))
        .await
        .expect("create job");
    // The disruption controller logs at debug inside its `pdb_sync` span.
    let pdb: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "logged"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "logged"}}}
    }))
    .expect("pdb");
    Api::<PodDisruptionBudget>::namespaced(client.clone(), &ns.name)
        .create(&PostParams::default(), &pdb)
        .await
        .expect("create pdb");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let lines = stop(p);
    assert!(lines.len() > 5, "too few lines: {lines:?}");
    let mut verbosities = std::collections::BTreeSet::new();
    let mut span_fields = 0;
    for line in &lines {
        let v: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        let o = v
            .as_object()
            .unwrap_or_else(|| panic!("not an object: {line}"));
        assert!(
            o["ts"].as_f64().is_some_and(|t| t > 1.7e12),
            "ts in ms: {line}"
        );
        assert!(o["msg"].is_string(), "msg: {line}");
        let caller = o["caller"].as_str().unwrap_or_default();
        assert!(
            caller
                .rsplit_once(':')
                .is_some_and(|(_, l)| l.parse::<u32>().is_ok()),
            "caller: {line}"
        );
        assert!(
            o.contains_key("v") != o.contains_key("err") || o.contains_key("v"),
            "{line}"
        );
        assert!(
            !o.contains_key("fields") && !o.contains_key("span") && !o.contains_key("spans"),
            "nested: {line}"
        );
        assert!(o.values().all(|x| !x.is_object()), "nested object: {line}");
        if let Some(level) = o.get("v").and_then(Value::as_u64) {
            verbosities.insert(level);
            // -v raises only kcm-rs's own crates: debug and trace lines are theirs.
            if level > 0 {
                assert!(
                    caller.starts_with("crates/") || caller.starts_with("cmd/"),
                    "dependency line at v={level}: {line}"
                );
            }
        }
        if o.contains_key("pdb") {
            span_fields += 1;
        }
    }
    eprintln!(
        "{} lines, v in {verbosities:?}; sample:\n{}",
        lines.len(),
        lines
            .iter()
            .find(|l| l.contains("\"pdb\""))
            .unwrap_or(&lines[0])
    );
    assert!(
        verbosities.contains(&0) && verbosities.iter().any(|v| *v >= 2),
        "{verbosities:?}"
    );
    assert!(
        span_fields > 0,
        "no span field (pdb) flattened:\n{}",
        lines.join("\n")
    );
}

/// Reads lines until one contains `needle` (or the process exits).
fn wait_line(
    lines: &mut impl Iterator<Item = String>,
    needle: &str,
    seen: &mut Vec<String>,
) -> bool {
    for l in lines.by_ref() {
        seen.push(l.clone());
        if l.contains(needle) {
            return true;
        }
    }
    false
}

#[tokio::test(flavor = "multi_thread")]
async fn an_api_server_one_minor_newer_is_accepted_as_kcms_skew() {
    let newest = KubeVersion::NEWEST.minor();
    let stamp = format!("v1.{}.0", newest + 1);
    let started = Instant::now();
    let cp = ControlPlane::start_stamped(&KubeVersion::NEWEST.to_string(), &stamp)
        .expect("stamped control plane");
    eprintln!(
        "control plane {} reporting {stamp} up in {:?}",
        KubeVersion::NEWEST,
        started.elapsed()
    );
    let client = cp.client().await.expect("client");
    let reported = client.apiserver_version().await.expect("version");
    assert_eq!(reported.git_version, stamp);

    let port = {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let mut p = Proc(
        Command::new(BIN)
            .arg(format!("--kubeconfig={}", cp.kubeconfig().display()))
            .args([
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                &format!("--secure-port={port}"),
            ])
            .arg(kcm_e2e::https::OPEN_PATHS)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn"),
    );
    let stderr = p.0.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stderr).lines().map_while(Result::ok);
        let mut seen = Vec::new();
        let ok = wait_line(&mut lines, "starting", &mut seen);
        let _ = tx.send((ok, seen));
        lines.for_each(drop);
    });
    let (ok, seen) = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("kcm-rs output");
    let text = seen.join("\n");
    eprintln!("kcm-rs against {stamp}:\n{text}");
    assert!(ok, "kcm-rs did not start its controllers:\n{text}");
    assert!(
        text.contains("WARN") && text.contains("one minor newer"),
        "warning:\n{text}"
    );
    assert!(
        text.contains(&format!("kcm_version=1.{newest}")),
        "behaves as the newest:\n{text}"
    );

    let metrics = wait_metric(port).await;
    let want = format!(
        "kcm_rs_version_skew{{behaves_as=\"1.{newest}\",server_version=\"1.{}\"}} 1",
        newest + 1
    );
    assert!(metrics.contains(&want), "no {want} in:\n{metrics}");
    eprintln!(
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("version_skew"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

async fn wait_metric(port: u16) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok((200, body)) = kcm_e2e::https::get(port, "/metrics").await {
            return body;
        }
        assert!(Instant::now() < deadline, "no /metrics on {port}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `/version` of a server two minors newer (the only request kcm-rs makes
/// before refusing it).
fn version_server(git_version: String) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let body = format!(r#"{{"major":"1","minor":"","gitVersion":"{git_version}"}}"#);
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
fn an_api_server_two_minors_newer_is_refused() {
    let two = KubeVersion::NEWEST.minor() + 2;
    let port = version_server(format!("v1.{two}.0"));
    let out = Command::new(BIN)
        .arg(format!("--kubeconfig={}", shared().kubeconfig().display()))
        .arg(format!("--master=http://127.0.0.1:{port}"))
        .arg("--secure-port=0")
        .stdin(Stdio::null())
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("Kubernetes 1.{two} is not supported")),
        "{err}"
    );
}
