//! Just enough PromQL lexing to list what an expression refers to: its
//! vector selectors (`metric{matchers}`) and the labels it groups or matches
//! on (`by (...)`, `without (...)`, `on (...)`, `ignoring (...)`,
//! `group_left (...)`, `group_right (...)`). Prometheus itself parses and
//! evaluates the expression; this only says which selectors and labels to
//! look for in its answers.

use std::collections::BTreeSet;

const GROUPING: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
const KEYWORDS: &[&str] = &["and", "or", "unless", "bool", "offset", "inf", "nan"];

#[derive(Debug, Default, PartialEq)]
pub struct Refs {
    /// Vector selectors as written, e.g. `up{job="kcm-rs"}`.
    pub selectors: Vec<String>,
    /// Labels named in grouping and matching clauses.
    pub grouping: BTreeSet<String>,
}

fn ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The index just after the bracket that closes the one at `open`, skipping
/// quoted strings.
fn close(chars: &[char], open: usize, closing: char) -> usize {
    let mut i = open + 1;
    while i < chars.len() && chars[i] != closing {
        if chars[i] == '"' || chars[i] == '\'' {
            let q = chars[i];
            i += 1;
            while i < chars.len() && chars[i] != q {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
        }
        i += 1;
    }
    (i + 1).min(chars.len())
}

fn skip_ws(chars: &[char], mut i: usize) -> usize {
    while i < chars.len() && chars[i].is_whitespace() {
        i += 1;
    }
    i
}

/// Whether the identifier `word` starts at `i`.
fn word_at(chars: &[char], i: usize, word: &str) -> bool {
    let end = i + word.len();
    end <= chars.len()
        && chars[i..end].iter().copied().eq(word.chars())
        && !chars.get(end).is_some_and(|c| ident_char(*c))
}

pub fn refs(expr: &str) -> Refs {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = Refs::default();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            i = close(&chars, i, c);
        } else if c == '[' {
            i = close(&chars, i, ']');
        } else if c.is_ascii_digit() || c == '.' {
            // Numbers and durations (`5m`, `1e3`) are not identifiers.
            while i < chars.len() && (ident_char(chars[i]) || chars[i] == '.') {
                i += 1;
            }
        } else if ident_start(c) {
            let start = i;
            while i < chars.len() && ident_char(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = skip_ws(&chars, i);
            let next_char = chars.get(next).copied();
            if GROUPING.contains(&word.as_str()) {
                if next_char == Some('(') {
                    let end = close(&chars, next, ')');
                    let list: String = chars[next + 1..end - 1].iter().collect();
                    let labels = list.split(',').map(str::trim).filter(|l| !l.is_empty());
                    out.grouping.extend(labels.map(str::to_string));
                    i = end;
                }
            } else if next_char == Some('(')
                || KEYWORDS.contains(&word.as_str())
                || ["by", "without"].iter().any(|k| word_at(&chars, next, k))
            {
                // A function or aggregation name (`sum by (x) (...)`), or an
                // operator keyword.
            } else if next_char == Some('{') {
                let end = close(&chars, next, '}');
                let matchers: String = chars[next..end].iter().collect();
                out.selectors.push(format!("{word}{matchers}"));
                i = end;
            } else {
                out.selectors.push(word);
            }
        } else if c == '{' {
            let end = close(&chars, i, '}');
            out.selectors.push(chars[i..end].iter().collect());
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

/// The metric name of a selector (`""` for `{__name__=...}` forms).
pub fn metric_name(selector: &str) -> &str {
    selector.split('{').next().unwrap_or_default()
}

/// `$labels.<name>` references in an alert annotation template.
pub fn template_labels(template: &str) -> BTreeSet<String> {
    template
        .split("$labels.")
        .skip(1)
        .map(|rest| rest.chars().take_while(|c| ident_char(*c)).collect())
        .collect()
}

#[test]
fn lists_selectors_and_grouping_labels() {
    let r = refs(
        r#"histogram_quantile(0.99, sum by (name, le) (rate(workqueue_work_duration_seconds_bucket{job="kcm-rs", name=~"a|b}"}[5m])))
            / on (name) group_left (pod) up and absent(x) > bool 0.5e3"#,
    );
    let want = [
        r#"workqueue_work_duration_seconds_bucket{job="kcm-rs", name=~"a|b}"}"#,
        "up",
        "x",
    ];
    assert_eq!(r.selectors, want);
    let labels: Vec<&str> = r.grouping.iter().map(String::as_str).collect();
    assert_eq!(labels, ["le", "name", "pod"]);
    assert_eq!(
        metric_name(&r.selectors[0]),
        "workqueue_work_duration_seconds_bucket"
    );
    let t = template_labels("{{ $labels.pod }} gets {{$labels.code}} ({{ $value }})");
    assert_eq!(t.into_iter().collect::<Vec<_>>(), ["code", "pod"]);
}
