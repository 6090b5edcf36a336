//! The matcher table (upstream cases first, then extra edge cases).

use super::*;

fn cases() -> Vec<Case> {
    use Action::*;
    let main2 = || failed(&[("main-container", St::Term(2))], &[], &[]);
    let dt = |status: &str| failed(&[], &[], &[(DT, status)]);
    vec![
        // --- ported from upstream TestMatchPodFailurePolicy ---
        Case {
            name: "unknown action for rule matching by exit codes - skip rule",
            policy: policy(vec![
                exit_rule("UnknownAction", "In", &[1, 2], None),
                exit_rule("FailJob", "In", &[2, 3], None),
            ]),
            pod: main2(),
            message: Some(
                "Container main-container for pod default/mypod failed with exit code 2 matching FailJob rule at index 1",
            ),
            counts: true,
            action: Some(FailJob),
        },
        Case {
            name: "unknown action for rule matching by pod conditions - skip rule",
            policy: policy(vec![
                cond_rule("UnkonwnAction", &[(DT, "True")]),
                cond_rule("Ignore", &[(DT, "True")]),
            ]),
            pod: dt("True"),
            message: None,
            counts: false,
            action: Some(Ignore),
        },
        Case {
            name: "unknown operator - rule is skipped for onExitCodes",
            policy: policy(vec![
                exit_rule("Ignore", "UnknownOperator", &[1, 2], None),
                exit_rule("FailJob", "In", &[2, 3], None),
            ]),
            pod: main2(),
            message: Some(
                "Container main-container for pod default/mypod failed with exit code 2 matching FailJob rule at index 1",
            ),
            counts: true,
            action: Some(FailJob),
        },
        Case {
            name: "no policy rules",
            policy: None,
            pod: failed(&[("", St::Term(2))], &[], &[]),
            message: None,
            counts: true,
            action: None,
        },
        Case {
            name: "ignore rule matched for exit codes",
            policy: policy(vec![exit_rule("Ignore", "In", &[1, 2, 3], None)]),
            pod: failed(&[("", St::Term(2))], &[], &[]),
            message: None,
            counts: false,
            action: Some(Ignore),
        },
        Case {
            name: "ignore rule matched on negative exit codes (Windows)",
            policy: policy(vec![exit_rule(
                "Ignore",
                "In",
                &[-1073741676, -1073741510],
                None,
            )]),
            pod: failed(&[("", St::Term(-1073741510))], &[], &[]),
            message: None,
            counts: false,
            action: Some(Ignore),
        },
        Case {
            name: "FailJob rule matched for exit codes",
            policy: policy(vec![exit_rule("FailJob", "In", &[1, 2, 3], None)]),
            pod: main2(),
            message: Some(
                "Container main-container for pod default/mypod failed with exit code 2 matching FailJob rule at index 0",
            ),
            counts: true,
            action: Some(FailJob),
        },
        Case {
            name: "successful containers are skipped by the rules",
            policy: policy(vec![exit_rule("FailJob", "NotIn", &[111], None)]),
            pod: failed(
                &[
                    ("main-container", St::Term(111)),
                    ("suppport-container", St::Term(0)),
                ],
                &[("init-container", St::Term(0))],
                &[],
            ),
            message: None,
            counts: true,
            action: None,
        },
        Case {
            name: "FailIndex rule matched for exit codes",
            policy: policy(vec![exit_rule("FailIndex", "In", &[1, 2, 3], None)]),
            pod: failed(&[("", St::Term(2))], &[], &[]),
            message: None,
            counts: true,
            action: Some(FailIndex),
        },
        Case {
            name: "NotIn operator and value 0",
            policy: policy(vec![exit_rule("FailJob", "NotIn", &[0], None)]),
            pod: failed(
                &[
                    ("main-container", St::Term(1)),
                    ("suppport-container", St::Term(0)),
                ],
                &[],
                &[],
            ),
            message: Some(
                "Container main-container for pod default/mypod failed with exit code 1 matching FailJob rule at index 0",
            ),
            counts: true,
            action: Some(FailJob),
        },
        Case {
            name: "second FailJob rule matched for exit codes",
            policy: policy(vec![
                exit_rule("Count", "In", &[1, 2, 3], None),
                exit_rule("FailJob", "In", &[4, 5, 6], None),
            ]),
            pod: failed(&[("main-container", St::Term(6))], &[], &[]),
            message: Some(
                "Container main-container for pod default/mypod failed with exit code 6 matching FailJob rule at index 1",
            ),
            counts: true,
            action: Some(FailJob),
        },
        Case {
            name: "count rule matched for exit codes (container without state skipped)",
            policy: policy(vec![exit_rule("Count", "In", &[1, 2, 3], None)]),
            pod: failed(&[("foo", St::NoState), ("bar", St::Term(2))], &[], &[]),
            message: None,
            counts: true,
            action: Some(Count),
        },
        Case {
            name: "FailIndex rule matched for pod conditions",
            policy: policy(vec![cond_rule("FailIndex", &[(DT, "True")])]),
            pod: dt("True"),
            message: None,
            counts: true,
            action: Some(FailIndex),
        },
        Case {
            name: "ignore rule matched for pod conditions",
            policy: policy(vec![cond_rule("Ignore", &[(DT, "True")])]),
            pod: dt("True"),
            message: None,
            counts: false,
            action: Some(Ignore),
        },
        Case {
            name: "ignore rule matches by status=False",
            policy: policy(vec![cond_rule("Ignore", &[(DT, "False")])]),
            pod: dt("False"),
            message: None,
            counts: false,
            action: Some(Ignore),
        },
        Case {
            name: "ignore rule matches by status=Unknown",
            policy: policy(vec![cond_rule("Ignore", &[(DT, "Unknown")])]),
            pod: dt("Unknown"),
            message: None,
            counts: false,
            action: Some(Ignore),
        },
        Case {
            name: "pattern False does not match actual True",
            policy: policy(vec![cond_rule("Ignore", &[(DT, "False")])]),
            pod: dt("True"),
            message: None,
            counts: true,
            action: None,
        },
        Case {
            name: "pattern True does not match actual False",
            policy: policy(vec![cond_rule("Ignore", &[(DT, "True")])]),
            pod: dt("False"),
            message: None,
            counts: true,
            action: None,
        },
        Case {
            name: "FailJob rule matched for pod conditions",
            policy: policy(vec![cond_rule("FailJob", &[(DT, "True")])]),
            pod: dt("True"),
            message: Some(
                "Pod default/mypod has condition DisruptionTarget matching FailJob rule at index 0",
            ),
            counts: true,
            action: Some(FailJob),
        },
        Case {
            name: "count rule matched for pod conditions",
            policy: policy(vec![cond_rule("Count", &[(DT, "True")])]),
            pod: dt("True"),
            message: None,
            counts: true,
            action: Some(Count),
        },
        Case {
            // Upstream calls this "no rule matched", but its first rule
            // (Count NotIn [8]) matches exit code 32.
            name: "first of many rules decides",
            policy: policy(vec![
                exit_rule("Count", "NotIn", &[8], None),
                exit_rule("Ignore", "In", &[1, 2, 3], None),
                exit_rule("FailJob", "NotIn", &[5, 6, 7], None),
                cond_rule("Count", &[("ResourceLimitExceeded", "True")]),
                cond_rule("Ignore", &[(DT, "True")]),
            ]),
            pod: failed(&[("", St::Term(32))], &[], &[]),
            message: None,
            counts: true,
            action: Some(Count),
        },
        // --- additional edge cases ---
        Case {
            name: "In does not match a code outside the values",
            policy: policy(vec![exit_rule("FailJob", "In", &[1, 3], None)]),
            pod: main2(),
            message: None,
            counts: true,
            action: None,
        },
        Case {
            name: "NotIn skips a listed code and matches the next container",
            policy: policy(vec![exit_rule("FailJob", "NotIn", &[2], None)]),
            pod: failed(&[("a", St::Term(2)), ("b", St::Term(7))], &[], &[]),
            message: Some(
                "Container b for pod default/mypod failed with exit code 7 matching FailJob rule at index 0",
            ),
            counts: true,
            action: Some(FailJob),
        },
        Case {
            name: "exit code 0 never matches, not even In [0]",
            policy: policy(vec![exit_rule("FailJob", "In", &[0], None)]),
            pod: failed(&[("a", St::Term(0))], &[], &[]),
            message: None,
            counts: true,
            action: None,
        },
        Case {
            name: "empty operator never matches",
            policy: policy(vec![exit_rule("FailJob", "", &[2], None)]),
            pod: main2(),
            message: None,
            counts: true,
            action: None,
        },
        Case {
            name: "operator is case-sensitive",
            policy: policy(vec![exit_rule("FailJob", "in", &[2], None)]),
            pod: main2(),
            message: None,
            counts: true,
            action: None,
        },
        Case {
            name: "action is case-sensitive (unknown, skipped)",
            policy: policy(vec![exit_rule("failjob", "In", &[2], None)]),
            pod: main2(),
            message: None,
            counts: true,
            action: None,
        },
        Case {
            name: "containerName restricts to the named container",
            policy: policy(vec![exit_rule("FailJob", "In", &[2, 3], Some("b"))]),
            pod: failed(&[("a", St::Term(2)), ("b", St::Term(3))], &[], &[]),
            message: Some(
                "Container b for pod default/mypod failed with exit code 3 matching FailJob rule at index 0",
            ),
            counts: true,
            action: Some(FailJob),
        },
        Case {
            name: "containerName of a container that did not match the code",
            policy: policy(vec![exit_rule("FailJob", "In", &[2], Some("b"))]),
            pod: failed(&[("a", St::Term(2)), ("b", St::Term(3))], &[], &[]),
            message: None,
            counts: true,
            action: None,
        },
        Case {
            name: "containerName selects an init container",
            policy: policy(vec![exit_rule("FailJob", "In", &[5], Some("setup"))]),
            pod: failed(&[("main", St::Term(5))], &[("setup", St::Term(5))], &[]),
            message: Some(
                "Container setup for pod default/mypod failed with exit code 5 matching FailJob rule at index 0",
            ),
            counts: true,
            action: Some(FailJob),
        },
        Case {
            name: "init container matched when no regular container does",
            policy: policy(vec![exit_rule("FailJob", "In", &[42], None)]),
            pod: failed(&[("main", St::NoState)], &[("setup", St::Term(42))], &[]),
            message: Some(
                "Container setup for pod default/mypod failed with exit code 42 matching FailJob rule at index 0",
            ),
            counts: true,
            action: Some(FailJob),
        },
        Case {
            name: "regular containers are checked before init containers",
            policy: policy(vec![exit_rule("FailJob", "In", &[1, 2], None)]),
            pod: failed(&[("main", St::Term(2))], &[("setup", St::Term(1))], &[]),
            message: Some(
                "Container main for pod default/mypod failed with exit code 2 matching FailJob rule at index 0",
            ),
            counts: true,
            action: Some(FailJob),
        },
        Case {
            name: "several matching containers: the first one is reported",
            policy: policy(vec![exit_rule("FailJob", "In", &[3, 5], None)]),
            pod: failed(
                &[("x", St::Running), ("a", St::Term(5)), ("b", St::Term(3))],
                &[],
                &[],
            ),
            message: Some(
                "Container a for pod default/mypod failed with exit code 5 matching FailJob rule at index 0",
            ),
            counts: true,
            action: Some(FailJob),
        },
        Case {
            name: "only the current state counts, not lastState",
            policy: policy(vec![exit_rule("FailJob", "In", &[2], None)]),
            pod: failed(&[("main", St::LastTerm(2))], &[], &[]),
            message: None,
            counts: true,
            action: None,
        },
        Case {
            name: "pod without status never matches",
            policy: policy(vec![
                exit_rule("FailJob", "NotIn", &[1], None),
                cond_rule("FailJob", &[(DT, "True")]),
            ]),
            pod: Pod::default(),
            message: None,
            counts: true,
            action: None,
        },
        Case {
            name: "empty rule list",
            policy: policy(vec![]),
            pod: main2(),
            message: None,
            counts: true,
            action: None,
        },
        Case {
            name: "rule without requirements never matches",
            policy: policy(vec![
                PodFailurePolicyRule {
                    action: "FailJob".into(),
                    ..Default::default()
                },
                exit_rule("Count", "In", &[2], None),
            ]),
            pod: main2(),
            message: None,
            counts: true,
            action: Some(Count),
        },
        Case {
            name: "onExitCodes present: onPodConditions of the same rule not consulted",
            policy: policy(vec![PodFailurePolicyRule {
                action: "FailJob".into(),
                on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                    container_name: None,
                    operator: "In".into(),
                    values: vec![99],
                }),
                on_pod_conditions: cond_rule("FailJob", &[(DT, "True")]).on_pod_conditions,
            }]),
            pod: failed(&[("main", St::Term(2))], &[], &[(DT, "True")]),
            message: None,
            counts: true,
            action: None,
        },
        Case {
            name: "empty pattern status defaults to True (matches True)",
            policy: policy(vec![cond_rule("FailJob", &[(DT, "")])]),
            pod: dt("True"),
            message: Some(
                "Pod default/mypod has condition DisruptionTarget matching FailJob rule at index 0",
            ),
            counts: true,
            action: Some(FailJob),
        },
        Case {
            name: "empty pattern status defaults to True (no match on False)",
            policy: policy(vec![cond_rule("FailJob", &[(DT, "")])]),
            pod: dt("False"),
            message: None,
            counts: true,
            action: None,
        },
        Case {
            name: "pod conditions in pod order, then patterns",
            policy: policy(vec![cond_rule("FailJob", &[("B", "True"), ("A", "True")])]),
            pod: failed(
                &[],
                &[],
                &[("Ready", "False"), ("A", "True"), ("B", "True")],
            ),
            message: Some("Pod default/mypod has condition A matching FailJob rule at index 0"),
            counts: true,
            action: Some(FailJob),
        },
        Case {
            name: "matching condition rule after an unmatched exit-code rule",
            policy: policy(vec![
                exit_rule("Ignore", "In", &[9], None),
                cond_rule("FailJob", &[(DT, "True")]),
            ]),
            pod: failed(&[("main", St::Term(2))], &[], &[(DT, "True")]),
            message: Some(
                "Pod default/mypod has condition DisruptionTarget matching FailJob rule at index 1",
            ),
            counts: true,
            action: Some(FailJob),
        },
        Case {
            name: "empty onPodConditions list never matches",
            policy: policy(vec![cond_rule("FailJob", &[])]),
            pod: dt("True"),
            message: None,
            counts: true,
            action: None,
        },
    ]
}

#[test]
fn match_pod_failure_policy_table() {
    for c in cases() {
        let got = match_pod_failure_policy(c.policy.as_ref(), &c.pod);
        assert_eq!(
            got.fail_job_message.as_deref(),
            c.message,
            "{}: message",
            c.name
        );
        assert_eq!(got.counts_towards_backoff, c.counts, "{}: counts", c.name);
        assert_eq!(got.action, c.action, "{}: action", c.name);
    }
}

#[test]
fn message_without_namespace_or_name() {
    let mut pod = failed(&[("c", St::Term(1))], &[], &[]);
    pod.metadata = ObjectMeta::default();
    let got = match_pod_failure_policy(
        policy(vec![exit_rule("FailJob", "In", &[1], None)]).as_ref(),
        &pod,
    );
    assert_eq!(
        got.fail_job_message.as_deref(),
        Some("Container c for pod / failed with exit code 1 matching FailJob rule at index 0")
    );
}

#[test]
fn action_names_round_trip() {
    for a in [
        Action::FailJob,
        Action::FailIndex,
        Action::Ignore,
        Action::Count,
    ] {
        assert_eq!(Action::from_api(a.as_str()), Some(a));
        assert_eq!(a.to_string(), a.as_str());
    }
    assert_eq!(Action::from_api("Unknown"), None);
    assert_eq!(Action::from_api(""), None);
}
