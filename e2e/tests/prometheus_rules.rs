//! The alert rules of `manifests/monitoring/prometheusrule.yaml` under
//! `promtool` (Debian's `prometheus` package; `.ci/run` installs it): they
//! pass `promtool check rules`, and `promtool test rules` runs the unit tests
//! of `e2e/tests/prometheus/alerts_test.yaml`, which have a case where each
//! alert fires and one where it stays silent. Replacing one alert's
//! expression by one that never (or always) fires makes those unit tests
//! fail, so each alert's cases really test it.

use std::path::Path;

use kcm_e2e::binaries::repo_root;
use kcm_e2e::prometheus::run_promtool;
use serde_json::Value;

fn yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).expect("read");
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The PrometheusRule's `spec` (a Prometheus rule file: `groups`).
fn rule_file() -> Value {
    let rule = yaml(&repo_root().join("manifests/monitoring/prometheusrule.yaml"));
    rule["spec"].clone()
}

fn alerts(rules: &Value) -> Vec<(usize, usize, String)> {
    let mut out = Vec::new();
    for (g, group) in rules["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .enumerate()
    {
        for (r, rule) in group["rules"].as_array().expect("rules").iter().enumerate() {
            if let Some(name) = rule["alert"].as_str() {
                out.push((g, r, name.to_string()));
            }
        }
    }
    out
}

/// Writes `rules` as `rules.yaml` beside a copy of the unit tests and runs
/// `promtool test rules`.
fn promtool_test(dir: &Path, rules: &Value) -> (bool, String) {
    std::fs::write(
        dir.join("rules.yaml"),
        serde_yaml_ng::to_string(rules).expect("yaml"),
    )
    .expect("write rules");
    let tests = repo_root().join("e2e/tests/prometheus/alerts_test.yaml");
    std::fs::copy(&tests, dir.join("alerts_test.yaml")).expect("copy tests");
    let file = dir.join("alerts_test.yaml");
    run_promtool(&["test", "rules", &file.display().to_string()], None)
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn promtool_checks_the_rules() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rules = rule_file();
    let path = dir.path().join("rules.yaml");
    std::fs::write(&path, serde_yaml_ng::to_string(&rules).expect("yaml")).expect("write");
    let (ok, out) = run_promtool(&["check", "rules", &path.display().to_string()], None)
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("promtool check rules:\n{out}");
    assert!(ok, "promtool check rules failed:\n{out}");
    let count: usize = rules["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .map(|g| g["rules"].as_array().map_or(0, Vec::len))
        .sum();
    assert!(count > 0);
    assert!(
        out.contains(&format!("SUCCESS: {count} rules found")),
        "{out}"
    );

    // A rule that does not parse fails, naming the expression.
    let mut broken = rules.clone();
    let bad = "sum(rate(workqueue_adds_total{job=\"kcm-rs\"}[5m])";
    broken["groups"][0]["rules"][0]["expr"] = Value::String(bad.into());
    std::fs::write(&path, serde_yaml_ng::to_string(&broken).expect("yaml")).expect("write");
    let (ok, out) = run_promtool(&["check", "rules", &path.display().to_string()], None)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        !ok && out.contains("parse error"),
        "a broken rule passed:\n{out}"
    );
}

#[test]
fn promtool_unit_tests_cover_every_alert() {
    let rules = rule_file();
    let alerts = alerts(&rules);
    assert!(alerts.len() >= 10, "alerts: {alerts:?}");

    // Every alert has a case where it fires and one where it is silent.
    let tests = yaml(&repo_root().join("e2e/tests/prometheus/alerts_test.yaml"));
    let mut fires = std::collections::BTreeSet::new();
    let mut silent = std::collections::BTreeSet::new();
    for group in tests["tests"].as_array().expect("tests") {
        for case in group["alert_rule_test"]
            .as_array()
            .expect("alert_rule_test")
        {
            let name = case["alertname"].as_str().expect("alertname").to_string();
            let expected = case["exp_alerts"].as_array().map_or(0, Vec::len);
            if expected > 0 {
                &mut fires
            } else {
                &mut silent
            }
            .insert(name);
        }
    }
    for (_, _, name) in &alerts {
        assert!(fires.contains(name), "no promtool case where {name} fires");
        assert!(
            silent.contains(name),
            "no promtool case where {name} is silent"
        );
    }

    let dir = tempfile::tempdir().expect("tempdir");
    let (ok, out) = promtool_test(dir.path(), &rules);
    eprintln!("promtool test rules:\n{out}");
    assert!(
        ok && out.contains("SUCCESS"),
        "promtool test rules failed:\n{out}"
    );

    // Each alert's cases catch an expression that never fires and one that
    // always fires (one thread per alert: promtool takes about a second).
    std::thread::scope(|s| {
        for (g, r, name) in &alerts {
            let rules = &rules;
            s.spawn(move || {
                let dir = tempfile::tempdir().expect("tempdir");
                for (what, expr) in [
                    ("never fires", "vector(0) > 1"),
                    ("always fires", "vector(1)"),
                ] {
                    let mut mutated = rules.clone();
                    mutated["groups"][*g]["rules"][*r]["expr"] = Value::String(expr.into());
                    let (ok, out) = promtool_test(dir.path(), &mutated);
                    assert!(
                        !ok,
                        "{name} replaced by `{expr}` ({what}) still passes:\n{out}"
                    );
                    assert!(out.contains(name.as_str()), "{name}: {out}");
                }
            });
        }
    });
    eprintln!(
        "{} alerts: each fires and stays silent as tested",
        alerts.len()
    );
}
