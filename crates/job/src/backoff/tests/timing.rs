//! Remaining delays, the OnFailure restart limit, and property tests.

use super::*;

// ----------------------------------------------------------- remaining time

#[test]
fn remaining_time_for_failures_table() {
    // Ported from upstream TestGetRemainingBackoffTime (base 5s, max 700s).
    let cases: Vec<(&str, i32, Option<Timestamp>, Timestamp, Duration)> = vec![
        ("no failures", 0, None, t0(), secs(0)),
        ("one failure, now == failure", 1, Some(t0()), t0(), secs(5)),
        ("one failure, 1s later", 1, Some(t0()), at(1000), secs(4)),
        (
            "one failure, exactly expired",
            1,
            Some(t0()),
            at(5000),
            secs(0),
        ),
        ("one failure, 1s past", 1, Some(t0()), at(6000), secs(0)),
        ("three failures", 3, Some(t0()), t0(), secs(20)),
        ("eight failures, below max", 8, Some(t0()), t0(), secs(640)),
        ("nine failures, capped", 9, Some(t0()), t0(), secs(700)),
        // --- additional ---
        ("failures without a time: no delay", 2, None, t0(), secs(0)),
        ("negative count: no delay", -1, Some(t0()), t0(), secs(0)),
        (
            "sub-second precision",
            1,
            Some(t0()),
            at(1500),
            Duration::from_millis(3500),
        ),
        (
            "failure in the future counts as now",
            1,
            Some(at(60_000)),
            t0(),
            secs(5),
        ),
        (
            "huge count capped",
            i32::MAX,
            Some(t0()),
            at(100_000),
            secs(600),
        ),
    ];
    for (name, n, last, now, want) in cases {
        assert_eq!(
            remaining_time_for_failures(n, last, now, secs(5), secs(700)),
            want,
            "{name}"
        );
    }
}

#[test]
fn remaining_time_with_upstream_defaults() {
    let rec = |n| BackoffRecord {
        failures_after_last_success: n,
        last_failure_time: Some(t0()),
    };
    let want = [
        (0, 0),
        (1, 10),
        (2, 20),
        (3, 40),
        (4, 80),
        (5, 160),
        (6, 320),
        (7, 600),
        (8, 600),
        (1000, 600),
    ];
    for (n, s) in want {
        assert_eq!(remaining_time(&rec(n), t0()), secs(s), "n={n}");
    }
    assert_eq!(remaining_time(&rec(3), at(15_000)), secs(25));
    assert_eq!(remaining_time(&rec(7), at(600_000)), secs(0));
    assert_eq!(remaining_time(&BackoffRecord::default(), t0()), secs(0));
}

fn held_pod(fail: Option<&str>, ignored: Option<&str>, deletion: Timestamp) -> CachedPod {
    held_pod_full(fail, ignored, deletion).into()
}

fn held_pod_full(fail: Option<&str>, ignored: Option<&str>, deletion: Timestamp) -> Pod {
    let mut ann = BTreeMap::new();
    if let Some(v) = fail {
        ann.insert(JOB_INDEX_FAILURE_COUNT.to_string(), v.to_string());
    }
    if let Some(v) = ignored {
        ann.insert(JOB_INDEX_IGNORED_FAILURE_COUNT.to_string(), v.to_string());
    }
    Pod {
        metadata: ObjectMeta {
            annotations: Some(ann),
            deletion_timestamp: Some(Time(deletion)),
            ..Default::default()
        },
        status: Some(PodStatus {
            phase: Some("Failed".into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn remaining_time_per_index_table() {
    let cases: Vec<(&str, Option<CachedPod>, Timestamp, Duration)> = vec![
        // Upstream cases use base 5s: 2 prior failures → 3rd → 20s; with the
        // 10s default that is 40s.
        ("no held pod", None, t0(), secs(0)),
        (
            "two prior failures",
            Some(held_pod(Some("2"), None, t0())),
            t0(),
            secs(40),
        ),
        (
            "one counted, one ignored",
            Some(held_pod(Some("1"), Some("1"), t0())),
            t0(),
            secs(40),
        ),
        (
            "first failure of the index",
            Some(held_pod(None, None, t0())),
            t0(),
            secs(10),
        ),
        (
            "invalid annotations count as 0",
            Some(held_pod(Some("x"), Some("-3"), t0())),
            at(4000),
            secs(6),
        ),
        (
            "many failures capped",
            Some(held_pod(Some("2147483647"), Some("2147483647"), t0())),
            t0(),
            secs(600),
        ),
        (
            "expired",
            Some(held_pod(Some("0"), None, t0())),
            at(10_000),
            secs(0),
        ),
    ];
    for (name, pod, now, want) in cases {
        assert_eq!(remaining_time_per_index(pod.as_ref(), now), want, "{name}");
    }
}

// ------------------------------------------------ pastBackoffLimitOnFailure

fn on_failure_job(restart_policy: &str, limit: Option<i32>) -> Job {
    Job {
        spec: Some(JobSpec {
            backoff_limit: limit,
            template: PodTemplateSpec {
                spec: Some(PodSpec {
                    restart_policy: Some(restart_policy.into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn restarting_pod(phase: &str, regular: &[i32], init: &[i32]) -> CachedPod {
    restarting_pod_full(phase, regular, init).into()
}

fn restarting_pod_full(phase: &str, regular: &[i32], init: &[i32]) -> Pod {
    let statuses = |v: &[i32]| {
        Some(
            v.iter()
                .map(|r| ContainerStatus {
                    restart_count: *r,
                    ..Default::default()
                })
                .collect(),
        )
    };
    Pod {
        status: Some(PodStatus {
            phase: Some(phase.into()),
            container_statuses: statuses(regular),
            init_container_statuses: statuses(init),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn past_backoff_limit_on_failure_table() {
    /// (phase, regular restart counts, init restart counts)
    type P = (&'static str, &'static [i32], &'static [i32]);
    /// (name, restartPolicy, backoffLimit, pods, past the limit)
    type Case = (&'static str, &'static str, Option<i32>, Vec<P>, bool);
    let cases: Vec<Case> = vec![
        // --- ported from upstream TestJobBackoffForOnFailure ---
        (
            "limit 0, no restarts",
            "OnFailure",
            Some(0),
            vec![("Running", &[0], &[])],
            false,
        ),
        (
            "limit 1, restart 0",
            "OnFailure",
            Some(1),
            vec![("Running", &[0], &[])],
            false,
        ),
        (
            "limit 1, restart 1, running",
            "OnFailure",
            Some(1),
            vec![("Running", &[1], &[])],
            true,
        ),
        (
            "limit 1, restart 1, pending",
            "OnFailure",
            Some(1),
            vec![("Pending", &[1], &[])],
            true,
        ),
        (
            "limit 2, single pod restart 2",
            "OnFailure",
            Some(2),
            vec![("Running", &[2], &[])],
            true,
        ),
        (
            "limit 2, two pods 1+1 running",
            "OnFailure",
            Some(2),
            vec![("Running", &[1], &[]), ("Running", &[1], &[])],
            true,
        ),
        (
            "limit 2, two pods 1+1 pending",
            "OnFailure",
            Some(2),
            vec![("Pending", &[1], &[]), ("Pending", &[1], &[])],
            true,
        ),
        (
            "not enough failures",
            "OnFailure",
            Some(3),
            vec![("Running", &[1], &[]), ("Running", &[1], &[])],
            false,
        ),
        (
            "succeeded pods are not summed",
            "OnFailure",
            Some(6),
            vec![("Succeeded", &[1, 1, 2, 0], &[]), ("Succeeded", &[5], &[])],
            false,
        ),
        // --- additional ---
        (
            "limit 0, any restart",
            "OnFailure",
            Some(0),
            vec![("Pending", &[0], &[1])],
            true,
        ),
        (
            "init containers are summed",
            "OnFailure",
            Some(3),
            vec![("Pending", &[1], &[2])],
            true,
        ),
        (
            "failed pods are not summed",
            "OnFailure",
            Some(1),
            vec![("Failed", &[4], &[])],
            false,
        ),
        (
            "unknown phase is not summed",
            "OnFailure",
            Some(1),
            vec![("Unknown", &[4], &[])],
            false,
        ),
        (
            "restartPolicy Never: never",
            "Never",
            Some(0),
            vec![("Running", &[9], &[])],
            false,
        ),
        (
            "unset limit defaults to 6 (5)",
            "OnFailure",
            None,
            vec![("Running", &[5], &[])],
            false,
        ),
        (
            "unset limit defaults to 6 (6)",
            "OnFailure",
            None,
            vec![("Running", &[3, 3], &[])],
            true,
        ),
        (
            "no overflow",
            "OnFailure",
            Some(i32::MAX),
            vec![("Running", &[i32::MAX], &[]), ("Running", &[i32::MAX], &[])],
            true,
        ),
    ];
    for (name, policy, limit, pods, want) in cases {
        let pods: Vec<CachedPod> = pods
            .iter()
            .map(|(ph, r, i)| restarting_pod(ph, r, i))
            .collect();
        let refs: Vec<&CachedPod> = pods.iter().collect();
        assert_eq!(
            past_backoff_limit_on_failure(&on_failure_job(policy, limit), &refs),
            want,
            "{name}"
        );
    }
    assert!(!past_backoff_limit_on_failure(&Job::default(), &[]));
}

// --------------------------------------------------------------- proptests

proptest! {
    #[test]
    fn remaining_time_bounded_and_monotone(
        n in any::<i32>(),
        last_s in -1_000_000i64..1_000_000,
        now_a in -2_000_000i64..2_000_000,
        delta_ms in 0i64..10_000_000,
    ) {
        let rec = BackoffRecord { failures_after_last_success: n, last_failure_time: Some(at(last_s * 1000)) };
        let a = at(now_a * 1000);
        let b = a + SignedDuration::from_millis(delta_ms);
        let ra = remaining_time(&rec, a);
        let rb = remaining_time(&rec, b);
        prop_assert!(ra <= MAX_POD_FAILURE_BACKOFF);
        prop_assert!(rb <= ra, "not monotone: {ra:?} then {rb:?}");
        if n <= 0 {
            prop_assert_eq!(ra, Duration::ZERO);
        } else {
            prop_assert!(ra <= DEFAULT_POD_FAILURE_BACKOFF.saturating_mul(1 << (n - 1).min(20)));
        }
    }

    #[test]
    fn delay_grows_with_failures(n in 1i32..100, now_off in 0i64..1_000_000) {
        let now = at(now_off);
        let r = |n| remaining_time(&BackoffRecord { failures_after_last_success: n, last_failure_time: Some(t0()) }, now);
        prop_assert!(r(n) <= r(n + 1));
    }

    #[test]
    fn record_counts_only_failures_after_last_success(
        succ in prop::collection::vec(-50i64..50, 0..4),
        fail in prop::collection::vec(-50i64..50, 0..6),
        stored in 0i32..5,
    ) {
        let sp: Vec<CachedPod> = succ.iter().map(|ms| pod_finished_at("Succeeded", at(*ms))).collect();
        let fp: Vec<CachedPod> = fail.iter().map(|ms| pod_finished_at("Failed", at(*ms))).collect();
        let s: Vec<&CachedPod> = sp.iter().collect();
        let f: Vec<&CachedPod> = fp.iter().collect();
        let prior = BackoffRecord { failures_after_last_success: stored, last_failure_time: Some(at(-100)) };
        let got = new_backoff_record(Some(&prior), &s, &f);
        // Order of the inputs does not matter.
        let mut rs = s.clone();
        rs.reverse();
        let mut rf = f.clone();
        rf.reverse();
        prop_assert_eq!(new_backoff_record(Some(&prior), &rs, &rf), got);
        match succ.iter().max() {
            None if fail.is_empty() => prop_assert_eq!(got, prior),
            None => {
                prop_assert_eq!(got.failures_after_last_success, stored + fail.len() as i32);
                prop_assert_eq!(got.last_failure_time, fail.iter().max().map(|m| at(*m)));
            }
            Some(last) => {
                let after: Vec<_> = fail.iter().filter(|m| *m > last).collect();
                prop_assert_eq!(got.failures_after_last_success, after.len() as i32);
                prop_assert_eq!(got.last_failure_time, after.iter().max().map(|m| at(**m)));
            }
        }
    }
}
