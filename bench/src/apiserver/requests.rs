//! What a manager asked the API server for during a relist storm, from the
//! fault proxy's records; and the writes of a phase, from the API server's
//! own request counters.

use std::collections::BTreeMap;

use kcm_e2e::faults::{Fault, Record};

use crate::common::Requests;

/// What kind of request `r` is: a streaming list (at a version or the
/// latest), a resumed watch (and whether the proxy answered it 410), a
/// list (from the cache at "0", at a version, the latest, or a
/// continuation), or another request by method; with the collection for
/// watches and lists.
pub fn request_kind(r: &Record) -> String {
    let (path, query) = r.path.split_once('?').unwrap_or((&r.path, ""));
    let resource = path.rsplit('/').next().unwrap_or(path);
    let param = |k: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
    };
    if r.watch {
        if param("sendInitialEvents") == Some("true") {
            let at = match param("resourceVersion") {
                Some(rv) if !rv.is_empty() => "at a version",
                _ => "latest",
            };
            return format!("streaming list {resource} {at}");
        }
        if r.fault == Some(Fault::WatchGone) {
            return format!("watch {resource} answered 410");
        }
        return format!("watch {resource}");
    }
    if r.method == "GET" && (param("limit").is_some() || param("continue").is_some()) {
        let rv = match param("resourceVersion") {
            Some("0") => "at 0",
            Some(rv) if !rv.is_empty() => "at a version",
            _ if param("continue").is_some() => "continued",
            _ => "latest",
        };
        return format!("list {resource} {rv}");
    }
    format!("{} {resource}", r.method)
}

/// Counts `records` by [`request_kind`].
pub fn count_kinds(records: &[Record]) -> Vec<(String, usize)> {
    let mut by: BTreeMap<String, usize> = BTreeMap::new();
    for r in records {
        *by.entry(request_kind(r)).or_default() += 1;
    }
    by.into_iter().collect()
}

/// Writes among request counts (`apiserver_request_total` by verb and
/// resource, as [`crate::common::request_counts`] keys them).
pub fn writes(counts: &Requests) -> f64 {
    counts
        .iter()
        .filter(|(k, _)| {
            let verb = k.split(' ').next().unwrap_or("");
            matches!(verb, "POST" | "PUT" | "PATCH" | "DELETE" | "APPLY")
        })
        .map(|(_, v)| v)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(method: &str, path: &str, watch: bool, fault: Option<Fault>) -> Record {
        Record {
            id: 0,
            start: std::time::SystemTime::UNIX_EPOCH,
            forwarded: None,
            end: None,
            method: method.into(),
            path: path.into(),
            user_agent: String::new(),
            accept: String::new(),
            watch,
            status: None,
            sent: None,
            fault,
            after: false,
            completed: false,
            upstream_error: None,
            created: None,
            frames: 0,
            bytes: 0,
        }
    }

    #[test]
    fn kinds_of_requests() {
        let cases = [
            (
                rec(
                    "GET",
                    "/api/v1/pods?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=5",
                    true,
                    None,
                ),
                "streaming list pods at a version",
            ),
            (
                rec(
                    "GET",
                    "/api/v1/pods?sendInitialEvents=true&resourceVersion=&watch=true",
                    true,
                    None,
                ),
                "streaming list pods latest",
            ),
            (
                rec(
                    "GET",
                    "/apis/batch/v1/jobs?watch=true&resourceVersion=5",
                    true,
                    Some(Fault::WatchGone),
                ),
                "watch jobs answered 410",
            ),
            (
                rec(
                    "GET",
                    "/api/v1/nodes?watch=true&resourceVersion=5",
                    true,
                    None,
                ),
                "watch nodes",
            ),
            (
                rec(
                    "GET",
                    "/api/v1/pods?limit=500&resourceVersion=0",
                    false,
                    None,
                ),
                "list pods at 0",
            ),
            (
                rec("GET", "/api/v1/pods?limit=500&continue=abc", false, None),
                "list pods continued",
            ),
            (
                rec("GET", "/api/v1/pods?limit=500", false, None),
                "list pods latest",
            ),
            (
                rec(
                    "PUT",
                    "/apis/batch/v1/namespaces/a/jobs/j/status",
                    false,
                    None,
                ),
                "PUT status",
            ),
        ];
        for (r, want) in cases {
            assert_eq!(request_kind(&r), want, "{}", r.path);
        }
        let counted = count_kinds(&[
            rec("GET", "/api/v1/nodes?watch=true", true, None),
            rec("GET", "/api/v1/nodes?watch=true", true, None),
            rec("POST", "/api/v1/namespaces/a/events", false, None),
        ]);
        assert_eq!(
            counted,
            vec![
                ("POST events".to_string(), 1),
                ("watch nodes".to_string(), 2)
            ]
        );
    }

    #[test]
    fn writes_are_the_mutating_verbs() {
        let counts: Requests = [
            ("GET pods", 4.0),
            ("LIST pods", 2.0),
            ("WATCH pods", 1.0),
            ("PUT jobs/status", 3.0),
            ("POST events", 2.0),
            ("PATCH pods", 1.0),
            ("DELETE pods", 1.0),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(writes(&counts), 7.0);
    }
}
