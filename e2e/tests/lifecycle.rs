//! The harness itself: several control planes at once, nothing left behind
//! when they stop (dropped, or their parent gone), clear errors on bad input.

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kcm_e2e::{ControlPlane, binaries};

fn alive(pid: u32) -> bool {
    // A zombie still has a /proc entry; it is gone once its status says so.
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map(|s| {
            !s.lines()
                .any(|l| l.starts_with("State:") && l.contains("Z"))
        })
        .unwrap_or(false)
}

fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    f()
}

fn port_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

#[tokio::test]
async fn two_control_planes_run_side_by_side_and_leave_nothing() {
    let a = ControlPlane::start().expect("first");
    let b = ControlPlane::start().expect("second");
    assert_ne!(a.server(), b.server());
    eprintln!("started in {:?} and {:?}", a.started_in(), b.started_in());
    let ca = a.client().await.expect("client a");
    let cb = b.client().await.expect("client b");
    let ns = kcm_e2e::TestNamespace::create(&ca, "only-in-a")
        .await
        .expect("ns");
    let in_b = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(cb)
        .get_opt(&ns.name)
        .await
        .expect("get");
    assert!(in_b.is_none(), "the control planes share no state");

    let (pid, port, dir) = (a.pid(), a.port().expect("port"), a.dir().to_path_buf());
    drop(ca);
    drop(a);
    assert!(
        wait_until(Duration::from_secs(10), || !alive(pid)),
        "apiserver process gone"
    );
    assert!(
        wait_until(Duration::from_secs(10), || port_free(port)),
        "port {port} free"
    );
    assert!(!dir.exists(), "state directory removed");
}

/// The parent-died path: the kernel closes the child's stdin pipe when the
/// parent exits, however it exits; closing it here is the same event.
#[test]
fn apiserver_exits_when_its_parent_lets_go() {
    let bin = binaries::ensure_built()
        .expect("built")
        .join("kcm-e2e-apiserver");
    let dir = tempfile::tempdir().expect("tmp");
    let state = dir.path().join("state");
    let mut child = Command::new(bin)
        .arg(format!("--dir={}", state.display()))
        .arg("--exit-on-stdin-close")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut out = child.stdout.take().expect("stdout");
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while out.read(&mut byte).expect("read") == 1 && byte[0] != b'\n' {
        line.push(byte[0]);
    }
    let line = String::from_utf8(line).expect("utf8");
    let port: u16 = line
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("READY line: {line:?}"));
    assert!(!port_free(port), "serving");
    drop(child.stdin.take());
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "did not exit");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "{status}");
    assert!(port_free(port), "port released");
    assert!(!Path::new(&state).exists(), "state removed");
}

#[test]
fn a_port_in_use_is_one_clear_error() {
    let bin = binaries::ensure_built()
        .expect("built")
        .join("kcm-e2e-apiserver");
    let busy = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = busy.local_addr().expect("addr").port();
    let dir = tempfile::tempdir().expect("tmp");
    let out = Command::new(bin)
        .arg(format!("--dir={}", dir.path().join("s").display()))
        .arg(format!("--port={port}"))
        .stdin(Stdio::null())
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains(&format!("port {port} is in use")),
        "{err}"
    );
    assert!(!dir.path().join("s").exists(), "nothing left behind");
}

#[test]
fn an_api_server_that_never_gets_healthy_is_one_clear_error() {
    let bin = binaries::ensure_built()
        .expect("built")
        .join("kcm-e2e-apiserver");
    let dir = tempfile::tempdir().expect("tmp");
    let state = dir.path().join("s");
    let out = Command::new(bin)
        .arg(format!("--dir={}", state.display()))
        .arg("--ready-timeout=1ms")
        .stdin(Stdio::null())
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("did not become healthy"), "{err}");
    assert!(!state.exists(), "nothing left behind");
}

#[test]
fn a_missing_go_toolchain_is_one_clear_error() {
    let script = binaries::repo_root()
        .join("e2e")
        .join("harness")
        .join("build.sh");
    let out_dir = tempfile::tempdir().expect("tmp");
    if std::path::Path::new("/usr/bin/go").exists() || std::path::Path::new("/bin/go").exists() {
        eprintln!("go is installed in /usr/bin or /bin; cannot hide it from PATH here");
        return;
    }
    let out = Command::new("/bin/bash")
        .arg(&script)
        .arg(out_dir.path())
        .env("PATH", "/usr/bin:/bin")
        .env_remove("GOROOT")
        .output();
    // Core utilities stay on PATH; the Go toolchain does not.
    let out = out.expect("bash");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.lines()
            .any(|l| l.starts_with("error:") && l.contains("Go toolchain")),
        "{err}"
    );
}
