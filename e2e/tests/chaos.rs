//! The short chaos run of `make test`: the mixed workload of `make chaos`
//! (`kcm_e2e::chaos`) at a small scale, once without kills and once with
//! five SIGKILLs of the real kcm-rs binary; every invariant must hold and
//! the Jobs must end as without kills. `make chaos` runs 50 kills.

#[path = "manifests/support.rs"]
#[allow(dead_code)]
mod support;

use std::time::Duration;

use kcm_e2e::chaos::{ChaosConfig, compare, run};

#[tokio::test]
async fn five_sigkills_lose_and_double_count_nothing() {
    let bin = support::kcm_rs_binary();
    let cfg = ChaosConfig {
        seed: 20_261_201,
        kills: 5,
        scale: 8,
        timeout: Duration::from_secs(240),
    };
    let calm = run(&cfg, &bin, 0).await.expect("run without kills");
    let wild = run(&cfg, &bin, cfg.kills).await.expect("run with kills");
    eprintln!(
        "without kills: {} pods, {} with DisruptionTarget, {:?}; with {} kills: {} pods, {} with DisruptionTarget, {:?}",
        calm.pods, calm.evicted, calm.elapsed, wild.kills, wild.pods, wild.evicted, wild.elapsed
    );
    assert_eq!(wild.kills, 5);
    assert!(
        calm.violations.is_empty(),
        "without kills: {:#?}",
        calm.violations
    );
    assert!(
        wild.violations.is_empty(),
        "with kills: {:#?}",
        wild.violations
    );
    let diff = compare(&wild, &calm);
    assert!(
        diff.is_empty(),
        "{diff:#?}\nwithout: {:#?}\nwith: {:#?}",
        calm.ends,
        wild.ends
    );
    // The workload did what it is for: evictions, FailJob, per-index.
    assert!(
        calm.evicted > 0 && calm.disruption_deletes > 0,
        "no disruption happened"
    );
    assert!(
        calm.ends
            .values()
            .any(|e| e.condition.contains("PodFailurePolicy"))
    );
    assert!(calm.ends.values().any(|e| e.failed_indexes.is_some()));
}
