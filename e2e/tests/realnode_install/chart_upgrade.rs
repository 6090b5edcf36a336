//! The chart's upgrade paths while a stream of Jobs runs (one every 4 s, each
//! 3 completions with its second pod exiting 1): `helm install` of the
//! previous chart version (the chart as it was just before its version last
//! changed, from git), `helm upgrade` to this one, `helm rollback`, the
//! upgrade again, image A -> B by `helm upgrade --reuse-values --set
//! image.tag`, and `helm rollback` to A. After each step both replicas are
//! Ready and report the expected build; at the end every stream Job must
//! end exactly (no pod lost, none counted twice, none left with the
//! tracking finalizer), and the audit log gives each handover's gap.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, ResourceQuota};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kcm_e2e::binaries::repo_root;
use kcm_e2e::manifests as support;
use kube::Api;
use kube::api::ListParams;

use super::checks::{Problems, SELECTOR};
use super::node::{Node, run};
use super::upgrade;

/// `git` in the repository root: its trimmed stdout, or None.
fn git(args: &[&str]) -> Option<String> {
    run(std::process::Command::new("git").args(args))
        .ok()
        .map(|s| s.trim().to_string())
}

/// A chart's `version:` as `Chart.yaml` text has it.
fn version_of(chart_yaml: &str) -> String {
    chart_yaml
        .lines()
        .find_map(|l| l.strip_prefix("version:"))
        .map(|v| v.trim().trim_matches('"').to_string())
        .unwrap_or_default()
}

/// The previous chart version: the commit just before the one that set the
/// chart's current version (or HEAD, when the work tree changed it), its
/// chart extracted under `out` with the monitoring files its link names.
/// Returns (chart directory, its version, the commit).
pub fn previous_chart(out: &Path) -> (PathBuf, String, String) {
    let root = repo_root();
    let current = version_of(
        &std::fs::read_to_string(root.join("charts/kcm-rs/Chart.yaml")).expect("Chart.yaml"),
    );
    let at = |commit: &str| {
        git(&["show", &format!("{commit}:charts/kcm-rs/Chart.yaml")])
            .map(|t| version_of(&t))
            .unwrap_or_default()
    };
    let commit = if at("HEAD") != current {
        git(&["rev-parse", "HEAD"]).expect("HEAD")
    } else {
        let log = git(&["log", "--format=%H", "--", "charts/kcm-rs/Chart.yaml"]).expect("git log");
        let set = log
            .lines()
            .find(|c| at(c) == current && at(&format!("{c}^")) != current)
            .expect("the commit that set the chart's version");
        git(&["rev-parse", &format!("{set}^")]).expect("its parent")
    };
    let dir = out.join("previous-chart");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let script = format!(
        "git archive {commit} charts/kcm-rs manifests/monitoring | tar -x -C {}",
        dir.display()
    );
    run(std::process::Command::new("bash").args(["-c", &script])).expect("git archive");
    (dir.join("charts/kcm-rs"), at(&commit), commit)
}

/// What one step left running.
pub struct Step {
    pub what: String,
    pub command: String,
    pub took: Duration,
    pub revision: String,
    pub chart: String,
    pub image: String,
    pub commits: Vec<String>,
    /// The running containers' image digests (kubelet's imageID).
    pub image_ids: Vec<String>,
    pub ready: usize,
    pub holder: String,
    pub pdb: bool,
    pub quota: bool,
}

/// Runs `helm args` (with `--wait`), waits for the rollout, and reads what
/// runs: the release's revision, the pods' chart label and image, their
/// builds (kcm_rs_build_info), the Lease holder, the PDB and the quota.
pub async fn step(
    node: &Node,
    client: &kube::Client,
    ns: &str,
    token: &str,
    what: &str,
    args: &[&str],
) -> Step {
    let began = Instant::now();
    let mut full: Vec<&str> = args.to_vec();
    full.extend(["-n", ns, "--wait", "--timeout", "5m"]);
    let out = support::run_helm(&full);
    eprintln!("$ helm {}\n{}", full.join(" "), out.trim_end());
    node.rollout_status(ns, "300s");
    let took = began.elapsed();
    // The replaced pods may still be terminating: the new ones only.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let history = support::run_helm(&["history", "kcm-rs", "-n", ns, "--max", "1", "-o", "json"]);
    let revision = serde_json::from_str::<serde_json::Value>(&history)
        .ok()
        .and_then(|h| h[0]["revision"].as_i64())
        .map_or("?".into(), |r| r.to_string());
    let dep = Api::<Deployment>::namespaced(client.clone(), ns)
        .get("kcm-rs")
        .await
        .expect("Deployment");
    let template = dep.spec.template.clone();
    let chart = template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.as_ref())
        .and_then(|l| l.get("helm.sh/chart").cloned())
        .unwrap_or_default();
    let image = template
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default();
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(SELECTOR))
        .await
        .expect("pods");
    let image_ids: Vec<String> = pods
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| {
            p.status
                .as_ref()?
                .container_statuses
                .as_ref()?
                .first()
                .map(|c| c.image_id.clone())
        })
        .map(|id| id.rsplit('@').next().unwrap_or_default().to_string())
        .collect();
    let ready = pods
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .count();
    let holder = Api::<Lease>::namespaced(client.clone(), ns)
        .get_opt("kcm-rs")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
        .unwrap_or_default();
    let pdb = Api::<PodDisruptionBudget>::namespaced(client.clone(), ns)
        .get_opt("kcm-rs")
        .await
        .expect("PDB")
        .is_some();
    let quota = Api::<ResourceQuota>::namespaced(client.clone(), ns)
        .get_opt("kcm-rs-critical-pods")
        .await
        .expect("quota")
        .is_some();
    let commits = upgrade::commits(client, ns, token)
        .await
        .into_values()
        .collect();
    Step {
        what: what.into(),
        command: format!("helm {}", args.join(" ")),
        took,
        revision,
        chart,
        image,
        commits,
        image_ids,
        ready,
        holder,
        pdb,
        quota,
    }
}

pub fn steps_markdown(steps: &[Step]) -> String {
    let mut s = String::from(
        "| step | command | took | revision | chart (pods) | image | running image digests (kubelet) | builds (kcm_rs_build_info) | Ready | Lease holder | PDB | ResourceQuota |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for x in steps {
        s.push_str(&format!(
            "| {} | `{}` | {:.0} s | {} | {} | `{}` | {} | {} | {}/2 | {} | {} | {} |\n",
            x.what,
            x.command,
            x.took.as_secs_f64(),
            x.revision,
            x.chart,
            x.image,
            x.image_ids
                .iter()
                .map(|d| short(d))
                .collect::<Vec<_>>()
                .join(", "),
            x.commits.join(", "),
            x.ready,
            x.holder,
            if x.pdb { "yes" } else { "no" },
            if x.quota { "yes" } else { "no" },
        ));
    }
    s
}

/// A pod of system-cluster-critical in a namespace without a quota for the
/// class is refused; the chart's ResourceQuota (rendered for that namespace)
/// applied, the same pod is admitted.
async fn gke_quota(node: &Node, client: &kube::Client, p: &mut Problems) -> String {
    let ns = "gke-check";
    node.kubectl(&["create", "namespace", ns]);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "critical"},
        "spec": {"priorityClassName": "system-cluster-critical", "nodeName": "none",
                 "containers": [{"name": "c", "image": "busybox:1.36"}]}
    }))
    .expect("pod");
    let refused = match pods.create(&Default::default(), &pod).await {
        Ok(_) => "admitted".to_string(),
        Err(e) => e.to_string(),
    };
    p.check(
        refused.contains("insufficient quota to match these scopes"),
        format!("without a quota, a system-cluster-critical pod is refused: {refused}"),
    );
    let rendered = support::run_helm(&[
        "template",
        "kcm-rs",
        "charts/kcm-rs",
        "-n",
        ns,
        "--show-only",
        "templates/resourcequota.yaml",
    ]);
    let file = node.out.join("gke-quota.yaml");
    std::fs::write(&file, &rendered).expect("quota file");
    node.kubectl(&["apply", "-f", &file.display().to_string()]);
    let admitted = pods.create(&Default::default(), &pod).await;
    p.check(
        admitted.is_ok(),
        format!(
            "with the chart's quota the same pod is admitted: {:?}",
            admitted.as_ref().err()
        ),
    );
    let _ = pods.delete("critical", &Default::default()).await;
    format!(
        "This session's API server limits critical pods as GKE does (`--admission-control-config-file`: the ResourceQuota plugin's \
         `limitedResources` for pods of `system-node-critical` and `system-cluster-critical`).\n\n\
         - A `system-cluster-critical` pod in `{ns}`, no quota: `{}`\n\
         - `helm template -n {ns} --show-only templates/resourcequota.yaml` applied (`kcm-rs-critical-pods`), the same pod: {}\n\
         - In `kcm-system`, the previous chart (no quota of its own) needs one made by hand, as a GKE user had to: `by-hand`, scoped to the class.\n",
        refused.trim(),
        if admitted.is_ok() {
            "admitted"
        } else {
            "refused"
        }
    )
}

fn short(digest: &str) -> String {
    digest.chars().take(19).collect()
}

/// The image name's repository and tag.
pub fn split_image(name: &str) -> (&str, &str) {
    name.rsplit_once(':').expect("name:tag")
}

/// The scenario of `chart_upgrade_rollback` (main.rs).
pub async fn scenario(node: &Node, r: &mut super::Report, p: &mut Problems, client: kube::Client) {
    let ns = "kcm-system";
    let (a, a_digest) = node.import_image("A");
    let (b, b_digest) = node.import_image("B");
    let (repo, a_tag) = split_image(&a);
    let (b_repo, b_tag) = split_image(&b);
    p.check(
        repo == b_repo,
        format!("images A and B in one repository: {a}, {b}"),
    );
    node.kubectl(&[
        "label",
        "node",
        &node.name,
        "node-role.kubernetes.io/control-plane=",
    ]);
    support::install_crds(&client).await;
    let (prev, prev_version, prev_commit) = previous_chart(&node.out);
    let current = version_of(
        &std::fs::read_to_string(repo_root().join("charts/kcm-rs/Chart.yaml")).expect("Chart.yaml"),
    );
    let prev_dir = prev.display().to_string();
    let set_repo = format!("image.repository={repo}");
    let set_a = format!("image.tag={a_tag}");
    let set_b = format!("image.tag={b_tag}");
    r.section(
        "Setup",
        &format!(
            "The node's KCM runs none of the four (`{}`). Node labelled control-plane; the Prometheus Operator's CRDs installed; \
             images imported with `ctr -n k8s.io images import`: A `{a}` {a_digest}, B `{b}` {b_digest}.\n\n\
             The previous chart version: {prev_version} at {prev_commit} (the commit before the one that set {current}), \
             extracted with `git archive`; the current chart: {current} (`charts/kcm-rs`).",
            node.kcm_args()
        ),
    );

    // GKE's limit (this session's API server has it, node.rs): a critical
    // pod is refused where no quota covers its class; the chart's own quota
    // (0.2.0, outside kube-system) lets it in. The previous chart had none:
    // a GKE user had to make one by hand, as here in kcm-system.
    let gke = gke_quota(node, &client, p).await;
    node.kubectl(&["create", "namespace", ns]);
    let by_hand = serde_json::json!({"apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": "by-hand", "namespace": ns},
        "spec": {"hard": {"pods": "10"}, "scopeSelector": {"matchExpressions": [
            {"scopeName": "PriorityClass", "operator": "In", "values": ["system-cluster-critical"]}]}}});
    let file = node.out.join("by-hand-quota.json");
    std::fs::write(&file, by_hand.to_string()).expect("quota file");
    node.kubectl(&["apply", "-f", &file.display().to_string()]);
    r.section("GKE's PriorityClass quota", &gke);

    // The previous chart, with image A (its default repository was kcm-rs).
    let mut install = step(
        node,
        &client,
        ns,
        "",
        &format!("install {prev_version}"),
        &[
            "install", "kcm-rs", &prev_dir, "--set", &set_repo, "--set", &set_a,
        ],
    )
    .await;
    let token = upgrade::metrics_token(node, ns).await;
    let seen = super::jobs::Seen::watch(client.clone());
    let before = upgrade::commits(&client, ns, &token).await;
    let a_commit = before.values().next().cloned().unwrap_or_default();
    install.commits = before.values().cloned().collect();

    // --reuse-values alone keeps the old chart's defaults: the chart refuses
    // it before anything changes, saying what to run (UPGRADING.md).
    let reuse = support::try_helm(&[
        "upgrade",
        "kcm-rs",
        "charts/kcm-rs",
        "-n",
        ns,
        "--reuse-values",
    ]);
    let history = support::run_helm(&["history", "kcm-rs", "-n", ns, "-o", "json"]);
    let revisions = serde_json::from_str::<serde_json::Value>(&history)
        .ok()
        .and_then(|h| h.as_array().map(Vec::len))
        .unwrap_or(0);
    p.check(
        reuse
            .as_ref()
            .is_err_and(|e| e.contains("--reset-then-reuse-values"))
            && revisions == 1,
        format!(
            "helm upgrade --reuse-values from {prev_version} fails before any change (revisions: {revisions}): {}",
            match &reuse {
                Ok(o) => format!("succeeded: {}", o.trim()),
                Err(e) => e.lines().find(|l| l.contains("Error")).unwrap_or(e).trim().to_string(),
            }
        ),
    );

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stream = upgrade::stream(client.clone(), Duration::from_secs(4), stop.clone());
    tokio::time::sleep(Duration::from_secs(15)).await;
    let window_start = jiff::Timestamp::now();
    let mut steps = vec![install];
    let plan: [(String, Vec<&str>); 5] = [
        (
            format!("upgrade {prev_version} -> {current}"),
            vec![
                "upgrade",
                "kcm-rs",
                "charts/kcm-rs",
                "--reset-then-reuse-values",
            ],
        ),
        (
            format!("rollback to {prev_version}"),
            vec!["rollback", "kcm-rs", "1"],
        ),
        (
            format!("upgrade {prev_version} -> {current} again"),
            vec![
                "upgrade",
                "kcm-rs",
                "charts/kcm-rs",
                "--reset-then-reuse-values",
            ],
        ),
        (
            "image A -> B".into(),
            vec![
                "upgrade",
                "kcm-rs",
                "charts/kcm-rs",
                "--reuse-values",
                "--set",
                &set_b,
            ],
        ),
        (
            "rollback to image A".into(),
            vec!["rollback", "kcm-rs", "4"],
        ),
    ];
    for (what, args) in &plan {
        steps.push(step(node, &client, ns, &token, what, args).await);
        tokio::time::sleep(Duration::from_secs(15)).await;
    }
    let window_end = jiff::Timestamp::now();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let names = stream.await.expect("stream");
    let ends = super::jobs::wait_ends(&client, &seen, &names, Duration::from_secs(300)).await;
    for (name, e) in &ends {
        p.check(
            e.line == super::jobs::STREAM_END && e.finalizers == 0,
            format!(
                "stream Job {name}: {}, finalizers left {}",
                e.line, e.finalizers
            ),
        );
    }

    // Each step: both replicas Ready, a holder, the chart and image meant
    // (images A and B told apart by what the kubelet runs: the image ID of
    // the first step is A's; B's is another).
    let a_id = steps[0].image_ids.first().cloned().unwrap_or_default();
    let b_id = steps[4].image_ids.first().cloned().unwrap_or_default();
    p.check(
        !a_id.is_empty() && a_id != b_id,
        format!("images A and B run as different images: {a_id} / {b_id}"),
    );
    let want: [(&str, &str, bool, bool); 6] = [
        (&prev_version, &a_id, true, false),
        (&current, &a_id, false, true),
        (&prev_version, &a_id, true, false),
        (&current, &a_id, false, true),
        (&current, &b_id, false, true),
        (&current, &a_id, false, true),
    ];
    for (s, (chart, id, pdb, quota)) in steps.iter().zip(want) {
        p.check(
            s.ready == 2
                && !s.holder.is_empty()
                && s.chart == format!("kcm-rs-{chart}")
                && s.image_ids.len() == 2
                && s.image_ids.iter().all(|d| d == id)
                && s.commits.len() == 2
                && s.commits.iter().all(|c| c.starts_with(&a_commit))
                && s.pdb == pdb
                && s.quota == quota,
            format!(
                "{}: {}/2 Ready, holder {:?}, chart {} (want kcm-rs-{chart}), images {:?} (want {id}), builds {:?}, PDB {} (want {pdb}), quota {} (want {quota})",
                s.what, s.ready, s.holder, s.chart, s.image_ids, s.commits, s.pdb, s.quota
            ),
        );
    }
    let stray = Api::<Lease>::namespaced(client.clone(), "kube-system")
        .get_opt("kcm-rs")
        .await
        .expect("lease");
    p.check(
        stray.is_none(),
        "no kcm-rs Lease in kube-system: the Lease stayed in the release namespace",
    );

    let events = super::audit::read(&node.audit_log());
    let in_window: Vec<super::audit::Event> = events
        .iter()
        .filter(|e| e.at >= window_start && e.at <= window_end)
        .cloned()
        .collect();
    let ctrls = super::controller_accounts(ns, super::FOUR);
    let hs = upgrade::handovers(&in_window, ns, "kcm-rs", &ctrls);
    p.check(
        hs.len() >= 5,
        format!("leadership moved at each step ({} handovers)", hs.len()),
    );
    let gaps = upgrade::gaps_markdown(&hs);
    r.section(
        "Upgrades and rollbacks",
        &format!(
            "`helm upgrade kcm-rs charts/kcm-rs -n {ns} --reuse-values` from {prev_version}: {}.\n\n{}\n\
             {} stream Jobs (one every 4 s, 3 completions, the second pod exits 1) ran through steps 2-6:\n\n{}\n\
             Service gaps (audit log, between {window_start} and {window_end}):\n\n{gaps}",
            match &reuse {
                Ok(_) => "succeeded (unexpected)".to_string(),
                Err(e) => format!(
                    "refused, nothing changed (`{}`)",
                    e.lines().find(|l| l.contains("--reset-then-reuse-values")).unwrap_or("").trim()
                ),
            },
            steps_markdown(&steps),
            names.len(),
            upgrade::jobs_markdown(&ends)
        ),
    );
}
