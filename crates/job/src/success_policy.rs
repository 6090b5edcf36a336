//! `spec.successPolicy` of Indexed Jobs (KEP-3998; upstream success_policy.go
//! `matchSuccessPolicy`).

use k8s_openapi::api::batch::v1::Job;

use crate::indexes::OrderedIntervals;
use crate::pods::completions;

/// Reason of the `SuccessCriteriaMet` condition set by a matching rule.
pub const REASON_SUCCESS_POLICY: &str = "SuccessPolicy";

/// Evaluates the Job's success policy against the succeeded indexes and
/// returns `(reason, message)` of the first satisfied rule: reason
/// [`REASON_SUCCESS_POLICY`], message `Matched rules at index <i>` where `i`
/// is the rule's position in `spec.successPolicy.rules`.
///
/// `None` when there is no policy or no succeeded index yet. Rules are tried
/// in order:
/// * with `succeededIndexes`: the string is parsed against
///   `spec.completions` (upstream leniency, see [`OrderedIntervals::parse`]);
///   an empty result (blank or malformed) skips the rule. The rule holds when
///   all of its indexes succeeded, or `succeededCount` is set and at least
///   that many of its indexes succeeded;
/// * with only `succeededCount`: holds when the total number of succeeded
///   indexes is at least that count;
/// * with neither: never holds (API validation forbids it).
pub fn match_success_policy(job: &Job, succeeded: &OrderedIntervals) -> Option<(String, String)> {
    let policy = job.spec.as_ref()?.success_policy.as_ref()?;
    if succeeded.is_empty() {
        return None;
    }
    let completions = completions(job);
    let matched = policy.rules.iter().position(|rule| {
        match (&rule.succeeded_indexes, rule.succeeded_count) {
            (Some(raw), count) => {
                let required = OrderedIntervals::parse(raw, completions);
                !required.is_empty() && rule_indexes_met(&required, succeeded, count)
            }
            (None, Some(count)) => succeeded.total_i64() >= i64::from(count),
            (None, None) => false,
        }
    })?;
    Some((
        REASON_SUCCESS_POLICY.to_string(),
        format!("Matched rules at index {matched}"),
    ))
}

/// Upstream `matchSucceededIndexesRule`: walks both sorted lists once,
/// summing the overlap; holds when the overlap covers the whole rule, or
/// reaches `count` when one is given.
fn rule_indexes_met(
    rule: &OrderedIntervals,
    succeeded: &OrderedIntervals,
    count: Option<i32>,
) -> bool {
    let (rule_ivs, done_ivs) = (rule.intervals(), succeeded.intervals());
    let (mut r, mut s) = (0usize, 0usize);
    let mut overlap_total: i64 = 0;
    while let (Some(&(rf, rl)), Some(&(sf, sl))) = (rule_ivs.get(r), done_ivs.get(s)) {
        let overlap = i64::from(rl.min(sl)) - i64::from(rf.max(sf)) + 1;
        if overlap > 0 {
            overlap_total += overlap;
        }
        // Advance whichever interval ends first (both when they end together).
        match sl.cmp(&rl) {
            std::cmp::Ordering::Less => s += 1,
            std::cmp::Ordering::Greater => r += 1,
            std::cmp::Ordering::Equal => {
                s += 1;
                r += 1;
            }
        }
    }
    overlap_total == rule.total_i64() || count.is_some_and(|c| overlap_total >= i64::from(c))
}

#[cfg(test)]
mod tests;
