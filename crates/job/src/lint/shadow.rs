//! Does an earlier rule match every failed pod a later rule matches?
//!
//! Exit-code rules: the later rule matches when some terminated container
//! it looks at exited with a non-zero code it accepts; the earlier rule
//! then matches too if it looks at that container and accepts that code.
//! Condition rules: every pattern of the later rule is one of the earlier's.
//! Mixed kinds never cover each other. Conservative: "false" may miss a
//! shadowed rule, "true" is always right.

use std::collections::BTreeSet;

use k8s_openapi::api::batch::v1::{PodFailurePolicyOnExitCodesRequirement, PodFailurePolicyRule};

use crate::pod_failure_policy::pattern_status;

pub fn covers(earlier: &PodFailurePolicyRule, later: &PodFailurePolicyRule) -> bool {
    match (
        &earlier.on_exit_codes,
        &later.on_exit_codes,
        &earlier.on_pod_conditions,
        &later.on_pod_conditions,
    ) {
        (Some(e), Some(l), None, None) => exit_codes_cover(e, l),
        (None, None, Some(e), Some(l)) => {
            !l.is_empty()
                && l.iter().all(|lp| {
                    e.iter()
                        .any(|ep| ep.type_ == lp.type_ && pattern_status(ep) == pattern_status(lp))
                })
        }
        _ => false,
    }
}

fn exit_codes_cover(
    e: &PodFailurePolicyOnExitCodesRequirement,
    l: &PodFailurePolicyOnExitCodesRequirement,
) -> bool {
    // The earlier rule must look at every container the later one does.
    if e.container_name.is_some() && e.container_name != l.container_name {
        return false;
    }
    let ev: BTreeSet<i32> = e.values.iter().copied().collect();
    let lv: BTreeSet<i32> = l.values.iter().copied().filter(|v| *v != 0).collect();
    match (e.operator.as_str(), l.operator.as_str()) {
        // A later `In` with no usable code matches nothing: not shadowed,
        // just empty (reported as such).
        ("In" | "NotIn", "In") if lv.is_empty() => false,
        // Every code the later accepts is one the earlier accepts.
        ("In", "In") => lv.is_subset(&ev),
        ("NotIn", "In") => lv.is_disjoint(&ev),
        // Later accepts all but lv (and 0); earlier all but ev: ev ⊆ lv ∪ {0}.
        ("NotIn", "NotIn") => ev.iter().all(|v| *v == 0 || lv.contains(v)),
        // An In list is finite, a NotIn set is not.
        _ => false,
    }
}
