//! Sharded workers under paused tokio time: a shard's items in order, the
//! earlier lane first, other shards not held up, panics retried.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::host::{Host, HostSettings};
use crate::workqueue::{RetryRateLimit, WorkQueue};

type Log = Arc<Mutex<Vec<String>>>;

fn queue(name: &str) -> WorkQueue<String> {
    WorkQueue::new(
        name,
        RetryRateLimit::per_key(Duration::from_secs(1), Duration::from_secs(60)),
        &crate::metrics::Metrics::detached(),
    )
}

/// Shard 0 for keys starting with `x`, 1 for the rest.
fn shard(key: &str) -> usize {
    usize::from(!key.starts_with('x'))
}

async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

/// Two lanes ("node" first, then "pod") on two workers; every sync logs
/// `lane:key`, and a key named `*-gated` waits for a permit of `gate`, a
/// key named `*-panics` panics on its first run.
fn pool(
    host: &Host,
    log: &Log,
    gate: &Arc<Semaphore>,
) -> (WorkQueue<String>, WorkQueue<String>, super::Sharded) {
    let nodes = queue("test_sharded_nodes");
    let pods = queue("test_sharded_pods");
    let sync = |lane: &'static str| {
        let (log, gate) = (Arc::clone(log), Arc::clone(gate));
        let panicked = Arc::new(Mutex::new(false));
        move |key: String| {
            let (log, gate, panicked) =
                (Arc::clone(&log), Arc::clone(&gate), Arc::clone(&panicked));
            async move {
                if key.ends_with("-gated") {
                    let _permit = gate.acquire().await;
                }
                if key.ends_with("-panics") && !std::mem::replace(&mut *panicked.lock(), true) {
                    panic!("first run of {key}");
                }
                log.lock().push(format!("{lane}:{key}"));
                Ok::<(), String>(())
            }
        }
    };
    let sharded = host
        .sharded(2)
        .lane(&nodes, "node", 10, |k: &String| shard(k), sync("node"))
        .lane(&pods, "pod", 1, |k: &String| shard(k), sync("pod"));
    (nodes, pods, sharded)
}

#[tokio::test(start_paused = true)]
async fn a_shard_runs_in_order_with_the_earlier_lane_first_and_others_proceed() {
    let host = Host::with_settings("test-sharded", HostSettings::default());
    let (log, gate): (Log, _) = (Arc::default(), Arc::new(Semaphore::new(0)));
    let (nodes, pods, sharded) = pool(&host, &log, &gate);
    let stop = CancellationToken::new();
    let run = tokio::spawn(sharded.run(stop.clone()));

    // Worker 0 is held by a gated node item; meanwhile a pod item and then
    // a node item of its shard arrive, and items of the other shard.
    nodes.add("x-gated".to_string());
    settle().await;
    pods.add("x-pod".to_string());
    settle().await;
    nodes.add("x-node".to_string());
    pods.add("y-pod".to_string());
    nodes.add("y-node".to_string());
    settle().await;
    let mut other = log.lock().clone();
    other.sort();
    assert_eq!(
        other,
        ["node:y-node", "pod:y-pod"],
        "shard 1 is not held up"
    );

    gate.add_permits(1);
    settle().await;
    assert_eq!(
        log.lock()[2..],
        ["node:x-gated", "node:x-node", "pod:x-pod"],
        "the node item that came later still runs before the waiting pod item"
    );
    stop.cancel();
    run.await.expect("run ends after stop");
}

#[tokio::test(start_paused = true)]
async fn a_panicking_item_is_retried_with_back_off() {
    let host = Host::with_settings("test-sharded-panics", HostSettings::default());
    let (log, gate): (Log, _) = (Arc::default(), Arc::new(Semaphore::new(0)));
    let (_nodes, pods, sharded) = pool(&host, &log, &gate);
    let stop = CancellationToken::new();
    let run = tokio::spawn(sharded.run(stop.clone()));
    pods.add("x-panics".to_string());
    settle().await;
    assert!(log.lock().is_empty());
    assert_eq!(pods.len(), 0, "waiting out its back-off, not ready");
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    settle().await;
    assert_eq!(*log.lock(), ["pod:x-panics"]);
    stop.cancel();
    run.await.expect("run ends after stop");
}
