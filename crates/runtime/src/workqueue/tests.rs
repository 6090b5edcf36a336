use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::{Instant, advance, timeout};

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn queue(name: &str) -> WorkQueue<String> {
    WorkQueue::new(
        name,
        RetryRateLimit::controller_default(),
        &crate::metrics::Metrics::detached(),
    )
}

fn k(s: &str) -> String {
    s.to_string()
}

/// Gets a key without waiting (the queue must already hold one).
async fn get_now(q: &WorkQueue<String>) -> Option<String> {
    timeout(Duration::ZERO, q.get()).await.ok().flatten()
}

/// True when `get` would still be waiting after `d`.
async fn blocks_for(q: &WorkQueue<String>, d: Duration) -> bool {
    timeout(d, q.get()).await.is_err()
}

#[tokio::test(start_paused = true)]
async fn waiting_key_is_queued_once() {
    let q = queue("test_dedupe");
    q.add(k("a"));
    q.add(k("b"));
    q.add(k("a"));
    assert_eq!(q.len(), 2);
    assert_eq!(get_now(&q).await.as_deref(), Some("a"));
    assert_eq!(get_now(&q).await.as_deref(), Some("b"));
    assert!(q.is_empty());
    assert!(blocks_for(&q, ms(100)).await);
}

#[tokio::test(start_paused = true)]
async fn key_in_flight_is_redelivered_only_after_done() {
    let q = queue("test_in_flight");
    q.add(k("a"));
    let first = get_now(&q).await;
    assert_eq!(first.as_deref(), Some("a"));

    // Re-added twice while processing: dirty, but not ready for anyone.
    q.add(k("a"));
    q.add(k("a"));
    assert_eq!(q.len(), 0);
    let q2 = q.clone();
    let second_worker = tokio::spawn(async move { q2.get().await });
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(!second_worker.is_finished());

    q.done(&k("a"));
    let got = timeout(ms(10), second_worker).await;
    assert!(matches!(got, Ok(Ok(Some(ref key))) if key == "a"));
    // The two re-adds collapsed into one delivery.
    assert!(q.is_empty());
    q.done(&k("a"));
    assert!(blocks_for(&q, ms(100)).await);
}

#[tokio::test(start_paused = true)]
async fn workers_never_share_a_key() {
    let q = queue("test_workers");
    let busy = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let handled = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..4 {
        let (q, busy, overlaps, handled) =
            (q.clone(), busy.clone(), overlaps.clone(), handled.clone());
        workers.push(tokio::spawn(async move {
            while let Some(key) = q.get().await {
                if busy.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(ms(30)).await;
                busy.fetch_sub(1, Ordering::SeqCst);
                handled.fetch_add(1, Ordering::SeqCst);
                q.done(&key);
            }
        }));
    }
    // Keep re-adding the single key while workers hold it.
    for _ in 0..50 {
        q.add(k("same"));
        tokio::time::sleep(ms(7)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    q.shutdown();
    for w in workers {
        assert!(w.await.is_ok());
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    assert!(handled.load(Ordering::SeqCst) >= 2);
}

/// Real threads, real time: every key added is processed after its last add
/// (no lost wake-ups) and no key is ever held by two workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_workers_lose_nothing() {
    use std::collections::HashSet;

    let q: WorkQueue<u32> = WorkQueue::new(
        "test_concurrent",
        RetryRateLimit::default(),
        &crate::metrics::Metrics::detached(),
    );
    let held = Arc::new(parking_lot::Mutex::new(HashSet::new()));
    let overlaps = Arc::new(AtomicUsize::new(0));
    // Per key: the generation last added and the generation last seen by a
    // worker that started after that add.
    let added = Arc::new(parking_lot::Mutex::new(HashMap::<u32, u64>::new()));
    let seen = Arc::new(parking_lot::Mutex::new(HashMap::<u32, u64>::new()));
    let mut workers = Vec::new();
    for _ in 0..6 {
        let (q, held, overlaps, added, seen) = (
            q.clone(),
            held.clone(),
            overlaps.clone(),
            added.clone(),
            seen.clone(),
        );
        workers.push(tokio::spawn(async move {
            while let Some(key) = q.get().await {
                if !held.lock().insert(key) {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                let generation = added.lock().get(&key).copied().unwrap_or(0);
                tokio::task::yield_now().await;
                seen.lock().insert(key, generation);
                held.lock().remove(&key);
                q.done(&key);
            }
        }));
    }
    let producers: Vec<_> = (0..3u64)
        .map(|p| {
            let (q, added) = (q.clone(), added.clone());
            tokio::spawn(async move {
                for i in 0..3000u64 {
                    let key = u32::try_from((i * 7 + p) % 50).unwrap_or(0);
                    *added.lock().entry(key).or_insert(0) += 1;
                    q.add(key);
                    if i % 64 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    for p in producers {
        assert!(p.await.is_ok());
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let done = {
            let added = added.lock();
            let seen = seen.lock();
            added.iter().all(|(k, g)| seen.get(k) == Some(g))
        };
        if done {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "keys left unprocessed"
        );
        tokio::time::sleep(ms(5)).await;
    }
    q.shutdown();
    for w in workers {
        assert!(w.await.is_ok());
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn add_after_earliest_wins() {
    let q = queue("test_add_after");
    q.add_after(k("a"), Duration::from_secs(10));
    q.add_after(k("a"), Duration::from_secs(5));
    q.add_after(k("a"), Duration::from_secs(20));
    assert_eq!(q.scheduled_len(), 1);
    assert_eq!(q.len(), 0);

    advance(ms(4999)).await;
    assert_eq!(q.len(), 0);
    advance(ms(1)).await;
    assert_eq!(q.len(), 1);
    assert_eq!(q.scheduled_len(), 0);
    assert_eq!(get_now(&q).await.as_deref(), Some("a"));
    q.done(&k("a"));

    // The later requests were merged, not kept.
    advance(Duration::from_secs(30)).await;
    assert_eq!(q.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn add_after_zero_is_immediate() {
    let q = queue("test_add_after_zero");
    q.add_after(k("a"), Duration::ZERO);
    assert_eq!(q.len(), 1);
    assert_eq!(q.scheduled_len(), 0);
}

#[tokio::test(start_paused = true)]
async fn blocked_worker_wakes_at_fire_time() {
    let q = queue("test_wake_at");
    q.add_after(k("late"), Duration::from_secs(60));
    let start = Instant::now();
    let q2 = q.clone();
    let worker = tokio::spawn(async move { (q2.get().await, Instant::now()) });
    tokio::task::yield_now().await;
    // An earlier schedule must re-arm the sleeping worker.
    q.add_after(k("early"), Duration::from_secs(3));
    let (key, at) = match worker.await {
        Ok(v) => v,
        Err(e) => panic!("worker failed: {e}"),
    };
    assert_eq!(key.as_deref(), Some("early"));
    assert_eq!(at - start, Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn cancel_withdraws_scheduled_key() {
    let q = queue("test_cancel");
    q.add_after(k("a"), Duration::from_secs(5));
    q.add_after(k("b"), Duration::from_secs(5));
    assert!(q.cancel(&k("a")));
    assert!(!q.cancel(&k("a")));
    assert_eq!(q.scheduled_len(), 1);
    advance(Duration::from_secs(10)).await;
    assert_eq!(get_now(&q).await.as_deref(), Some("b"));
    assert!(blocks_for(&q, Duration::from_secs(10)).await);

    // A key that already fired is not withdrawn.
    q.add_after(k("c"), Duration::from_secs(1));
    advance(Duration::from_secs(1)).await;
    assert!(!q.cancel(&k("c")));
    assert_eq!(q.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn per_key_backoff_doubles_and_resets_on_forget() {
    let q = WorkQueue::new(
        "test_backoff",
        RetryRateLimit::per_key(Duration::from_secs(1), Duration::from_secs(60)),
        &crate::metrics::Metrics::detached(),
    );
    let key = k("ns/job");
    for (attempt, expect) in [1u64, 2, 4, 8].into_iter().enumerate() {
        q.add_rate_limited(key.clone());
        assert_eq!(q.num_requeues(&key) as usize, attempt + 1);
        advance(Duration::from_secs(expect) - ms(1)).await;
        assert_eq!(q.len(), 0, "attempt {attempt} fired early");
        advance(ms(1)).await;
        assert_eq!(q.len(), 1, "attempt {attempt} did not fire");
        assert_eq!(get_now(&q).await, Some(key.clone()));
        q.done(&key);
    }
    q.forget(&key);
    assert_eq!(q.num_requeues(&key), 0);
    q.add_rate_limited(key.clone());
    advance(Duration::from_secs(1)).await;
    assert_eq!(q.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn global_bucket_limits_across_keys() {
    let q = WorkQueue::new(
        "test_bucket",
        RetryRateLimit {
            base_delay: ms(1),
            max_delay: Duration::from_secs(1000),
            bucket: Some(BucketLimit { qps: 1.0, burst: 2 }),
        },
        &crate::metrics::Metrics::detached(),
    );
    for key in ["a", "b", "c", "d"] {
        q.add_rate_limited(k(key));
    }
    // Each key has failed once (1 ms backoff); the bucket lets two through.
    advance(ms(1)).await;
    assert_eq!(q.len(), 2);
    advance(ms(998)).await;
    assert_eq!(q.len(), 2);
    advance(ms(1)).await;
    assert_eq!(q.len(), 3);
    advance(Duration::from_secs(1)).await;
    assert_eq!(q.len(), 4);
    assert_eq!(q.num_requeues(&k("c")), 1);
}

#[tokio::test(start_paused = true)]
async fn shutdown_releases_workers_and_ignores_adds() {
    let q = queue("test_shutdown");
    let q2 = q.clone();
    let worker = tokio::spawn(async move { q2.get().await });
    tokio::task::yield_now().await;
    q.add_after(k("later"), Duration::from_secs(1));
    q.shutdown();
    assert!(matches!(worker.await, Ok(None)));
    assert!(q.is_shutting_down());

    q.add(k("a"));
    q.add_after(k("b"), Duration::ZERO);
    q.add_rate_limited(k("c"));
    assert_eq!(q.len(), 0);
    assert_eq!(q.scheduled_len(), 0);
    assert_eq!(q.get().await, None);
}

#[tokio::test(start_paused = true)]
async fn shutdown_with_drain_waits_for_in_flight() {
    let q = queue("test_drain");
    q.add(k("a"));
    q.add(k("b"));
    assert_eq!(get_now(&q).await.as_deref(), Some("a"));

    let q2 = q.clone();
    let drain = tokio::spawn(async move { q2.shutdown_with_drain().await });
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!drain.is_finished());
    // No new keys are handed out while draining; "b" is dropped.
    assert_eq!(q.get().await, None);

    q.done(&k("a"));
    assert!(timeout(ms(10), drain).await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn shutdown_releases_a_drain() {
    let q = queue("test_drain_abort");
    q.add(k("a"));
    assert!(get_now(&q).await.is_some());
    let q2 = q.clone();
    let drain = tokio::spawn(async move { q2.shutdown_with_drain().await });
    tokio::task::yield_now().await;
    q.shutdown();
    assert!(timeout(ms(10), drain).await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn metrics_follow_the_queue() {
    let metrics = crate::metrics::Metrics::detached();
    let q = WorkQueue::new(
        "test_metrics",
        RetryRateLimit::controller_default(),
        &metrics,
    );
    let m = &q.inner.metrics;
    q.add(k("a"));
    q.add(k("b"));
    q.add(k("a"));
    assert_eq!(m.depth.get(), 2);
    assert_eq!(m.adds.get(), 2);

    advance(Duration::from_secs(2)).await;
    let key = get_now(&q).await;
    assert_eq!(m.depth.get(), 1);
    assert_eq!(m.queue_duration.get_sample_count(), 1);
    assert!((m.queue_duration.get_sample_sum() - 2.0).abs() < 1e-9);

    advance(Duration::from_secs(3)).await;
    q.update_unfinished_work_metrics();
    assert!((m.longest_running.get() - 3.0).abs() < 1e-9);
    assert!((m.unfinished_work.get() - 3.0).abs() < 1e-9);

    if let Some(key) = key {
        q.done(&key);
    }
    assert_eq!(m.work_duration.get_sample_count(), 1);
    assert!((m.work_duration.get_sample_sum() - 3.0).abs() < 1e-9);
    q.update_unfinished_work_metrics();
    assert_eq!(m.longest_running.get(), 0.0);

    q.add_after(k("c"), Duration::from_secs(1));
    q.add_rate_limited(k("d"));
    assert_eq!(m.retries.get(), 2);

    let text = metrics.render();
    assert!(
        text.contains("workqueue_depth{name=\"test_metrics\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("workqueue_adds_total{name=\"test_metrics\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("workqueue_retries_total{name=\"test_metrics\"} 2"),
        "{text}"
    );
    assert!(
        text.contains(
            "workqueue_queue_duration_seconds_bucket{name=\"test_metrics\",le=\"1000\"} 1"
        ),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn background_tick_promotes_while_workers_are_busy() {
    let q = queue("test_tick");
    q.add_after(k("a"), Duration::from_secs(1));
    // Nobody calls get or len; the maintenance task still moves the key.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(q.inner.metrics.depth.get(), 1);
}

#[test]
fn works_without_a_runtime() {
    let q: WorkQueue<u32> = WorkQueue::new(
        "test_no_runtime",
        RetryRateLimit::default(),
        &crate::metrics::Metrics::detached(),
    );
    q.add(1);
    q.add(1);
    assert_eq!(q.len(), 1);
    assert!(!q.cancel(&2));
}

#[tokio::test(start_paused = true)]
async fn longest_waiting_is_the_age_of_the_head_of_the_ready_queue() {
    let q = queue("test_longest_waiting");
    assert_eq!(q.longest_waiting(), None);
    q.add(k("a"));
    advance(Duration::from_secs(3)).await;
    q.add(k("b"));
    assert_eq!(q.longest_waiting(), Some(Duration::from_secs(3)));
    assert_eq!(get_now(&q).await.as_deref(), Some("a"));
    assert_eq!(q.longest_waiting(), Some(Duration::ZERO), "b just arrived");
    assert_eq!(get_now(&q).await.as_deref(), Some("b"));
    assert_eq!(q.longest_waiting(), None, "keys in flight do not wait");
    // A scheduled key waits from when it became due.
    q.add_after(k("c"), Duration::from_secs(10));
    advance(Duration::from_secs(12)).await;
    assert_eq!(q.longest_waiting(), Some(Duration::from_secs(2)));
}

#[tokio::test(start_paused = true)]
async fn an_idle_queue_wakes_for_scheduled_and_processing_keys() {
    let q = queue("test_idle_wake");
    let m = &q.inner.metrics;
    // The maintenance task finds the queue idle and stops ticking.
    tokio::time::sleep(Duration::from_secs(2)).await;
    q.add_after(k("a"), Duration::from_secs(1));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(m.depth.get(), 1, "the scheduled key was promoted");
    let key = get_now(&q).await.expect("key");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        m.longest_running.get() >= 2.0,
        "the gauge follows the key being processed: {}",
        m.longest_running.get()
    );
    q.done(&key);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(m.longest_running.get(), 0.0);
}
