use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{JobSpec, JobStatus, PodFailurePolicy};
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use proptest::prelude::*;

use super::*;
use crate::pods::{
    JOB_INDEX_FAILURE_COUNT, JOB_INDEX_IGNORED_FAILURE_COUNT, JOB_TRACKING_FINALIZER,
};

mod creation;
mod failures;

/// "No annotation" marker in `(index, phase)` descriptions, as upstream's tests.
const NO_INDEX: &str = "-";

/// Intervals as written in table cases.
type Ivs<'a> = &'a [(i32, i32)];

fn ivs(v: &[(i32, i32)]) -> OrderedIntervals {
    OrderedIntervals::from_intervals(v.to_vec())
}

fn ts(secs: i64) -> Timestamp {
    Timestamp::from_second(secs).expect("valid timestamp")
}

/// A small pod builder.
#[derive(Clone, Default)]
struct B(Pod);

fn pod(index: &str, phase: &str) -> B {
    let mut p = Pod {
        status: Some(PodStatus {
            phase: Some(phase.to_string()),
            ..Default::default()
        }),
        ..Default::default()
    };
    if index != NO_INDEX {
        p.metadata.annotations = Some(BTreeMap::from([(
            JOB_COMPLETION_INDEX.to_string(),
            index.to_string(),
        )]));
    }
    B(p)
}

impl B {
    fn annotate(mut self, k: &str, v: &str) -> Self {
        self.0
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(k.to_string(), v.to_string());
        self
    }
    fn failures(self, n: &str) -> Self {
        self.annotate(JOB_INDEX_FAILURE_COUNT, n)
    }
    fn ignored(self, n: &str) -> Self {
        self.annotate(JOB_INDEX_IGNORED_FAILURE_COUNT, n)
    }
    fn fin(mut self) -> Self {
        self.0
            .metadata
            .finalizers
            .get_or_insert_with(Vec::new)
            .push(JOB_TRACKING_FINALIZER.to_string());
        self
    }
    fn uid(mut self, uid: &str) -> Self {
        self.0.metadata.uid = Some(uid.to_string());
        self
    }
    fn deleted_at(mut self, secs: i64) -> Self {
        self.0.metadata.deletion_timestamp = Some(Time(ts(secs)));
        self
    }
    fn p(self) -> CachedPod {
        self.0.into()
    }
}

/// Pods from `(index, phase)` pairs, all with the tracking finalizer when `fin`.
fn hollow(descs: &[(&str, &str)], fin: bool) -> Vec<CachedPod> {
    descs
        .iter()
        .map(|(i, ph)| {
            let b = pod(i, ph);
            if fin { b.fin().p() } else { b.p() }
        })
        .collect()
}

fn job(completions: i32) -> Job {
    Job {
        metadata: ObjectMeta {
            name: Some("job".into()),
            ..Default::default()
        },
        spec: Some(JobSpec {
            completions: Some(completions),
            completion_mode: Some("Indexed".into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn with_spec(mut j: Job, f: impl FnOnce(&mut JobSpec)) -> Job {
    if let Some(s) = j.spec.as_mut() {
        f(s);
    }
    j
}

fn with_status(mut j: Job, completed: Option<&str>, failed: Option<&str>) -> Job {
    j.status = Some(JobStatus {
        completed_indexes: completed.map(str::to_string),
        failed_indexes: failed.map(str::to_string),
        ..Default::default()
    });
    j
}

fn per_index(j: Job, limit: i32) -> Job {
    with_spec(j, |s| s.backoff_limit_per_index = Some(limit))
}

fn with_policy(j: Job) -> Job {
    with_spec(j, |s| {
        s.pod_failure_policy = Some(PodFailurePolicy::default())
    })
}

// ---------------------------------------------------------------- intervals

#[test]
fn format_table() {
    let cases: &[(Ivs<'_>, &str)] = &[
        (&[], ""),
        (&[(0, 0)], "0"),
        (&[(0, 1)], "0,1"),
        (&[(0, 2)], "0-2"),
        (&[(1, 1), (3, 5), (7, 8)], "1,3-5,7,8"),
        (&[(2, 3), (5, 7), (10, 10)], "2,3,5-7,10"),
        (&[(0, 2147483646)], "0-2147483646"),
        // Malformed (inverted) intervals print their start only, like upstream.
        (&[(4, 1)], "4"),
    ];
    for (input, want) in cases {
        assert_eq!(ivs(input).to_string(), *want, "{input:?}");
    }
}

#[test]
fn parse_table() {
    let cases: &[(&str, i32, Ivs<'_>)] = &[
        ("", 5, &[]),
        ("0", 5, &[(0, 0)]),
        ("1,3-5,7,8", 10, &[(1, 1), (3, 5), (7, 8)]),
        ("1,2,3", 10, &[(1, 3)]),
        ("1-2,3-4", 10, &[(1, 4)]),
        // Upstream "prev interval out of range" / "partially out of range".
        ("0-5,8-10", 8, &[(0, 5)]),
        ("0-5,8-10", 10, &[(0, 5), (8, 9)]),
        // Upstream "corrupted interval".
        ("0,1-foo,bar", 4, &[(0, 0)]),
        ("invalid-form", 10, &[]),
        ("9", 2, &[]),
        // Parsing stops at the first start >= completions, even if smaller follow.
        ("0,12,1", 10, &[(0, 0)]),
        ("3,1,7,2", 5, &[(3, 3), (1, 1)]),
        // No sorting, no overlap repair.
        ("5,2", 10, &[(5, 5), (2, 2)]),
        ("1-3,2-5", 10, &[(1, 3), (2, 5)]),
        // Inverted pieces are skipped (upstream keeps them and then counts
        // them negatively; see `OrderedIntervals::parse`).
        ("4-1", 10, &[]),
        ("0,4-1,5", 10, &[(0, 0), (5, 5)]),
        ("0-5,9-2", 8, &[(0, 5)]),
        // Extra '-' pieces ignored; '+' accepted as by Go's Atoi.
        ("1-2-3", 10, &[(1, 2)]),
        ("+3", 10, &[(3, 3)]),
        ("1-+4", 10, &[(1, 4)]),
        ("007", 10, &[(7, 7)]),
        // Pieces without a parsable start are skipped.
        ("-1,2", 10, &[(2, 2)]),
        (" 1,2", 10, &[(2, 2)]),
        (",,1", 10, &[(1, 1)]),
        ("1-,2", 10, &[(2, 2)]),
        ("1_0", 20, &[]),
        // Go int overflow is a parse error (skip); a huge but valid int ends parsing.
        ("99999999999999999999,1", 5, &[(1, 1)]),
        ("9223372036854775807,1", 5, &[]),
        ("0-99999999999", 5, &[(0, 4)]),
        ("0-99999999999999999999,3", 5, &[(3, 3)]),
        // Non-positive completions: nothing is in range.
        ("0,1", 0, &[]),
        ("0,1", -3, &[]),
        ("0-2147483647", i32::MAX, &[(0, 2147483646)]),
    ];
    for (s, completions, want) in cases {
        assert_eq!(
            OrderedIntervals::parse(s, *completions),
            ivs(want),
            "parse({s:?}, {completions})"
        );
    }
}

#[test]
fn has_table() {
    // Upstream TestIntervalsHaveIndex.
    let cases: &[(Ivs<'_>, i32, bool)] = &[
        (&[], 4, false),
        (&[(2, 4), (5, 7)], 1, false),
        (&[(2, 4), (6, 8)], 9, false),
        (&[(2, 4), (6, 8)], 5, false),
        (&[(2, 4), (6, 8)], 2, true),
        (&[(2, 4), (6, 8)], 8, true),
        (&[(2, 4), (6, 8)], 4, true),
        (&[(0, 0)], -1, false),
        (&[(0, i32::MAX)], i32::MAX, true),
    ];
    for (input, ix, want) in cases {
        assert_eq!(ivs(input).has(*ix), *want, "{input:?} has {ix}");
    }
}

#[test]
fn merge_table() {
    let cases: &[(Ivs<'_>, Ivs<'_>, Ivs<'_>)] = &[
        (&[], &[], &[]),
        (&[(0, 2)], &[], &[(0, 2)]),
        (&[], &[(0, 2)], &[(0, 2)]),
        (&[(0, 2)], &[(3, 5)], &[(0, 5)]),
        (&[(0, 2)], &[(4, 5)], &[(0, 2), (4, 5)]),
        (&[(0, 9)], &[(3, 5)], &[(0, 9)]),
        (&[(3, 5)], &[(0, 9)], &[(0, 9)]),
        (&[(0, 3), (8, 9)], &[(2, 6)], &[(0, 6), (8, 9)]),
        (&[(1, 1), (5, 5)], &[(2, 4)], &[(1, 5)]),
        (&[(0, i32::MAX)], &[(5, 5)], &[(0, i32::MAX)]),
    ];
    for (a, b, want) in cases {
        assert_eq!(ivs(a).merge(&ivs(b)), ivs(want), "{a:?} ∪ {b:?}");
    }
    assert_eq!(
        ivs(&[(2, 3)]).with_ordered_indexes(&[0, 1, 4, 6]),
        ivs(&[(0, 4), (6, 6)])
    );
}

#[test]
fn total_and_iter() {
    assert_eq!(ivs(&[]).total(), 0);
    assert_eq!(ivs(&[(0, 5), (8, 9)]).total(), 8);
    assert_eq!(
        ivs(&[(0, 1), (4, 6)]).iter().collect::<Vec<_>>(),
        vec![0, 1, 4, 5, 6]
    );
    // Malformed lists: inverted intervals count negatively (as upstream) and
    // the sum saturates instead of overflowing.
    assert_eq!(ivs(&[(5, 3)]).total(), -1);
    assert_eq!(ivs(&[(5, 3)]).iter().count(), 0);
    assert_eq!(
        ivs(&[(0, i32::MAX - 1), (0, i32::MAX - 1)]).total(),
        i32::MAX
    );
}

// ------------------------------------------------------------------ proptests

fn set_strategy() -> impl Strategy<Value = BTreeSet<i32>> {
    proptest::collection::btree_set(0..200i32, 0..80)
}

fn from_set(set: &BTreeSet<i32>) -> OrderedIntervals {
    OrderedIntervals::new().with_ordered_indexes(&set.iter().copied().collect::<Vec<_>>())
}

proptest! {
    #[test]
    fn format_parse_round_trip(set in set_strategy(), extra in 0..50i32) {
        let iv = from_set(&set);
        let completions = set.last().map_or(1, |m| m + 1) + extra;
        prop_assert_eq!(OrderedIntervals::parse(&iv.to_string(), completions), iv);
    }

    #[test]
    fn total_has_iter_agree_with_set(set in set_strategy()) {
        let iv = from_set(&set);
        prop_assert_eq!(usize::try_from(iv.total()).ok(), Some(set.len()));
        prop_assert_eq!(iv.iter().collect::<BTreeSet<_>>(), set.clone());
        for i in -2..203 {
            prop_assert_eq!(iv.has(i), set.contains(&i), "index {}", i);
        }
        // Canonical form: sorted, disjoint, non-adjacent.
        for w in iv.intervals().windows(2) {
            prop_assert!(w[0].1 + 1 < w[1].0);
        }
    }

    #[test]
    fn merge_is_set_union(a in set_strategy(), b in set_strategy()) {
        let union: BTreeSet<i32> = a.union(&b).copied().collect();
        prop_assert_eq!(from_set(&a).merge(&from_set(&b)), from_set(&union));
        let b_sorted: Vec<i32> = b.iter().copied().collect();
        prop_assert_eq!(from_set(&a).with_ordered_indexes(&b_sorted), from_set(&union));
    }

    /// Arbitrary strings never panic, and every parsed bound is in range.
    #[test]
    fn parse_never_panics(s in ".{0,40}", completions in any::<i32>()) {
        check_parse(&s, completions)?;
    }

    #[test]
    fn parse_never_panics_on_near_misses(s in "[0-9+,\\- x]{0,40}", completions in -5..40i32) {
        check_parse(&s, completions)?;
    }
}

fn check_parse(s: &str, completions: i32) -> Result<(), TestCaseError> {
    let iv = OrderedIntervals::parse(s, completions);
    for &(f, l) in iv.intervals() {
        prop_assert!((0..completions).contains(&f) && (0..completions).contains(&l));
    }
    let _ = (iv.total(), iv.has(3), iv.to_string(), iv.merge(&iv));
    Ok(())
}
