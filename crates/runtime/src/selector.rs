//! Label selectors with `metav1.LabelSelectorAsSelector` semantics (PDBs,
//! Jobs): a nil selector selects nothing, an empty one everything, and
//! malformed expressions are errors (the sync then fails safe).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// A selector upstream cannot convert.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("{0:?} is not a valid label selector operator")]
    Operator(String),
    #[error("for '{op}' operator, the values set {detail}")]
    Values { op: String, detail: &'static str },
}

/// Labels a selector can look up: the API type's map (absent = none) or a
/// cached pod's [`kcm_pod::Labels`].
pub trait LabelSet {
    fn label(&self, key: &str) -> Option<&str>;
}

impl LabelSet for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl LabelSet for Option<&BTreeMap<String, String>> {
    fn label(&self, key: &str) -> Option<&str> {
        self.and_then(|m| m.label(key))
    }
}

impl LabelSet for kcm_pod::Labels {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key)
    }
}

/// A parsed selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    Nothing,
    Everything,
    Requirements(Vec<Requirement>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    Equals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

impl Selector {
    /// Converts a PDB's `spec.selector`.
    pub fn parse(sel: Option<&LabelSelector>) -> Result<Selector, SelectorError> {
        let Some(sel) = sel else {
            return Ok(Selector::Nothing);
        };
        let labels = sel.match_labels.as_ref();
        let exprs = sel.match_expressions.as_deref().unwrap_or(&[]);
        if labels.is_none_or(BTreeMap::is_empty) && exprs.is_empty() {
            return Ok(Selector::Everything);
        }
        let mut reqs: Vec<Requirement> = labels
            .into_iter()
            .flatten()
            .map(|(k, v)| Requirement::Equals(k.clone(), v.clone()))
            .collect();
        for e in exprs {
            let values = e.values.clone().unwrap_or_default();
            let need = |non_empty: bool| {
                if non_empty == values.is_empty() {
                    Err(SelectorError::Values {
                        op: e.operator.to_lowercase(),
                        detail: if non_empty {
                            "must be non-empty"
                        } else {
                            "must be empty"
                        },
                    })
                } else {
                    Ok(())
                }
            };
            let key = e.key.clone();
            reqs.push(match e.operator.as_str() {
                "In" => need(true).map(|()| Requirement::In(key, values.clone()))?,
                "NotIn" => need(true).map(|()| Requirement::NotIn(key, values.clone()))?,
                "Exists" => need(false).map(|()| Requirement::Exists(key))?,
                "DoesNotExist" => need(false).map(|()| Requirement::DoesNotExist(key))?,
                other => return Err(SelectorError::Operator(other.to_string())),
            });
        }
        Ok(Selector::Requirements(reqs))
    }

    /// Whether a pod with `labels` is selected.
    pub fn matches(&self, labels: &impl LabelSet) -> bool {
        let one_of = |vs: &[String], v: &str| vs.iter().any(|x| x == v);
        match self {
            Selector::Nothing => false,
            Selector::Everything => true,
            Selector::Requirements(reqs) => reqs.iter().all(|r| match r {
                Requirement::Equals(k, v) => labels.label(k) == Some(v.as_str()),
                Requirement::In(k, vs) => labels.label(k).is_some_and(|v| one_of(vs, v)),
                Requirement::NotIn(k, vs) => labels.label(k).is_none_or(|v| !one_of(vs, v)),
                Requirement::Exists(k) => labels.label(k).is_some(),
                Requirement::DoesNotExist(k) => labels.label(k).is_none(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn nil_selects_nothing_and_empty_everything() {
        assert_eq!(Selector::parse(None), Ok(Selector::Nothing));
        let all = Selector::parse(Some(&LabelSelector::default())).expect("ok");
        assert!(all.matches(&None::<&BTreeMap<String, String>>));
        assert!(!Selector::Nothing.matches(&labels(&[("a", "b")])));
    }

    #[test]
    fn labels_and_expressions() {
        let sel = LabelSelector {
            match_labels: Some(labels(&[("app", "web")])),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "NotIn".into(),
                values: Some(vec!["db".into()]),
            }]),
        };
        let s = Selector::parse(Some(&sel)).expect("ok");
        assert!(s.matches(&labels(&[("app", "web")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "db")])));
        assert!(!s.matches(&None::<&BTreeMap<String, String>>));
    }

    #[test]
    fn malformed_expressions_are_errors() {
        let bad = |op: &str, values: Option<Vec<String>>| LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "k".into(),
                operator: op.into(),
                values,
            }]),
            ..Default::default()
        };
        assert!(Selector::parse(Some(&bad("Near", None))).is_err());
        assert!(Selector::parse(Some(&bad("In", None))).is_err());
        assert!(Selector::parse(Some(&bad("Exists", Some(vec!["x".into()])))).is_err());
    }
}
