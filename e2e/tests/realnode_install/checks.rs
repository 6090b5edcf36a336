//! What every install must show on the real node: the Deployment's two
//! replicas running with in-cluster credentials, the kubelet's HTTPS probes
//! passing, one Lease held, and in the audit log the per-controller
//! identities as the only writers of what the controllers write.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, ResourceExt};

use super::audit::{self, Event, sa};
use super::node::Node;

pub const SELECTOR: &str = "app.kubernetes.io/name=kcm-rs";

/// Findings collected along a scenario; the test fails at the end if any
/// (after the report is written).
#[derive(Default)]
pub struct Problems(pub Vec<String>);

impl Problems {
    /// Records `what` only if it is a problem (checks run per event).
    pub fn quiet(&mut self, ok: bool, what: impl FnOnce() -> String) -> bool {
        if !ok {
            self.check(false, what());
        }
        ok
    }

    pub fn check(&mut self, ok: bool, what: impl Into<String>) {
        let what = what.into();
        eprintln!("{} {what}", if ok { "ok:" } else { "PROBLEM:" });
        if !ok {
            self.0.push(what);
        }
    }
}

/// The replicas as the checks saw them.
#[derive(Debug, Default)]
pub struct Replicas {
    /// pod IP -> pod name, for every kcm-rs pod seen.
    pub ips: HashMap<String, String>,
    pub names: Vec<String>,
    pub holder: String,
    pub markdown: String,
}

/// Waits for the Deployment's rollout, then checks its pods and the Lease.
pub async fn replicas(
    node: &Node,
    client: &kube::Client,
    ns: &str,
    lease: &str,
    p: &mut Problems,
) -> Replicas {
    node.rollout_status(ns, "240s");
    // Past the liveness probe's first checks (initialDelaySeconds 10,
    // period 10): a failing /livez would have restarted the container.
    tokio::time::sleep(Duration::from_secs(25)).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let list = pods
        .list(&ListParams::default().labels(SELECTOR))
        .await
        .expect("pods");
    let mut r = Replicas::default();
    let mut rows = String::from(
        "| pod | node | ready | restarts | probes (kubelet, HTTPS) | token volume | image |\n|---|---|---|---|---|---|---|\n",
    );
    let running: Vec<&Pod> = list
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    p.check(
        running.len() == 2,
        format!("{ns}: two kcm-rs replicas ({} running)", running.len()),
    );
    for pod in running {
        let name = pod.name_any();
        let spec = pod.spec.clone().unwrap_or_default();
        let st = pod.status.clone().unwrap_or_default();
        let ready = st
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let cs = st.container_statuses.clone().unwrap_or_default();
        let restarts: i32 = cs.iter().map(|c| c.restart_count).sum();
        let c = &spec.containers[0];
        let https = |pr: &Option<k8s_openapi::api::core::v1::Probe>| {
            pr.as_ref().and_then(|p| p.http_get.as_ref()).map(|h| {
                format!(
                    "{} {}",
                    h.scheme.clone().unwrap_or_default(),
                    h.path.clone().unwrap_or_default()
                )
            })
        };
        let probes = format!(
            "liveness {:?}, readiness {:?}",
            https(&c.liveness_probe),
            https(&c.readiness_probe)
        );
        let token = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name.starts_with("kube-api-access-"));
        let token = token.and_then(|v| v.projected.as_ref()).is_some_and(|pv| {
            pv.sources
                .iter()
                .flatten()
                .any(|s| s.service_account_token.is_some())
        });
        let image_id = cs.first().map(|c| c.image_id.clone()).unwrap_or_default();
        p.check(
            ready,
            format!(
                "{name}: Ready (readiness probe {})",
                https(&c.readiness_probe).unwrap_or_default()
            ),
        );
        p.check(
            restarts == 0,
            format!("{name}: no restart (liveness probe passing), restarts={restarts}"),
        );
        p.check(
            token,
            format!(
                "{name}: ServiceAccount token mounted (kube-api-access-*, {})",
                spec.service_account_name.clone().unwrap_or_default()
            ),
        );
        rows.push_str(&format!(
            "| {name} | {} | {ready} | {restarts} | {probes} | {token} | {} `{}` |\n",
            spec.node_name.clone().unwrap_or_default(),
            c.image.clone().unwrap_or_default(),
            image_id
                .rsplit(':')
                .next()
                .unwrap_or("")
                .get(..12)
                .unwrap_or("")
        ));
        if let Some(ip) = st.pod_ip.clone() {
            r.ips.insert(ip, name.clone());
        }
        r.names.push(name);
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let l = leases.get(lease).await.expect("the Lease");
    r.holder = l.spec.and_then(|s| s.holder_identity).unwrap_or_default();
    let holder_pod = r
        .holder
        .rsplit_once('_')
        .map(|(pod, _)| pod.to_string())
        .unwrap_or_default();
    p.check(
        r.names.contains(&holder_pod),
        format!("Lease {ns}/{lease} held by one replica: {}", r.holder),
    );
    rows.push_str(&format!(
        "\nLease `{ns}/{lease}`: holder `{}`; the other replica waits.\n",
        r.holder
    ));
    r.markdown = rows;
    r
}

/// In-cluster credentials: every request of kcm-rs's identities came from a
/// kcm-rs pod's IP (through the `kubernetes` Service: kube-proxy keeps the
/// source), none from elsewhere; and how many.
pub fn in_cluster(
    events: &[Event],
    ns: &str,
    ips: &HashMap<String, String>,
    p: &mut Problems,
) -> String {
    let ours = |e: &&Event| {
        e.user
            .starts_with(&format!("system:serviceaccount:{ns}:kcm-rs"))
    };
    let mut by_source: BTreeMap<String, usize> = BTreeMap::new();
    for e in events.iter().filter(ours) {
        *by_source.entry(e.source.clone()).or_default() += 1;
    }
    let elsewhere: Vec<&String> = by_source.keys().filter(|s| !ips.contains_key(*s)).collect();
    p.check(
        !by_source.is_empty() && elsewhere.is_empty(),
        format!("kcm-rs's requests all from its pods' IPs (others: {elsewhere:?})"),
    );
    let list: Vec<String> = by_source
        .iter()
        .map(|(ip, n)| {
            format!(
                "{ip} ({}): {n}",
                ips.get(ip).map(String::as_str).unwrap_or("?")
            )
        })
        .collect();
    format!(
        "Requests of `{ns}:kcm-rs*` identities by source address: {}\n",
        list.join(", ")
    )
}

/// Who may write what, for one install.
pub struct Writers<'a> {
    pub ns: &'a str,
    /// The kcm-rs controllers installed (`job-controller`, ...).
    pub controllers: &'a [&'a str],
    /// KCM's own job-controller identity and the Jobs it may write (beside KCM).
    pub kcm_jobs: Option<(&'a str, &'a [&'a str])>,
}

const ADMIN: &str = "kcm-rs-admin";

/// The identities' writes in the audit log against `w`: kcm-rs's process
/// account writes only its Lease, the token Secret and TokenRequests; each
/// controller's writes come under its own account; nobody else writes Jobs'
/// status, creates or deletes their pods or writes PDB status. Returns the
/// writers table (the harness admin, i.e. kubelet, scheduler, KCM helpers and
/// this test, summed on one line).
pub fn writers(events: &[Event], w: &Writers, p: &mut Problems) -> String {
    let process = sa(w.ns, "kcm-rs");
    let ctrl: BTreeSet<String> = w
        .controllers
        .iter()
        .map(|c| sa(w.ns, &format!("kcm-rs-{}", ctrl_account(c))))
        .collect();
    let writes: Vec<&Event> = events
        .iter()
        .filter(|e| e.is_write() && e.code < 300)
        .collect();
    let mut bad = 0;
    for e in writes.iter().filter(|e| e.user == process) {
        let fine = matches!(
            e.resource.as_str(),
            "coordination.k8s.io/leases"
                | "/secrets"
                | "/serviceaccounts/token"
                | "/events"
                | "events.k8s.io/events"
        );
        let what = || {
            format!(
                "the process account wrote {} {} {}/{}",
                e.verb, e.resource, e.namespace, e.name
            )
        };
        bad += usize::from(!p.quiet(fine, what));
    }
    p.check(
        bad == 0,
        "the process account writes only its Lease, its Secret, TokenRequests and events",
    );
    let kcm_rs = |u: &str| u.starts_with(&format!("system:serviceaccount:{}:kcm-rs-", w.ns));
    let mut bad = 0;
    for e in writes.iter().filter(|e| kcm_rs(&e.user)) {
        let what = || format!("kcm-rs wrote as {}: {} {}", e.user, e.verb, e.resource);
        bad += usize::from(!p.quiet(ctrl.contains(&e.user), what));
    }
    p.check(
        bad == 0,
        format!("kcm-rs writes only as the installed controllers {ctrl:?}"),
    );
    // What only the controllers write (the test creates Jobs and evicts
    // pods; the kubelet writes pod status; the scheduler binds).
    let controlled = |e: &&&Event| {
        (e.resource == "batch/jobs/status" || (e.resource == "batch/jobs" && e.verb != "create"))
            || (e.resource == "/pods" && e.namespace == super::jobs::NS && e.verb != "update")
            || e.resource == "policy/poddisruptionbudgets/status"
    };
    let mut by_user: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut bad = 0;
    for e in writes.iter().filter(controlled) {
        by_user
            .entry(e.user.clone())
            .or_default()
            .insert(format!("{} {}", e.verb, e.resource));
        // Beside KCM, its job-controller writes its own Jobs and their pods
        // (created by generateName: no name in the audit event).
        let kcm_job_ok = w.kcm_jobs.is_some_and(|(user, jobs)| {
            let of_its_job = |name: &str| {
                jobs.iter()
                    .any(|j| name == *j || name.starts_with(&format!("{j}-")))
            };
            e.user == user
                && (e.resource.starts_with("batch/jobs") && of_its_job(&e.name)
                    || e.resource == "/pods" && (e.name.is_empty() || of_its_job(&e.name)))
        });
        // The kubelet (the harness admin) deletes a pod whose graceful
        // deletion it finished (an evicted pod).
        let kubelet = e.user == ADMIN && e.resource == "/pods" && e.verb == "delete";
        let kcm_other = w.kcm_jobs.is_some()
            && e.user.starts_with("system:serviceaccount:kube-system:")
            && !kcm_rs(&e.user)
            && e.resource.starts_with("policy/");
        let what = || {
            format!(
                "{} {} {}/{} written by {}",
                e.verb, e.resource, e.namespace, e.name, e.user
            )
        };
        bad += usize::from(!p.quiet(
            ctrl.contains(&e.user) || kcm_job_ok || kcm_other || kubelet,
            what,
        ));
    }
    p.check(
        bad == 0,
        "Jobs, their pods and PDB status written only by the controllers' own identities",
    );
    let summary: Vec<String> = by_user
        .iter()
        .map(|(u, v)| {
            format!(
                "`{u}`: {}",
                v.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        })
        .collect();
    let mut all = audit::writers(events.iter().filter(|e| e.user != ADMIN));
    let admin = audit::writers(events.iter().filter(|e| e.user == ADMIN));
    let admin_total: usize = admin.values().flat_map(|m| m.values()).sum();
    all.insert(
        format!("{ADMIN} (kubelet, scheduler, node's KCM, this test; {admin_total} writes)"),
        BTreeMap::new(),
    );
    format!(
        "Writers of Jobs (status, patches), the Jobs' pods (create, patch, delete) and PDB status: {}\n\n{}",
        summary.join("; "),
        audit::writers_markdown(&all)
    )
}

/// The ServiceAccount suffix of a controller (`--controllers` name).
pub fn ctrl_account(c: &str) -> &str {
    match c {
        "pod-garbage-collector-controller" => "pod-garbage-collector",
        other => other,
    }
}
