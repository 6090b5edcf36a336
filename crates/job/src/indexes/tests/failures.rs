//! Tests of the failure and success bookkeeping of `indexes` (upstream cases
//! as data): succeeded/failed index sets, held pods, replacement counts.

use super::*;

fn count_towards(_: &CachedPod) -> (bool, bool) {
    (true, false)
}

fn ignore(_: &CachedPod) -> (bool, bool) {
    (false, false)
}

fn fail_index(_: &CachedPod) -> (bool, bool) {
    (true, true)
}

fn not_consulted(_: &CachedPod) -> (bool, bool) {
    panic!("the policy verdict must not be asked for without a pod failure policy")
}

fn deletion_time(p: &CachedPod) -> Option<Timestamp> {
    p.deletion_timestamp()
}

#[test]
fn succeeded_indexes_table() {
    // Upstream TestCalculateSucceededIndexes: (name, prev, pods, completions, want prev, want merged).
    type Case<'a> = (
        &'a str,
        &'a str,
        &'a [(&'a str, &'a str)],
        i32,
        &'a [(i32, i32)],
        &'a [(i32, i32)],
    );
    let cases: &[Case<'_>] = &[
        ("one index", "", &[("1", "Succeeded")], 2, &[], &[(1, 1)]),
        (
            "two separate",
            "",
            &[
                ("2", "Failed"),
                ("5", "Succeeded"),
                ("5", "Succeeded"),
                ("10", "Failed"),
                ("10", "Succeeded"),
            ],
            11,
            &[],
            &[(5, 5), (10, 10)],
        ),
        (
            "two intervals",
            "",
            &[
                ("0", "Running"),
                ("1", "Pending"),
                ("2", "Succeeded"),
                ("3", "Succeeded"),
                ("5", "Succeeded"),
                ("6", "Succeeded"),
                ("7", "Succeeded"),
            ],
            8,
            &[],
            &[(2, 3), (5, 7)],
        ),
        (
            "one index and one interval",
            "",
            &[
                ("0", "Succeeded"),
                ("1", "Failed"),
                ("2", "Succeeded"),
                ("3", "Succeeded"),
                ("4", "Succeeded"),
                ("5", "Succeeded"),
                (NO_INDEX, "Succeeded"),
                ("-2", "Succeeded"),
            ],
            6,
            &[],
            &[(0, 0), (2, 5)],
        ),
        (
            "out of range",
            "",
            &[
                ("0", "Succeeded"),
                ("1", "Succeeded"),
                ("2", "Succeeded"),
                ("3", "Failed"),
                ("4", "Succeeded"),
                ("5", "Succeeded"),
                (NO_INDEX, "Succeeded"),
                ("-2", "Succeeded"),
            ],
            5,
            &[],
            &[(0, 2), (4, 4)],
        ),
        (
            "prev interval out of range",
            "0-5,8-10",
            &[],
            8,
            &[(0, 5)],
            &[(0, 5)],
        ),
        (
            "prev partially out of range",
            "0-5,8-10",
            &[],
            10,
            &[(0, 5), (8, 9)],
            &[(0, 5), (8, 9)],
        ),
        (
            "prev and new separate",
            "0,4,5,10-12",
            &[("2", "Succeeded"), ("7", "Succeeded"), ("8", "Succeeded")],
            13,
            &[(0, 0), (4, 5), (10, 12)],
            &[(0, 0), (2, 2), (4, 5), (7, 8), (10, 12)],
        ),
        (
            "prev between new",
            "3,4,6",
            &[("2", "Succeeded"), ("7", "Succeeded"), ("8", "Succeeded")],
            9,
            &[(3, 4), (6, 6)],
            &[(2, 4), (6, 8)],
        ),
        (
            "new between prev",
            "2,7,8",
            &[("3", "Succeeded"), ("4", "Succeeded"), ("6", "Succeeded")],
            9,
            &[(2, 2), (7, 8)],
            &[(2, 4), (6, 8)],
        ),
        (
            "new within prev",
            "2-7",
            &[
                ("0", "Succeeded"),
                ("3", "Succeeded"),
                ("5", "Succeeded"),
                ("9", "Succeeded"),
            ],
            10,
            &[(2, 7)],
            &[(0, 0), (2, 7), (9, 9)],
        ),
        (
            "corrupted interval",
            "0,1-foo,bar",
            &[("3", "Succeeded")],
            4,
            &[(0, 0)],
            &[(0, 0), (3, 3)],
        ),
    ];
    for (name, prev, descs, completions, want_prev, want) in cases {
        let j = with_status(job(*completions), Some(prev), None);
        let pods = hollow(descs, true);
        let (got_prev, got) = succeeded_indexes(&j, &pods);
        assert_eq!(got_prev, ivs(want_prev), "{name}: prev");
        assert_eq!(got, ivs(want), "{name}: merged");
    }
    // Succeeded pods whose finalizer is gone are already counted in status.
    let pods = hollow(&[("1", "Succeeded")], false);
    assert_eq!(succeeded_indexes(&job(3), &pods).1, ivs(&[]));
    // No status at all.
    assert_eq!(
        succeeded_indexes(&Job::default(), &pods),
        (ivs(&[]), ivs(&[]))
    );
}

#[test]
fn is_index_failed_table() {
    type Case<'a> = (&'a str, Job, CachedPod, FailureVerdict<'a>, bool);
    let cases: Vec<Case<'_>> = vec![
        (
            "failed pod reaching backoffLimitPerIndex=0",
            per_index(job(2), 0),
            pod("0", "Failed").failures("0").fin().p(),
            &not_consulted,
            true,
        ),
        (
            "failed pod reaching backoffLimitPerIndex=1",
            per_index(job(2), 1),
            pod("1", "Failed").failures("1").fin().p(),
            &not_consulted,
            true,
        ),
        (
            "FailIndex policy match",
            with_policy(per_index(job(2), 1)),
            pod("0", "Failed").failures("0").fin().p(),
            &fail_index,
            true,
        ),
        (
            "below the limit",
            per_index(job(2), 1),
            pod("0", "Failed").failures("0").fin().p(),
            &not_consulted,
            false,
        ),
        (
            "ignored failure never fails the index",
            with_policy(per_index(job(2), 0)),
            pod("0", "Failed").failures("5").fin().p(),
            &ignore,
            false,
        ),
        (
            "counted failure with policy",
            with_policy(per_index(job(2), 2)),
            pod("0", "Failed").failures("2").fin().p(),
            &count_towards,
            true,
        ),
        (
            "running pod",
            with_policy(per_index(job(2), 0)),
            pod("0", "Running").fin().p(),
            &fail_index,
            false,
        ),
        (
            "terminating pod with podReplacementPolicy Failed is not failed",
            with_spec(per_index(job(2), 0), |s| {
                s.pod_replacement_policy = Some("Failed".into())
            }),
            pod("0", "Running").deleted_at(5).fin().p(),
            &not_consulted,
            false,
        ),
        (
            "terminating pod otherwise is failed",
            per_index(job(2), 0),
            pod("0", "Running").deleted_at(5).fin().p(),
            &not_consulted,
            true,
        ),
        (
            "without backoffLimitPerIndex only FailIndex fails",
            job(2),
            pod("0", "Failed").failures("9").fin().p(),
            &not_consulted,
            false,
        ),
        (
            "garbage count reads as 0",
            per_index(job(2), 1),
            pod("0", "Failed").failures("x").p(),
            &not_consulted,
            false,
        ),
    ];
    for (name, j, p, verdict, want) in cases {
        assert_eq!(is_index_failed(&j, &p, verdict), want, "{name}");
    }
}

#[test]
fn failed_indexes_table() {
    // Upstream TestCalculateFailedIndexes: (name, status.failedIndexes, limit, pods, want).
    type Case<'a> = (
        &'a str,
        Option<&'a str>,
        i32,
        Vec<CachedPod>,
        &'a [(i32, i32)],
    );
    let cases: Vec<Case<'_>> = vec![
        (
            "one new index failed",
            None,
            1,
            vec![
                pod("0", "Failed").failures("0").fin().p(),
                pod("1", "Failed").failures("1").fin().p(),
            ],
            &[(1, 1)],
        ),
        (
            "pod without finalizer is ignored",
            None,
            0,
            vec![pod("0", "Failed").failures("0").p()],
            &[],
        ),
        (
            "pod outside completions is ignored",
            None,
            0,
            vec![pod("3", "Failed").failures("0").fin().p()],
            &[],
        ),
        (
            "extend the failed indexes",
            Some("0"),
            0,
            vec![pod("1", "Failed").failures("0").fin().p()],
            &[(0, 1)],
        ),
        (
            "prev failed indexes empty",
            Some(""),
            0,
            vec![pod("1", "Failed").failures("0").fin().p()],
            &[(1, 1)],
        ),
        (
            "prev failed indexes outside the completions",
            Some("9"),
            0,
            vec![pod("1", "Failed").failures("0").fin().p()],
            &[(1, 1)],
        ),
    ];
    for (name, prev, limit, pods, want) in cases {
        let j = per_index(with_status(job(2), None, prev), limit);
        assert_eq!(
            failed_indexes(&j, &pods, &not_consulted),
            ivs(want),
            "{name}"
        );
    }
}

#[test]
fn delayed_deletion_table() {
    // Upstream TestGetPodsWithDelayedDeletionPerIndex plus our own cases:
    // (name, completions, limit, pods, expected finalizer removals, want UIDs).
    type Case<'a> = (
        &'a str,
        i32,
        i32,
        Vec<CachedPod>,
        &'a [&'a str],
        &'a [&'a str],
    );
    let f = |uid: &str, ix: &str, count: &str| pod(ix, "Failed").uid(uid).failures(count).fin();
    let cases: Vec<Case<'_>> = vec![
        (
            "failed pods of non-failed indexes are kept",
            3,
            1,
            vec![
                f("a", "0", "0").p(),
                f("b", "1", "1").p(),
                f("c", "2", "0").p(),
            ],
            &[],
            &["a", "c"],
        ),
        (
            "pod without finalizer: deletion already started",
            2,
            0,
            vec![pod("0", "Failed").uid("a").failures("0").p()],
            &[],
            &[],
        ),
        (
            "finalizer removal already expected",
            2,
            0,
            vec![f("a", "0", "0").p()],
            &["a"],
            &[],
        ),
        (
            "index outside completions",
            2,
            0,
            vec![f("a", "4", "0").p()],
            &[],
            &[],
        ),
        (
            "index already replaced by an active pod",
            2,
            1,
            vec![
                f("a1", "0", "0").p(),
                pod("0", "Running").uid("a2").failures("1").fin().p(),
            ],
            &[],
            &[],
        ),
        (
            "index succeeded",
            2,
            1,
            vec![
                f("a1", "0", "0").p(),
                pod("0", "Succeeded").uid("a2").failures("1").fin().p(),
            ],
            &[],
            &[],
        ),
        (
            "highest failure count is kept",
            2,
            4,
            vec![
                f("a1", "0", "0").p(),
                f("a3", "0", "2").p(),
                f("a2", "0", "1").p(),
            ],
            &[],
            &["a3"],
        ),
        (
            "latest finish time is kept",
            2,
            4,
            vec![
                f("a1", "0", "1").deleted_at(99).p(),
                f("a3", "0", "1").deleted_at(100).p(),
                f("a2", "0", "1").deleted_at(98).p(),
            ],
            &[],
            &["a3"],
        ),
        (
            "ignored failures add to the absolute count",
            2,
            4,
            vec![f("a1", "0", "1").p(), f("a2", "0", "0").ignored("2").p()],
            &[],
            &["a2"],
        ),
        (
            "count and time disagree: the first seen stays",
            2,
            4,
            vec![
                f("a1", "0", "2").deleted_at(10).p(),
                f("a2", "0", "3").deleted_at(5).p(),
            ],
            &[],
            &["a1"],
        ),
        (
            "no finish time orders before any time",
            2,
            4,
            vec![f("a1", "0", "1").p(), f("a2", "0", "1").deleted_at(5).p()],
            &[],
            &["a2"],
        ),
        (
            "failed index is not held",
            2,
            0,
            vec![f("a1", "0", "0").p(), f("b", "1", "0").p()],
            &[],
            &[],
        ),
    ];
    for (name, completions, limit, pods, expected_rm, want) in cases {
        let j = per_index(job(completions), limit);
        let failed = failed_indexes(&j, &pods, &not_consulted);
        let (_, succeeded) = succeeded_indexes(&j, &pods);
        let rm: HashSet<String> = expected_rm.iter().map(|s| s.to_string()).collect();
        let got = pods_with_delayed_deletion_per_index(
            &j,
            &pods,
            &succeeded,
            &failed,
            &rm,
            &deletion_time,
        );
        let mut got_uids: Vec<&str> = got.values().map(|p| p.uid()).collect();
        got_uids.sort_unstable();
        assert_eq!(got_uids, want.to_vec(), "{name}");
    }
    // The map is keyed by index.
    let pods = vec![f("a", "1", "0").p()];
    let j = per_index(job(3), 2);
    let got = pods_with_delayed_deletion_per_index(
        &j,
        &pods,
        &ivs(&[]),
        &ivs(&[]),
        &HashSet::new(),
        &deletion_time,
    );
    assert_eq!(got.keys().copied().collect::<Vec<_>>(), vec![1]);
}

#[test]
fn new_index_failure_counts_table() {
    // Upstream TestGetNewIndexFailureCountValue plus our own cases.
    type Case<'a> = (&'a str, Job, Option<CachedPod>, bool, (i32, i32));
    let held = |count: &str| pod("0", "Failed").uid("a").failures(count).fin();
    let cases: Vec<Case<'_>> = vec![
        ("first pod created", job(1), None, true, (0, 0)),
        (
            "replacing a pod with count 0",
            job(1),
            Some(held("0").p()),
            true,
            (1, 0),
        ),
        (
            "replacing a pod with count 3",
            job(1),
            Some(held("3").p()),
            true,
            (4, 0),
        ),
        (
            "ignored failure",
            with_policy(job(1)),
            Some(held("3").p()),
            false,
            (3, 1),
        ),
        (
            "ignored again",
            with_policy(job(1)),
            Some(held("3").ignored("4").p()),
            false,
            (3, 5),
        ),
        (
            "counted, keeping ignored",
            with_policy(job(1)),
            Some(held("3").ignored("4").p()),
            true,
            (4, 4),
        ),
        (
            "no policy: always counted",
            job(1),
            Some(held("2").p()),
            false,
            (3, 0),
        ),
        (
            "garbage annotations read as 0",
            job(1),
            Some(held("abc").ignored("-4").p()),
            true,
            (1, 0),
        ),
        (
            "saturates",
            job(1),
            Some(held("2147483647").p()),
            true,
            (i32::MAX, 0),
        ),
    ];
    for (name, j, p, counts, want) in cases {
        assert_eq!(
            new_index_failure_counts(&j, p.as_ref(), counts),
            want,
            "{name}"
        );
    }
}
