//! The deployment manifests (`manifests/`): every document parses with the
//! expected kinds, kustomize builds them, the Deployment, Service and
//! dashboard pass server-side dry-run, kind's KCM patch is accepted by KCM;
//! and kcm-rs, run with the Deployment's flags as the `kube-system/kcm-rs`
//! ServiceAccount bound by `base/rbac.yaml`, works in all four controllers (and
//! leader election and events) without a single 403.

mod audit;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Pod, Secret, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kcm_e2e::binaries::ensure_built;
use kcm_e2e::kubelet;
use kcm_e2e::manifests as support;
use kcm_e2e::wait::{wait_for_list, wait_gone};
use kcm_e2e::{ControlPlane, TestNamespace};
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use support::*;

#[test]
fn every_manifest_parses_with_the_expected_kinds() {
    let on_disk = manifest_files();
    let mut listed: Vec<&str> = KINDS.iter().map(|(f, _)| *f).collect();
    listed.sort();
    assert_eq!(on_disk, listed, "every manifests/**/*.yaml is checked here");
    for (file, want) in KINDS {
        let want: Vec<&str> = want.split(' ').collect();
        assert_eq!(kinds(&docs(file)), want, "{file}");
    }
    for line in AGREE {
        let (left, right) = line.split_once(" = ").expect("left = right");
        assert_eq!(resolve(left), resolve(right), "{line}");
    }
    let labels = &docs("base/deployment.yaml")[0]["spec"]["template"]["metadata"]["labels"];
    let svc = &docs("base/service.yaml")[0];
    let sm = &docs("monitoring/servicemonitor.yaml")[0];
    let pdb = &docs("pdb/pdb.yaml")[0];
    for (selector, target) in [
        (&svc["spec"]["selector"], labels),
        (&pdb["spec"]["selector"]["matchLabels"], labels),
        (
            &sm["spec"]["selector"]["matchLabels"],
            &svc["metadata"]["labels"],
        ),
    ] {
        let selector = selector.as_object().expect("selector");
        assert!(
            selector.iter().all(|(k, v)| &target[k] == v),
            "{selector:?}"
        );
    }
    let cm = &docs("monitoring/dashboard.yaml")[0];
    let dash: Value = serde_json::from_str(text(&cm["data"]["kcm-rs.json"])).expect("JSON");
    assert!(dash["panels"].as_array().is_some_and(|p| p.len() > 10));
    // One cluster at a time: every selector of every panel takes the
    // dashboard's cluster variable, which lists the clusters kcm-rs is up in.
    let vars = dash["templating"]["list"].as_array().expect("variables");
    let cluster = vars.iter().find(|v| v["name"] == "cluster");
    let cluster = cluster.expect("a cluster variable");
    assert_eq!(
        cluster["query"]["query"],
        "label_values(up{job=\"kcm-rs\"}, cluster)"
    );
    assert_eq!(
        cluster["includeAll"], false,
        "All would add clusters together"
    );
    let panels = dash["panels"].as_array().expect("panels");
    for target in panels
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
    {
        let expr = text(&target["expr"]);
        let selectors = expr.matches("{job=\"kcm-rs\"").count();
        let scoped = expr
            .matches("{job=\"kcm-rs\", cluster=~\"$cluster\"")
            .count();
        assert!(
            selectors > 0 && selectors == scoped,
            "not scoped to $cluster: {expr}"
        );
    }

    // base lists its four files, the monitoring component its four, the pdb
    // component its one, and manifests/ is base and monitoring; kustomize
    // (kubectl's) builds exactly their objects, with the release's image.
    let layers = [
        ("base", "resources", &KINDS[..4]),
        ("monitoring", "resources", &KINDS[4..8]),
        ("pdb", "resources", &KINDS[8..9]),
    ];
    for (dir, key, files) in layers {
        let listed = docs(&format!("{dir}/kustomization.yaml"))[0][key].clone();
        let names: Vec<&str> = files.iter().map(|(f, _)| &f[dir.len() + 1..]).collect();
        assert_eq!(listed, json!(names), "{dir}/kustomization.yaml");
    }
    let top = &docs("kustomization.yaml")[0];
    assert_eq!(top["resources"], json!(["base"]));
    assert_eq!(top["components"], json!(["monitoring"]));
    for (dir, files) in [("base", &KINDS[..4]), ("", &KINDS[..8])] {
        let built = kustomize(dir);
        let all: Vec<Value> = files.iter().flat_map(|(f, _)| docs(f)).collect();
        let (mut got, mut want) = (kinds(&built), kinds(&all));
        got.sort();
        want.sort();
        assert_eq!(got, want, "kustomize manifests/{dir}");
        let deployment = built.iter().find(|d| d["kind"] == "Deployment");
        let image = &container(deployment.expect("Deployment"))["image"];
        // The release's repository (hack/release-checks.py holds it equal to
        // the Makefile's and the chart's) and version.
        let kustomization = docs("base/kustomization.yaml");
        let repository = text(&kustomization[0]["images"][0]["newName"]);
        let tagged = format!("{repository}:{}", env!("CARGO_PKG_VERSION"));
        assert_eq!(image, tagged.as_str(), "kustomize manifests/{dir}");
    }
}

/// One kind config per supported minor: its node image is that minor, pinned
/// by digest, and its kubeadm patch (in the format kind writes for that
/// minor: v1beta3's map before 1.37, v1beta4's list from 1.37) names exactly
/// kcm-rs's four controllers; upstream KCM accepts the string and rejects a
/// wrong name.
#[test]
fn kind_configs_switch_off_the_four_controllers_in_kcm() {
    let mut strings = BTreeSet::new();
    for minor in kcm_features::KubeVersion::ALL {
        let file = format!("kind/{minor}.yaml");
        let cluster = &docs(&file)[0];
        for node in cluster["nodes"].as_array().expect("nodes") {
            let image = text(&node["image"]);
            let (tag, digest) = image.split_once("@sha256:").unwrap_or_default();
            assert!(
                tag.starts_with(&format!("kindest/node:v{minor}.")),
                "{file}: {image}"
            );
            let hex = digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit());
            assert!(hex, "{file}: node image not pinned by digest: {image:?}");
        }
        let patch = text(&cluster["kubeadmConfigPatches"][0]);
        let cfg: Value = serde_yaml_ng::from_str(patch).expect("patch YAML");
        let args = &cfg["controllerManager"]["extraArgs"];
        let controllers = if minor.minor() >= 37 {
            assert_eq!(cfg["apiVersion"], "kubeadm.k8s.io/v1beta4", "{file}");
            let list = args.as_array().expect("v1beta4 extraArgs is a list");
            let arg = list.iter().find(|a| a["name"] == "controllers");
            text(&arg.expect("a controllers argument")["value"]).to_string()
        } else {
            text(&args["controllers"]).to_string()
        };
        let off: BTreeSet<&str> = controllers
            .split(',')
            .filter_map(|c| c.strip_prefix('-'))
            .collect();
        let ours = "disruption-controller job-controller pod-garbage-collector-controller \
                    taint-eviction-controller";
        assert_eq!(off, ours.split_whitespace().collect(), "{file}");
        strings.insert(controllers);
    }
    assert_eq!(
        strings.len(),
        1,
        "the same controllers everywhere: {strings:?}"
    );
    let controllers = strings.pop_first().expect("one");
    let kcm = ensure_built().expect("binaries");
    let run = |value: &str| {
        let mut cmd = Command::new(kcm.join("kcm-e2e-controller-manager"));
        cmd.arg("--kubeconfig=/nonexistent/kubeconfig");
        let out = cmd.arg(format!("--controllers={value}")).output();
        String::from_utf8_lossy(&out.expect("run KCM").stderr).into_owned()
    };
    // KCM validates flags before it reads the kubeconfig.
    let err = run(&controllers);
    let accepted = err.contains("/nonexistent/kubeconfig") && !err.contains("known controllers");
    assert!(accepted, "{err}");
    let err = run("*,-pod-garbage-collector");
    let msg = "pod-garbage-collector\\\" is not in the list of known controllers";
    assert!(err.contains(msg), "{err}");
}

#[tokio::test]
async fn kcm_rs_runs_under_the_manifests_rbac() {
    let began = Instant::now();
    let bin = kcm_rs_binary();
    let cp = ControlPlane::start_with_audit().expect("control plane");
    let admin = cp.client().await.expect("admin client");
    let mut kcm = start_kcm_rs(&cp, &admin, &bin, true).await;
    for file in [
        "base/deployment.yaml",
        "base/service.yaml",
        "monitoring/dashboard.yaml",
    ] {
        dry_run(&admin, file).await;
    }

    // (f) Leadership: kcm-rs creates and holds the Lease kube-system/kcm-rs.
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "kube-system");
    let lease = kcm
        .until(&leases, "kcm-rs", |l| !holder(l).is_empty())
        .await;
    // Its controllers' tokens are bound to the Secret its pod owns (made
    // before the Lease was sought, with no more than `secrets create`).
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "kube-system");
    let anchor = format!("{POD}-controller-tokens");
    let secret = kcm.ok(secrets.get(&anchor).await);
    let owner = &secret.owner_references()[0];
    let pod_uid = kcm_rs_pod(&admin).await;
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("Pod", POD, pod_uid.as_str())
    );
    assert_eq!(secret.type_.as_deref(), Some("kcm-rs.dev/token-binding"));
    assert!(secret.data.is_none(), "the anchor holds no data");
    let deadline = Instant::now() + WAIT;
    while !matches!(http_get(kcm.port, "/readyz").await, Ok((200, _))) {
        kcm.check(Instant::now() < deadline, "/readyz never 200");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let ns = TestNamespace::create(&admin, "manifests")
        .await
        .expect("ns");
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns.name);
    let jobs: Api<Job> = Api::namespaced(admin.clone(), &ns.name);
    // Created early, so kcm-rs has seen it when Job "ok" arrives.
    create(&pods, pod("ok-orphan", "ok", None)).await;
    let node = format!("{}-node", ns.name);
    let tainted = format!("{}-tainted", ns.name);
    let no_execute = vec![kubelet::taint("example.com/evict", None, "NoExecute")];
    kubelet::create_node(&admin, &node, true, vec![])
        .await
        .expect("node");
    let created = kubelet::create_node(&admin, &tainted, true, no_execute).await;
    created.expect("tainted node");

    // (a) FailJob on exit code 42: FailureTarget, then Failed.
    // (b) A Job that adopts an orphan pod (a live GET of the Job first, then
    // a pod patch) and completes.
    create(&jobs, job("fail42", true)).await;
    let mut ok = job("ok", false);
    ok["spec"]["manualSelector"] = json!(true);
    ok["spec"]["selector"] = json!({ "matchLabels": { "app": "ok" } });
    ok["spec"]["template"]["metadata"] = json!({ "labels": { "app": "ok" } });
    create(&jobs, ok).await;
    finish_job_pod(&kcm, &pods, "fail42", &node, 42).await;
    let adopted = |p: &Pod| p.owner_references().iter().any(|o| o.kind == "Job");
    kcm.until(&pods, "ok-orphan", adopted).await;
    end_pod(&kcm, &pods, "ok-orphan", &node, 0).await;
    kcm.until(&jobs, "fail42", |j| job_has(j, "FailureTarget"))
        .await;
    kcm.until(&jobs, "fail42", |j| job_has(j, "Failed")).await;
    kcm.until(&jobs, "ok", |j| job_has(j, "Complete")).await;

    // (b2) Suspending a running Job: the controller deletes its pod.
    create(&jobs, job("paused", false)).await;
    let lp = ListParams::default().labels("batch.kubernetes.io/job-name=paused");
    kcm.ok(wait_for_list(&pods, &lp, WAIT, "paused's pod", |ps| ps.len() == 1).await);
    let suspend = json!({ "spec": { "suspend": true } });
    let (pp, merge) = (Default::default(), kube::api::Patch::Merge(&suspend));
    kcm.ok(jobs.patch("paused", &pp, &merge).await);
    kcm.ok(wait_for_list(&pods, &lp, WAIT, "paused's pod gone", |ps| ps.is_empty()).await);

    // (c) Pod GC: a pod bound to a node that does not exist is deleted.
    let mut orphan = pod("orphan", "orphan", None);
    orphan["spec"]["nodeName"] = json!(format!("{}-ghost", ns.name));
    create(&pods, orphan).await;
    kcm.ok(wait_gone(&pods, "orphan", WAIT).await);

    // (d) Taint eviction: a running pod without toleration on a NoExecute node.
    let bound = kubelet::create_bound_pod(&pods, "victim", &tainted, None).await;
    bound.expect("victim");
    kcm.until(&pods, "victim", |p| {
        let cond = pod_condition(p, "DisruptionTarget");
        let reason = cond.and_then(|c| c.reason.as_deref());
        p.metadata.deletion_timestamp.is_some() && reason == Some("DeletionByTaintManager")
    })
    .await;

    // (e) Disruption: a PDB over a ReplicaSet's pod (owner from the informer
    // cache), one over the pod of a ReplicaSet whose Deployment is gone (the
    // generic finder GETs replicasets/scale), one selecting nothing; and a
    // stale DisruptionTarget condition reset.
    let rss: Api<ReplicaSet> = Api::namespaced(admin.clone(), &ns.name);
    for (name, replicas, orphaned) in [("plain", 3, false), ("scaled", 2, true)] {
        let rs = create(&rss, replica_set(name, replicas, orphaned)).await;
        let uid = rs.uid().expect("uid");
        create(&pods, pod(&format!("{name}-0"), name, Some((name, &uid)))).await;
    }
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(admin.clone(), &ns.name);
    let budgets = [
        ("plain", "maxUnavailable", json!(1), 3, 2),
        ("scaled", "minAvailable", json!("50%"), 2, 1),
        ("empty", "minAvailable", json!(1), 0, 1),
    ];
    for (name, budget, value, expected, desired) in budgets {
        let mut spec = json!({ "selector": { "matchLabels": { "app": name } } });
        spec[budget] = value;
        create(&pdbs, json!({ "metadata": { "name": name }, "spec": spec })).await;
        let synced = |p: &PodDisruptionBudget| {
            let status = p.status.as_ref();
            status.is_some_and(|s| s.observed_generation == Some(1))
        };
        let pdb = kcm.until(&pdbs, name, synced).await;
        let status = serde_json::to_value(pdb.status).expect("status");
        let (s, c) = (&status, &status["conditions"][0]);
        let got = json!({
            "expected, desired, healthy, allowed": [s["expectedPods"], s["desiredHealthy"],
                s["currentHealthy"], s["disruptionsAllowed"]],
            "condition": [c["type"], c["status"], c["reason"]],
        });
        let want = json!({
            "expected, desired, healthy, allowed": [expected, desired, 0, 0],
            "condition": ["DisruptionAllowed", "False", "InsufficientPods"],
        });
        assert_eq!(got, want, "PDB {name}: {status}");
    }
    create(&pods, pod("stale", "stale", None)).await;
    let evicting = kubelet::condition("DisruptionTarget", true, "EvictionByEvictionAPI", "");
    let added = kubelet::add_pod_condition(&pods, "stale", evicting).await;
    added.expect("condition");
    kcm.until(&pods, "stale", |p| {
        let cond = pod_condition(p, "DisruptionTarget");
        cond.is_some_and(|c| c.status == "False")
    })
    .await;

    // Events from the recorder, from three controllers.
    let events: Api<Event> = Api::namespaced(admin.clone(), &ns.name);
    let lp = ListParams::default();
    let found = wait_for_list(&events, &lp, WAIT, "events", |es| {
        let reasons: BTreeSet<&str> = es.iter().filter_map(|e| e.reason.as_deref()).collect();
        let want = ["TaintManagerEviction", "SuccessfulCreate", "NoPods"];
        want.iter().all(|r| reasons.contains(r))
    });
    kcm.ok(found.await);

    // (f) The same leader, having renewed (update) in between.
    let now = leases.get("kcm-rs").await.expect("lease");
    assert_eq!(holder(&now), holder(&lease));
    let spec = now.spec.expect("spec");
    assert!(spec.renew_time != spec.acquire_time, "renewed: {spec:?}");

    // /metrics over HTTPS: anonymous 401, an identity without the
    // metrics-reader role 403, one with it 200; TokenReview and
    // SubjectAccessReview cached across scrapes.
    let metrics = secured_metrics(&admin, kcm.port).await;
    // The admin client certificate (O=system:masters), verified against
    // --client-ca-file: allowed without a review.
    let state = cp.dir().join("state");
    let cert = kcm_e2e::https::Credential::Cert(&state.join("admin.crt"), &state.join("admin.key"));
    let (code, _) = kcm_e2e::https::get_as(kcm.port, "/metrics", cert)
        .await
        .expect("cert");
    eprintln!("GET /metrics with the admin client certificate -> {code}");
    assert_eq!(code, 200);

    // A controller's identity cannot do another's writes.
    cross_writes_are_denied(&cp, &admin, &ns.name).await;

    // No request was refused; every metric of the alerts and dashboard exists.
    let requests = metrics
        .lines()
        .filter(|l| l.starts_with("rest_client_requests_total{"));
    let requests: Vec<&str> = requests.collect();
    eprintln!("{}", requests.join("\n"));
    let refused = |l: &&&str| l.contains("code=\"403\"") || l.contains("code=\"401\"");
    let refused: Vec<&&str> = requests.iter().filter(refused).collect();
    kcm.check(refused.is_empty(), format!("refused: {refused:?}"));
    let leader = "leader_election_master_status{name=\"kcm-rs\"} 1";
    assert!(!requests.is_empty() && metrics.lines().any(|l| l == leader));
    let exposed = metrics.lines().filter_map(|l| l.split(['{', ' ']).next());
    let exposed: BTreeSet<&str> = exposed.collect();
    // Families with samples only after an error or a retry.
    let after_errors = [
        "pod_gc_collector_force_delete_pod_errors_total",
        "rest_client_request_retries_total",
    ];
    let mut missing = referenced_metrics();
    missing.retain(|m| !exposed.contains(m.as_str()) && !after_errors.contains(&m.as_str()));
    assert!(
        missing.is_empty(),
        "alerts/dashboard use unknown metrics: {missing:?}"
    );

    // SIGTERM: a clean exit that releases the Lease (update under the Role).
    let pid = kcm.child.id().to_string();
    let sent = Command::new("kill").args(["-TERM", &pid]).status();
    assert!(sent.expect("kill").success());
    let deadline = Instant::now() + WAIT;
    let status = loop {
        if let Some(s) = kcm.child.try_wait().expect("wait") {
            break s;
        }
        kcm.check(Instant::now() < deadline, "no exit after SIGTERM");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    kcm.check(status.success(), format!("exit {status}"));
    let released = leases.get("kcm-rs").await.expect("lease");
    kcm.check(holder(&released).is_empty(), "the Lease was not released");
    least_privilege_from_the_audit_log(&cp);
    // Each controller's token was renewed while it worked (every 3 s here),
    // and no request of theirs was refused across the renewals (above).
    let renewed = audit::token_requests(&cp.audit_log(), &audit::sa("kcm-rs"));
    eprintln!("TokenRequests by account: {renewed:?}");
    for account in CONTROLLER_ACCOUNTS {
        let n = renewed.get(*account).copied().unwrap_or(0);
        assert!(n >= 2, "{account}: {n} TokenRequests, no renewal");
    }
    // At --v=10 the log holds no token: neither the ones kcm-rs minted for
    // its controllers nor the ones it reviewed (all JWTs start "eyJ").
    let log = std::fs::read_to_string(&kcm.log).expect("kcm-rs log");
    let lines = log.lines().count();
    assert!(lines > 100, "a verbose log: {lines} lines");
    assert!(
        !log.contains("eyJ") && !log.contains("Bearer "),
        "a token in the log"
    );
    eprintln!("kcm-rs log at --v=10: {lines} lines, no token");
    // Start-up order: every controller's token is checked by a
    // SelfSubjectReview (its user confirmed) before the Lease is sought.
    let lease_sought = log.find("waiting for the lease").expect("lease log");
    for account in CONTROLLER_ACCOUNTS {
        let user = format!("system:serviceaccount:kube-system:{account}");
        let checked = log
            .lines()
            .position(|l| l.contains("token checked") && l.contains(&user));
        let at = checked.map(|i| log.lines().take(i).map(|l| l.len() + 1).sum::<usize>());
        assert!(
            at.is_some_and(|at| at < lease_sought),
            "{user}: no SelfSubjectReview before the Lease was sought"
        );
    }
    eprintln!(
        "kcm-rs under base/rbac.yaml: no 403, {:?} in all",
        began.elapsed()
    );
}

/// The curl transcript of the issue, and the cost of a scrape's checks.
async fn secured_metrics(admin: &kube::Client, port: u16) -> String {
    use kcm_e2e::https::{Credential, get_as};
    let crbs: Api<ClusterRoleBinding> = Api::all(admin.clone());
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), "default");
    for name in ["scraper", "stranger"] {
        create(&sas, json!({ "metadata": { "name": name } })).await;
    }
    create(
        &crbs,
        json!({
            "metadata": { "name": "kcm-rs-test-scraper" },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                "name": "system:kcm-rs:metrics-reader" },
            "subjects": [{ "kind": "ServiceAccount", "name": "scraper", "namespace": "default" }]
        }),
    )
    .await;
    let scraper = sa_token(admin, "default", "scraper").await;
    let stranger = sa_token(admin, "default", "stranger").await;
    let (anon, _) = get_as(port, "/metrics", Credential::None)
        .await
        .expect("anonymous");
    let (bad, _) = get_as(port, "/metrics", Credential::Bearer("not-a-token"))
        .await
        .expect("bad token");
    let (denied, why) = get_as(port, "/metrics", Credential::Bearer(&stranger))
        .await
        .expect("stranger");
    let (health, _) = get_as(port, "/healthz", Credential::None)
        .await
        .expect("healthz");
    eprintln!("GET /metrics anonymous -> {anon}\nGET /metrics bad token -> {bad}");
    eprintln!(
        "GET /metrics as default/stranger -> {denied} {}",
        why.trim()
    );
    eprintln!("GET /healthz anonymous -> {health}");
    assert_eq!((anon, bad, denied, health), (401, 401, 403, 200));
    let before = |m: &str, name: &str| -> f64 {
        m.lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let (code, first) = get_as(port, "/metrics", Credential::Bearer(&scraper))
        .await
        .expect("scrape");
    assert_eq!(code, 200, "{first}");
    let scrapes = 20;
    let mut last = String::new();
    for _ in 0..scrapes {
        let (code, body) = get_as(port, "/metrics", Credential::Bearer(&scraper))
            .await
            .expect("scrape");
        assert_eq!(code, 200);
        last = body;
    }
    let authn = "apiserver_delegated_authn_request_total";
    let authz = "apiserver_delegated_authz_request_total";
    let (tr, sar) = (
        before(&last, authn) - before(&first, authn),
        before(&last, authz) - before(&first, authz),
    );
    eprintln!(
        "{scrapes} scrapes as default/scraper within the 10 s cache: {tr} TokenReviews, {sar} SubjectAccessReviews"
    );
    assert!(
        tr <= 1.0 && sar <= 1.0,
        "cache: {tr} TokenReviews, {sar} SubjectAccessReviews"
    );
    last
}

/// Pod GC's identity creating a pod, taint eviction's updating a Job's
/// status: both refused by RBAC.
async fn cross_writes_are_denied(cp: &ControlPlane, admin: &kube::Client, ns: &str) {
    for (account, what) in [
        ("kcm-rs-pod-garbage-collector", "create a pod"),
        ("kcm-rs-taint-eviction-controller", "delete a Job"),
    ] {
        let token = sa_token(admin, "kube-system", account).await;
        let kc = cp.dir().join(format!("{account}.kubeconfig"));
        token_kubeconfig(cp.kubeconfig(), &token, &kc);
        let client = kcm_e2e::control_plane::client_from_kubeconfig(&kc)
            .await
            .expect("client");
        let refused = if what == "create a pod" {
            let pods: Api<Pod> = Api::namespaced(client, ns);
            pods.create(&Default::default(), &obj(pod("intruder", "x", None)))
                .await
                .err()
        } else {
            let jobs: Api<Job> = Api::namespaced(client, ns);
            jobs.delete("ok", &Default::default()).await.err()
        };
        match refused {
            Some(kube::Error::Api(e)) if e.code == 403 => {
                eprintln!("{account} may not {what}: 403")
            }
            other => panic!("{account} must not {what}: {other:?}"),
        }
    }
}

/// Grants that no request can show: (identity, verb, resource, why).
const ADMISSION_ONLY: &[(&str, &str, &str, &str)] = &[
    (
        "kcm-rs-job-controller",
        "update",
        "batch/jobs/finalizers",
        "admission-only: OwnerReferencesPermissionEnforcement checks it when a pod with \
         blockOwnerDeletion is created",
    ),
    (
        "kcm-rs-job-controller",
        "patch",
        "/events",
        "repeat-only: the recorder patches an event's count when it repeats (the \
         disruption controller's identity does so in this run)",
    ),
    (
        "kcm-rs-taint-eviction-controller",
        "patch",
        "/events",
        "repeat-only: as the job-controller's",
    ),
    (
        "kcm-rs",
        "watch",
        "coordination.k8s.io/leases",
        "standby-only: a replica waiting for a held Lease watches it, to take over at once \
         when it is released",
    ),
];

/// Every request of kcm-rs's identities was allowed, and every grant of
/// their roles was used (or is admission-only).
fn least_privilege_from_the_audit_log(cp: &ControlPlane) {
    let usage = audit::read(&cp.audit_log());
    let ours: Vec<&str> = std::iter::once("kcm-rs")
        .chain(CONTROLLER_ACCOUNTS.iter().copied())
        .collect();
    // The two cross writes above, refused on purpose; nothing else may be.
    let meant = [
        format!(
            "{} create /pods -> 403",
            audit::sa("kcm-rs-pod-garbage-collector")
        ),
        format!(
            "{} delete batch/jobs -> 403",
            audit::sa("kcm-rs-taint-eviction-controller")
        ),
        // start_kcm_rs checks that the process's own identity cannot.
        format!("{} list /secrets -> 403", audit::sa("kcm-rs")),
    ];
    for m in &meant {
        assert!(
            usage.refused.contains(m),
            "{m} not in the audit log: {:#?}",
            usage.refused
        );
    }
    let refused: Vec<&String> = usage
        .refused
        .iter()
        .filter(|r| {
            ours.iter()
                .any(|a| r.starts_with(&format!("{} ", audit::sa(a))))
        })
        .filter(|r| !meant.contains(r))
        .collect();
    let rbac = docs("base/rbac.yaml");
    let role_of = |name: &str| {
        rbac.iter()
            .filter(|d| {
                d["metadata"]["name"] == name && (d["kind"] == "ClusterRole" || d["kind"] == "Role")
            })
            .flat_map(audit::grants)
            .collect::<BTreeSet<_>>()
    };
    let mut unused = Vec::new();
    eprintln!("| identity | grant (verb resource) | requests in the audit log |\n|---|---|--:|");
    for &account in &ours {
        let role = if account == "kcm-rs" {
            "system:kcm-rs".to_string()
        } else {
            // kcm-rs-<controller> is bound to system:kcm-rs:<controller>.
            let controller = account.strip_prefix("kcm-rs-").unwrap_or(account);
            format!("system:kcm-rs:{controller}")
        };
        let used = usage
            .uses
            .get(&audit::sa(account))
            .cloned()
            .unwrap_or_default();
        for g in role_of(&role) {
            let n: usize = used
                .iter()
                .filter(|(u, _)| audit::covers(&g, u))
                .map(|(_, n)| n)
                .sum();
            let exempt = ADMISSION_ONLY
                .iter()
                .find(|(a, v, r, _)| *a == account && *v == g.verb && *r == g.resource)
                .map(|(.., why)| *why);
            // The informers stream their initial list in the watch
            // (WatchList); list is for an API server that refuses that.
            let streamed = g.verb == "list"
                && used
                    .iter()
                    .any(|(u, n)| *n > 0 && u.verb == "watch" && u.resource == g.resource);
            let exempt = exempt.or(streamed.then_some(
                "fallback-only: the watch streamed the initial list; LIST where an API server \
                 refuses that",
            ));
            let shown = match exempt {
                Some(why) if n == 0 => format!("0 ({why})"),
                _ => n.to_string(),
            };
            eprintln!("| {account} | {} {} | {shown} |", g.verb, g.resource);
            if n == 0 && exempt.is_none() {
                unused.push(format!("{account}: {} {}", g.verb, g.resource));
            }
        }
    }
    assert!(
        refused.is_empty(),
        "requests of kcm-rs's identities refused: {refused:#?}"
    );
    assert!(unused.is_empty(), "granted but never used: {unused:#?}");
}
