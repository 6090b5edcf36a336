//! The policy the gate leaves, `fail_job_message`, and property tests.

use super::*;

fn job(policy: Option<PodFailurePolicy>, replacement: Option<&str>) -> Job {
    Job {
        spec: Some(JobSpec {
            pod_failure_policy: policy,
            pod_replacement_policy: replacement.map(str::to_string),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn the_policy_honours_the_gate() {
    let j = job(
        policy(vec![exit_rule("FailJob", "In", &[1], None)]),
        Some("Failed"),
    );
    let on = crate::sync::Config::default();
    let off = crate::sync::Config {
        pod_failure_policy: false,
        ..on.clone()
    };
    assert!(on.policy(&j).is_some());
    assert!(off.policy(&j).is_none());
    assert!(on.policy(&job(None, None)).is_none());
    assert!(on.policy(&Job::default()).is_none());
}

#[test]
fn fail_job_message_table() {
    let fail_on_42 = policy(vec![
        exit_rule("Ignore", "In", &[7], None),
        exit_rule("FailJob", "In", &[42], None),
    ]);
    let named = |name: &str, mut p: Pod| {
        p.metadata.name = Some(name.into());
        p
    };
    let deleting = |mut p: Pod| {
        p.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        p
    };
    let running42 = named(
        "running",
        pod_with("Running", &[("c", St::Term(42))], &[], &[]),
    );
    let failed42 = named("failed42", failed(&[("c", St::Term(42))], &[], &[]));
    let failed42b = named("failed42b", failed(&[("c", St::Term(42))], &[], &[]));
    let ignored = named("ignored", failed(&[("c", St::Term(7))], &[], &[]));
    let deleting42 = named(
        "deleting",
        deleting(pod_with("Running", &[("c", St::Term(42))], &[], &[])),
    );
    let msg = |name: &str| {
        format!(
            "Container c for pod default/{name} failed with exit code 42 matching FailJob rule at index 1"
        )
    };

    struct FCase<'a> {
        name: &'static str,
        job: Job,
        pods: Vec<&'a Pod>,
        gate: bool,
        want: Option<String>,
    }
    let cases = vec![
        FCase {
            name: "no policy",
            job: job(None, None),
            pods: vec![&failed42],
            gate: true,
            want: None,
        },
        FCase {
            name: "gate off",
            job: job(fail_on_42.clone(), Some("Failed")),
            pods: vec![&failed42],
            gate: false,
            want: None,
        },
        FCase {
            name: "first failed matching pod",
            job: job(fail_on_42.clone(), Some("Failed")),
            pods: vec![&ignored, &failed42, &failed42b],
            gate: true,
            want: Some(msg("failed42")),
        },
        FCase {
            name: "cache order decides",
            job: job(fail_on_42.clone(), Some("Failed")),
            pods: vec![&failed42b, &failed42],
            gate: true,
            want: Some(msg("failed42b")),
        },
        FCase {
            name: "running pods are not failed",
            job: job(fail_on_42.clone(), Some("Failed")),
            pods: vec![&running42],
            gate: true,
            want: None,
        },
        FCase {
            name: "Ignore rule: no message",
            job: job(fail_on_42.clone(), Some("Failed")),
            pods: vec![&ignored],
            gate: true,
            want: None,
        },
        FCase {
            name: "terminating pod, replacement Failed: not failed",
            job: job(fail_on_42.clone(), Some("Failed")),
            pods: vec![&deleting42],
            gate: true,
            want: None,
        },
        FCase {
            // 1.34 `onlyReplaceFailedPods`: any pod failure policy implies
            // "Failed", whatever podReplacementPolicy says.
            name: "terminating pod with a policy is never failed",
            job: job(fail_on_42.clone(), Some("TerminatingOrFailed")),
            pods: vec![&deleting42, &failed42],
            gate: true,
            want: Some(msg("failed42")),
        },
        FCase {
            name: "no pods",
            job: job(fail_on_42.clone(), Some("Failed")),
            pods: vec![],
            gate: true,
            want: None,
        },
    ];
    for c in cases {
        assert_eq!(
            get_fail_job_message(&c.job, &c.pods, c.gate),
            c.want,
            "{}",
            c.name
        );
    }
}

// ---------------------------------------------------------------- proptests

fn arb_state() -> impl Strategy<Value = St> {
    prop_oneof![
        4 => prop_oneof![Just(0), -3..5i32, any::<i32>()].prop_map(St::Term),
        1 => Just(St::Running),
        1 => Just(St::NoState),
        1 => (-3..5i32).prop_map(St::LastTerm),
    ]
}

fn arb_statuses() -> impl Strategy<Value = Vec<(String, St)>> {
    prop::collection::vec(
        (
            prop::sample::select(vec!["a", "b", "c"]).prop_map(String::from),
            arb_state(),
        ),
        0..4,
    )
}

fn arb_rule() -> impl Strategy<Value = PodFailurePolicyRule> {
    let action = prop::sample::select(vec!["FailJob", "FailIndex", "Ignore", "Count", "Bogus", ""]);
    let op = prop::sample::select(vec!["In", "NotIn", "Exists", ""]);
    let name = prop::option::of(prop::sample::select(vec!["a", "b", "z"]));
    let values = prop::collection::vec(prop_oneof![-3..5i32, any::<i32>()], 0..4);
    let statuses = prop::sample::select(vec!["True", "False", "Unknown", ""]);
    let types = prop::sample::select(vec![DT, "Ready", "X"]);
    let patterns = prop::collection::vec((types, statuses), 0..3);
    prop_oneof![
        (action.clone(), op, values, name).prop_map(|(a, o, v, n)| exit_rule(a, o, &v, n)),
        (action.clone(), patterns.clone()).prop_map(|(a, p)| cond_rule(a, &p)),
        action.prop_map(|a| PodFailurePolicyRule {
            action: a.into(),
            ..Default::default()
        }),
    ]
}

fn arb_conditions() -> impl Strategy<Value = Vec<(&'static str, &'static str)>> {
    prop::collection::vec(
        (
            prop::sample::select(vec![DT, "Ready", "X"]),
            prop::sample::select(vec!["True", "False", "Unknown"]),
        ),
        0..3,
    )
}

fn to_refs(v: &[(String, St)]) -> Vec<(&str, St)> {
    v.iter().map(|(n, s)| (n.as_str(), *s)).collect()
}

proptest! {
    #[test]
    fn match_is_total_and_consistent(
        rules in prop::collection::vec(arb_rule(), 0..5),
        containers in arb_statuses(),
        init in arb_statuses(),
        conditions in arb_conditions(),
    ) {
        let pod = failed(&to_refs(&containers), &to_refs(&init), &conditions);
        let got = match_pod_failure_policy(Some(&PodFailurePolicy { rules: rules.clone() }), &pod);
        // Ignore is the only action that does not count.
        prop_assert_eq!(got.counts_towards_backoff, got.action != Some(Action::Ignore));
        // A message exactly when FailJob decided.
        prop_assert_eq!(got.fail_job_message.is_some(), got.action == Some(Action::FailJob));
        // Rules with unknown actions never decide: dropping them changes nothing.
        let known: Vec<_> = rules.iter().filter(|r| Action::from_api(&r.action).is_some()).cloned().collect();
        let only_known = match_pod_failure_policy(Some(&PodFailurePolicy { rules: known }), &pod);
        prop_assert_eq!(got.action, only_known.action);
        prop_assert_eq!(got.counts_towards_backoff, only_known.counts_towards_backoff);
        // The rule index in the message may shift; the rest is identical.
        let strip = |m: Option<String>| m.map(|m| m.rsplit_once(" at index ").map(|(h, _)| h.to_string()));
        prop_assert_eq!(strip(got.fail_job_message), strip(only_known.fail_job_message));
    }

    #[test]
    fn no_policy_always_counts(containers in arb_statuses(), conditions in arb_conditions()) {
        let pod = failed(&to_refs(&containers), &[], &conditions);
        prop_assert_eq!(match_pod_failure_policy(None, &pod), PolicyMatch::unmatched());
    }

    #[test]
    fn successful_containers_never_match_exit_code_rules(
        rules in prop::collection::vec(arb_rule(), 0..5),
        names in prop::collection::vec(prop::sample::select(vec!["a", "b"]), 0..4),
    ) {
        let containers: Vec<(&str, St)> = names.iter().map(|n| (*n, St::Term(0))).collect();
        let pod = failed(&containers, &containers, &[]);
        let exit_rules: Vec<_> = rules.into_iter().filter(|r| r.on_exit_codes.is_some()).collect();
        let got = match_pod_failure_policy(Some(&PodFailurePolicy { rules: exit_rules }), &pod);
        prop_assert_eq!(got, PolicyMatch::unmatched());
    }

    #[test]
    fn in_and_not_in_are_complementary_for_one_container(code in any::<i32>(), values in prop::collection::vec(-3..5i32, 0..4)) {
        prop_assume!(code != 0);
        let pod = failed(&[("a", St::Term(code))], &[], &[]);
        let with = |op| match_pod_failure_policy(policy(vec![exit_rule("Count", op, &values, None)]).as_ref(), &pod).action;
        let (is_in, not_in) = (with("In"), with("NotIn"));
        prop_assert!(is_in.is_some() != not_in.is_some());
        prop_assert_eq!(is_in.is_some(), values.contains(&code));
    }
}
