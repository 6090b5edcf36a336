//! What the audit log says each identity did, against what its role grants:
//! every request of kcm-rs's five identities, their refusals (must be none),
//! and for every (verb, resource) a role grants, whether that identity used it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;

/// `system:serviceaccount:kube-system:<name>`.
pub fn sa(name: &str) -> String {
    format!("system:serviceaccount:kube-system:{name}")
}

/// One audited request, reduced to what RBAC decides on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Use {
    pub verb: String,
    /// `group/resource[/subresource]` (core group: empty group), or the
    /// non-resource path.
    pub resource: String,
}

/// Per user: every (verb, resource) with its count, and refused requests.
#[derive(Debug, Default)]
pub struct Usage {
    pub uses: BTreeMap<String, BTreeMap<Use, usize>>,
    pub refused: Vec<String>,
}

pub fn read(path: &Path) -> Usage {
    let text = std::fs::read_to_string(path).expect("audit log");
    let mut u = Usage::default();
    for line in text.lines() {
        let Ok(e) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if e["stage"] != "ResponseComplete" {
            continue;
        }
        let user = e["user"]["username"].as_str().unwrap_or("").to_string();
        let o = &e["objectRef"];
        let resource = if o.is_object() {
            let mut r = format!(
                "{}/{}",
                o["apiGroup"].as_str().unwrap_or(""),
                o["resource"].as_str().unwrap_or("")
            );
            if let Some(sub) = o["subresource"].as_str() {
                r = format!("{r}/{sub}");
            }
            r
        } else {
            e["requestURI"]
                .as_str()
                .unwrap_or("")
                .split('?')
                .next()
                .unwrap_or("")
                .to_string()
        };
        let verb = e["verb"].as_str().unwrap_or("").to_string();
        let code = e["responseStatus"]["code"].as_i64().unwrap_or(0);
        if matches!(code, 401 | 403) {
            u.refused
                .push(format!("{user} {verb} {resource} -> {code}"));
        }
        *u.uses
            .entry(user)
            .or_default()
            .entry(Use { verb, resource })
            .or_default() += 1;
    }
    u
}

/// Every (verb, group/resource) a ClusterRole or Role document grants
/// (non-resource URLs as their path).
pub fn grants(role: &Value) -> BTreeSet<Use> {
    let mut out = BTreeSet::new();
    for rule in role["rules"].as_array().into_iter().flatten() {
        let verbs = rule["verbs"].as_array().cloned().unwrap_or_default();
        let mut targets = Vec::new();
        for g in rule["apiGroups"].as_array().into_iter().flatten() {
            for r in rule["resources"].as_array().into_iter().flatten() {
                targets.push(format!(
                    "{}/{}",
                    g.as_str().unwrap_or(""),
                    r.as_str().unwrap_or("")
                ));
            }
        }
        for p in rule["nonResourceURLs"].as_array().into_iter().flatten() {
            targets.push(p.as_str().unwrap_or("").to_string());
        }
        for v in &verbs {
            for t in &targets {
                out.insert(Use {
                    verb: v.as_str().unwrap_or("").to_string(),
                    resource: t.clone(),
                });
            }
        }
    }
    out
}

/// Did `used` exercise the grant `g` (`*` groups and `*/scale` match any)?
pub fn covers(g: &Use, used: &Use) -> bool {
    if g.verb != used.verb {
        return false;
    }
    let (gg, gr) = g.resource.split_once('/').unwrap_or(("", &g.resource));
    let (ug, ur) = used
        .resource
        .split_once('/')
        .unwrap_or(("", &used.resource));
    let group = gg == "*" || gg == ug;
    let res = match gr.strip_prefix("*/") {
        Some(sub) => ur.split_once('/').is_some_and(|(_, s)| s == sub),
        None => gr == ur,
    };
    group && res
}

/// TokenRequests `user` made, by ServiceAccount name (successful only).
pub fn token_requests(path: &Path, user: &str) -> BTreeMap<String, usize> {
    let text = std::fs::read_to_string(path).expect("audit log");
    let mut out = BTreeMap::new();
    for e in text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    {
        let o = &e["objectRef"];
        if e["stage"] == "ResponseComplete"
            && e["user"]["username"] == user
            && o["subresource"] == "token"
            && e["responseStatus"]["code"] == 201
        {
            let name = o["name"].as_str().unwrap_or("").to_string();
            *out.entry(name).or_default() += 1;
        }
    }
    out
}
