//! Upstream's event reasons and messages for this controller (source
//! component `controllermanager`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// The event source component KCM uses for the disruption controller.
pub const COMPONENT: &str = "controllermanager";

pub const NO_PODS: &str = "NoPods";
pub const CALCULATE_EXPECTED_FAILED: &str = "CalculateExpectedPodCountFailed";
pub const UNMANAGED_PODS: &str = "UnmanagedPods";
pub const MULTIPLE_PDBS: &str = "MultiplePodDisruptionBudgets";
pub const NOT_DELETED: &str = "NotDeleted";

pub const MSG_NO_MATCHING_PODS: &str = "No matching pods found";

/// The `UnmanagedPods` message; the selector is printed as Go's `%v` of a
/// `*metav1.LabelSelector` does.
pub fn unmanaged_pods_message(selector: Option<&LabelSelector>) -> String {
    format!(
        "Pods selected by this PodDisruptionBudget (selector: {}) were found to be unmanaged. \
         As a result, the status of the PDB cannot be calculated correctly, which may result in \
         undefined behavior. To account for these pods please set \".spec.minAvailable\" field of \
         the PDB to an integer value.",
        go_selector_string(selector)
    )
}

/// The `NotDeleted` message. Upstream prints the PDB's namespace twice
/// (instead of namespace/name); kept for identical events.
pub fn not_deleted_message(pdb_namespace: &str) -> String {
    format!("Pod was expected by PDB {pdb_namespace}/{pdb_namespace} to be deleted but it wasn't")
}

/// The `MultiplePodDisruptionBudgets` message (two spaces as upstream).
pub fn multiple_pdbs_message(pod_ns: &str, pod_name: &str, chosen: &str) -> String {
    format!(
        "Pod {pod_ns:?}/{pod_name:?} matches multiple PodDisruptionBudgets.  Chose {chosen:?} arbitrarily."
    )
}

/// The generated protobuf `String()` of `*metav1.LabelSelector`.
pub fn go_selector_string(selector: Option<&LabelSelector>) -> String {
    let Some(s) = selector else {
        return "nil".into();
    };
    let labels: String = s
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}: {v},"))
        .collect();
    let exprs: String = s
        .match_expressions
        .iter()
        .flatten()
        .map(|e| {
            format!(
                "LabelSelectorRequirement{{Key:{},Operator:{},Values:[{}],}},",
                e.key,
                e.operator,
                e.values.as_deref().unwrap_or(&[]).join(" ")
            )
        })
        .collect();
    format!(
        "&LabelSelector{{MatchLabels:map[string]string{{{labels}}},MatchExpressions:[]LabelSelectorRequirement{{{exprs}}},}}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    #[test]
    fn selector_prints_like_go() {
        let sel = LabelSelector {
            match_labels: Some([("app".to_string(), "web".to_string())].into()),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "t".into(),
                operator: "In".into(),
                values: Some(vec!["a".into(), "b".into()]),
            }]),
        };
        assert_eq!(
            go_selector_string(Some(&sel)),
            "&LabelSelector{MatchLabels:map[string]string{app: web,},MatchExpressions:[]LabelSelectorRequirement{LabelSelectorRequirement{Key:t,Operator:In,Values:[a b],},},}"
        );
        assert_eq!(go_selector_string(None), "nil");
    }
}
