//! Tests of what `indexes` decides for pod creation and removal (upstream
//! cases as data): pending indexes, duplicate removal, names, env var.

use k8s_openapi::api::core::v1::Container;

use super::*;

/// Stand-in for `ActivePods` ("delete first" first): Pending < Unknown < Running.
fn by_phase(a: &CachedPod, b: &CachedPod) -> Ordering {
    let rank = |p: &CachedPod| match p.phase() {
        "Pending" => 0,
        "Unknown" => 1,
        "Running" => 2,
        _ => 3,
    };
    rank(a).cmp(&rank(b))
}

fn describe<P: Borrow<CachedPod>>(pods: &[&P]) -> Vec<(String, String)> {
    pods.iter()
        .map(|p| {
            let p: &CachedPod = (*p).borrow();
            let ix = p
                .job_annotations()
                .completion_index
                .as_deref()
                .map_or_else(|| NO_INDEX.to_string(), str::to_string);
            (ix, p.phase().to_string())
        })
        .collect()
}

fn owned_descs(d: &[(&str, &str)]) -> Vec<(String, String)> {
    d.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn first_pending_indexes_table() {
    // Upstream TestFirstPendingIndexes: (name, count, completions, pods, succeeded, failed, want).
    type Case<'a> = (
        &'a str,
        usize,
        i32,
        &'a [(&'a str, &'a str)],
        &'a [(i32, i32)],
        Option<&'a [(i32, i32)]>,
        &'a [i32],
    );
    let cases: &[Case<'_>] = &[
        (
            "count greater than completions",
            5,
            3,
            &[],
            &[],
            None,
            &[0, 1, 2],
        ),
        ("count less than completions", 2, 5, &[], &[], None, &[0, 1]),
        (
            "first pods active",
            3,
            10,
            &[("0", "Running"), ("1", "Pending")],
            &[],
            None,
            &[2, 3, 4],
        ),
        (
            "last pods active or succeeded",
            6,
            6,
            &[("6", "Pending")],
            &[(4, 5)],
            None,
            &[0, 1, 2, 3],
        ),
        (
            "mixed",
            5,
            20,
            &[
                ("3", "Pending"),
                ("5", "Running"),
                ("8", "Pending"),
                (NO_INDEX, "Running"),
                ("-3", "Running"),
            ],
            &[(2, 4), (9, 9)],
            None,
            &[0, 1, 6, 7, 10],
        ),
        (
            "with failed indexes",
            5,
            20,
            &[("3", "Pending"), ("9", "Pending")],
            &[(1, 1), (5, 5), (9, 9)],
            Some(&[(2, 2), (6, 7)]),
            &[0, 4, 8, 10, 11],
        ),
        ("count zero", 0, 5, &[], &[], None, &[]),
        ("completions zero", 3, 0, &[], &[], None, &[]),
        (
            "everything taken",
            3,
            3,
            &[("1", "Running")],
            &[(0, 0)],
            Some(&[(2, 2)]),
            &[],
        ),
        (
            "huge count is bounded by completions",
            usize::MAX,
            3,
            &[],
            &[],
            None,
            &[0, 1, 2],
        ),
        (
            "terminal pods do not hold an index",
            2,
            3,
            &[("0", "Failed"), ("1", "Succeeded")],
            &[],
            None,
            &[0, 1],
        ),
    ];
    for (name, count, completions, descs, succeeded, failed, want) in cases {
        let pods = hollow(descs, false);
        let failed = failed.map(ivs);
        let got = first_pending_indexes(
            &job(*completions),
            &pods,
            &ivs(succeeded),
            failed.as_ref(),
            *count,
        );
        assert_eq!(got, want.to_vec(), "{name}");
    }
}

#[test]
fn first_pending_indexes_and_terminating_pods() {
    let pods = vec![
        pod("0", "Running").deleted_at(1).p(),
        pod("2", "Running").p(),
    ];
    let failed_only = with_spec(job(4), |s| s.pod_replacement_policy = Some("Failed".into()));
    assert_eq!(
        first_pending_indexes(&failed_only, &pods, &ivs(&[]), None, 4),
        vec![1, 3]
    );
    let default_policy = with_spec(job(4), |s| {
        s.pod_replacement_policy = Some("TerminatingOrFailed".into())
    });
    assert_eq!(
        first_pending_indexes(&default_policy, &pods, &ivs(&[]), None, 4),
        vec![0, 1, 3]
    );
}

#[test]
fn duplicated_index_removal_table() {
    // Upstream TestAppendDuplicatedIndexPodsForRemoval plus our own cases:
    // (name, pods, completions, want rm, want left).
    type Case<'a> = (
        &'a str,
        &'a [(&'a str, &'a str)],
        i32,
        &'a [(&'a str, &'a str)],
        &'a [(&'a str, &'a str)],
    );
    let cases: &[Case<'_>] = &[
        (
            "all unique",
            &[
                (NO_INDEX, "Pending"),
                ("2", "Pending"),
                ("5", "Running"),
                ("6", "Running"),
            ],
            6,
            &[(NO_INDEX, "Pending"), ("6", "Running")],
            &[("2", "Pending"), ("5", "Running")],
        ),
        (
            "all with index",
            &[
                ("5", "Pending"),
                ("0", "Running"),
                ("3", "Pending"),
                ("0", "Running"),
                ("3", "Running"),
                ("0", "Pending"),
                ("6", "Running"),
                ("6", "Pending"),
            ],
            6,
            &[
                ("0", "Pending"),
                ("0", "Running"),
                ("3", "Pending"),
                ("6", "Running"),
                ("6", "Pending"),
            ],
            &[("0", "Running"), ("3", "Running"), ("5", "Pending")],
        ),
        (
            "mixed",
            &[
                (NO_INDEX, "Pending"),
                ("invalid", "Running"),
                ("-2", "Running"),
                ("0", "Pending"),
                ("1", "Pending"),
                ("1", "Pending"),
                ("1", "Running"),
            ],
            6,
            &[
                (NO_INDEX, "Pending"),
                ("invalid", "Running"),
                ("-2", "Running"),
                ("1", "Pending"),
                ("1", "Pending"),
            ],
            &[("0", "Pending"), ("1", "Running")],
        ),
        // Upstream appends out-of-range pods before the last valid group's duplicates.
        (
            "out-of-range pods precede the last group's duplicates",
            &[
                ("1", "Running"),
                ("7", "Running"),
                ("1", "Pending"),
                ("0", "Unknown"),
                ("0", "Pending"),
            ],
            2,
            &[("0", "Pending"), ("7", "Running"), ("1", "Pending")],
            &[("0", "Unknown"), ("1", "Running")],
        ),
        ("empty", &[], 3, &[], &[]),
        (
            "only unknown",
            &[(NO_INDEX, "Running")],
            3,
            &[(NO_INDEX, "Running")],
            &[],
        ),
        // Unknown-index pods form the "last group" here, so they follow the out-of-range ones.
        (
            "completions zero",
            &[("0", "Running"), (NO_INDEX, "Pending")],
            0,
            &[("0", "Running"), (NO_INDEX, "Pending")],
            &[],
        ),
    ];
    for (name, descs, completions, want_rm, want_left) in cases {
        let pods = hollow(descs, false);
        let (rm, left) = duplicated_index_pods_for_removal(&job(*completions), &pods, &by_phase);
        assert_eq!(describe(&rm), owned_descs(want_rm), "{name}: rm");
        assert_eq!(describe(&left), owned_descs(want_left), "{name}: left");
    }
}

#[test]
fn generate_name_with_index_table() {
    let h70 = "hhhhhooooo".repeat(7);
    let h57 = &h70[..57];
    let cases: Vec<(&str, &str, i32, String)> = vec![
        // Upstream TestPodGenerateNameWithIndex.
        ("short job name", "indexed-job", 1, "indexed-job-1-".into()),
        (
            "name exceeds the limit",
            &h70,
            1,
            format!("{}-1-", &h70[..55]),
        ),
        (
            "name plus suffix exceeds the limit",
            h57,
            1,
            format!("{}-1-", &h70[..55]),
        ),
        // The 58 boundary.
        ("exactly 58", &h70[..55], 1, format!("{}-1-", &h70[..55])),
        (
            "59 is cut to 58",
            &h70[..56],
            1,
            format!("{}-1-", &h70[..55]),
        ),
        (
            "wide index",
            &h70,
            2147483647,
            format!("{}-2147483647-", &h70[..46]),
        ),
        ("negative index", "j", -4, "j--4-".into()),
    ];
    for (name, job_name, index, want) in cases {
        let got = pod_generate_name_with_index(job_name, index);
        assert_eq!(got, want, "{name}");
        assert!(got.len() <= MAX_GENERATED_NAME_LENGTH, "{name}");
    }
    // Non-ASCII names are refused by the API server; here they only must not panic.
    let odd = "é".repeat(40);
    assert!(pod_generate_name_with_index(&odd, 3).ends_with("-3-"));
}

#[test]
fn generate_name_non_indexed() {
    assert_eq!(pod_generate_name("pi"), "pi-");
    assert_eq!(pod_generate_name("a.b"), "a.b-");
    // Upstream masks the trailing dash by replacing the last *two* bytes with
    // `a`, so a 253-char name still takes the dash and 254 does not.
    let n253 = "a".repeat(253);
    assert_eq!(pod_generate_name(&n253), format!("{n253}-"));
    let n254 = "a".repeat(254);
    assert_eq!(pod_generate_name(&n254), n254);
    assert_eq!(pod_generate_name("Upper"), "Upper");
    assert_eq!(pod_generate_name(""), "");
    assert_eq!(pod_generate_name("é"), "é");
}

#[test]
fn completion_index_env_var() {
    let existing = EnvVar {
        name: JOB_COMPLETION_INDEX_ENV.into(),
        value: Some("user".into()),
        ..Default::default()
    };
    let mut spec = PodSpec {
        init_containers: Some(vec![Container {
            name: "init".into(),
            ..Default::default()
        }]),
        containers: vec![
            Container {
                name: "a".into(),
                ..Default::default()
            },
            Container {
                name: "b".into(),
                env: Some(vec![existing.clone()]),
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    add_completion_index_env_var(&mut spec);
    add_completion_index_env_var(&mut spec); // idempotent
    let injected = EnvVar {
        name: "JOB_COMPLETION_INDEX".into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: "metadata.labels['batch.kubernetes.io/job-completion-index']".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let init = spec
        .init_containers
        .as_ref()
        .and_then(|c| c.first())
        .and_then(|c| c.env.clone());
    assert_eq!(init, Some(vec![injected.clone()]));
    assert_eq!(spec.containers[0].env, Some(vec![injected]));
    assert_eq!(spec.containers[1].env, Some(vec![existing]));
}

proptest! {
    /// The pending indexes are sorted, in range, free, and as many as allowed.
    #[test]
    fn first_pending_indexes_properties(
        succeeded in proptest::collection::btree_set(0..60i32, 0..30),
        failed in proptest::collection::btree_set(0..60i32, 0..30),
        active in proptest::collection::btree_set(-1..70i32, 0..30),
        completions in 0..60i32,
        count in 0..80usize,
    ) {
        let descs: Vec<(String, &str)> = active.iter().map(|i| (i.to_string(), "Running")).collect();
        let descs: Vec<(&str, &str)> = descs.iter().map(|(i, p)| (i.as_str(), *p)).collect();
        let pods = hollow(&descs, false);
        let got = first_pending_indexes(
            &job(completions), &pods, &from_set(&succeeded), Some(&from_set(&failed)), count,
        );
        let free: Vec<i32> = (0..completions)
            .filter(|i| !succeeded.contains(i) && !failed.contains(i) && !active.contains(i))
            .collect();
        prop_assert_eq!(got, free.into_iter().take(count).collect::<Vec<_>>());
    }

    #[test]
    fn generate_name_is_bounded(name in "[a-z0-9-]{0,80}", index in any::<i32>()) {
        let got = pod_generate_name_with_index(&name, index);
        let suffix = format!("-{index}-");
        prop_assert!(got.len() <= MAX_GENERATED_NAME_LENGTH);
        prop_assert!(got.ends_with(&suffix));
        prop_assert!(name.starts_with(&got[..got.len() - suffix.len()]));
    }
}

#[test]
fn accepts_arc_and_reference_slices() {
    use std::sync::Arc;
    let owned = hollow(
        &[("0", "Running"), ("0", "Pending"), ("1", "Succeeded")],
        true,
    );
    let arcs: Vec<Arc<CachedPod>> = owned.iter().cloned().map(Arc::new).collect();
    let refs: Vec<&CachedPod> = owned.iter().collect();
    let j = job(3);
    let (rm, left) = duplicated_index_pods_for_removal(&j, &arcs[..2], &by_phase);
    assert_eq!(describe(&rm), owned_descs(&[("0", "Pending")]));
    assert_eq!(describe(&left), owned_descs(&[("0", "Running")]));
    let (_, done) = succeeded_indexes(&j, &refs);
    assert_eq!(done, ivs(&[(1, 1)]));
    assert_eq!(first_pending_indexes(&j, &arcs, &done, None, 3), vec![2]);
}
