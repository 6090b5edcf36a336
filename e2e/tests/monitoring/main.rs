//! A real Prometheus (Debian's `prometheus` 2.x) scrapes the real kcm-rs,
//! run as the manifests' ServiceAccount with the Deployment's flags, while
//! the example Jobs run under the simulator, pod GC deletes an orphan and
//! taint eviction deletes a pod. Then every dashboard panel's and every
//! alert's expression goes through Prometheus's HTTP API: each parses, each
//! selector matches series kcm-rs exports, each grouping label and each
//! `$labels.x` of an alert exists, and each panel returns data. Prometheus
//! also loads the PrometheusRule's rules and evaluates them without error,
//! and `promtool check metrics` finds nothing to say about `/metrics`.

mod promql;
mod table;

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kcm_e2e::binaries::repo_root;
use kcm_e2e::manifests as support;
use kcm_e2e::prometheus::{Prometheus, Target, run_promtool};
use kcm_e2e::wait::wait_gone;
use kcm_e2e::{ControlPlane, apply, kubelet};
use kcm_sim::{self as sim, SimConfig, SimStats};
use kube::Api;
use serde_json::{Value, json};
use support::*;

/// Grafana's `$__rate_interval`, for a 1 s scrape interval and a workload
/// of under two minutes.
const RATE_INTERVAL: &str = "2m";
/// Families with samples only after an API error or a retry (the metric
/// table of docs/operating.md says which): their selectors cannot match here.
fn after_errors() -> &'static BTreeSet<String> {
    static SET: OnceLock<BTreeSet<String>> = OnceLock::new();
    SET.get_or_init(|| {
        let reference = std::fs::read_to_string(repo_root().join("docs/operating.md"))
            .expect("docs/operating.md");
        let rows = table::documented(&reference);
        let after = rows
            .into_iter()
            .filter(|(_, (_, _, note))| note.contains(table::ONLY_AFTER));
        after.map(|(name, _)| name).collect()
    })
}

/// The dashboard's panels with their query expressions.
fn panels() -> Vec<(String, Vec<String>)> {
    let cm = &docs("monitoring/dashboard.yaml")[0];
    let dash: Value = serde_json::from_str(text(&cm["data"]["kcm-rs.json"])).expect("JSON");
    let panels = dash["panels"].as_array().expect("panels");
    let with_targets = panels.iter().filter(|p| p["type"] != "row");
    with_targets
        .map(|p| {
            let targets = p["targets"].as_array().cloned().unwrap_or_default();
            let exprs = targets.iter().map(|t| text(&t["expr"]).to_string());
            (text(&p["title"]).to_string(), exprs.collect())
        })
        .collect()
}

/// The alerts: name, expression, labels their annotations use.
fn alerts() -> Vec<(String, String, BTreeSet<String>)> {
    let rule = &docs("monitoring/prometheusrule.yaml")[0];
    let groups = rule["spec"]["groups"].as_array().expect("groups");
    let rules = groups
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default());
    rules
        .filter(|r| r["alert"].is_string())
        .map(|r| {
            let notes = r["annotations"].as_object().cloned().unwrap_or_default();
            let used = notes
                .values()
                .flat_map(|v| promql::template_labels(text(v)));
            let expr = text(&r["expr"]).to_string();
            (text(&r["alert"]).to_string(), expr, used.collect())
        })
        .collect()
}

/// `selector` with one more matcher.
fn with_matcher(selector: &str, matcher: &str) -> String {
    match selector.strip_suffix('}') {
        Some(open) => format!("{open}, {matcher}}}"),
        None => format!("{selector}{{{matcher}}}"),
    }
}

/// `selector` with its matchers on other labels than `job` replaced by
/// `label!=""`: the metric and those labels exist, whatever their values.
fn relaxed(selector: &str) -> String {
    let Some((name, rest)) = selector.split_once('{') else {
        return selector.to_string();
    };
    let body = rest.strip_suffix('}').unwrap_or(rest);
    let (mut matchers, mut current, mut quoted) = (Vec::new(), String::new(), false);
    for c in body.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => {
                matchers.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    matchers.push(current);
    let relaxed: Vec<String> = matchers
        .iter()
        .map(|m| m.trim())
        .filter(|m| !m.is_empty())
        .map(|m| {
            let label: String = m
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if label == "job" {
                m.to_string()
            } else {
                format!("{label}!=\"\"")
            }
        })
        .collect();
    format!("{name}{{{}}}", relaxed.join(", "))
}

async fn has_series(prom: &Prometheus, selector: &str) -> Result<bool, String> {
    let q = format!("count(last_over_time({selector}[10m]))");
    let got = prom.query(&q).await.map_err(|e| e.to_string())?;
    Ok(!got.is_empty())
}

/// Evaluates `expr` and what it refers to: the number of series it returns
/// and notes (selectors whose label values this run never saw, as an
/// alert's error codes), or every problem found. Each selector must match
/// series, or at least its metric and every label it matches on must
/// exist; grouping labels and `labels` (an alert's `$labels.x`) must be on
/// the series of some selector.
async fn check(
    prom: &Prometheus,
    expr: &str,
    labels: &BTreeSet<String>,
) -> Result<(usize, Vec<String>), String> {
    let series = prom.query(expr).await.map_err(|e| e.to_string())?;
    let refs = promql::refs(expr);
    let (mut problems, mut notes, mut selectors) = (Vec::new(), Vec::new(), Vec::new());
    let checked = refs.selectors.iter();
    for sel in checked.filter(|s| !after_errors().contains(promql::metric_name(s))) {
        if has_series(prom, sel).await? {
            selectors.push(sel.clone());
        } else if has_series(prom, &relaxed(sel)).await? {
            notes.push(format!(
                "no series of `{sel}` in this run, but of `{}`",
                relaxed(sel)
            ));
            selectors.push(relaxed(sel));
        } else {
            problems.push(format!("`{sel}` matches no series kcm-rs exports"));
        }
    }
    let wanted: BTreeSet<&String> = refs.grouping.iter().chain(labels).collect();
    for label in wanted {
        let mut found = false;
        for sel in &selectors {
            found |= has_series(prom, &with_matcher(sel, &format!("{label}!=\"\""))).await?;
        }
        if labels.contains(label) && !refs.grouping.is_empty() && !refs.grouping.contains(label) {
            problems.push(format!("`$labels.{label}` is aggregated away"));
        }
        if !found && !selectors.is_empty() {
            problems.push(format!("label `{label}` is on no series of {selectors:?}"));
        }
    }
    if problems.is_empty() {
        Ok((series.len(), notes))
    } else {
        Err(problems.join("; "))
    }
}

#[tokio::test]
async fn prometheus_scrapes_kcm_rs_and_every_panel_and_alert_has_data() {
    let began = Instant::now();
    kcm_e2e::prometheus::prometheus().unwrap_or_else(|e| panic!("{e}"));
    let bin = kcm_rs_binary();
    let cp = ControlPlane::start().expect("control plane");
    let admin = cp.client().await.expect("admin client");
    let kcm = start_kcm_rs(&cp, &admin, &bin, false).await;
    let sim_cfg = SimConfig {
        nodes: 2,
        ..SimConfig::default()
    };
    sim::create_nodes(&admin, &sim_cfg).await.expect("nodes");
    let stats = Arc::new(SimStats::default());
    let sim_task = tokio::spawn(sim::run(admin.clone(), sim_cfg, Arc::clone(&stats)));

    // Labels as the ServiceMonitor's scrape sets them, and `cluster`, as a
    // Prometheus holding several clusters' series has it (the alerts keep it).
    let target = Target {
        address: format!("127.0.0.1:{}", kcm.port),
        labels: [
            ("cluster", "local"),
            ("job", "kcm-rs"),
            ("namespace", "kube-system"),
            ("pod", "kcm-rs-0"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .to_vec(),
    };
    let rules = docs("monitoring/prometheusrule.yaml")[0]["spec"].clone();
    let prom = Prometheus::start(&[target], "1s", Some(&rules))
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    // The workload: the example Jobs, an orphan pod for pod GC, a pod on a
    // NoExecute node for taint eviction.
    for file in ["job.yaml", "pod-failure-policy.yaml"] {
        let path = manifests().join("examples").join(file);
        let made = apply::create_from_file(&admin, &path, "default").await;
        eprintln!("created {:?}", made.expect("example"));
    }
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let mut orphan = pod("orphan", "orphan", None);
    orphan["spec"]["nodeName"] = json!("ghost-node");
    create(&pods, orphan).await;
    let no_execute = vec![kubelet::taint("example.com/evict", None, "NoExecute")];
    let tainted = kubelet::create_node(&admin, "tainted", true, no_execute).await;
    tainted.expect("tainted node");
    // Bound at creation: the simulator schedules only unbound pods.
    let mut victim = pod("victim", "victim", None);
    victim["spec"]["nodeName"] = json!("tainted");
    create(&pods, victim).await;
    let jobs: Api<Job> = Api::namespaced(admin.clone(), "default");
    let ends = [
        ("sample", "Complete"),
        ("policy-count-ignore", "Complete"),
        ("policy-failjob", "Failed"),
    ];
    for (name, end) in ends {
        let wait = kcm_e2e::wait::wait_for(&jobs, name, Duration::from_secs(180), name, |j| {
            job_has(j, end)
        });
        kcm.ok(wait.await);
    }
    kcm.ok(wait_gone(&pods, "orphan", WAIT).await);
    // No kubelet runs on "tainted": the eviction is the delete request.
    kcm.until(&pods, "victim", |p| p.metadata.deletion_timestamp.is_some())
        .await;
    eprintln!(
        "workload done in {:.1?}; simulator: {}",
        began.elapsed(),
        stats.summary()
    );

    // A few scrapes after the work, and the target is up.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let targets = prom.targets().await.expect("targets");
    assert!(
        targets.iter().all(|(h, _)| h == "up") && !targets.is_empty(),
        "scrape targets: {targets:?}"
    );

    // promtool's lint of the exposition.
    let (code, metrics) = http_get(kcm.port, "/metrics").await.expect("/metrics");
    assert_eq!(code, 200);
    let (ok, out) = run_promtool(&["check", "metrics"], Some(&metrics)).expect("promtool");
    assert!(
        ok && out.trim().is_empty(),
        "promtool check metrics:\n{out}"
    );
    eprintln!(
        "promtool check metrics: clean ({} lines)",
        metrics.lines().count()
    );

    // The metric table of docs/operating.md is what /metrics exposes.
    let reference =
        std::fs::read_to_string(repo_root().join("docs/operating.md")).expect("docs/operating.md");
    let problems = table::compare(&reference, &metrics, &repo_root().join("crates"));
    assert!(
        problems.is_empty(),
        "docs/operating.md metric table:\n{}",
        problems.join("\n")
    );

    // kcm_rs_build_info: this build's version and commit, the API version.
    let info = prom
        .query("kcm_rs_build_info{job=\"kcm-rs\"} == 1")
        .await
        .expect("query");
    let mut git = Command::new("git");
    git.args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(repo_root());
    let commit = git.output().map(|o| o.stdout).unwrap_or_default();
    let commit = String::from_utf8(commit).unwrap_or_default();
    let want = json!({
        "version": env!("CARGO_PKG_VERSION"),
        "git_commit": if commit.trim().is_empty() { "unknown" } else { commit.trim() },
        "kubernetes_version": "v1.37",
    });
    let got: Vec<Value> = info
        .iter()
        .map(|s| {
            let m = &s["metric"];
            json!({ "version": m["version"], "git_commit": m["git_commit"],
                "kubernetes_version": m["kubernetes_version"] })
        })
        .collect();
    assert_eq!(got, vec![want], "kcm_rs_build_info");

    // Every panel and alert expression.
    let mut failures = Vec::new();
    let mut report = Vec::new();
    for (title, exprs) in panels() {
        let mut total = 0;
        for raw in &exprs {
            // The dashboard's cluster variable, set to this target's cluster.
            let expr = raw
                .replace("$__rate_interval", RATE_INTERVAL)
                .replace("$cluster", "local");
            assert!(
                !expr.contains('$'),
                "panel {title}: unknown variable in {raw}"
            );
            match check(&prom, &expr, &BTreeSet::new()).await {
                Ok((n, notes)) => {
                    total += n;
                    report.extend(notes.iter().map(|n| format!("  panel {title:?}: {n}")));
                }
                Err(why) => failures.push(format!("panel {title:?}: `{expr}`: {why}")),
            }
        }
        if total == 0 {
            failures.push(format!("panel {title:?} returned no data: {exprs:?}"));
        }
        report.push(format!("panel {title:?}: {total} series"));
    }
    for (name, expr, used) in alerts() {
        match check(&prom, &expr, &used).await {
            Ok((n, notes)) => {
                report.push(format!("alert {name}: {n} series (firing or pending)"));
                report.extend(notes.iter().map(|n| format!("  {n}")));
            }
            Err(why) => failures.push(format!("alert {name}: `{expr}`: {why}")),
        }
    }
    eprintln!("{}", report.join("\n"));
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // Prometheus evaluated every rule, without error.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let data = prom.api("rules", &[]).await.expect("rules");
        let groups = data["groups"].as_array().cloned().unwrap_or_default();
        let rules: Vec<Value> = groups
            .iter()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect();
        let bad: Vec<String> = rules
            .iter()
            .filter(|r| r["health"] != "ok")
            .map(|r| format!("{} {}: {}", r["name"], r["health"], r["lastError"]))
            .collect();
        if rules.len() == alerts().len() && bad.is_empty() {
            eprintln!("Prometheus evaluated {} rules: all ok", rules.len());
            break;
        }
        assert!(Instant::now() < deadline, "rules {}: {bad:?}", rules.len());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // The checks can fail: a misspelled metric, a missing label, a
    // parse error and an alert label that is aggregated away.
    let none = BTreeSet::new();
    let pod = BTreeSet::from(["pod".to_string()]);
    let bad = [
        (
            "sum(workqueue_dept{job=\"kcm-rs\"})",
            &none,
            "matches no series",
        ),
        (
            "sum by (nmae) (workqueue_depth{job=\"kcm-rs\"})",
            &none,
            "label `nmae`",
        ),
        ("sum(rate(workqueue_adds_total[5m])", &none, "parse error"),
        (
            "sum by (name) (workqueue_depth{job=\"kcm-rs\"}) > 0",
            &pod,
            "aggregated away",
        ),
    ];
    for (expr, labels, want) in bad {
        let got = check(&prom, expr, labels).await;
        assert!(
            matches!(&got, Err(why) if why.contains(want)),
            "`{expr}` should fail with {want:?}: {got:?}"
        );
    }
    sim_task.abort();
    eprintln!("monitoring e2e done in {:.1?}", began.elapsed());
}
