//! A real kube-apiserver over embedded etcd, on 127.0.0.1 at a free port, run
//! as a child process that exits on its own when this process goes away (its
//! stdin is a pipe that the kernel closes when we exit, however we exit).

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::{HarnessError, binaries};

/// How long the API server may take to answer /readyz (a cold start on two
/// loaded cores takes a few seconds; CI machines can be slower).
const READY_TIMEOUT: Duration = Duration::from_secs(120);

pub struct ControlPlane {
    child: Child,
    // Held only so the pipe stays open; dropping it tells the child to exit.
    _stdin: ChildStdin,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    server: String,
    log: PathBuf,
    started_in: Duration,
    version: String,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("server", &self.server)
            .field("kubeconfig", &self.kubeconfig)
            .field("pid", &self.child.id())
            .field("version", &self.version)
            .finish()
    }
}

/// Returns the last `n` lines of a log file, for error messages.
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A fresh directory for one control plane, under `$KCM_E2E_TMPDIR` or the
/// system's temporary directory.
fn scratch_dir() -> Result<tempfile::TempDir, HarnessError> {
    let scratch = std::env::var_os("KCM_E2E_TMPDIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&scratch)?;
    Ok(tempfile::Builder::new()
        .prefix("kcm-e2e-")
        .tempdir_in(scratch)?)
}

impl ControlPlane {
    /// Builds the binaries if needed and starts a fresh control plane in a new
    /// temporary directory. Several may run at once. Every `start*` runs the
    /// Kubernetes version [`binaries::k8s_version`] names
    /// (`$KCM_E2E_K8S_VERSION`, default 1.34).
    pub fn start() -> Result<Self, HarnessError> {
        let dir = scratch_dir()?;
        let kubeconfig = dir.path().join("admin.kubeconfig");
        Self::start_in(dir, kubeconfig, 0)
    }

    /// Starts a control plane whose state lives in `dir` (removed on drop) and
    /// whose admin kubeconfig is written to `kubeconfig`. `port` 0 picks a free one.
    pub fn start_in(
        dir: tempfile::TempDir,
        kubeconfig: PathBuf,
        port: u16,
    ) -> Result<Self, HarnessError> {
        Self::launch(dir, kubeconfig, port, "")
    }

    /// [`ControlPlane::start_version`] with extra kube-apiserver flags
    /// (space separated), e.g. `--feature-gates=JobManagedBy=false` on 1.34
    /// to play an API server configured otherwise (that gate is locked on
    /// from 1.35).
    pub fn start_version_with_args(version: &str, extra_args: &str) -> Result<Self, HarnessError> {
        let dir = scratch_dir()?;
        let kubeconfig = dir.path().join("admin.kubeconfig");
        Self::launch_version(dir, kubeconfig, 0, extra_args, version, None)
    }

    /// [`ControlPlane::start`] of one Kubernetes version (`"1.37"`), whatever
    /// `$KCM_E2E_K8S_VERSION` says; [`UpstreamKcm`](crate::UpstreamKcm)
    /// started against it runs the same version.
    pub fn start_version(version: &str) -> Result<Self, HarnessError> {
        let dir = scratch_dir()?;
        let kubeconfig = dir.path().join("admin.kubeconfig");
        Self::launch_version(dir, kubeconfig, 0, "", version, None)
    }

    /// [`ControlPlane::start_version`] of binaries stamped to report
    /// `git_version` on `/version` (e.g. a 1.37 API server saying
    /// `v1.38.0`, to play a control plane upgraded ahead of kcm-rs); built
    /// by `build.sh --git-version` into their own cache folder.
    pub fn start_stamped(version: &str, git_version: &str) -> Result<Self, HarnessError> {
        let dir = scratch_dir()?;
        let kubeconfig = dir.path().join("admin.kubeconfig");
        Self::launch_version(dir, kubeconfig, 0, "", version, Some(git_version))
    }

    /// [`ControlPlane::start`] with an audit log of every request's
    /// metadata (user, verb, resource, response code), one JSON event per
    /// line in [`ControlPlane::audit_log`].
    pub fn start_with_audit() -> Result<Self, HarnessError> {
        let dir = scratch_dir()?;
        let policy = dir.path().join("audit-policy.yaml");
        std::fs::write(
            &policy,
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\n\
             rules:\n- level: Metadata\n",
        )?;
        let log = dir.path().join("audit.log");
        let extra = format!(
            "--audit-policy-file={} --audit-log-path={} --audit-log-format=json",
            policy.display(),
            log.display()
        );
        let kubeconfig = dir.path().join("admin.kubeconfig");
        Self::launch(dir, kubeconfig, 0, &extra)
    }

    /// Where [`ControlPlane::start_with_audit`] writes the audit log.
    pub fn audit_log(&self) -> PathBuf {
        self.dir().join("audit.log")
    }

    fn launch(
        dir: tempfile::TempDir,
        kubeconfig: PathBuf,
        port: u16,
        extra_args: &str,
    ) -> Result<Self, HarnessError> {
        Self::launch_version(
            dir,
            kubeconfig,
            port,
            extra_args,
            &binaries::k8s_version(),
            None,
        )
    }

    fn launch_version(
        mut dir: tempfile::TempDir,
        kubeconfig: PathBuf,
        port: u16,
        extra_args: &str,
        version: &str,
        stamp: Option<&str>,
    ) -> Result<Self, HarnessError> {
        // The harness picks free ports by binding and releasing them, so a
        // parallel test can take one first; etcd then fails to bind before
        // it writes any state, and a second try is clean.
        for attempt in 1.. {
            match Self::launch_once(dir, kubeconfig.clone(), port, extra_args, version, stamp) {
                Ok(cp) => return Ok(cp),
                Err((e, back)) => {
                    let raced = matches!(&e, HarnessError::NotHealthy { log_tail, .. }
                        if log_tail.contains("address already in use"));
                    if !raced || attempt == 3 {
                        return Err(e);
                    }
                    dir = back;
                }
            }
        }
        unreachable!("the loop returns")
    }

    /// One start; on failure the scratch directory comes back for a retry.
    #[allow(clippy::result_large_err)]
    fn launch_once(
        dir: tempfile::TempDir,
        kubeconfig: PathBuf,
        port: u16,
        extra_args: &str,
        version: &str,
        stamp: Option<&str>,
    ) -> Result<Self, (HarnessError, tempfile::TempDir)> {
        let version = binaries::normalize_version(version);
        let built = match stamp {
            Some(git_version) => binaries::ensure_built_stamped(&version, git_version),
            None => binaries::ensure_built_for(&version),
        };
        let bin = match built {
            Ok(b) => b.join("kcm-e2e-apiserver"),
            Err(e) => return Err((e, dir)),
        };
        let log = dir.path().join("apiserver.log");
        let log_file = match File::create(&log) {
            Ok(f) => f,
            Err(e) => return Err((e.into(), dir)),
        };
        let began = Instant::now();
        let child = Command::new(&bin)
            .arg(format!("--dir={}", dir.path().join("state").display()))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--port={port}"))
            .arg("--exit-on-stdin-close")
            .arg(format!("--extra-args={extra_args}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file))
            .spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(source) => {
                let what = bin.display().to_string();
                return Err((HarnessError::Spawn { what, source }, dir));
            }
        };
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
            let _ = child.kill();
            let e = HarnessError::NotHealthy {
                reason: "child pipes missing".into(),
                log_tail: String::new(),
            };
            return Err((e, dir));
        };
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.strip_prefix("READY ") {
                    let _ = tx.send(rest.to_string());
                }
            }
        });
        let fail = |child: &mut Child, reason: String| {
            let _ = child.kill();
            let _ = child.wait();
            HarnessError::NotHealthy {
                reason,
                log_tail: tail(&log, 30),
            }
        };
        let ready = loop {
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(line) => break line,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if let Ok(Some(status)) = child.try_wait() {
                        let why = format!("kcm-e2e-apiserver exited ({status})");
                        return Err((fail(&mut child, why), dir));
                    }
                    if began.elapsed() > READY_TIMEOUT {
                        let why = format!("no READY within {READY_TIMEOUT:?}");
                        return Err((fail(&mut child, why), dir));
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let _ = child.wait();
                    let why = "kcm-e2e-apiserver closed stdout".to_string();
                    return Err((fail(&mut child, why), dir));
                }
            }
        };
        let server = ready
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_string();
        Ok(ControlPlane {
            child,
            _stdin: stdin,
            dir,
            kubeconfig,
            server,
            log,
            started_in: began.elapsed(),
            version,
        })
    }

    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }
    pub fn server(&self) -> &str {
        &self.server
    }
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
    pub fn log(&self) -> &Path {
        &self.log
    }
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
    /// The Kubernetes minor this control plane runs (`"1.34"`): its binaries,
    /// and those of [`UpstreamKcm`](crate::UpstreamKcm) started against it.
    pub fn version(&self) -> &str {
        &self.version
    }
    /// Wall time from spawn to a ready API server with a kubeconfig written.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// The port the API server listens on.
    pub fn port(&self) -> Option<u16> {
        self.server.rsplit(':').next().and_then(|p| p.parse().ok())
    }

    /// A client for the admin user. Make one per async runtime (per test):
    /// a client's connections belong to the runtime that created them.
    pub async fn client(&self) -> Result<kube::Client, HarnessError> {
        client_from_kubeconfig(&self.kubeconfig).await
    }
}

/// Builds a client from a kubeconfig file, without kube's default retry
/// policy (tests want to see a 429 or 5xx, not have it hidden).
pub async fn client_from_kubeconfig(path: &Path) -> Result<kube::Client, HarnessError> {
    let err = |message: String| HarnessError::Kubeconfig {
        path: path.to_path_buf(),
        message,
    };
    let kc = Kubeconfig::read_from(path).map_err(|e| err(e.to_string()))?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| err(e.to_string()))?;
    config.read_timeout = Some(Duration::from_secs(60));
    config.default_retry = false;
    Ok(kube::Client::try_from(config)?)
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The control plane shared by every test of one test binary, started on
/// first use, of the version `$KCM_E2E_K8S_VERSION` names (default 1.34). It stops when the test binary exits (the child sees its stdin
/// close), whether the tests passed, failed or panicked.
pub fn shared() -> &'static ControlPlane {
    static SHARED: OnceLock<ControlPlane> = OnceLock::new();
    SHARED.get_or_init(|| match ControlPlane::start() {
        Ok(cp) => cp,
        Err(e) => panic!("cannot start the local control plane: {e}"),
    })
}
