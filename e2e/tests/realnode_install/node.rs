//! The real node's session around each install test, and the node's tools.
//!
//! A test runs twice: first outside the node, where it builds what the
//! installs need (`e2e/realnode/installs/build.sh`: kube-proxy, the images A
//! and B) and runs itself again inside `node.sh session` (the machine-wide
//! lock, `up` with Services and an audit log, always `down` and the
//! leftover check); then inside, with the session's environment, where it
//! runs its scenario.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kcm_e2e::binaries::{bin_dir, repo_root};

/// Set to the test's name for its run inside the session.
const INSIDE: &str = "KCM_INSTALL_SESSION";

/// The test whose API server limits critical pods as GKE does.
pub const GKE_QUOTA_TEST: &str = "chart_upgrade_rollback";
const GKE_ADMISSION: &str = "apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: ResourceQuota
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: ResourceQuotaConfiguration
    limitedResources:
    - resource: pods
      matchScopes:
      - scopeName: PriorityClass
        operator: In
        values: [system-node-critical, system-cluster-critical]
";

/// The node of a session, as `node.sh session` describes it.
pub struct Node {
    pub kubeconfig: PathBuf,
    pub kubectl: PathBuf,
    pub name: String,
    /// The node's state directory (`/run/kcm-rs-node`).
    pub state: PathBuf,
    /// This test's files: the audit policy and log, outputs.
    pub out: PathBuf,
    pub version: String,
}

/// Where each test keeps its files (they outlive the node).
fn out_dir(test: &str) -> PathBuf {
    repo_root().join("target/realnode/installs/runs").join(test)
}

fn installs_dir() -> PathBuf {
    repo_root().join("target/realnode/installs")
}

/// Runs `scenario` on a fresh real node: outside a session, builds, then
/// runs this test again in one and asserts it passed; inside, runs it.
pub fn in_session(test: &str, scenario: impl FnOnce(&Node)) {
    if std::env::var(INSIDE).as_deref() == Ok(test) {
        let env = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} unset in the session"));
        let node = Node {
            kubeconfig: env("KUBECONFIG").into(),
            kubectl: env("KUBECTL").into(),
            name: env("NODE_NAME"),
            state: PathBuf::from(
                std::env::var("KCM_NODE_STATE").unwrap_or("/run/kcm-rs-node".into()),
            ),
            out: out_dir(test),
            version: env("K8S_VERSION"),
        };
        scenario(&node);
        return;
    }
    let root = repo_root();
    // make realnode-install-test builds once for all the tests.
    if std::env::var_os("KCM_INSTALL_BUILT").is_none() {
        let status = Command::new("bash")
            .arg(root.join("e2e/realnode/installs/build.sh"))
            .status()
            .expect("bash");
        assert!(status.success(), "e2e/realnode/installs/build.sh failed");
    }
    let out = out_dir(test);
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).expect("out dir");
    // Every request's metadata but the harness admin's reads (the kubelet,
    // the scheduler, KCM and this test use the admin certificate).
    let policy = out.join("audit-policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n\
         - level: None\n  verbs: [get, list, watch]\n  userGroups: [\"system:masters\"]\n\
         - level: Metadata\n",
    )
    .expect("audit policy");
    let mut audit = format!(
        "--audit-policy-file={} --audit-log-path={} --audit-log-format=json --audit-log-maxsize=0",
        policy.display(),
        out.join("audit.log").display()
    );
    if test == GKE_QUOTA_TEST {
        // GKE's limit on critical pods, as GKE sets it: the ResourceQuota
        // admission plugin's limitedResources, so pods of a system-*-critical
        // PriorityClass are admitted only where a quota covers that class.
        let admission = out.join("admission.yaml");
        std::fs::write(&admission, GKE_ADMISSION).expect("admission config");
        audit.push_str(&format!(
            " --admission-control-config-file={}",
            admission.display()
        ));
    }
    let version = std::env::var("K8S_VERSION").unwrap_or_else(|_| "1.34".into());
    let exe = std::env::current_exe().expect("test binary");
    let began = Instant::now();
    let status = Command::new(root.join("e2e/realnode/node.sh"))
        .args(["session", "--version", &version, "--"])
        .arg(exe)
        .args([
            "--ignored",
            "--exact",
            test,
            "--nocapture",
            "--test-threads=1",
        ])
        .current_dir(&root)
        .env(INSIDE, test)
        .env(
            "KCM_NODE_KUBE_PROXY",
            installs_dir().join("bin/kcm-node-proxy"),
        )
        .env("KCM_NODE_APISERVER_ARGS", audit)
        .env_remove("KUBECONFIG")
        .status()
        .expect("node.sh session");
    eprintln!("{test}: session of {:.0?}", began.elapsed());
    assert!(status.success(), "{test} in its node session: {status}");
}

impl Node {
    pub fn audit_log(&self) -> PathBuf {
        self.out.join("audit.log")
    }

    pub fn sock(&self) -> PathBuf {
        self.state.join("containerd/containerd.sock")
    }

    pub async fn client(&self) -> kube::Client {
        kcm_e2e::control_plane::client_from_kubeconfig(&self.kubeconfig)
            .await
            .expect("admin client")
    }

    /// kubectl in the repository root; its stdout, or its output as the error.
    pub fn try_kubectl(&self, args: &[&str]) -> Result<String, String> {
        run(Command::new(&self.kubectl)
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig))
    }

    pub fn kubectl(&self, args: &[&str]) -> String {
        let out = self.try_kubectl(args);
        let out = out.unwrap_or_else(|e| panic!("kubectl {}:\n{e}", args.join(" ")));
        eprintln!("$ kubectl {}\n{}", args.join(" "), out.trim_end());
        out
    }

    /// Waits for the kcm-rs Deployment in `ns` to finish its rollout.
    pub fn rollout_status(&self, ns: &str, timeout: &str) {
        let timeout = format!("--timeout={timeout}");
        self.kubectl(&["-n", ns, "rollout", "status", "deployment/kcm-rs", &timeout]);
    }

    /// Imports image `which` (A or B) with the node's `ctr`, as a user of a
    /// containerd node without a registry would; returns its name and digest.
    pub fn import_image(&self, which: &str) -> (String, String) {
        let images = installs_dir().join("images");
        let archive = images.join(format!("kcm-rs-{which}.oci.tar"));
        let sock = self.sock();
        let args = ["--address", path(&sock), "-n", "k8s.io", "images", "import"];
        let out = run(Command::new("ctr").args(args).arg(&archive));
        out.unwrap_or_else(|e| panic!("ctr images import {}: {e}", archive.display()));
        let read = |ext: &str| {
            let f = images.join(format!("kcm-rs-{which}.{ext}"));
            std::fs::read_to_string(&f)
                .expect("built image")
                .trim()
                .to_string()
        };
        (read("name"), read("digest"))
    }

    /// The command line KCM runs with (its pid file under the state dir).
    pub fn kcm_args(&self) -> String {
        let pid = std::fs::read_to_string(self.state.join("pids/kcm-helpers")).expect("KCM pid");
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", pid.trim())).expect("KCM runs");
        String::from_utf8_lossy(&cmdline).replace('\0', " ")
    }

    /// Replaces the node's KCM (the helper controllers only) with a complete
    /// one: every controller on by default, job-controller included, each
    /// under its own ServiceAccount (so the audit log tells them apart). It
    /// takes the pid file of the one it replaces, so `down` stops it.
    pub fn complete_kcm(&self) -> String {
        let pids = self.state.join("pids/kcm-helpers");
        let pid: i32 = std::fs::read_to_string(&pids)
            .expect("KCM pid")
            .trim()
            .parse()
            .expect("pid");
        let _ = Command::new("kill").arg(pid.to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let pki = self.state.join("apiserver");
        let kcm = cp_bin(&self.version).join("kcm-e2e-controller-manager");
        let log = repo_root().join("target/realnode/logs/kcm-complete.log");
        // In a session of its own, not a child of this test (which ends
        // before the node does): bash starts it and says its pid.
        let out = Command::new("bash")
            .arg("-c")
            .arg(r#"log="$1"; shift; setsid "$@" </dev/null >"$log" 2>&1 & echo $!"#)
            .arg("kcm")
            .arg(&log)
            .arg(&kcm)
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .args(["--controllers=*", "--use-service-account-credentials=true"])
            .args(["--leader-elect=false", "--secure-port=0", "--v=2"])
            .arg(format!(
                "--service-account-private-key-file={}",
                pki.join("sa.key").display()
            ))
            .arg(format!("--root-ca-file={}", pki.join("ca.crt").display()))
            .output()
            .expect("start KCM");
        let child = String::from_utf8_lossy(&out.stdout).trim().to_string();
        std::fs::write(&pids, &child).expect("pid file");
        std::thread::sleep(Duration::from_secs(2));
        self.kcm_args()
    }
}

/// The control-plane binaries of a minor (e2e/harness/build.sh's cache).
fn cp_bin(version: &str) -> PathBuf {
    if version == "1.34" {
        bin_dir()
    } else {
        bin_dir().join(version)
    }
}

pub fn path(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

/// Runs `cmd` in the repository root: stdout, or stdout and stderr as the error.
pub fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .current_dir(repo_root())
        .output()
        .map_err(|e| format!("spawn: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(format!(
            "{}: {stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}
