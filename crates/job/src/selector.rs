//! Label selector matching (metav1.LabelSelectorAsSelector semantics) for
//! claiming pods and finding the Jobs that select an orphan pod.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kcm_pod::Labels;
use kcm_runtime::selector::Selector;

/// Whether `labels` satisfy `selector`. An empty selector matches
/// everything; a selector upstream cannot convert (unknown operator, wrong
/// value count) matches nothing.
pub fn matches(selector: &LabelSelector, labels: &Labels) -> bool {
    matcher(selector)(labels)
}

/// [`matches`] with the selector parsed once, for loops over many pods.
pub fn matcher(selector: &LabelSelector) -> impl Fn(&Labels) -> bool {
    let parsed = Selector::parse(Some(selector)).ok();
    move |labels| parsed.as_ref().is_some_and(|s| s.matches(labels))
}

/// True when the selector selects nothing in particular (no labels, no
/// expressions): upstream's GetPodJobs skips such Jobs.
pub fn is_empty(selector: &LabelSelector) -> bool {
    matches!(Selector::parse(Some(selector)), Ok(Selector::Everything))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    use super::*;

    use std::collections::BTreeMap;

    fn labels(kv: &[(&str, &str)]) -> Labels {
        Labels::from_pairs(kv.iter().copied())
    }

    fn map(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
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
            match_labels: Some(map(&[("app", "x")])),
            match_expressions: Some(vec![
                expr("tier", "In", &["a", "b"]),
                expr("skip", "DoesNotExist", &[]),
            ]),
        };
        assert!(matches(&sel, &(labels(&[("app", "x"), ("tier", "a")]))));
        assert!(!matches(&sel, &(labels(&[("app", "x"), ("tier", "c")]))));
        assert!(!matches(
            &sel,
            &(labels(&[("app", "x"), ("tier", "a"), ("skip", "1")]))
        ));
        assert!(!matches(&sel, &Labels::default()));
        let notin = LabelSelector {
            match_expressions: Some(vec![
                expr("tier", "NotIn", &["a"]),
                expr("app", "Exists", &[]),
            ]),
            ..Default::default()
        };
        assert!(matches(&notin, &(labels(&[("app", "y")]))));
        assert!(!matches(&notin, &(labels(&[("app", "y"), ("tier", "a")]))));
        let bad = LabelSelector {
            match_expressions: Some(vec![expr("app", "Regex", &[".*"])]),
            ..Default::default()
        };
        assert!(!matches(&bad, &(labels(&[("app", "y")]))));
        assert!(is_empty(&LabelSelector::default()));
    }
}
