//! Upstream kube-controller-manager, built from the same Kubernetes module as
//! the API server: the reference implementation in differential tests.

use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};

use crate::control_plane::tail;
use crate::{ControlPlane, HarnessError, binaries};

pub struct UpstreamKcm {
    child: Child,
    _stdin: Option<ChildStdin>,
    log: PathBuf,
}

impl UpstreamKcm {
    /// Starts upstream KCM against `cp` running only `controllers` (canonical
    /// KCM names such as `job-controller`), without leader election and
    /// without its HTTPS endpoint. `extra` flags are passed through. It is
    /// built from the same Kubernetes version as `cp` ([`ControlPlane::version`]).
    pub fn start(
        cp: &ControlPlane,
        controllers: &[&str],
        extra: &[&str],
    ) -> Result<Self, HarnessError> {
        let bin = binaries::ensure_built_for(cp.version())?.join("kcm-e2e-controller-manager");
        let log = cp.dir().join(format!(
            "kube-controller-manager-{}.log",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default()
        ));
        let mut child = Command::new(&bin)
            .arg("--exit-on-stdin-close")
            .arg(format!("--kubeconfig={}", cp.kubeconfig().display()))
            .arg(format!("--controllers={}", controllers.join(",")))
            .arg("--leader-elect=false")
            .arg("--secure-port=0")
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::from(File::create(&log)?))
            .spawn()
            .map_err(|source| HarnessError::Spawn {
                what: bin.display().to_string(),
                source,
            })?;
        let stdin = child.stdin.take();
        std::thread::sleep(std::time::Duration::from_millis(300));
        if let Ok(Some(status)) = child.try_wait() {
            return Err(HarnessError::NotHealthy {
                reason: format!("kube-controller-manager exited at once ({status})"),
                log_tail: tail(&log, 30),
            });
        }
        Ok(UpstreamKcm {
            child,
            _stdin: stdin,
            log,
        })
    }

    pub fn log(&self) -> &std::path::Path {
        &self.log
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits up to `timeout` for the process to exit;
    /// returns how long it took, or None if it is still running (it is
    /// killed when dropped).
    pub fn terminate(&mut self, timeout: std::time::Duration) -> Option<std::time::Duration> {
        let began = std::time::Instant::now();
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        while sent && began.elapsed() < timeout {
            if let Ok(Some(_)) = self.child.try_wait() {
                return Some(began.elapsed());
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        None
    }
}

impl Drop for UpstreamKcm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
