//! kcm-rs installed as users install it, running in pods on the real node
//! (e2e/realnode: kubelet, containerd, kube-proxy): the image from `make
//! image-oci` imported with the node's `ctr`, and each install path end to
//! end. Ignored by default (root, the real node, a release build): `make
//! realnode-install-test` runs them, one node session each, and each writes
//! its figures to bench/results/in-cluster/<test>.md.
//!
//! - `manifests_replacing_kcm`: `kubectl apply -k manifests/` in kube-system
//!   on a node labelled control-plane, the node's KCM running none of the
//!   four controllers; then upgrade A -> B -> A by rolling update while Jobs
//!   run, and the PodDisruptionBudget.
//! - `chart_in_another_namespace`: `helm install` into kcm-system; then
//!   Prometheus scraping the pods with the chart's ServiceMonitor and rules,
//!   `KcmRsDown` firing at zero replicas and clearing after.
//! - `beside_complete_kcm`: `kubectl apply -k manifests/beside-kcm` beside a
//!   KCM running every controller (job-controller included), on a node
//!   without the control-plane label.
//! - `chart_upgrade_rollback`: the previous chart version installed, then
//!   `helm upgrade` to this one, `helm rollback`, the upgrade again, image
//!   A -> B and a rollback to A, while Jobs run (chart_upgrade.rs).
//!
//! In each: two Ready replicas (the kubelet's HTTPS probes), one Lease
//! holder, every request of kcm-rs's identities from its pods' addresses
//! (in-cluster credentials through the `kubernetes` Service), the
//! per-controller identities as the only writers (audit log), and the example
//! Jobs' exact ends.

use kcm_e2e::manifests as support;

mod audit;
mod chart_upgrade;
mod checks;
mod jobs;
mod monitoring;
mod node;
mod upgrade;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use checks::{Problems, Writers};
use jobs::Seen;
use kcm_e2e::binaries::repo_root;
use node::Node;

/// The report of one test: Markdown sections, written before the verdict.
struct Report {
    test: String,
    text: String,
}

impl Report {
    fn new(test: &str, title: &str, node: &Node) -> Self {
        let commit =
            node::run(std::process::Command::new("git").args(["rev-parse", "--short=12", "HEAD"]))
                .unwrap_or_default();
        let text = format!(
            "# {title}\n\n`cargo test -p kcm-e2e --test realnode_install -- --ignored {test}` (make realnode-install-test), \
             {}, Kubernetes {} real node, kcm-rs at {}.\n",
            jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M UTC"),
            node.version,
            commit.trim()
        );
        Report {
            test: test.into(),
            text,
        }
    }

    fn section(&mut self, title: &str, body: &str) {
        self.text.push_str(&format!("\n## {title}\n\n{body}\n"));
        eprintln!("\n## {title}\n\n{body}");
    }

    /// Writes the report, with the problems found, and fails on any.
    fn finish(mut self, p: Problems) {
        let verdict = if p.0.is_empty() {
            "none".to_string()
        } else {
            p.0.iter().map(|x| format!("\n- {x}")).collect()
        };
        self.text.push_str(&format!("\n## Problems\n\n{verdict}\n"));
        let dir = repo_root().join("bench/results/in-cluster");
        std::fs::create_dir_all(&dir).expect("results dir");
        std::fs::write(dir.join(format!("{}.md", self.test)), &self.text).expect("write report");
        assert!(
            p.0.is_empty(),
            "{}: {} problem(s):{verdict}",
            self.test,
            p.0.len()
        );
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// One install test: a node session named `test`, its report (`title`)
/// and problems, the admin client; the report is written once `body` ends.
fn install(
    test: &str,
    title: &str,
    body: impl AsyncFnOnce(&Node, &mut Report, &mut Problems, kube::Client),
) {
    node::in_session(test, |node| {
        rt().block_on(async {
            let (mut r, mut p) = (Report::new(test, title, node), Problems::default());
            body(node, &mut r, &mut p, node.client().await).await;
            r.finish(p);
        })
    });
}

/// Runs the example Jobs (plus `extra`) to their ends; checks each against
/// docs/real-node.md's (and `extra`'s expected end).
async fn examples(
    client: &kube::Client,
    seen: &Seen,
    managed_by: Option<&str>,
    extra: &[(serde_json::Value, &str)],
    p: &mut Problems,
) -> String {
    let mut want: BTreeMap<String, String> = jobs::EXAMPLES_END
        .iter()
        .map(|(n, e)| (n.to_string(), e.to_string()))
        .collect();
    for job in jobs::examples(managed_by) {
        jobs::create(client, &job).await;
    }
    for (job, end) in extra {
        let made = jobs::create(client, job).await;
        want.insert(kube::ResourceExt::name_any(&made), end.to_string());
    }
    let names: Vec<String> = want.keys().cloned().collect();
    let ends = jobs::wait_ends(client, seen, &names, Duration::from_secs(300)).await;
    for (name, e) in &ends {
        p.check(
            e.line == want[name] && e.finalizers == 0,
            format!(
                "Job {name}: {} (want {}), finalizers left {}",
                e.line, want[name], e.finalizers
            ),
        );
    }
    jobs::ends_markdown(&ends)
}

fn kcm_runs_none_of_the_four(args: &str) -> bool {
    let ctrl = args
        .split_whitespace()
        .find_map(|a| a.strip_prefix("--controllers="))
        .unwrap_or("*");
    !ctrl.contains('*')
        && [
            "job-controller",
            "pod-garbage-collector-controller",
            "taint-eviction-controller",
            "disruption-controller",
        ]
        .iter()
        .all(|c| !ctrl.split(',').any(|x| x == *c))
}

fn controller_accounts(ns: &str, controllers: &[&str]) -> Vec<String> {
    controllers
        .iter()
        .map(|c| audit::sa(ns, &format!("kcm-rs-{}", checks::ctrl_account(c))))
        .collect()
}

/// What every install shows once applied, each in the report: the
/// replicas (probes, Lease), the example Jobs (with `managed_by`, plus
/// `extra` and its expected end) run to their ends, and in the audit log the
/// requests from the pods' addresses and the writers `w` allows. Returns the
/// replicas and the pods seen.
async fn verify(
    node: &Node,
    client: &kube::Client,
    r: &mut Report,
    p: &mut Problems,
    w: &Writers<'_>,
    managed_by: Option<&str>,
    extra: &[(serde_json::Value, &str)],
) -> (checks::Replicas, Seen) {
    let reps = checks::replicas(node, client, w.ns, "kcm-rs", p).await;
    r.section("Replicas, probes, Lease", &reps.markdown);
    let seen = Seen::watch(client.clone());
    jobs::evict_on_request(client.clone(), node.state.clone());
    let ends = examples(client, &seen, managed_by, extra, p).await;
    let title = match managed_by {
        Some(m) => format!("Jobs (the examples with spec.managedBy: {m}; the others without)"),
        None => "Example Jobs".to_string(),
    };
    r.section(&title, &ends);
    let events = audit::read(&node.audit_log());
    let creds = checks::in_cluster(&events, w.ns, &reps.ips, p);
    r.section(
        "Identities (audit log)",
        &format!("{creds}\n{}", checks::writers(&events, w, p)),
    );
    (reps, seen)
}

const FOUR: &[&str] = &[
    "job-controller",
    "pod-garbage-collector-controller",
    "taint-eviction-controller",
    "disruption-controller",
];

#[test]
#[ignore = "needs root and the real node: make realnode-install-test"]
fn manifests_replacing_kcm() {
    install(
        "manifests_replacing_kcm",
        "`kubectl apply -k manifests/`, replacing KCM's four controllers",
        manifests,
    );
}

async fn manifests(node: &Node, r: &mut Report, p: &mut Problems, client: kube::Client) {
    let ns = "kube-system";
    let kcm = node.kcm_args();
    p.check(
        kcm_runs_none_of_the_four(&kcm),
        "the node's KCM runs none of kcm-rs's four controllers",
    );
    let (a, a_digest) = node.import_image("A");
    let (b, b_digest) = node.import_image("B");
    node.kubectl(&[
        "label",
        "node",
        &node.name,
        "node-role.kubernetes.io/control-plane=",
    ]);
    support::install_crds(&client).await;
    r.section(
        "Setup",
        &format!(
            "The node's KCM already runs without kcm-rs's four controllers (nothing to restart): `{kcm}`.\n\n\
             Node `{}` labelled `node-role.kubernetes.io/control-plane=\"\"` (as kind's control-plane node); the Prometheus Operator's CRDs installed; \
             images imported with `ctr -n k8s.io images import`: A `{a}` {a_digest}, B `{b}` {b_digest}.\n\n\
             `kubectl apply -k manifests/` (as it is: base + monitoring, image `{a}`, imagePullPolicy IfNotPresent).",
            node.name
        ),
    );
    node.kubectl(&["apply", "-k", "manifests/"]);
    let w = Writers {
        ns,
        controllers: FOUR,
        kcm_jobs: None,
    };
    let (_, seen) = verify(node, &client, r, p, &w, None, &[]).await;

    // Upgrade A -> B -> A by rolling update, Jobs streaming throughout.
    let token = upgrade::metrics_token(node, ns).await;
    let before = upgrade::commits(&client, ns, &token).await;
    let stop = Arc::new(AtomicBool::new(false));
    let stream = upgrade::stream(client.clone(), Duration::from_secs(4), stop.clone());
    tokio::time::sleep(Duration::from_secs(15)).await;
    let window_start = jiff::Timestamp::now();
    let set_b = format!("kcm-rs={b}");
    let up = upgrade::roll(
        node,
        &client,
        ns,
        &token,
        "A -> B",
        &["-n", ns, "set", "image", "deployment/kcm-rs", &set_b],
    )
    .await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    let down = upgrade::roll(
        node,
        &client,
        ns,
        &token,
        "B -> A (rollout undo)",
        &["-n", ns, "rollout", "undo", "deployment/kcm-rs"],
    )
    .await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    let window_end = jiff::Timestamp::now();
    stop.store(true, Ordering::SeqCst);
    let names = stream.await.expect("stream");
    let stream_ends = jobs::wait_ends(&client, &seen, &names, Duration::from_secs(240)).await;
    for (name, e) in &stream_ends {
        p.check(
            e.line == jobs::STREAM_END && e.finalizers == 0,
            format!(
                "stream Job {name}: {}, finalizers left {}",
                e.line, e.finalizers
            ),
        );
    }
    let a_commit = before.values().next().cloned().unwrap_or_default();
    p.check(
        up.commits.values().all(|c| *c == format!("{a_commit}-b")) && up.commits.len() == 2,
        format!(
            "after A -> B both replicas report B's commit: {:?}",
            up.commits
        ),
    );
    p.check(
        down.commits.values().all(|c| *c == a_commit) && down.commits.len() == 2,
        format!(
            "after B -> A both replicas report A's commit: {:?}",
            down.commits
        ),
    );
    let events = audit::read(&node.audit_log());
    let in_window: Vec<audit::Event> = events
        .iter()
        .filter(|e| e.at >= window_start && e.at <= window_end)
        .cloned()
        .collect();
    let ctrls = controller_accounts(ns, FOUR);
    let hs = upgrade::handovers(&in_window, ns, "kcm-rs", &ctrls);
    p.check(
        !hs.is_empty(),
        format!(
            "leadership moved during the rollouts ({} handovers)",
            hs.len()
        ),
    );
    let gaps = upgrade::gaps_markdown(&hs);
    r.section(
        "Upgrade and rollback",
        &format!(
            "Replicas' `kcm_rs_build_info` git_commit before: {before:?}.\n\n| rollout | took | commits after |\n|---|---|---|\n\
             | {} | {:.0} s | {:?} |\n| {} | {:.0} s | {:?} |\n\n{} stream Jobs (one every 4 s, 3 completions, the second pod exits 1) ran through both:\n\n{}\n\
             Service gaps (audit log, between {window_start} and {window_end}):\n\n{gaps}",
            up.what, up.took.as_secs_f64(), up.commits, down.what, down.took.as_secs_f64(), down.commits,
            names.len(), upgrade::jobs_markdown(&stream_ends)
        ),
    );
    // No PodDisruptionBudget by default (one control-plane node would never
    // drain); the pdb component adds it for clusters with more.
    let none = node.kubectl(&["-n", ns, "get", "pdb", "-o", "name"]);
    p.check(
        none.trim().is_empty(),
        format!("no PodDisruptionBudget from manifests/: {none:?}"),
    );
    node.kubectl(&["apply", "-f", "manifests/pdb/pdb.yaml"]);
    // Its status is kcm-rs's disruption controller's.
    node.kubectl(&[
        "-n",
        ns,
        "wait",
        "--for=jsonpath={.status.disruptionsAllowed}=1",
        "pdb/kcm-rs",
        "--timeout=60s",
    ]);
    let pdb = upgrade::pdb(&client, ns, p).await;
    node.rollout_status(ns, "240s");
    r.section(
        "PodDisruptionBudget",
        &format!(
            "None with `manifests/` as it is; with the `manifests/pdb` component applied:\n\n{pdb}"
        ),
    );
}

#[test]
#[ignore = "needs root and the real node: make realnode-install-test"]
fn chart_in_another_namespace() {
    install(
        "chart_in_another_namespace",
        "The Helm chart in `kcm-system`, monitored",
        chart,
    );
}

async fn chart(node: &Node, r: &mut Report, p: &mut Problems, client: kube::Client) {
    let ns = "kcm-system";
    let (a, a_digest) = node.import_image("A");
    node.kubectl(&[
        "label",
        "node",
        &node.name,
        "node-role.kubernetes.io/control-plane=",
    ]);
    support::install_crds(&client).await;
    let helm = support::run_helm(&[
        "install",
        "kcm-rs",
        "charts/kcm-rs",
        "--namespace",
        ns,
        "--create-namespace",
        "--wait",
        "--timeout",
        "5m",
    ]);
    r.section(
        "Setup",
        &format!(
            "The node's KCM runs none of the four (`{}`). Node labelled control-plane; the Prometheus Operator's CRDs installed; image A `{a}` {a_digest} imported.\n\n\
             `helm install kcm-rs charts/kcm-rs --namespace {ns} --create-namespace --wait` (defaults):\n\n```\n{}\n```",
            node.kcm_args(),
            helm.trim()
        ),
    );
    let w = Writers {
        ns,
        controllers: FOUR,
        kcm_jobs: None,
    };
    verify(node, &client, r, p, &w, None, &[]).await;
    let mon = monitoring::run(node, ns, p).await;
    r.section("Monitoring", &mon);
}

#[test]
#[ignore = "needs root and the real node: make realnode-install-test"]
fn chart_upgrade_rollback() {
    install(
        "chart_upgrade_rollback",
        "The chart in `kcm-system`: upgrade from the previous chart version, rollback, image A -> B, while Jobs run",
        chart_upgrade::scenario,
    );
}

#[test]
#[ignore = "needs root and the real node: make realnode-install-test"]
fn beside_complete_kcm() {
    install(
        "beside_complete_kcm",
        "`kubectl apply -k manifests/beside-kcm` beside a complete KCM",
        beside,
    );
}

async fn beside(node: &Node, r: &mut Report, p: &mut Problems, client: kube::Client) {
    let ns = "kube-system";
    let kcm = node.complete_kcm();
    p.check(
        kcm.contains("--controllers=*"),
        format!("KCM runs every controller: {kcm}"),
    );
    let labels = node.kubectl(&[
        "get",
        "node",
        &node.name,
        "-o",
        "jsonpath={.metadata.labels}",
    ]);
    p.check(
        !labels.contains("node-role.kubernetes.io/control-plane"),
        format!("node without the control-plane label: {labels}"),
    );
    let (a, a_digest) = node.import_image("A");
    r.section(
        "Setup",
        &format!(
            "The node's KCM replaced by a complete one: `{kcm}` (every controller on by default, job-controller included, each under its own ServiceAccount).\n\n\
             Node `{}` labels: `{labels}` (no control-plane label). Image A `{a}` {a_digest} imported. `kubectl apply -k manifests/beside-kcm`.",
            node.name
        ),
    );
    node.kubectl(&["apply", "-k", "manifests/beside-kcm"]);
    let mut kcm_job = jobs::examples(None)
        .into_iter()
        .find(|j| j["metadata"]["name"] == "sample")
        .expect("sample");
    kcm_job["metadata"]["name"] = serde_json::json!("sample-kcm");
    let extra = [(
        kcm_job,
        "Complete (CompletionsReached) succeeded=6 failed=0 pods=6 pods-succeeded=6 pods-failed=0 ignored=0",
    )];
    let kcm_sa = audit::sa("kube-system", "job-controller");
    let w = Writers {
        ns,
        controllers: &["job-controller"],
        kcm_jobs: Some((&kcm_sa, &["sample-kcm"])),
    };
    let managed = Some("kcm-rs.dev/job-controller");
    verify(node, &client, r, p, &w, managed, &extra).await;
    let sas = node.kubectl(&["-n", ns, "get", "serviceaccounts", "-o", "name"]);
    let ours: Vec<&str> = sas.lines().filter(|l| l.contains("kcm-rs")).collect();
    p.check(
        ours == [
            "serviceaccount/kcm-rs",
            "serviceaccount/kcm-rs-job-controller",
        ],
        format!("only the job controller's identity installed: {ours:?}"),
    );
    let events = audit::read(&node.audit_log());
    // Pods created per identity: kcm-rs's for the managed Jobs, KCM's for sample-kcm.
    let created = |user: &str| {
        events
            .iter()
            .filter(|e| {
                e.user == user
                    && e.verb == "create"
                    && e.resource == "/pods"
                    && e.namespace == jobs::NS
                    && e.code < 300
            })
            .count()
    };
    let created_rs = created(&audit::sa(ns, "kcm-rs-job-controller"));
    let created_kcm = created(&kcm_sa);
    p.check(
        created_rs == 9 + 1 + 6 && created_kcm == 6,
        format!("pods created: kcm-rs-job-controller {created_rs} (managed Jobs' 16), KCM's job-controller {created_kcm} (sample-kcm's 6)"),
    );
    let foreign = events
        .iter()
        .filter(|e| {
            e.user.contains(":kcm-rs-")
                && e.is_write()
                && (e.name == "sample-kcm" || e.name.starts_with("sample-kcm-"))
        })
        .count();
    p.check(
        foreign == 0,
        format!("kcm-rs wrote nothing of KCM's Job sample-kcm ({foreign} writes)"),
    );
    r.section(
        "Beside KCM",
        &format!(
            "kcm-rs ServiceAccounts: {ours:?}. Pods created: by kcm-rs-job-controller {created_rs}, \
             by KCM's job-controller {created_kcm}; kcm-rs writes to sample-kcm or its pods: {foreign}.\n"
        ),
    );
}
