//! An explanation for people (aligned tables, colour only on a terminal)
//! or for scripts (JSON, YAML: the report's own serialisation).

use std::fmt::Write as _;
use std::io::IsTerminal;

use kcm_job::explain::{ConditionText, Explanation, PodReport, Verdict, WhatIfReport};

use super::{Color, Output, ToolError};

pub fn render(e: &Explanation, output: Output, color: Color) -> Result<String, ToolError> {
    Ok(match output {
        Output::Json => serde_json::to_string_pretty(e)? + "\n",
        Output::Yaml => serde_yaml_ng::to_string(e)?,
        Output::Text => {
            let on = match color {
                Color::Always => true,
                Color::Never => false,
                Color::Auto => {
                    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
                }
            };
            text(e, Paint(on))
        }
    })
}

/// ANSI colours, or none.
#[derive(Clone, Copy)]
pub struct Paint(pub bool);

impl Paint {
    fn wrap(self, code: &str, s: &str) -> String {
        if self.0 {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
    fn bold(self, s: &str) -> String {
        self.wrap("1", s)
    }
    fn dim(self, s: &str) -> String {
        self.wrap("2", s)
    }
    fn action(self, a: &str) -> String {
        match a {
            "FailJob" => self.wrap("1;31", a),
            "FailIndex" => self.wrap("31", a),
            "Ignore" => self.wrap("32", a),
            "Count" => self.wrap("33", a),
            _ => a.to_string(),
        }
    }
}

/// Rows padded to their columns' widths (measured before colouring).
pub fn table(header: &[&str], rows: &[Vec<String>], paint: Paint) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>, head: bool| {
        let mut s = String::from("  ");
        let last = cells.len().saturating_sub(1);
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            let pad = w.saturating_sub(c.chars().count());
            let shown = if head {
                paint.bold(c)
            } else if i == 4 {
                paint.action(c)
            } else {
                c.clone()
            };
            s.push_str(&shown);
            if i < last {
                s.push_str(&" ".repeat(pad + 2));
            }
        }
        s.push('\n');
        s
    };
    let mut out = line(header.iter().map(|h| h.to_string()).collect(), true);
    for r in rows {
        out.push_str(&line(r.clone(), false));
    }
    out
}

fn failure_text(r: &PodReport) -> String {
    let mut parts = Vec::new();
    if let (Some(c), Some(code)) = (&r.evidence.container, r.evidence.exit_code) {
        parts.push(format!("exit {code} ({c})"));
    }
    for c in &r.evidence.conditions {
        parts.push(match &c.reason {
            Some(reason) => format!("{} ({reason})", c.type_),
            None => c.type_.clone(),
        });
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

fn counters(r: &PodReport) -> (String, String) {
    let Some(e) = &r.effect else {
        return ("-".into(), r.note.clone().unwrap_or_default());
    };
    let mut note = Vec::new();
    if let Some((before, after)) = e.index_failures {
        note.push(format!("index failures {before}→{after}"));
    }
    if e.index_failed {
        note.push("index failed".into());
    }
    if let Some(fi) = &e.failed_indexes
        && !fi.is_empty()
    {
        note.push(format!("failedIndexes {fi}"));
    }
    if !e.counted {
        note.push("not counted".into());
    }
    if let Some(c) = &e.ends_job {
        note.push(format!("→ {} {}", c.type_, c.reason));
    }
    (format!("{}/{}", e.failed, e.backoff_limit), note.join(", "))
}

fn pod_rows(reports: &[PodReport]) -> Vec<Vec<String>> {
    reports
        .iter()
        .map(|r| {
            let (failed, note) = counters(r);
            vec![
                r.pod.clone(),
                r.index.map_or("-".into(), |i| i.to_string()),
                failure_text(r),
                r.rule.map_or("-".into(), |i| i.to_string()),
                r.action.clone(),
                failed,
                note,
            ]
        })
        .collect()
}

const HEADER: &[&str] = &[
    "POD",
    "INDEX",
    "FAILURE",
    "RULE",
    "ACTION",
    "FAILED/LIMIT",
    "EFFECT",
];

/// Why no rule decided the pods that got the default handling.
fn why_none(out: &mut String, reports: &[PodReport], paint: Paint) {
    for r in reports
        .iter()
        .filter(|r| r.rule.is_none() && !r.rules.is_empty())
    {
        let _ = writeln!(out, "  {} no rule decided {}:", paint.dim("·"), r.pod);
        for t in &r.rules {
            let _ = writeln!(out, "      rule {}: {}", t.rule, t.why);
        }
    }
}

fn condition(c: &ConditionText) -> String {
    format!("{} {}: {}", c.type_, c.reason, c.message)
}

/// The condition after a state that already names its type.
fn after_state(state: &str, c: &ConditionText) -> String {
    if state == c.type_ {
        format!("{}: {}", c.reason, c.message)
    } else {
        condition(c)
    }
}

fn verdict(out: &mut String, v: &Verdict, paint: Paint) {
    let _ = write!(out, "{} {}", paint.bold("Verdict:"), paint.bold(&v.state));
    match &v.condition {
        Some(c) => {
            let _ = writeln!(out, " — {}", after_state(&v.state, c));
        }
        None => {
            let _ = writeln!(
                out,
                " — no failure condition; {} more counted failure(s) tolerated by backoffLimit",
                v.failures_left
            );
        }
    }
    if let Some(p) = &v.decided_by {
        let _ = writeln!(out, "  decided by pod {p}");
    }
    if v.state == "Failing" {
        let _ = writeln!(
            out,
            "  the Job gets Failed with the same reason once its pods have terminated"
        );
    }
    if !v.agrees {
        let _ = writeln!(
            out,
            "  {} replaying the pods still present gives {} (pods that are gone decided the rest)",
            paint.wrap("33", "note:"),
            v.replay.as_ref().map_or("no condition".into(), condition)
        );
    }
}

fn what_if(out: &mut String, w: &WhatIfReport, paint: Paint) {
    let _ = writeln!(out, "\n{}", paint.bold("What if (proposed policy):"));
    for (i, r) in w.rules.iter().enumerate() {
        let _ = writeln!(out, "  rule {i}: {r}");
    }
    let _ = writeln!(
        out,
        "  backoffLimit {}{}",
        w.budgets.backoff_limit,
        w.budgets
            .backoff_limit_per_index
            .map(|b| format!(", backoffLimitPerIndex {b}"))
            .unwrap_or_default()
    );
    out.push_str(&table(HEADER, &pod_rows(&w.failures), paint));
    if w.changed.is_empty() {
        let _ = writeln!(out, "  no pod is decided differently");
    } else {
        let _ = writeln!(out, "  decided differently:");
        for c in &w.changed {
            let _ = writeln!(out, "    {}: {} → {}", c.pod, c.before, c.after);
        }
    }
    let _ = write!(out, "  ");
    verdict(out, &w.verdict, paint);
    let _ = writeln!(
        out,
        "  {}",
        if w.ends_differently {
            "the Job would have ended otherwise"
        } else {
            "the Job would have ended the same way"
        }
    );
    if !w.unknown.is_empty() {
        let _ = writeln!(
            out,
            "  outcome unknown (stopped when the real Job ended): {}",
            w.unknown.join(", ")
        );
    }
}

pub fn text(e: &Explanation, paint: Paint) -> String {
    let mut out = String::new();
    let b = &e.budgets;
    let _ = writeln!(
        out,
        "{} {} ({}, backoffLimit {}{}{})",
        paint.bold("Job"),
        paint.bold(&e.job),
        e.completion_mode,
        b.backoff_limit,
        b.backoff_limit_per_index
            .map(|x| format!(", backoffLimitPerIndex {x}"))
            .unwrap_or_default(),
        b.max_failed_indexes
            .map(|x| format!(", maxFailedIndexes {x}"))
            .unwrap_or_default(),
    );
    if let Some(m) = &e.managed_by {
        let _ = writeln!(out, "  managedBy {m}");
    }
    if e.rules.is_empty() {
        let _ = writeln!(out, "  no podFailurePolicy: every failure counts");
    } else if !e.policy_applied {
        let _ = writeln!(
            out,
            "  podFailurePolicy ignored: the gate JobPodFailurePolicy is off"
        );
    }
    for (i, r) in e.rules.iter().enumerate() {
        let _ = writeln!(out, "  rule {i}: {r}");
    }
    let s = &e.status;
    let conds: Vec<String> = s
        .conditions
        .iter()
        .map(|c| format!("{}({})", c.type_, c.reason))
        .collect();
    let _ = writeln!(
        out,
        "  status: active {}, succeeded {}, failed {}{}{}",
        s.active,
        s.succeeded,
        s.failed,
        s.failed_indexes
            .as_ref()
            .filter(|f| !f.is_empty())
            .map(|f| format!(", failedIndexes {f}"))
            .unwrap_or_default(),
        if conds.is_empty() {
            String::new()
        } else {
            format!(", {}", conds.join(", "))
        }
    );
    out.push('\n');
    if e.failures.is_empty() {
        let _ = writeln!(out, "  no failed pods in the API");
    } else {
        out.push_str(&table(HEADER, &pod_rows(&e.failures), paint));
        why_none(&mut out, &e.failures, paint);
    }
    if !e.stopped.is_empty() {
        let _ = writeln!(
            out,
            "\n  stopped when the Job ended (counted by its last sync):"
        );
        out.push_str(&table(HEADER, &pod_rows(&e.stopped), paint));
    }
    if e.gone.counted_failures > 0 || !e.gone.pods.is_empty() {
        let _ = writeln!(
            out,
            "\n  pods no longer in the API: {} counted failure(s) in status.failed",
            e.gone.counted_failures
        );
        for g in &e.gone.pods {
            let inferred = g
                .inferred
                .as_ref()
                .map(|i| {
                    format!(
                        " → {} → {}{}",
                        i.condition,
                        i.rule.map(|r| format!("rule {r} ")).unwrap_or_default(),
                        paint.action(&i.action)
                    )
                })
                .unwrap_or_default();
            let _ = writeln!(out, "    {}{inferred}", g.pod);
            for ev in &g.events {
                let _ = writeln!(out, "      {}", paint.dim(ev));
            }
        }
    }
    out.push('\n');
    verdict(&mut out, &e.verdict, paint);
    if let Some(w) = &e.what_if {
        what_if(&mut out, w, paint);
    }
    out
}
