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
/// `promtool test rules`; with `only`, the copy keeps only the test groups
/// that check that alert (the others cannot see a change of its expression).
fn promtool_test(dir: &Path, rules: &Value, only: Option<&str>) -> (bool, String) {
    std::fs::write(
        dir.join("rules.yaml"),
        serde_yaml_ng::to_string(rules).expect("yaml"),
    )
    .expect("write rules");
    let mut tests = yaml(&repo_root().join("e2e/tests/prometheus/alerts_test.yaml"));
    if let Some(alert) = only {
        let groups = tests["tests"].as_array_mut().expect("tests");
        groups.retain(|g| {
            let cases = g["alert_rule_test"].as_array();
            cases.is_some_and(|cs| cs.iter().any(|c| c["alertname"] == alert))
        });
    }
    let file = dir.join("alerts_test.yaml");
    std::fs::write(&file, serde_yaml_ng::to_string(&tests).expect("yaml")).expect("write tests");
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
    let (ok, out) = promtool_test(dir.path(), &rules, None);
    eprintln!("promtool test rules:\n{out}");
    assert!(
        ok && out.contains("SUCCESS"),
        "promtool test rules failed:\n{out}"
    );

    // Each alert's cases catch an expression that never fires and one that
    // always fires (one thread per alert, each running only the groups that
    // test that alert).
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
                    let (ok, out) = promtool_test(dir.path(), &mutated, Some(name));
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

/// Seconds in a Prometheus duration (`5m`, `1h30m`), `None` if it is not one.
fn prometheus_duration(text: &str) -> Option<u64> {
    let (mut total, mut rest) = (0, text);
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit())?;
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit = ["ms", "s", "m", "h", "d", "w", "y"]
            .into_iter()
            .find(|u| rest.starts_with(u))?;
        let secs = match unit {
            "ms" => 0,
            "s" => 1,
            "m" => 60,
            "h" => 3600,
            "d" => 86400,
            "w" => 604_800,
            _ => 31_536_000,
        };
        total += n * secs;
        rest = &rest[unit.len()..];
    }
    Some(total)
}

/// Every alert waits (`for`), so one bad scrape or evaluation does not page,
/// and says what is wrong and what to look at (`summary` and `description`).
#[test]
fn every_alert_has_a_for_a_summary_and_a_description() {
    let rules = rule_file();
    let mut problems = Vec::new();
    for (g, r, name) in alerts(&rules) {
        let rule = &rules["groups"][g]["rules"][r];
        let lasts = rule["for"].as_str().unwrap_or("");
        if prometheus_duration(lasts).is_none_or(|secs| secs == 0) {
            problems.push(format!("{name}: for {lasts:?}"));
        }
        for note in ["summary", "description"] {
            let text = rule["annotations"][note].as_str().unwrap_or("");
            if text.split_whitespace().count() < 5 {
                problems.push(format!("{name}: {note} {text:?}"));
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
    assert_eq!(prometheus_duration("1h30m"), Some(5400));
    for bad in ["", "0m", "5", "m5", "5x"] {
        assert!(prometheus_duration(bad).is_none_or(|s| s == 0), "{bad:?}");
    }
}

/// The repository's web address, from the Go module path of the harness
/// (`github.com/kcm-rs/kcm-rs/e2e/harness`).
fn repository_url() -> String {
    let go_mod = std::fs::read_to_string(repo_root().join("e2e/harness/go.mod")).expect("go.mod");
    let module = go_mod
        .lines()
        .find_map(|l| l.strip_prefix("module "))
        .expect("module line");
    let repo = module.trim().trim_end_matches("/e2e/harness");
    format!("https://{repo}")
}

/// The GitHub anchor of a Markdown heading: lower case, spaces as dashes,
/// other punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn every_alert_links_its_runbook_section() {
    let rules = rule_file();
    let base = format!("{}/blob/main/docs/runbook.md#", repository_url());
    let runbook = std::fs::read_to_string(repo_root().join("docs/runbook.md")).expect("runbook");
    let operating =
        std::fs::read_to_string(repo_root().join("docs/operating.md")).expect("docs/operating.md");
    let sections: Vec<&str> = runbook
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .collect();
    let anchors: std::collections::BTreeSet<String> = sections.iter().map(|s| anchor(s)).collect();
    let mut problems = Vec::new();
    let alerts = alerts(&rules);
    for (g, r, name) in &alerts {
        let url = &rules["groups"][*g]["rules"][*r]["annotations"]["runbook_url"];
        let want = format!("{base}{}", anchor(name));
        match url.as_str() {
            Some(u) if u == want => {}
            other => problems.push(format!("{name}: runbook_url {other:?}, want {want}")),
        }
        if !anchors.contains(&anchor(name)) {
            problems.push(format!("docs/runbook.md has no section `## {name}`"));
        }
        // docs/operating.md's "Alerts: what to do" lists it, with the same link.
        let listed = format!("[{name}](runbook.md#{})", anchor(name));
        if !operating.contains(&listed) {
            problems.push(format!("docs/operating.md does not list {listed}"));
        }
    }
    // No section for an alert that does not exist (renamed or removed).
    for s in &sections {
        if !alerts.iter().any(|(_, _, n)| n == s.trim()) {
            problems.push(format!("docs/runbook.md section `## {s}` names no alert"));
        }
    }
    // Links inside the runbook lead to its own sections.
    for (i, _) in runbook.match_indices("](#") {
        let rest = &runbook[i + 3..];
        let target = &rest[..rest.find(')').unwrap_or(rest.len())];
        if !anchors.contains(target) {
            problems.push(format!(
                "docs/runbook.md links #{target}, which is no section"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    eprintln!(
        "{} alerts, each with runbook_url {base}<alert> and its section",
        alerts.len()
    );
}

/// PromQL's aggregation operators.
const AGGREGATIONS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
];

/// Words of `expr` outside strings and label matchers, and parenthesised
/// label lists as one item each (`(cluster, namespace)`).
fn tokens(expr: &str) -> Vec<String> {
    let chars: Vec<char> = expr.chars().collect();
    let (mut out, mut i) = (Vec::new(), 0);
    while i < chars.len() {
        let c = chars[i];
        if c == '{' || c == '[' {
            let close = if c == '{' { '}' } else { ']' };
            while i < chars.len() && chars[i] != close {
                if chars[i] == '"' {
                    i += 1;
                    while i < chars.len() && chars[i] != '"' {
                        i += if chars[i] == '\\' { 2 } else { 1 };
                    }
                }
                i += 1;
            }
            i += 1;
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(chars[start..i].iter().collect());
        } else if c == '(' {
            // A label list: only names, commas and blanks up to `)`.
            let end = chars[i..].iter().position(|&c| c == ')').map(|p| i + p);
            let list = end.map(|e| chars[i + 1..e].iter().collect::<String>());
            match list {
                Some(l)
                    if l.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_, \n".contains(c)) =>
                {
                    out.push(format!("({})", l.split_whitespace().collect::<String>()));
                    i = end.unwrap_or(i) + 1;
                }
                _ => {
                    out.push("(".into());
                    i += 1;
                }
            }
        } else {
            if !c.is_whitespace() {
                out.push(c.to_string());
            }
            i += 1;
        }
    }
    out
}

fn labels_of(list: &str) -> Vec<&str> {
    let inner = list.trim_start_matches('(').trim_end_matches(')');
    inner.split(',').filter(|s| !s.is_empty()).collect()
}

/// Why `expr` would mix clusters on a Prometheus that holds several: an
/// aggregation without `by (cluster, ...)` (or with `without (cluster)`),
/// a vector match `on (...)` without `cluster` or `ignoring (cluster)`, an
/// `absent()` that is not the `or on () absent(...)` fallback.
fn cluster_problems(expr: &str) -> Vec<String> {
    let t = tokens(expr);
    let mut problems = Vec::new();
    for (i, word) in t.iter().enumerate() {
        let next = t.get(i + 1).map(String::as_str).unwrap_or("");
        let list = t.get(i + 2).map(String::as_str).unwrap_or("");
        if AGGREGATIONS.contains(&word.as_str()) {
            match next {
                "by" if labels_of(list).contains(&"cluster") => {}
                "without" if !labels_of(list).contains(&"cluster") => {}
                _ => problems.push(format!("`{word} {next} {list}` drops cluster")),
            }
        }
        if word == "on" {
            let fallback = next == "()" && list == "absent";
            if !fallback && !labels_of(next).contains(&"cluster") {
                problems.push(format!("`on {next}` does not match on cluster"));
            }
        }
        if word == "ignoring" && labels_of(next).contains(&"cluster") {
            problems.push(format!("`ignoring {next}` ignores cluster"));
        }
        if word == "absent" {
            let before: Vec<&str> = t[i.saturating_sub(3)..i]
                .iter()
                .map(String::as_str)
                .collect();
            if before != ["or", "on", "()"] {
                problems.push("absent() other than the `or on () absent(...)` fallback".into());
            }
        }
    }
    problems
}

#[test]
fn every_alert_expression_keeps_cluster() {
    let rules = rule_file();
    let mut problems = Vec::new();
    for (g, r, name) in alerts(&rules) {
        let expr = rules["groups"][g]["rules"][r]["expr"]
            .as_str()
            .expect("expr");
        for p in cluster_problems(expr) {
            problems.push(format!("{name}: {p}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The check finds what the rules had before they kept cluster.
    let before = [
        "sum(leader_election_master_status{job=\"kcm-rs\", name=\"kcm-rs\"}) < 1",
        "sum by (pod) (rate(x{job=\"kcm-rs\"}[5m])) > 0",
        "max by (name) (a) and on() (absent(up{job=\"kcm-rs\"} == 1))",
        "sum(rate(x[5m])) by (cluster)",
        "a / ignoring (cluster, pod) b",
        "count without (cluster) (up)",
    ];
    for expr in before {
        assert!(!cluster_problems(expr).is_empty(), "`{expr}` passed");
    }
    let fine = [
        "sum by (cluster, le) (rate(h_bucket{le=~\"1|2\"}[5m]))",
        "count without (pod) (up) or on () absent(up{job=\"x\"} == 1)",
        "max_over_time(a[1h]) unless on (namespace, cluster) b",
    ];
    for expr in fine {
        assert_eq!(cluster_problems(expr), Vec::<String>::new(), "`{expr}`");
    }
}
