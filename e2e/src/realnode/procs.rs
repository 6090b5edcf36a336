//! The processes of the real-node scenarios (shared by
//! `realnode_kep3329/` and `realnode_termination.rs`): the controllers
//! under test (kcm-rs, or KCM with the four), and the node's own processes
//! (`node.sh`'s kubelet and helper KCM) stopped and started again.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::binaries::repo_root;

use super::RealNode;

/// KCM's names of the four controllers kcm-rs replaces.
pub const FOUR: &str = "job-controller,pod-garbage-collector-controller,taint-eviction-controller,disruption-controller";

/// Stops the kubelet in its tracks (SIGSTOP): to the cluster the node is
/// dead, its containers go on running. [`FrozenKubelet::restart`] brings a
/// new kubelet up with the same command line.
pub fn freeze_kubelet(node: &RealNode) -> FrozenKubelet {
    let proc = NodeProcess::of(node, "kubelet", "kcm-node-kubelet");
    signal(proc.pid, "STOP");
    FrozenKubelet {
        proc,
        restarted: false,
    }
}

fn signal(pid: u32, sig: &str) -> bool {
    Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success())
}

/// Gone, or a zombie nobody reaped yet (its ports and files are released).
fn dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

/// Sends `sig` and waits up to `timeout` for the process to die.
fn kill_wait(pid: u32, sig: &str, timeout: Duration) -> bool {
    signal(pid, sig);
    let end = Instant::now() + timeout;
    while !dead(pid) {
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    true
}

/// A process `node.sh` started (kubelet, the helper KCM): its pid file,
/// command line and environment, so a scenario can stop it and start it
/// again as it was (or with other flags); the new pid goes to the pid file,
/// so `node.sh down` stops it.
pub struct NodeProcess {
    pub pid: u32,
    pub argv: Vec<String>,
    env: Vec<String>,
    pid_file: PathBuf,
    log: PathBuf,
}

impl NodeProcess {
    /// The process of `$STATE/pids/<name>`, which must run `binary`.
    pub fn of(node: &RealNode, name: &str, binary: &str) -> NodeProcess {
        let pid_file = node.state.join("pids").join(name);
        let pid: u32 = std::fs::read_to_string(&pid_file)
            .unwrap_or_else(|e| panic!("{}: {e}", pid_file.display()))
            .trim()
            .parse()
            .expect("a pid");
        let split = |b: Vec<u8>| -> Vec<String> {
            b.split(|c| *c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        };
        let argv = split(std::fs::read(format!("/proc/{pid}/cmdline")).expect("cmdline"));
        let env = split(std::fs::read(format!("/proc/{pid}/environ")).expect("environ"));
        assert!(
            argv.first().is_some_and(|a| a.ends_with(binary)),
            "pid {pid} of {} is not {binary}: {argv:?}",
            pid_file.display()
        );
        NodeProcess {
            pid,
            argv,
            env,
            pid_file,
            log: repo_root().join(format!("target/realnode/logs/{name}.log")),
        }
    }

    /// Starts `argv` (this process's own command line unless given) with
    /// this process's environment, in its own process group, output
    /// appended to `log` (its own log unless given), and records the pid.
    pub fn spawn(&self, argv: Option<&[String]>, log: Option<&Path>) -> Result<Child, String> {
        let argv = argv.unwrap_or(&self.argv);
        let log = log.unwrap_or(&self.log);
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        use std::os::unix::process::CommandExt;
        let child = Command::new(&argv[0])
            .args(&argv[1..])
            .env_clear()
            .envs(self.env.iter().filter_map(|kv| kv.split_once('=')))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", argv[0]))?;
        std::fs::write(&self.pid_file, format!("{}\n", child.id())).map_err(|e| e.to_string())?;
        Ok(child)
    }
}

/// A kubelet stopped by [`RealNode::freeze_kubelet`]; restarted on drop if
/// the test did not (a failed scenario must not leave the node without one).
pub struct FrozenKubelet {
    proc: NodeProcess,
    restarted: bool,
}

impl FrozenKubelet {
    /// Kills the frozen kubelet and starts a new one with the same command
    /// line and environment, logging where the first one did. The new
    /// kubelet registers the node again.
    pub fn restart(&mut self) -> Result<u32, String> {
        self.restarted = true;
        if !kill_wait(self.proc.pid, "KILL", Duration::from_secs(20)) {
            return Err(format!("the old kubelet {} did not die", self.proc.pid));
        }
        Ok(self.proc.spawn(None, None)?.id())
    }
}

impl Drop for FrozenKubelet {
    fn drop(&mut self) {
        if !self.restarted
            && let Err(e) = self.restart()
        {
            eprintln!("restarting the kubelet: {e}");
        }
    }
}

/// Which controllers run the four: kcm-rs, or upstream KCM of the node's minor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Which {
    KcmRs,
    Kcm,
}

impl Which {
    pub const BOTH: [Which; 2] = [Which::KcmRs, Which::Kcm];
    pub fn label(self) -> &'static str {
        match self {
            Which::KcmRs => "kcm-rs",
            Which::Kcm => "KCM",
        }
    }
}

/// The four controllers under test, never two implementations at once:
/// kcm-rs (`--controllers=*`, the admin kubeconfig) beside the node's helper
/// KCM; or KCM as upstream deploys it, one process: the helper KCM
/// restarted with the four added to its `--controllers` (upstream's
/// taint-eviction-controller finds a node's pods through the `spec.nodeName`
/// index node-lifecycle-controller adds to the shared pod informer: in a KCM
/// of its own it never evicts anything). [`Controllers::stop`] puts the
/// helper KCM back as `node.sh` started it.
pub struct Controllers {
    child: Child,
    pub which: Which,
    pub log: PathBuf,
    helpers: Option<NodeProcess>,
}

impl Controllers {
    pub fn start(which: Which, node: &RealNode, test: &str) -> Controllers {
        let dir = repo_root().join("target/realnode/scenario-logs");
        std::fs::create_dir_all(&dir).expect("log dir");
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default();
        let log = dir.join(format!(
            "{test}-{}-{}-{stamp}.log",
            node.version,
            which.label()
        ));
        let (mut child, helpers) = match which {
            Which::KcmRs => {
                let bin = std::env::var_os("KCM_RS_BIN")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| repo_root().join("target/debug/kcm-rs"));
                assert!(
                    bin.exists(),
                    "{} is missing: cargo build -p kcm-rs",
                    bin.display()
                );
                let out = std::fs::File::create(&log).expect("log");
                let err = out.try_clone().expect("log");
                let child = Command::new(bin)
                    .arg(format!("--kubeconfig={}", node.kubeconfig.display()))
                    .args(["--controllers=*", "--leader-elect=false", "--secure-port=0"])
                    .stdin(Stdio::null())
                    .stdout(out)
                    .stderr(err)
                    .spawn()
                    .expect("starting kcm-rs");
                (child, None)
            }
            Which::Kcm => {
                let helpers = NodeProcess::of(node, "kcm-helpers", "kcm-e2e-controller-manager");
                assert!(
                    kill_wait(helpers.pid, "TERM", Duration::from_secs(20)),
                    "the helper KCM {} did not stop",
                    helpers.pid
                );
                let argv: Vec<String> = helpers
                    .argv
                    .iter()
                    .map(|a| match a.strip_prefix("--controllers=") {
                        Some(list) => format!("--controllers={list},{FOUR}"),
                        None => a.clone(),
                    })
                    .collect();
                assert!(
                    argv.iter().any(|a| a.ends_with(FOUR)),
                    "no --controllers in {argv:?}"
                );
                let child = helpers
                    .spawn(Some(&argv), Some(&log))
                    .expect("starting KCM");
                (child, Some(helpers))
            }
        };
        std::thread::sleep(Duration::from_millis(500));
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "{} exited at once ({status}): {}",
                which.label(),
                crate::control_plane::tail(&log, 30)
            );
        }
        Controllers {
            child,
            which,
            log,
            helpers,
        }
    }

    /// Still running? (Checked after every scenario: a crash is a finding.)
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM (SIGKILL after 15 s); the helper KCM back as it was.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        signal(self.child.id(), "TERM");
        let end = Instant::now() + Duration::from_secs(15);
        while !matches!(self.child.try_wait(), Ok(Some(_))) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(helpers) = self.helpers.take()
            && let Err(e) = helpers.spawn(None, None)
        {
            eprintln!("restarting the helper KCM: {e}");
        }
    }
}

impl Drop for Controllers {
    fn drop(&mut self) {
        self.halt();
    }
}

/// The cases `$var` names (comma separated slugs), else all of them.
pub fn selected<C: Copy>(var: &str, all: &[C], slug: impl Fn(C) -> &'static str) -> Vec<C> {
    match std::env::var(var) {
        Ok(only) if !only.trim().is_empty() => all
            .iter()
            .copied()
            .filter(|c| only.split(',').any(|o| o.trim() == slug(*c)))
            .collect(),
        _ => all.to_vec(),
    }
}

/// Runs every case under kcm-rs, then every case under KCM (one
/// [`Controllers`] per pass, started again if it died: that is reported).
/// Returns each outcome by case and controllers, and the deaths.
pub async fn both_passes<C, O, F, Fut>(
    node: &RealNode,
    test: &str,
    cases: &[C],
    slug: impl Fn(C) -> &'static str,
    mut run: F,
) -> (BTreeMap<(C, Which), O>, Vec<String>)
where
    C: Copy + Ord,
    O: Debug,
    F: FnMut(C) -> Fut,
    Fut: std::future::Future<Output = O>,
{
    let mut results = BTreeMap::new();
    let mut deaths = Vec::new();
    for which in Which::BOTH {
        let mut ctl = Controllers::start(which, node, test);
        for &c in cases {
            let began = Instant::now();
            let o = run(c).await;
            let took = began.elapsed();
            eprintln!("[{}] {} in {took:.0?}: {o:?}", which.label(), slug(c));
            if !ctl.alive() {
                deaths.push(format!(
                    "{} exited during {} (log {})",
                    which.label(),
                    slug(c),
                    ctl.log.display()
                ));
                ctl = Controllers::start(which, node, test);
            }
            results.insert((c, which), o);
        }
        ctl.stop();
    }
    (results, deaths)
}
