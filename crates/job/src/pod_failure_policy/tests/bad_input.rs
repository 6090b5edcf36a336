//! Pod failure policies the API server refuses (issue 14, "Bad input";
//! docs/bad-input.md) but that could still reach the matcher from a skewed
//! or older API server, or through objects stored before validation got
//! stricter: the matcher must stay total, never panic and decide as
//! upstream's `matchPodFailurePolicy` would. The refusals themselves are
//! proven against the real API server in `crates/job/tests/bad_input`.

use super::*;

fn exit_main(code: i32) -> Pod {
    failed(&[("main", St::Term(code))], &[], &[])
}

fn decide(rules: Vec<PodFailurePolicyRule>, pod: &Pod) -> (Option<Action>, Option<usize>) {
    let m = match_pod_failure_policy(policy(rules).as_ref(), pod);
    (m.action, m.rule)
}

/// More than 255 exit codes, unsorted and with duplicates: every listed code
/// matches `In`, no listed code matches `NotIn` (a linear scan; no binary
/// search that would need the validated order).
#[test]
fn exit_code_lists_longer_than_255_unsorted_with_duplicates() {
    let mut values: Vec<i32> = (1..=300).rev().collect();
    values.extend([7, 7, 300, 1, -5, i32::MIN, i32::MAX]);
    for code in [1, 7, 150, 300, -5, i32::MIN, i32::MAX] {
        assert_eq!(
            decide(
                vec![exit_rule("Ignore", "In", &values, None)],
                &exit_main(code)
            ),
            (Some(Action::Ignore), Some(0)),
            "In {code}"
        );
        assert_eq!(
            decide(
                vec![exit_rule("Ignore", "NotIn", &values, None)],
                &exit_main(code)
            ),
            (None, None),
            "NotIn {code}"
        );
    }
    assert_eq!(
        decide(
            vec![exit_rule("Ignore", "In", &values, None)],
            &exit_main(301)
        ),
        (None, None)
    );
    // An empty list: In never matches, NotIn matches every failure.
    assert_eq!(
        decide(vec![exit_rule("Count", "In", &[], None)], &exit_main(3)),
        (None, None)
    );
    assert_eq!(
        decide(vec![exit_rule("Count", "NotIn", &[], None)], &exit_main(3)),
        (Some(Action::Count), Some(0))
    );
}

/// `0` listed with `In` (refused by validation) never matches: containers
/// that exited 0 are skipped before the operator is looked at.
#[test]
fn zero_with_in_never_matches() {
    let pod = failed(&[("main", St::Term(0)), ("side", St::Term(0))], &[], &[]);
    assert_eq!(
        decide(vec![exit_rule("FailJob", "In", &[0, 1], None)], &pod),
        (None, None)
    );
}

/// More than 20 rules and more than 20 `onPodConditions` patterns (refused
/// as "Too many: 21: must have at most 20 items"): all are evaluated, in
/// order.
#[test]
fn more_than_twenty_rules_and_patterns() {
    let mut rules: Vec<PodFailurePolicyRule> = (100..124)
        .map(|c| exit_rule("Count", "In", &[c], None))
        .collect();
    rules.push(exit_rule("FailJob", "In", &[42], None));
    assert_eq!(
        decide(rules.clone(), &exit_main(42)),
        (Some(Action::FailJob), Some(24))
    );
    assert_eq!(
        decide(rules, &exit_main(123)),
        (Some(Action::Count), Some(23))
    );

    let patterns: Vec<String> = (0..30).map(|i| format!("Custom{i}")).collect();
    let pairs: Vec<(&str, &str)> = patterns.iter().map(|p| (p.as_str(), "True")).collect();
    let rule = cond_rule("Ignore", &pairs);
    let pod = failed(&[], &[], &[("Custom29", "True")]);
    assert_eq!(
        decide(vec![rule.clone()], &pod),
        (Some(Action::Ignore), Some(0))
    );
    let other = failed(&[], &[], &[("Custom30", "True")]);
    assert_eq!(decide(vec![rule], &other), (None, None));
}

/// Unknown actions and operators (a newer API served by a skewed server):
/// the rule is skipped and evaluation goes on, so the next rule decides.
#[test]
fn unknown_actions_and_operators_skip_the_rule() {
    let pod = failed(&[("main", St::Term(3))], &[], &[(DT, "True")]);
    for rules in [
        vec![
            exit_rule("RestartPod", "In", &[3], None),
            exit_rule("Count", "In", &[3], None),
        ],
        vec![
            exit_rule("FailJob", "Gt", &[1], None),
            exit_rule("Count", "In", &[3], None),
        ],
        vec![
            exit_rule("FailJob", "in", &[3], None),
            exit_rule("Count", "In", &[3], None),
        ],
        vec![
            cond_rule("Foo", &[(DT, "True")]),
            exit_rule("Count", "NotIn", &[9], None),
        ],
    ] {
        assert_eq!(
            decide(rules.clone(), &pod),
            (Some(Action::Count), Some(1)),
            "{rules:?}"
        );
    }
    // Only unknown rules: default handling (counted, no action).
    let m = match_pod_failure_policy(
        policy(vec![exit_rule("Foo", "In", &[3], None)]).as_ref(),
        &pod,
    );
    assert_eq!((m.action, m.counts_towards_backoff), (None, true));
}

/// A rule with both `onExitCodes` and `onPodConditions`, or neither
/// (refused): only `onExitCodes` is consulted when present; neither never
/// matches.
#[test]
fn rules_with_both_or_neither_requirement() {
    let pod = failed(&[("main", St::Term(5))], &[], &[(DT, "True")]);
    let mut both = exit_rule("FailJob", "In", &[6], None);
    both.on_pod_conditions = cond_rule("FailJob", &[(DT, "True")]).on_pod_conditions;
    assert_eq!(decide(vec![both], &pod), (None, None));
    let neither = PodFailurePolicyRule {
        action: "FailJob".into(),
        on_exit_codes: None,
        on_pod_conditions: None,
    };
    assert_eq!(decide(vec![neither], &pod), (None, None));
}

/// `containerName` naming no container of the pod (refused: "must be one of
/// the container or initContainer names in the pod template"): the rule
/// simply never matches.
#[test]
fn container_name_that_names_no_container() {
    let pod = failed(&[("main", St::Term(1))], &[("init", St::Term(1))], &[]);
    assert_eq!(
        decide(vec![exit_rule("FailJob", "In", &[1], Some("nosuch"))], &pod),
        (None, None)
    );
    assert_eq!(
        decide(vec![exit_rule("FailJob", "NotIn", &[2], Some(""))], &pod),
        (None, None)
    );
}

/// Failed pods the kubelet never ran or lost: no container statuses at
/// all, containers not terminated, node-pressure evictions
/// (`ContainerStatusUnknown` with 137 and `DisruptionTarget`). Exit-code
/// rules cannot match what has no exit code; condition rules still can;
/// user rules decide about 137 like any code.
#[test]
fn failed_pods_without_exit_codes_and_node_pressure_evictions() {
    let rules = || {
        vec![
            exit_rule("FailJob", "NotIn", &[137], None),
            cond_rule("Ignore", &[(DT, "True")]),
            exit_rule("Count", "In", &[137], None),
        ]
    };
    let no_statuses = failed(&[], &[], &[]);
    assert_eq!(decide(rules(), &no_statuses), (None, None));
    let not_terminated = failed(&[("main", St::Running), ("side", St::NoState)], &[], &[]);
    assert_eq!(decide(rules(), &not_terminated), (None, None));
    let evicted_before_start = failed(&[], &[], &[(DT, "True")]);
    assert_eq!(
        decide(rules(), &evicted_before_start),
        (Some(Action::Ignore), Some(1))
    );
    let pressure = failed(&[("main", St::Term(137))], &[], &[(DT, "True")]);
    assert_eq!(decide(rules(), &pressure), (Some(Action::Ignore), Some(1)));
    let oom_no_condition = failed(&[("main", St::Term(137))], &[], &[]);
    assert_eq!(
        decide(rules(), &oom_no_condition),
        (Some(Action::Count), Some(2))
    );
}
