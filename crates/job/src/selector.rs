//! Label selector matching (metav1.LabelSelectorAsSelector semantics) for
//! claiming pods and finding the Jobs that select an orphan pod.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Whether `labels` satisfy `selector`. An empty selector matches
/// everything, as upstream's conversion does; an unknown operator matches
/// nothing (upstream rejects such selectors).
pub fn matches(selector: &LabelSelector, labels: Option<&BTreeMap<String, String>>) -> bool {
    let empty = BTreeMap::new();
    let labels = labels.unwrap_or(&empty);
    let by_labels = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let by_exprs = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or(&[]);
        match e.operator.as_str() {
            "In" => labels.get(&e.key).is_some_and(|v| values.contains(v)),
            "NotIn" => labels.get(&e.key).is_none_or(|v| !values.contains(v)),
            "Exists" => labels.contains_key(&e.key),
            "DoesNotExist" => !labels.contains_key(&e.key),
            _ => false,
        }
    });
    by_labels && by_exprs
}

/// True when the selector selects nothing in particular (no labels, no
/// expressions): upstream's GetPodJobs skips such Jobs.
pub fn is_empty(selector: &LabelSelector) -> bool {
    selector
        .match_labels
        .as_ref()
        .is_none_or(BTreeMap::is_empty)
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(Vec::is_empty)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    use super::*;

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|s| s.to_string()).collect()),
        }
    }

    #[test]
    fn match_labels_and_expressions() {
        let sel = LabelSelector {
            match_labels: Some(labels(&[("app", "x")])),
            match_expressions: Some(vec![
                expr("tier", "In", &["a", "b"]),
                expr("skip", "DoesNotExist", &[]),
            ]),
        };
        assert!(matches(&sel, Some(&labels(&[("app", "x"), ("tier", "a")]))));
        assert!(!matches(
            &sel,
            Some(&labels(&[("app", "x"), ("tier", "c")]))
        ));
        assert!(!matches(
            &sel,
            Some(&labels(&[("app", "x"), ("tier", "a"), ("skip", "1")]))
        ));
        assert!(!matches(&sel, None));
        let notin = LabelSelector {
            match_expressions: Some(vec![
                expr("tier", "NotIn", &["a"]),
                expr("app", "Exists", &[]),
            ]),
            ..Default::default()
        };
        assert!(matches(&notin, Some(&labels(&[("app", "y")]))));
        assert!(!matches(
            &notin,
            Some(&labels(&[("app", "y"), ("tier", "a")]))
        ));
        let bad = LabelSelector {
            match_expressions: Some(vec![expr("app", "Regex", &[".*"])]),
            ..Default::default()
        };
        assert!(!matches(&bad, Some(&labels(&[("app", "y")]))));
        assert!(is_empty(&LabelSelector::default()));
    }
}
