//! The metric table of docs/operating.md (between `<!-- metrics:begin -->` and
//! `<!-- metrics:end -->`) against what kcm-rs exposes: every family on
//! `/metrics` has a row with its type and label names, and every row is on
//! `/metrics` unless its note says `after an error` (such a family has no
//! series until then; its name must still be registered in the source).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Family name → (type, label names).
pub type Families = BTreeMap<String, (String, BTreeSet<String>)>;

pub const ONLY_AFTER: &str = "only after";

/// The families of a text exposition (`le` and `quantile` left out).
pub fn exposed(text: &str) -> Families {
    let mut out = Families::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            out.insert(name.to_string(), (kind.to_string(), BTreeSet::new()));
        }
    }
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, labels)) = line.split_once('{') else {
            continue;
        };
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| series.strip_suffix(s).filter(|f| out.contains_key(*f)))
            .unwrap_or(series);
        let labels = labels.split_once('}').map_or("", |(l, _)| l);
        let names = labels
            .split("\",")
            .filter_map(|kv| kv.split_once('=').map(|(k, _)| k.trim().to_string()))
            .filter(|k| k != "le" && k != "quantile");
        if let Some((_, set)) = out.get_mut(family) {
            set.extend(names);
        }
    }
    out
}

/// The table's rows: name → (type, labels, note).
pub fn documented(doc_text: &str) -> BTreeMap<String, (String, BTreeSet<String>, String)> {
    let begin = doc_text
        .find("<!-- metrics:begin -->")
        .expect("metrics:begin marker");
    let end = doc_text
        .find("<!-- metrics:end -->")
        .expect("metrics:end marker");
    let cells = |line: &str| -> Vec<String> {
        let trimmed = line.trim().trim_matches('|');
        trimmed.split('|').map(|c| c.trim().to_string()).collect()
    };
    let ticked = |c: &str| -> BTreeSet<String> {
        c.split(',')
            .map(|l| l.trim().trim_matches('`').to_string())
            .filter(|l| !l.is_empty() && l != "-")
            .collect()
    };
    doc_text[begin..end]
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let c = cells(l);
            let name = c[0].trim_matches('`').to_string();
            (
                name,
                (
                    c[1].clone(),
                    ticked(&c[2]),
                    c.get(3).cloned().unwrap_or_default(),
                ),
            )
        })
        .collect()
}

/// A table row for an exposed family.
pub fn row(name: &str, kind: &str, labels: &BTreeSet<String>) -> String {
    let labels: Vec<String> = labels.iter().map(|l| format!("`{l}`")).collect();
    let labels = if labels.is_empty() {
        "-".to_string()
    } else {
        labels.join(", ")
    };
    format!("| `{name}` | {kind} | {labels} | |")
}

/// Every disagreement between the documented table and `/metrics`; `source`
/// is searched for the names of families documented as after-error only.
pub fn compare(doc_text: &str, metrics: &str, source: &Path) -> Vec<String> {
    let doc = documented(doc_text);
    let live = exposed(metrics);
    let mut problems = Vec::new();
    for (name, (kind, labels)) in &live {
        match doc.get(name) {
            None => problems.push(format!("not in the table: {}", row(name, kind, labels))),
            Some((k, l, _)) if (k, l) != (kind, labels) => problems.push(format!(
                "the table says {k} {l:?}: {}",
                row(name, kind, labels)
            )),
            Some(_) => {}
        }
    }
    for (name, (_, _, note)) in &doc {
        if live.contains_key(name) {
            continue;
        }
        if !note.contains(ONLY_AFTER) {
            problems.push(format!("in the table, not on /metrics: {name}"));
        } else if !source_mentions(source, &format!("\"{name}\"")) {
            problems.push(format!("{name} ({ONLY_AFTER}) is registered nowhere"));
        }
    }
    problems
}

fn source_mentions(dir: &Path, needle: &str) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|e| {
        let p = e.path();
        if p.is_dir() {
            source_mentions(&p, needle)
        } else {
            p.extension().is_some_and(|x| x == "rs")
                && std::fs::read_to_string(&p).is_ok_and(|t| t.contains(needle))
        }
    })
}

#[test]
fn reads_families_and_rows() {
    let text = "# HELP a_total x\n# TYPE a_total counter\na_total{code=\"200\",method=\"GET\"} 1\n\
                # TYPE h_seconds histogram\nh_seconds_bucket{name=\"q\",le=\"1\"} 1\n\
                h_seconds_sum{name=\"q\"} 1\nh_seconds_count{name=\"q\"} 1\n# TYPE g gauge\ng 1\n";
    let live = exposed(text);
    let names = |s: &BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>().join(",");
    assert_eq!(names(&live["a_total"].1), "code,method");
    assert_eq!(
        (live["h_seconds"].0.as_str(), names(&live["h_seconds"].1)),
        ("histogram", "name".into())
    );
    let doc_text = format!(
        "<!-- metrics:begin -->\n| metric | type | labels | note |\n|---|---|---|---|\n{}\n{}\n\
         | `gone_total` | counter | `x` | {ONLY_AFTER} |\n<!-- metrics:end -->",
        row("a_total", "counter", &live["a_total"].1),
        row("g", "gauge", &BTreeSet::new()),
    );
    let problems = compare(&doc_text, text, Path::new("/nonexistent"));
    let want = [
        "not in the table: | `h_seconds` | histogram | `name` | |",
        "gone_total (only after) is registered nowhere",
    ];
    assert_eq!(problems, want);
}
