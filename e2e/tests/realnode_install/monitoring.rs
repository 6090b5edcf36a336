//! Prometheus (the Debian package) against the live pods: the installed
//! ServiceMonitor translated into the scrape config the Prometheus Operator
//! generates from it (the endpoints of the selected Service, its TLS
//! settings, its relabelling; its `authorization.credentials`, a key of a
//! Secret in its namespace, read as the Operator reads it and given to
//! Prometheus as `authorization.credentials_file`), the installed
//! PrometheusRule loaded, and `KcmRsDown` firing when the Deployment is
//! scaled to zero and clearing after. Prometheus's own account gets 403: only
//! the scraper's token may read /metrics.
//!
//! Debian builds Prometheus without `kubernetes_sd_configs` (no client-go in
//! Debian), so the Service discovery is replayed: a task lists the Endpoints
//! of the Services the ServiceMonitor selects every 2 s and writes the
//! targets with the `__meta_kubernetes_*` labels the `endpoints` role gives
//! into a `file_sd_configs` file; the Operator's relabelling then runs on
//! them unchanged.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Endpoints, Pod, Secret, Service};
use kube::api::ListParams;
use kube::{Api, ResourceExt};

use kcm_e2e::prometheus::Prometheus;
use serde_json::{Value, json};

use super::checks::{Problems, SELECTOR};
use super::node::{Node, path};

/// The Operator's scrape config for endpoint `i` of ServiceMonitor `sm`, its
/// targets from `targets_file` (see [`discover`]), authenticating with
/// `token_file` (what [`endpoint_token`] read).
/// Panics on a field it does not translate, so a changed ServiceMonitor is
/// not scraped with settings it does not have.
pub fn scrape_config(sm: &Value, i: usize, targets_file: &str, token_file: &str) -> Value {
    let spec = &sm["spec"];
    let ns = sm["metadata"]["namespace"].as_str().expect("namespace");
    let name = sm["metadata"]["name"].as_str().expect("name");
    let ep = &spec["endpoints"][i];
    let known = [
        "port",
        "scheme",
        "tlsConfig",
        "authorization",
        "path",
        "interval",
        "scrapeTimeout",
    ];
    for k in ep.as_object().expect("endpoint").keys() {
        assert!(
            known.contains(&k.as_str()),
            "ServiceMonitor endpoint field {k} is not translated"
        );
    }
    for k in spec.as_object().expect("spec").keys() {
        assert!(
            ["selector", "namespaceSelector", "endpoints"].contains(&k.as_str()),
            "ServiceMonitor field {k} is not translated"
        );
    }
    let mut relabel =
        vec![json!({ "source_labels": ["job"], "target_label": "__tmp_prometheus_job_name" })];
    for (k, v) in spec["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels")
    {
        let label = label_name(k);
        relabel.push(json!({ "action": "keep",
            "source_labels": [format!("__meta_kubernetes_service_label_{label}"), format!("__meta_kubernetes_service_labelpresent_{label}")],
            "regex": format!("({});true", v.as_str().expect("label value")) }));
    }
    let port = ep["port"].as_str().expect("endpoint port name");
    relabel.push(json!({ "action": "keep", "source_labels": ["__meta_kubernetes_endpoint_port_name"], "regex": port }));
    for (kind, label) in [("Node", "node"), ("Pod", "pod")] {
        relabel.push(json!({ "source_labels": ["__meta_kubernetes_endpoint_address_target_kind", "__meta_kubernetes_endpoint_address_target_name"],
            "separator": ";", "regex": format!("{kind};(.*)"), "replacement": "${1}", "target_label": label }));
    }
    for (meta, label) in [
        ("namespace", "namespace"),
        ("service_name", "service"),
        ("pod_name", "pod"),
        ("pod_container_name", "container"),
    ] {
        relabel.push(json!({ "source_labels": [format!("__meta_kubernetes_{meta}")], "target_label": label }));
    }
    // The job label: the Service's name (no jobLabel set).
    relabel.push(json!({ "source_labels": ["__meta_kubernetes_service_name"], "target_label": "job", "replacement": "${1}" }));
    relabel.push(json!({ "target_label": "endpoint", "replacement": port }));
    let mut c = json!({
        "job_name": format!("serviceMonitor/{ns}/{name}/{i}"),
        "honor_labels": false,
        // In place of kubernetes_sd_configs [{role: endpoints, namespaces: {names: ...}}].
        "file_sd_configs": [{ "files": [targets_file], "refresh_interval": "5s" }],
        "scheme": ep["scheme"].as_str().unwrap_or("http"),
        "metrics_path": ep["path"].as_str().unwrap_or("/metrics"),
        "relabel_configs": relabel,
    });
    for (from, to) in [
        ("interval", "scrape_interval"),
        ("scrapeTimeout", "scrape_timeout"),
    ] {
        if let Some(v) = ep[from].as_str() {
            c[to] = json!(v);
        }
    }
    if ep["tlsConfig"].is_object() {
        let keys: Vec<&String> = ep["tlsConfig"].as_object().expect("tls").keys().collect();
        assert_eq!(
            keys,
            ["insecureSkipVerify"],
            "tlsConfig fields not translated"
        );
        c["tls_config"] = json!({ "insecure_skip_verify": ep["tlsConfig"]["insecureSkipVerify"] });
    }
    // The Operator copies the Secret's key into Prometheus's config; here
    // Prometheus reads it from a file, the same token.
    if ep["authorization"].is_object() {
        let keys: Vec<&String> = ep["authorization"]
            .as_object()
            .expect("auth")
            .keys()
            .collect();
        assert!(
            keys.iter()
                .all(|k| ["type", "credentials"].contains(&k.as_str())),
            "authorization fields not translated: {keys:?}"
        );
        let kind = ep["authorization"]["type"].as_str().unwrap_or("Bearer");
        c["authorization"] = json!({ "type": kind, "credentials_file": token_file });
    }
    c
}

/// The credentials endpoint `i` of ServiceMonitor `sm` names
/// (`authorization.credentials`: a key of a Secret in the ServiceMonitor's
/// namespace), read as the Operator reads them, once KCM's token controller
/// has filled the Secret in (up to 60 s).
pub async fn endpoint_token(client: &kube::Client, sm: &Value, i: usize) -> String {
    let ns = sm["metadata"]["namespace"].as_str().expect("namespace");
    let cred = &sm["spec"]["endpoints"][i]["authorization"]["credentials"];
    let name = cred["name"].as_str().expect("credentials name");
    let key = cred["key"].as_str().expect("credentials key");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let found = secrets.get_opt(name).await.ok().flatten();
        let value = found.and_then(|s| s.data?.remove(key));
        if let Some(v) = value.filter(|v| !v.0.is_empty()) {
            return String::from_utf8(v.0).expect("a UTF-8 token");
        }
        assert!(
            Instant::now() < deadline,
            "Secret {ns}/{name} has no {key:?} after 60 s (KCM's token controller?)"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The ServiceMonitor `kcm-rs` of namespace `ns`, as installed.
pub fn service_monitor(node: &Node, ns: &str) -> Value {
    let out = node.kubectl(&["-n", ns, "get", "servicemonitor", "kcm-rs", "-o", "json"]);
    serde_json::from_str(&out).expect("ServiceMonitor")
}

/// A token of Prometheus's own account (kube-prometheus's
/// monitoring/prometheus-k8s), which needs no right on kcm-rs any more.
fn prometheus_own_token(node: &Node) -> String {
    let _ = node.try_kubectl(&["create", "namespace", "monitoring"]);
    let _ = node.try_kubectl(&[
        "-n",
        "monitoring",
        "create",
        "serviceaccount",
        "prometheus-k8s",
    ]);
    // Not echoed: a token.
    let args = [
        "-n",
        "monitoring",
        "create",
        "token",
        "prometheus-k8s",
        "--duration=1h",
    ];
    let token = node.try_kubectl(&args).expect("kubectl create token");
    token.trim().to_string()
}

/// The HTTP status of GET https://<ip>:10257/metrics with `token`.
fn metrics_status(ip: &str, token: &str) -> String {
    let auth = format!("Authorization: Bearer {token}");
    let url = format!("https://{ip}:10257/metrics");
    let args = [
        "-sk",
        "--max-time",
        "5",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-H",
        &auth,
        &url,
    ];
    super::node::run(std::process::Command::new("curl").args(args)).unwrap_or_else(|e| e)
}

/// Prometheus's label name for a Kubernetes label key.
fn label_name(k: &str) -> String {
    k.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// Replays Prometheus's Kubernetes Service discovery (role `endpoints`) for
/// ServiceMonitor `sm` into the file_sd file `file`, every 2 s: each address
/// (ready or not) and port of the Endpoints of every Service its selector
/// and namespaceSelector pick, with the `__meta_kubernetes_*` labels that
/// role attaches (namespace, service name and labels, endpoint port and
/// readiness, target pod and container).
pub fn discover(client: kube::Client, sm: Value, file: PathBuf) {
    tokio::spawn(async move {
        let spec = &sm["spec"];
        let own = sm["metadata"]["namespace"].clone();
        let namespaces = spec["namespaceSelector"]["matchNames"]
            .as_array()
            .cloned()
            .unwrap_or_else(|| vec![own]);
        let selector: Vec<String> = spec["selector"]["matchLabels"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
            .collect();
        loop {
            let mut groups = Vec::new();
            for ns in namespaces.iter().filter_map(Value::as_str) {
                let services: Api<Service> = Api::namespaced(client.clone(), ns);
                let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), ns);
                let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
                let lp = ListParams::default().labels(&selector.join(","));
                let Ok(list) = services.list(&lp).await else {
                    continue;
                };
                for svc in list.items {
                    let Ok(Some(ep)) = endpoints.get_opt(&svc.name_any()).await else {
                        continue;
                    };
                    let mut base = serde_json::Map::new();
                    base.insert("__meta_kubernetes_namespace".into(), json!(ns));
                    base.insert(
                        "__meta_kubernetes_service_name".into(),
                        json!(svc.name_any()),
                    );
                    for (k, v) in svc.labels() {
                        base.insert(
                            format!("__meta_kubernetes_service_label_{}", label_name(k)),
                            json!(v),
                        );
                        base.insert(
                            format!("__meta_kubernetes_service_labelpresent_{}", label_name(k)),
                            json!("true"),
                        );
                    }
                    for subset in ep.subsets.into_iter().flatten() {
                        let ready = subset.addresses.into_iter().flatten().map(|a| (a, "true"));
                        let not_ready = subset
                            .not_ready_addresses
                            .into_iter()
                            .flatten()
                            .map(|a| (a, "false"));
                        for (addr, is_ready) in ready.chain(not_ready) {
                            for port in subset.ports.iter().flatten() {
                                let mut labels = base.clone();
                                labels.insert(
                                    "__meta_kubernetes_endpoint_port_name".into(),
                                    json!(port.name.clone().unwrap_or_default()),
                                );
                                labels.insert(
                                    "__meta_kubernetes_endpoint_port_protocol".into(),
                                    json!(port.protocol.clone().unwrap_or_default()),
                                );
                                labels.insert(
                                    "__meta_kubernetes_endpoint_ready".into(),
                                    json!(is_ready),
                                );
                                if let Some(t) = &addr.target_ref {
                                    let (kind, name) = (
                                        t.kind.clone().unwrap_or_default(),
                                        t.name.clone().unwrap_or_default(),
                                    );
                                    labels.insert(
                                        "__meta_kubernetes_endpoint_address_target_kind".into(),
                                        json!(kind),
                                    );
                                    labels.insert(
                                        "__meta_kubernetes_endpoint_address_target_name".into(),
                                        json!(name),
                                    );
                                    if kind == "Pod"
                                        && let Ok(pod) = pods.get(&name).await
                                    {
                                        labels.insert(
                                            "__meta_kubernetes_pod_name".into(),
                                            json!(name),
                                        );
                                        labels.insert(
                                            "__meta_kubernetes_pod_ip".into(),
                                            json!(addr.ip),
                                        );
                                        let spec = pod.spec.unwrap_or_default();
                                        let c = spec.containers.iter().find(|c| {
                                            c.ports
                                                .iter()
                                                .flatten()
                                                .any(|cp| cp.container_port == port.port)
                                        });
                                        if let Some(c) = c {
                                            labels.insert(
                                                "__meta_kubernetes_pod_container_name".into(),
                                                json!(c.name),
                                            );
                                        }
                                    }
                                }
                                groups.push(json!({ "targets": [format!("{}:{}", addr.ip, port.port)], "labels": labels }));
                            }
                        }
                    }
                }
            }
            // Whole files only: Prometheus may read at any moment.
            let tmp = file.with_extension("tmp");
            if std::fs::write(&tmp, Value::Array(groups).to_string()).is_ok() {
                let _ = std::fs::rename(&tmp, &file);
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    });
}

/// Waits (up to 90 s: three evaluation intervals) until every rule group
/// has been evaluated after `t`.
async fn evaluated_after(prom: &Prometheus, t: jiff::Timestamp) -> bool {
    let deadline = Instant::now() + Duration::from_secs(90);
    while Instant::now() < deadline {
        let rules = prom.api("rules", &[]).await.expect("rules");
        let groups = rules["groups"].as_array().cloned().unwrap_or_default();
        let after = |g: &Value| {
            g["lastEvaluation"]
                .as_str()
                .and_then(|s| s.parse::<jiff::Timestamp>().ok())
                .is_some_and(|e| e > t)
        };
        if !groups.is_empty() && groups.iter().all(after) {
            return true;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    false
}

fn alert_state(alerts: &Value, name: &str) -> Option<String> {
    let list = alerts["alerts"].as_array()?;
    let a = list.iter().find(|a| a["labels"]["alertname"] == name)?;
    a["state"].as_str().map(str::to_string)
}

/// Scrapes the install in `ns` with its own ServiceMonitor and rules, then
/// scales it to zero and back; returns the report's section.
pub async fn run(node: &Node, ns: &str, p: &mut Problems) -> String {
    let sm = service_monitor(node, ns);
    let rule: Value = serde_json::from_str(&node.kubectl(&[
        "-n",
        ns,
        "get",
        "prometheusrule",
        "kcm-rs",
        "-o",
        "json",
    ]))
    .expect("PrometheusRule");
    let eps = sm["spec"]["endpoints"]
        .as_array()
        .map(Vec::len)
        .unwrap_or(0);
    p.check(eps == 1, format!("one ServiceMonitor endpoint: {eps}"));
    let token = endpoint_token(&node.client().await, &sm, 0).await;
    let token_file = node.out.join("prometheus.token");
    std::fs::write(&token_file, &token).expect("token file");
    let targets_file = node.out.join("targets.json");
    discover(node.client().await, sm.clone(), targets_file.clone());
    let scrapes: Vec<Value> = (0..eps)
        .map(|i| scrape_config(&sm, i, path(&targets_file), path(&token_file)))
        .collect();
    // The Operator's default evaluation interval.
    let config = json!({ "global": { "evaluation_interval": "30s" }, "scrape_configs": scrapes });
    std::fs::write(
        node.out.join("prometheus.json"),
        serde_json::to_string_pretty(&config).expect("JSON"),
    )
    .expect("write");
    let prom = Prometheus::start_config(config, Some(&rule["spec"]))
        .await
        .expect("Prometheus");

    // Both replicas scraped through the Service's endpoints.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut targets = Vec::new();
    while Instant::now() < deadline {
        targets = prom.targets().await.expect("targets");
        if targets.len() == 2 && targets.iter().all(|(h, _)| h == "up") {
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let up_at = jiff::Timestamp::now();
    p.check(
        targets.len() == 2 && targets.iter().all(|(h, _)| h == "up"),
        format!("Prometheus scrapes both replicas: {targets:?}"),
    );
    // Only the scraper's token reads /metrics: Prometheus's own is refused.
    let pods: Api<Pod> = Api::namespaced(node.client().await, ns);
    let listed = pods.list(&ListParams::default().labels(SELECTOR)).await;
    let ip = listed
        .ok()
        .and_then(|l| l.items.into_iter().find_map(|p| p.status?.pod_ip));
    let ip = ip.unwrap_or_default();
    let (with_scraper, with_own) = (
        metrics_status(&ip, &token),
        metrics_status(&ip, &prometheus_own_token(node)),
    );
    p.check(
        with_scraper == "200" && with_own == "403",
        format!(
            "GET /metrics of {ip}: the scraper's token {with_scraper}, Prometheus's own {with_own}"
        ),
    );
    let leaders = prom
        .query(r#"sum(leader_election_master_status{job="kcm-rs"})"#)
        .await
        .expect("query");
    let leaders = leaders
        .first()
        .map(|v| v["value"][1].clone())
        .unwrap_or_default();
    p.check(
        leaders == "1",
        format!("one leader among the scraped replicas: {leaders}"),
    );
    let loaded = prom
        .api("rules", &[("type", "alert")])
        .await
        .expect("rules");
    let n_loaded: usize = loaded["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|g| g["rules"].as_array().map_or(0, Vec::len))
        .sum();
    let n_defined: usize = rule["spec"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|g| {
            g["rules"]
                .as_array()
                .map_or(0, |r| r.iter().filter(|r| r["alert"].is_string()).count())
        })
        .sum();
    p.check(
        n_loaded == n_defined && n_loaded > 0,
        format!("alerting rules loaded: {n_loaded} of {n_defined}"),
    );
    // The rules' first evaluation may precede the first scrape (then
    // `absent(up == 1)` holds and KcmRsDown is pending): judge it by an
    // evaluation of every group made after both targets were seen up.
    let evaluated = evaluated_after(&prom, up_at).await;
    let before = prom.api("alerts", &[]).await.expect("alerts");
    let state = alert_state(&before, "KcmRsDown");
    p.check(
        evaluated && state.is_none(),
        format!("KcmRsDown inactive while both replicas are up (evaluated after they were up: {evaluated}; state {state:?})"),
    );

    // Scaled to zero: the targets go, KcmRsDown goes pending, then firing
    // after its `for` (5m).
    let scaled = Instant::now();
    let scaled_at = jiff::Timestamp::now();
    node.kubectl(&["-n", ns, "scale", "deployment/kcm-rs", "--replicas=0"]);
    let (mut pending, mut firing) = (None, None);
    while firing.is_none() && scaled.elapsed() < Duration::from_secs(480) {
        let alerts = prom.api("alerts", &[]).await.expect("alerts");
        match alert_state(&alerts, "KcmRsDown").as_deref() {
            Some("pending") if pending.is_none() => pending = Some(scaled.elapsed()),
            Some("firing") => firing = Some(scaled.elapsed()),
            _ => {}
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    p.check(firing.is_some(), format!("KcmRsDown fired after scaling to zero: pending at {pending:.0?}, firing at {firing:.0?}"));
    let restored = Instant::now();
    let restored_at = jiff::Timestamp::now();
    node.kubectl(&["-n", ns, "scale", "deployment/kcm-rs", "--replicas=2"]);
    let mut cleared = None;
    while cleared.is_none() && restored.elapsed() < Duration::from_secs(240) {
        let alerts = prom.api("alerts", &[]).await.expect("alerts");
        if alert_state(&alerts, "KcmRsDown").is_none() {
            cleared = Some(restored.elapsed());
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    p.check(
        cleared.is_some(),
        format!("KcmRsDown cleared after scaling back to 2: {cleared:.0?}"),
    );
    node.rollout_status(ns, "240s");
    format!(
        "Prometheus {} (config `prometheus.json`: Service discovery through the API server, the ServiceMonitor's \
         endpoint: {}, its credentials read from Secret `{ns}/{}` key `{}` as the Operator reads them): targets {:?}; \
         GET /metrics of a replica: {with_scraper} with that token, {with_own} with Prometheus's own (`monitoring/prometheus-k8s`); \
         `sum(leader_election_master_status)` = {leaders}; alerting rules loaded {n_loaded}/{n_defined}.\n\n\
         | step (UTC) | KcmRsDown |\n|---|---|\n| both replicas up | inactive |\n\
         | scaled to 0 at {} | pending after {} ({}), firing after {} ({}) (`for: 5m`, evaluation every 30s) |\n\
         | scaled back to 2 at {} | cleared after {} ({}) |\n",
        prometheus_version(),
        serde_json::to_string(&sm["spec"]["endpoints"][0]).unwrap_or_default(),
        text_of(&sm["spec"]["endpoints"][0]["authorization"]["credentials"]["name"]),
        text_of(&sm["spec"]["endpoints"][0]["authorization"]["credentials"]["key"]),
        targets,
        clock(scaled_at, Some(Duration::ZERO)),
        secs(pending),
        clock(scaled_at, pending),
        secs(firing),
        clock(scaled_at, firing),
        clock(restored_at, Some(Duration::ZERO)),
        secs(cleared),
        clock(restored_at, cleared),
    )
}

fn text_of(v: &Value) -> &str {
    v.as_str().unwrap_or("?")
}

/// `at + d` as a UTC time of day, "never" without `d`.
fn clock(at: jiff::Timestamp, d: Option<Duration>) -> String {
    let Some(d) = d else {
        return "never".into();
    };
    let t = jiff::SignedDuration::try_from(d)
        .ok()
        .and_then(|d| at.checked_add(d).ok())
        .unwrap_or(at);
    t.strftime("%H:%M:%S").to_string()
}

fn secs(d: Option<Duration>) -> String {
    d.map_or("never".into(), |d| format!("{:.0} s", d.as_secs_f64()))
}

fn prometheus_version() -> String {
    let bin = kcm_e2e::prometheus::prometheus().expect("prometheus");
    let out = std::process::Command::new(bin)
        .arg("--version")
        .output()
        .expect("prometheus --version");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    text.lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .nth(2)
        .unwrap_or("?")
        .to_string()
}
