//! Fenced leadership on the real API server: a leader and a standby kcm-rs
//! on one Lease, a large Job created at a low QPS, and the leader stopped
//! mid-creation. Each process has its own ServiceAccount, so the audit log
//! says who wrote what; the checks:
//!
//! * no write of the old leader completes after the new leader's first
//!   write (its acquisition of the Lease);
//! * never more pods than `parallelism` (no pod is created twice);
//! * after SIGTERM the old leader is gone within its renew deadline plus
//!   start-up slack (the drain is bounded by the fence), and it releases
//!   the Lease even when its in-flight syncs ran into the fence: the
//!   standby's first write comes within retry period + 2 s of the old
//!   leader's last one;
//! * a leader frozen (SIGSTOP) past the lease duration writes nothing after
//!   the standby acquired once it thaws, and exits;
//! * no pod is deleted by either process.
//!
//! `make handover` also runs the ignored `handover_table`: crash, SIGTERM
//! and freeze for kcm-rs and for upstream KCM's job-controller under the
//! same test, one line each (the leadership table of docs/operating.md).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kcm_e2e::ControlPlane;
use kcm_e2e::faults::{Fault, FaultProxy, FaultSettings, Script, When};
use kcm_e2e::history::PodHistory;
use kcm_e2e::manifests as support;
use kube::Api;
use serde_json::{Value, json};
use support::*;

const NS: &str = "kube-system";
const LEASE: &str = "kcm-rs-fence";
const PARALLELISM: i32 = 120;
const RENEW_DEADLINE: Duration = Duration::from_secs(4);
const LEASE_DURATION: Duration = Duration::from_secs(6);
const RETRY_PERIOD: Duration = Duration::from_secs(1);

/// Which controller leads and stands by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ctl {
    KcmRs,
    Upstream,
}

/// Two identities with cluster-admin, bound once per control plane.
async fn identities(admin: &kube::Client) {
    let ns: Api<Namespace> = Api::all(admin.clone());
    if ns.get_opt(NS).await.expect("get ns").is_none() {
        create(&ns, json!({ "metadata": { "name": NS } })).await;
    }
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), NS);
    let crbs: Api<ClusterRoleBinding> = Api::all(admin.clone());
    for who in ["leader-a", "leader-b"] {
        create(&sas, json!({ "metadata": { "name": who } })).await;
        create(
            &crbs,
            json!({
                "metadata": { "name": format!("kcm-rs-{who}") },
                "roleRef": { "apiGroup": "rbac.authorization.k8s.io",
                             "kind": "ClusterRole", "name": "cluster-admin" },
                "subjects": [{ "kind": "ServiceAccount", "name": who, "namespace": NS }],
            }),
        )
        .await;
    }
}

fn username(who: &str) -> String {
    format!("system:serviceaccount:{NS}:{who}")
}

/// The controller as `who`, running the Job controller under leader
/// election with short timings and a low QPS (creation takes a while).
async fn start(cp: &ControlPlane, admin: &kube::Client, bin: &Path, who: &str) -> Child {
    start_as(cp, admin, Ctl::KcmRs, bin, who).await
}

async fn start_as(
    cp: &ControlPlane,
    admin: &kube::Client,
    ctl: Ctl,
    bin: &Path,
    who: &str,
) -> Child {
    let token = sa_token(admin, NS, who).await;
    let kubeconfig = cp.dir().join(format!("{who}.kubeconfig"));
    token_kubeconfig(cp.kubeconfig(), &token, &kubeconfig);
    spawn_as(cp, ctl, bin, who, &kubeconfig)
}

fn spawn(cp: &ControlPlane, bin: &Path, who: &str, kubeconfig: &Path) -> Child {
    spawn_as(cp, Ctl::KcmRs, bin, who, kubeconfig)
}

fn spawn_as(cp: &ControlPlane, ctl: Ctl, bin: &Path, who: &str, kubeconfig: &Path) -> Child {
    let log = std::fs::File::create(cp.dir().join(format!("{who}.log"))).expect("log");
    let mut cmd = Command::new(bin);
    cmd.arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args([
            "--controllers=job-controller",
            "--secure-port=0",
            "--leader-elect=true",
            &format!("--leader-elect-resource-name={LEASE}"),
            &format!(
                "--leader-elect-lease-duration={}s",
                LEASE_DURATION.as_secs()
            ),
            &format!(
                "--leader-elect-renew-deadline={}s",
                RENEW_DEADLINE.as_secs()
            ),
            &format!("--leader-elect-retry-period={}s", RETRY_PERIOD.as_secs()),
            "--kube-api-qps=4",
            "--kube-api-burst=4",
            "--v=2",
        ]);
    if ctl == Ctl::Upstream {
        cmd.arg("--leader-elect-resource-namespace=kube-system");
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .expect("spawn the controller")
}

fn binary(cp: &ControlPlane, ctl: Ctl) -> std::path::PathBuf {
    match ctl {
        Ctl::KcmRs => kcm_rs_binary(),
        Ctl::Upstream => kcm_e2e::binaries::ensure_built_for(cp.version())
            .expect("upstream binaries")
            .join("kcm-e2e-controller-manager"),
    }
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(ok.success());
}

/// SIGSTOP for twice the lease duration, then SIGCONT, from a thread (the
/// hand-over goes on meanwhile).
fn freeze(child: &Child) {
    signal(child, "STOP");
    let pid = child.id().to_string();
    std::thread::spawn(move || {
        std::thread::sleep(LEASE_DURATION * 2);
        let _ = Command::new("kill").args(["-CONT", &pid]).status();
    });
}

fn sigterm(child: &Child) {
    signal(child, "TERM");
}

fn sigkill(child: &Child) {
    signal(child, "KILL");
}

struct Write {
    user: String,
    verb: String,
    resource: String,
    received: Timestamp,
    completed: Timestamp,
}

fn writes(audit: &Path) -> Vec<Write> {
    let text = std::fs::read_to_string(audit).expect("audit log");
    let ts =
        |v: &Value, k: &str| -> Timestamp { v[k].as_str().and_then(|s| s.parse().ok()).expect(k) };
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["stage"] == "ResponseComplete")
        .filter(|e| {
            let verb = e["verb"].as_str().unwrap_or("");
            matches!(
                verb,
                "create" | "update" | "patch" | "delete" | "deletecollection"
            )
        })
        .map(|e| Write {
            user: e["user"]["username"].as_str().unwrap_or("").into(),
            verb: e["verb"].as_str().unwrap_or("").into(),
            resource: e["objectRef"]["resource"].as_str().unwrap_or("").into(),
            received: ts(&e, "requestReceivedTimestamp"),
            completed: ts(&e, "stageTimestamp"),
        })
        .collect()
}

async fn wait_holder(leases: &Api<Lease>, prefix_not: Option<&str>, timeout: Duration) -> String {
    let began = Instant::now();
    loop {
        if let Some(l) = leases.get_opt(LEASE).await.expect("get lease") {
            let h = holder(&l);
            if !h.is_empty() && prefix_not.is_none_or(|p| h != p) {
                return h;
            }
        }
        assert!(
            began.elapsed() < timeout,
            "no new lease holder in {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn big_job(name: &str) -> Value {
    json!({
        "metadata": { "name": name },
        "spec": {
            "completions": PARALLELISM * 2, "parallelism": PARALLELISM,
            "template": { "spec": { "restartPolicy": "Never",
                "containers": [{ "name": "main", "image": "busybox" }] } },
        },
    })
}

fn active(pods: &[Pod]) -> usize {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .count()
}

/// The scenario up to the hand-over: `a` (already started) leads, a
/// standby starts, a large Job is created, `disrupt` hits the leader
/// mid-creation; the standby must take over and finish creation, no pod
/// created twice. Returns the old leader's exit delay after `disrupt`.
async fn hand_over(
    cp: &ControlPlane,
    bin: &Path,
    a: Child,
    disrupt: impl FnOnce(&Child),
) -> Duration {
    hand_over_as(cp, Ctl::KcmRs, bin, a, disrupt).await.0
}

async fn hand_over_as(
    cp: &ControlPlane,
    ctl: Ctl,
    bin: &Path,
    mut a: Child,
    disrupt: impl FnOnce(&Child),
) -> (Duration, usize) {
    let admin = cp.client().await.expect("client");
    let leases: Api<Lease> = Api::namespaced(admin.clone(), NS);
    let first = wait_holder(&leases, None, Duration::from_secs(60)).await;
    let mut b = start_as(cp, &admin, ctl, bin, "leader-b").await;
    // The standby's caches sync before the leader is hit.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ns = kcm_e2e::TestNamespace::create(&admin, "fence")
        .await
        .expect("ns");
    let history = PodHistory::start(&admin, &ns.name).await;
    let jobs: Api<Job> = Api::namespaced(admin.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns.name);
    create(&jobs, big_job("big")).await;
    let began = Instant::now();
    while active(&pods.list(&Default::default()).await.expect("list").items) < 20 {
        assert!(began.elapsed() < Duration::from_secs(60), "no pods created");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let hit = Instant::now();
    disrupt(&a);
    let exited = loop {
        if a.try_wait().expect("wait").is_some() {
            break hit.elapsed();
        }
        assert!(
            hit.elapsed() < Duration::from_secs(60),
            "old leader still running"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let second = wait_holder(&leases, Some(&first), Duration::from_secs(60)).await;
    assert_ne!(first, second);
    // The new leader finishes creation.
    let began = Instant::now();
    loop {
        let n = active(&pods.list(&Default::default()).await.expect("list").items);
        if n >= PARALLELISM as usize {
            break;
        }
        assert!(
            began.elapsed() < Duration::from_secs(120),
            "only {n} pods after the hand-over"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Time for a stray second writer to show itself.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let _ = b.kill();
    let _ = b.wait();
    let names: std::collections::HashSet<String> = history
        .all()
        .iter()
        .filter_map(|s| s.pod().metadata.name.clone())
        .collect();
    // Upstream's figures are reported, not asserted (`handover_table`).
    if ctl == Ctl::KcmRs {
        assert_eq!(
            names.len(),
            PARALLELISM as usize,
            "pods ever created (at most parallelism, none twice)"
        );
    }
    (exited, names.len())
}

/// From the audit log: the old leader (`a_user`) wrote nothing after the
/// new leader's first write, and nobody deleted a pod. Returns the
/// take-over: the new leader's first write after the old one's last.
fn assert_one_writer_at_a_time(cp: &ControlPlane, exited: Duration) -> Duration {
    let (takeover, late, deletes) = audit_handover(cp, exited);
    assert_eq!(late, 0, "the old leader wrote after the new one acquired");
    assert_eq!(deletes, 0, "pods deleted");
    takeover
}

/// The take-over, the old leader's writes completed after the new leader's
/// first, and the pod deletes, from the audit log.
fn audit_handover(cp: &ControlPlane, exited: Duration) -> (Duration, usize, usize) {
    let all = writes(&cp.audit_log());
    let (a_user, b_user) = (username("leader-a"), username("leader-b"));
    let a_last = all
        .iter()
        .filter(|w| w.user == a_user)
        .max_by_key(|w| w.completed);
    let b_first = all
        .iter()
        .filter(|w| w.user == b_user)
        .min_by_key(|w| w.received);
    let (a_last, b_first) = (
        a_last.expect("old leader wrote"),
        b_first.expect("new leader wrote"),
    );
    eprintln!(
        "old leader's last write: {} {} completed {}; new leader's first: {} {} received {} ({} ms later); old leader exited {exited:?} after the stop",
        a_last.verb,
        a_last.resource,
        a_last.completed,
        b_first.verb,
        b_first.resource,
        b_first.received,
        (b_first.received - a_last.completed)
            .total(jiff::Unit::Millisecond)
            .unwrap_or(f64::NAN)
    );
    assert_eq!(
        b_first.resource, "leases",
        "the new leader starts with the Lease"
    );
    let late = all
        .iter()
        .filter(|w| w.user == a_user && w.completed >= b_first.received)
        .count();
    let deletes = all
        .iter()
        .filter(|w| w.resource == "pods" && w.verb == "delete")
        .count();
    // The take-over runs from the old leader's last write before the new
    // leader's first (a late write does not shorten it).
    let before = all
        .iter()
        .filter(|w| w.user == a_user && w.completed < b_first.received)
        .max_by_key(|w| w.completed)
        .map_or(a_last.completed, |w| w.completed);
    let ms = (b_first.received - before)
        .total(jiff::Unit::Millisecond)
        .unwrap_or(0.0);
    (Duration::from_millis(ms.max(0.0) as u64), late, deletes)
}

/// One hand-over: the take-over, when the old leader was gone, the pods
/// ever created, the old leader's writes after the new one acquired, the
/// pod deletes.
struct Handover {
    exited: Duration,
    takeover: Duration,
    pods: usize,
    late: usize,
    deletes: usize,
}

/// kcm-rs's hand-overs are asserted (one writer at a time, no deletes,
/// each pod once); upstream's are measured only.
async fn measure(ctl: Ctl, how: &str, disrupt: fn(&Child)) -> Handover {
    let cp = ControlPlane::start_with_audit().expect("control plane");
    let bin = binary(&cp, ctl);
    let admin = cp.client().await.expect("client");
    identities(&admin).await;
    let a = start_as(&cp, &admin, ctl, &bin, "leader-a").await;
    let (exited, pods) = hand_over_as(&cp, ctl, &bin, a, disrupt).await;
    let (takeover, late, deletes) = if ctl == Ctl::KcmRs {
        (assert_one_writer_at_a_time(&cp, exited), 0, 0)
    } else {
        audit_handover(&cp, exited)
    };
    eprintln!(
        "{ctl:?} {how}: take-over {takeover:?}, old leader exited {exited:?} after the signal, \
         {pods} pods, {late} late writes, {deletes} deletes"
    );
    Handover {
        exited,
        takeover,
        pods,
        late,
        deletes,
    }
}

#[tokio::test]
async fn sigterm_mid_creation_hands_over_without_two_writers() {
    let bin = kcm_rs_binary();
    let cp = ControlPlane::start_with_audit().expect("control plane");
    let admin = cp.client().await.expect("client");
    identities(&admin).await;
    let a = start(&cp, &admin, &bin, "leader-a").await;
    let exited = hand_over(&cp, &bin, a, sigterm).await;
    let takeover = assert_one_writer_at_a_time(&cp, exited);
    // Drain bounded by the fence (renew deadline), plus process exit.
    assert!(
        exited < RENEW_DEADLINE + Duration::from_secs(3),
        "the drain took {exited:?}"
    );
    // Released even when the drain ran into the fence, and acquired at once.
    assert!(
        takeover <= RETRY_PERIOD + Duration::from_secs(2),
        "the standby's first write came {takeover:?} after the old leader's last"
    );
}

/// A leader frozen past the lease duration: the standby takes over; the
/// thawed process writes nothing after that (its fence has passed) and
/// exits on its own.
#[tokio::test]
async fn a_frozen_leader_thaws_without_writing_and_exits() {
    let h = measure(Ctl::KcmRs, "SIGSTOP", freeze).await;
    assert!(
        h.takeover >= LEASE_DURATION - RENEW_DEADLINE,
        "took over after {:?}, before the lease could expire",
        h.takeover
    );
    assert!(h.exited < LEASE_DURATION * 2 + Duration::from_secs(10));
}

/// crash / SIGTERM / freeze, kcm-rs and upstream KCM (`make handover`).
#[tokio::test]
#[ignore = "about 8 minutes: make handover"]
async fn handover_table() {
    let mut rows = Vec::new();
    for ctl in [Ctl::KcmRs, Ctl::Upstream] {
        for (how, f) in [
            ("crash (SIGKILL)", sigkill as fn(&Child)),
            ("SIGTERM", sigterm),
            ("freeze (SIGSTOP 12 s)", freeze),
        ] {
            let h = measure(ctl, how, f).await;
            rows.push(format!(
                "| {} | {how} | {:.1} s | {:.1} s | {} | {} | {} |",
                match ctl {
                    Ctl::KcmRs => "kcm-rs",
                    Ctl::Upstream => "upstream KCM",
                },
                h.takeover.as_secs_f64(),
                h.exited.as_secs_f64(),
                h.pods,
                h.late,
                h.deletes
            ));
        }
    }
    println!(
        "| controller | leader stopped by | take-over (old leader's last write to new leader's first) | old leader gone after the signal | pods created | old leader's writes after the take-over | pod deletes |\n|---|---|--:|--:|--:|--:|--:|"
    );
    for r in rows {
        println!("{r}");
    }
}

/// The lease partitioned away from a leader that can still write pods
/// (every renewal through the fault proxy fails with a 500 before reaching
/// the API server): its writes stop at its renew deadline, before the
/// standby acquires, and nothing is created twice.
#[tokio::test]
async fn a_leader_that_cannot_renew_stops_writing_at_its_renew_deadline() {
    let bin = kcm_rs_binary();
    let cp = ControlPlane::start_with_audit().expect("control plane");
    let admin = cp.client().await.expect("client");
    identities(&admin).await;
    let proxy = FaultProxy::start(&cp, FaultSettings::none())
        .await
        .expect("proxy");
    // The old leader goes through the proxy (as the admin); the standby
    // talks to the API server directly as leader-b.
    let a = spawn(&cp, &bin, "leader-a-proxied", proxy.kubeconfig());
    let partition = |_: &Child| {
        proxy.script(Script {
            method: "PUT".into(),
            path_contains: format!("/leases/{LEASE}"),
            fault: Fault::InternalError,
            when: When::Before,
            times: 10_000,
        })
    };
    let exited = hand_over(&cp, &bin, a, partition).await;
    let records = proxy.records();
    let is_lease = |r: &kcm_e2e::faults::Record| r.path.contains("/leases/");
    let last_renewal = records
        .iter()
        .filter(|r| r.method == "PUT" && is_lease(r) && r.fault.is_none() && r.status == Some(200))
        .filter_map(|r| r.forwarded)
        .max()
        .expect("renewals before the partition");
    let a_writes: Vec<_> = records
        .iter()
        .filter(|r| r.is_write() && !is_lease(r) && r.reached_server())
        .collect();
    let a_last_sent = a_writes
        .iter()
        .filter_map(|r| r.forwarded)
        .max()
        .expect("old leader wrote");
    let a_last_end = a_writes.iter().filter_map(|r| r.end).max().expect("ended");
    let deadline = last_renewal + RENEW_DEADLINE;
    let b_first = writes(&cp.audit_log())
        .into_iter()
        .filter(|w| w.user == username("leader-b"))
        .min_by_key(|w| w.received)
        .expect("new leader wrote");
    let ms = |later: SystemTime, earlier: SystemTime| match later.duration_since(earlier) {
        Ok(d) => d.as_millis() as i64,
        Err(e) => -(e.duration().as_millis() as i64),
    };
    let b_first_at = SystemTime::from(b_first.received);
    eprintln!(
        "{} writes of the old leader; its last sent {} ms after its last renewal (renew deadline {} ms), \
         its last answer {} ms before the new leader's first write ({} {}); old leader exited {exited:?} after the partition",
        a_writes.len(),
        ms(a_last_sent, last_renewal),
        RENEW_DEADLINE.as_millis(),
        ms(b_first_at, a_last_end),
        b_first.verb,
        b_first.resource,
    );
    assert!(
        a_last_sent <= deadline,
        "the old leader sent a write {} ms after its renew deadline",
        ms(a_last_sent, deadline)
    );
    assert!(
        a_last_end < b_first_at,
        "the old leader wrote after the new one acquired"
    );
}
