//! The API server's audit log, read for who wrote what, from where and when.

use std::collections::BTreeMap;
use std::path::Path;

use jiff::Timestamp;
use serde_json::Value;

/// One completed request.
#[derive(Debug, Clone)]
pub struct Event {
    pub at: Timestamp,
    pub user: String,
    pub verb: String,
    /// `group/resource[/subresource]`, core group empty: `/pods/status`.
    pub resource: String,
    pub namespace: String,
    pub name: String,
    pub source: String,
    pub code: i64,
}

impl Event {
    /// A change to an object (reviews and token requests are `create`s that
    /// store nothing; they count as requests, not writes).
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        ) && !self.resource.ends_with("reviews")
    }
}

pub fn read(path: &Path) -> Vec<Event> {
    let text = std::fs::read_to_string(path).expect("audit log");
    let mut out = Vec::new();
    for line in text.lines() {
        let Ok(e) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if e["stage"] != "ResponseComplete" {
            continue;
        }
        let s = |v: &Value| v.as_str().unwrap_or("").to_string();
        let o = &e["objectRef"];
        let resource = if o.is_object() {
            let r = format!("{}/{}", s(&o["apiGroup"]), s(&o["resource"]));
            match o["subresource"].as_str() {
                Some(sub) => format!("{r}/{sub}"),
                None => r,
            }
        } else {
            s(&e["requestURI"])
                .split('?')
                .next()
                .unwrap_or("")
                .to_string()
        };
        let Ok(at) = s(&e["stageTimestamp"]).parse::<Timestamp>() else {
            continue;
        };
        out.push(Event {
            at,
            user: s(&e["user"]["username"]),
            verb: s(&e["verb"]),
            resource,
            namespace: s(&o["namespace"]),
            name: s(&o["name"]),
            source: s(&e["sourceIPs"][0]),
            code: e["responseStatus"]["code"].as_i64().unwrap_or(0),
        });
    }
    out
}

/// `system:serviceaccount:<ns>:<name>`.
pub fn sa(ns: &str, name: &str) -> String {
    format!("system:serviceaccount:{ns}:{name}")
}

/// Per user, per `verb resource`, how many successful writes.
pub fn writers<'a>(
    events: impl Iterator<Item = &'a Event>,
) -> BTreeMap<String, BTreeMap<String, usize>> {
    let mut out: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for e in events.filter(|e| e.is_write() && e.code < 300) {
        *out.entry(e.user.clone())
            .or_default()
            .entry(format!("{} {}", e.verb, e.resource))
            .or_default() += 1;
    }
    out
}

/// The writers table as Markdown lines: `| user | verb resource ×n, ... |`.
pub fn writers_markdown(w: &BTreeMap<String, BTreeMap<String, usize>>) -> String {
    let mut s = String::from("| identity | writes (verb group/resource: count) |\n|---|---|\n");
    for (user, uses) in w {
        let list: Vec<String> = uses.iter().map(|(k, n)| format!("{k}: {n}")).collect();
        s.push_str(&format!("| `{user}` | {} |\n", list.join(", ")));
    }
    s
}
