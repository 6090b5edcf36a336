//! The taint-eviction controller against bad input on the real API server
//! (issue 14, "Bad input"; docs/bad-input.md): `tolerationSeconds` at the
//! edges of its range and pods bound to a node the cache does not have.
//! A pod recreated on another node while its eviction is queued is
//! `e2e::deleting_the_pod_cancels_its_eviction`.

mod support;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use kcm_e2e::ControlPlane;
use kcm_e2e::in_process::Detached;
use kcm_features::FeatureGates;

use support::scenarios::Run;
use support::*;

/// The shared control plane with our controller (default gates).
fn plane() -> &'static ControlPlane {
    static OURS: OnceLock<Detached> = OnceLock::new();
    let cp = kcm_e2e::shared();
    OURS.get_or_init(|| start_ours(cp, FeatureGates::default()));
    cp
}

/// `tolerationSeconds` of 0 and below evict at once; `i64::MAX`, values
/// past what a Go `time.Duration` holds, the largest one it holds and a
/// year keep the pod; a 4 s one beside them still goes on time. Upstream
/// multiplies by `time.Second` unchecked: 18446744074 s (584 years) wraps
/// to 0.29 s and evicts almost at once, 9.3e9 s wraps negative and reads as
/// "forever"; kcm-rs treats everything past the Go limit as forever.
#[tokio::test]
async fn toleration_seconds_at_the_edges() {
    let client = plane().client().await.expect("client");
    let Watched { ns, pods, history } = watched_namespace(&client, "te-edges").await;
    let node = format!("{ns}-n1");
    create_node(&client, &node, &["dedicated"]).await;
    let cases: [(&str, i64); 9] = [
        ("zero", 0),
        ("negative", -5),
        ("min", i64::MIN),
        ("max", i64::MAX),
        ("past-go-duration", 9_300_000_000),
        ("wraps-to-0-29s-upstream", 18_446_744_074),
        ("go-duration-limit", i64::MAX / 1_000_000_000),
        ("a-year", 31_536_000),
        ("four", 4),
    ];
    let mut created = Vec::new();
    for (name, secs) in cases {
        let p = pods
            .create(
                &Default::default(),
                &pod(name, &node, &[("dedicated", Some(secs))]),
            )
            .await
            .unwrap_or_else(|e| panic!("{name}: tolerationSeconds {secs} refused: {e}"));
        created.push((name, Instant::now(), p.metadata.uid));
    }
    tokio::time::sleep(Duration::from_secs(8)).await;
    let mut run = Run {
        ns: ns.clone(),
        pods: Default::default(),
    };
    for (name, at, uid) in &created {
        let evicted = matches!(*name, "zero" | "negative" | "min" | "four");
        let want = if evicted {
            vec![marking(&ns, name)]
        } else {
            vec![]
        };
        let o = observe(&client, &ns, &history, name, uid.as_deref(), *at, &want).await;
        run.pods.insert(name.to_string(), o);
    }
    for name in ["zero", "negative", "min"] {
        let o = run.pod(name);
        assert_eq!(o.timing, Timing::Immediate, "{name}: {run:#?}");
        assert_eq!(o.condition, expected_condition(), "{name}: {run:#?}");
        assert_eq!(o.condition_first, Some(true), "{name}");
    }
    assert!(run.pod("four").timing.about(4), "{run:#?}");
    for name in [
        "max",
        "past-go-duration",
        "wraps-to-0-29s-upstream",
        "go-duration-limit",
        "a-year",
    ] {
        let o = run.pod(name);
        assert_eq!(o.timing, Timing::Never, "{name}: {run:#?}");
        assert_eq!(o.condition, None, "{name}: {run:#?}");
    }
}

/// A pod bound to a node that does not exist (a typo, or a node the cache
/// has not seen yet): nothing happens and nothing is stuck; once the node
/// appears with an untolerated NoExecute taint the pod goes at once.
#[tokio::test]
async fn pod_on_a_node_missing_from_the_cache() {
    let client = plane().client().await.expect("client");
    let Watched { ns, pods, history } = watched_namespace(&client, "te-missing-node").await;
    let node = format!("{ns}-late");
    pods.create(&Default::default(), &pod("early", &node, &[]))
        .await
        .expect("pod");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!history.deleted("early"), "nothing to evict for");
    create_node(&client, &node, &["dedicated"]).await;
    let appeared = Instant::now();
    assert!(
        history
            .wait_deleting("early", None, Duration::from_secs(10))
            .await,
        "evicted once the tainted node is known"
    );
    let o = observe(
        &client,
        &ns,
        &history,
        "early",
        None,
        appeared,
        &[marking(&ns, "early")],
    )
    .await;
    assert_eq!(o.timing, Timing::Immediate, "{o:#?}");
    assert_eq!(o.condition_first, Some(true), "{o:#?}");
}
