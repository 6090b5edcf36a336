use k8s_openapi::api::batch::v1::{JobSpec, SuccessPolicy, SuccessPolicyRule};
use proptest::prelude::*;

use super::*;

/// A rule: `(succeededIndexes, succeededCount)`.
type Rule<'a> = (Option<&'a str>, Option<i32>);

fn job(completions: i32, rules: Option<&[Rule<'_>]>) -> Job {
    Job {
        spec: Some(JobSpec {
            completions: Some(completions),
            completion_mode: Some("Indexed".into()),
            success_policy: rules.map(|rules| SuccessPolicy {
                rules: rules
                    .iter()
                    .map(|(ix, n)| SuccessPolicyRule {
                        succeeded_indexes: ix.map(str::to_string),
                        succeeded_count: *n,
                    })
                    .collect(),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn ivs(v: &[(i32, i32)]) -> OrderedIntervals {
    OrderedIntervals::from_intervals(v.to_vec())
}

struct Case {
    name: &'static str,
    rules: Option<&'static [Rule<'static>]>,
    succeeded: &'static [(i32, i32)],
    /// Index of the matching rule, if any.
    want: Option<usize>,
}

/// Upstream TestMatchSuccessPolicy cases (the feature-gate-off case is moot:
/// JobSuccessPolicy is GA and locked on), plus a few of our own.
const CASES: &[Case] = &[
    Case {
        name: "successPolicy is null",
        rules: None,
        succeeded: &[(0, 0)],
        want: None,
    },
    Case {
        name: "no rules",
        rules: Some(&[]),
        succeeded: &[(0, 0)],
        want: None,
    },
    Case {
        name: "succeededIndexes is invalid format",
        rules: Some(&[(Some("invalid-form"), None)]),
        succeeded: &[(0, 0)],
        want: None,
    },
    Case {
        name: "succeededIndexes matched",
        rules: Some(&[(Some("0-2"), None)]),
        succeeded: &[(0, 2), (4, 7)],
        want: Some(0),
    },
    Case {
        name: "succeededIndexes not matched",
        rules: Some(&[(Some("3"), None)]),
        succeeded: &[(0, 2)],
        want: None,
    },
    Case {
        name: "succeededCount matched",
        rules: Some(&[(None, Some(2))]),
        succeeded: &[(0, 2)],
        want: Some(0),
    },
    Case {
        name: "succeededCount not matched",
        rules: Some(&[(None, Some(4))]),
        succeeded: &[(0, 2)],
        want: None,
    },
    Case {
        name: "multiple rules, second met",
        rules: Some(&[(Some("9"), None), (Some("4,6"), None)]),
        succeeded: &[(0, 2), (4, 7)],
        want: Some(1),
    },
    Case {
        name: "multiple rules, all met: first wins",
        rules: Some(&[(Some("0,1"), None), (Some("5"), None)]),
        succeeded: &[(0, 2), (4, 7)],
        want: Some(0),
    },
    Case {
        name: "indexes and count, met by count",
        rules: Some(&[(Some("3-6"), Some(2))]),
        succeeded: &[(0, 2), (4, 7)],
        want: Some(0),
    },
    Case {
        name: "indexes and count, not met",
        rules: Some(&[(Some("3-6"), Some(2))]),
        succeeded: &[(0, 2), (6, 7)],
        want: None,
    },
    Case {
        name: "no succeeded indexes",
        rules: Some(&[(None, Some(4))]),
        succeeded: &[],
        want: None,
    },
    Case {
        name: "rule is proper subset",
        rules: Some(&[(Some("2-4,6-8"), None)]),
        succeeded: &[(1, 5), (6, 9)],
        want: Some(0),
    },
    Case {
        name: "rule equals succeeded",
        rules: Some(&[(Some("2-4,6-9"), None)]),
        succeeded: &[(2, 4), (6, 9)],
        want: Some(0),
    },
    Case {
        name: "rule is subset, succeeded beyond completions",
        rules: Some(&[(Some("2-4,8-12"), None)]),
        succeeded: &[(2, 5), (7, 15)],
        want: Some(0),
    },
    Case {
        name: "rule is an empty string",
        rules: Some(&[(Some(""), None)]),
        succeeded: &[(1, 3)],
        want: None,
    },
    Case {
        name: "rule and succeeded empty",
        rules: Some(&[(Some(""), None)]),
        succeeded: &[],
        want: None,
    },
    Case {
        name: "rule entirely out of range is empty",
        rules: Some(&[(Some("10-12,14-16"), None)]),
        succeeded: &[(1, 3), (5, 7)],
        want: None,
    },
    Case {
        name: "rule overlaps at first",
        rules: Some(&[(Some("1-3,5-7"), None)]),
        succeeded: &[(2, 4), (6, 8)],
        want: None,
    },
    Case {
        name: "rule overlaps at first, count met",
        rules: Some(&[(Some("1-3,5-7"), Some(4))]),
        succeeded: &[(2, 4), (6, 8)],
        want: Some(0),
    },
    Case {
        name: "rule overlaps at last",
        rules: Some(&[(Some("2-4,6-9"), None)]),
        succeeded: &[(1, 3), (5, 7)],
        want: None,
    },
    Case {
        name: "rule overlaps at last, count met",
        rules: Some(&[(Some("2-4,6-9"), Some(4))]),
        succeeded: &[(1, 3), (5, 7)],
        want: Some(0),
    },
    Case {
        name: "rule covers succeeded",
        rules: Some(&[(Some("0-4,6-9"), None)]),
        succeeded: &[(1, 3), (7, 8)],
        want: None,
    },
    Case {
        name: "rule covers succeeded, count met",
        rules: Some(&[(Some("0-4,6-9"), Some(5))]),
        succeeded: &[(1, 3), (7, 8)],
        want: Some(0),
    },
    Case {
        name: "rule overlaps several succeeded at last",
        rules: Some(&[(Some("0-6,8-9"), None)]),
        succeeded: &[(1, 3), (5, 9)],
        want: None,
    },
    Case {
        name: "rule overlaps several succeeded at last, count met",
        rules: Some(&[(Some("0-6,8-9"), Some(7))]),
        succeeded: &[(1, 3), (5, 9)],
        want: Some(0),
    },
    Case {
        name: "overlap at first, equal at last",
        rules: Some(&[(Some("0-5,7-9"), None)]),
        succeeded: &[(1, 5), (7, 10)],
        want: None,
    },
    Case {
        name: "overlap at first, equal at last, count met",
        rules: Some(&[(Some("0-5,7-9"), Some(8))]),
        succeeded: &[(1, 5), (7, 10)],
        want: Some(0),
    },
    Case {
        name: "first rule interval overlaps succeeded at first",
        rules: Some(&[(Some("0-3,6-9"), None)]),
        succeeded: &[(1, 10)],
        want: None,
    },
    Case {
        name: "first rule interval overlaps succeeded at first, count met",
        rules: Some(&[(Some("0-3,6-9"), Some(7))]),
        succeeded: &[(1, 10)],
        want: Some(0),
    },
    // Our own cases.
    Case {
        name: "malformed rule skipped, later rule wins",
        rules: Some(&[(Some("x,y"), Some(1)), (None, Some(1))]),
        succeeded: &[(3, 3)],
        want: Some(1),
    },
    Case {
        name: "rule clamped to completions",
        rules: Some(&[(Some("8-20"), None)]),
        succeeded: &[(8, 9)],
        want: Some(0),
    },
    Case {
        name: "rule with neither field never holds",
        rules: Some(&[(None, None)]),
        succeeded: &[(0, 9)],
        want: None,
    },
    Case {
        name: "count equal to total",
        rules: Some(&[(None, Some(3))]),
        succeeded: &[(0, 0), (4, 5)],
        want: Some(0),
    },
];

#[test]
fn match_success_policy_table() {
    for c in CASES {
        let got = match_success_policy(&job(10, c.rules), &ivs(c.succeeded));
        let want = c.want.map(|i| {
            (
                REASON_SUCCESS_POLICY.to_string(),
                format!("Matched rules at index {i}"),
            )
        });
        assert_eq!(got, want, "{}", c.name);
    }
}

#[test]
fn job_without_spec_never_matches() {
    assert_eq!(match_success_policy(&Job::default(), &ivs(&[(0, 3)])), None);
}

proptest! {
    /// Arbitrary rule strings, counts and completions never panic.
    #[test]
    fn never_panics(
        raw in "[0-9,+\\- x]{0,24}",
        count in proptest::option::of(any::<i32>()),
        completions in any::<i32>(),
        succeeded in proptest::collection::vec((any::<i32>(), any::<i32>()), 0..6),
    ) {
        let rules = [(Some(raw.as_str()), count), (None, count)];
        let _ = match_success_policy(&job(completions, Some(&rules)), &OrderedIntervals::from_intervals(succeeded));
    }

    /// For well-formed sets, a rule listing indexes holds exactly when the
    /// rule's set is contained in the succeeded set.
    #[test]
    fn indexes_rule_is_subset_test(
        rule in proptest::collection::btree_set(0..40i32, 1..15),
        done in proptest::collection::btree_set(0..40i32, 1..30),
    ) {
        let rule_v: Vec<i32> = rule.iter().copied().collect();
        let done_v: Vec<i32> = done.iter().copied().collect();
        let rule_s = OrderedIntervals::new().with_ordered_indexes(&rule_v).to_string();
        let rules = [(Some(rule_s.as_str()), None)];
        let got = match_success_policy(
            &job(40, Some(&rules)),
            &OrderedIntervals::new().with_ordered_indexes(&done_v),
        );
        prop_assert_eq!(got.is_some(), rule.is_subset(&done));
    }
}
