//! The host under paused tokio time: retries, timeouts, panics and health.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use http::{Request, Response};
use kcm_pod::CachedPod;
use kube::client::Body;
use parking_lot::Mutex;
use tokio::sync::Semaphore;
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;
use tower::BoxError;

use super::*;
use crate::informer::{Change, Informer};
use crate::workqueue::{RetryRateLimit, WorkQueue};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn host(name: &'static str, sync_timeout: Duration, stall_timeout: Duration) -> Host {
    Host::with_settings(
        name,
        HostSettings {
            sync_timeout,
            stall_timeout,
        },
    )
}

/// A queue retrying after 1 s, 2 s, 4 s, ... (no global bucket).
fn queue(name: &str) -> WorkQueue<String> {
    WorkQueue::new(
        name,
        RetryRateLimit::per_key(secs(1), secs(60)),
        &crate::metrics::Metrics::detached(),
    )
}

type Log = Arc<Mutex<Vec<(String, Duration)>>>;

fn attempts(log: &Log, key: &str) -> Vec<Duration> {
    log.lock()
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, at)| *at)
        .collect()
}

async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

/// Sets a flag when dropped: shows a cancelled sync was dropped.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test(start_paused = true)]
async fn a_panicking_sync_is_retried_with_back_off_and_counted_while_others_proceed() {
    let host = host("test-panics", secs(60), secs(120));
    let q = queue("test_host_panics");
    let log: Log = Arc::default();
    let t0 = Instant::now();
    let seen = Arc::clone(&log);
    let sync = move |key: String| {
        let seen = Arc::clone(&seen);
        async move {
            seen.lock().push((key.clone(), t0.elapsed()));
            assert!(key != "bad", "boom on {key}");
            Ok::<(), String>(())
        }
    };
    for k in ["bad", "a", "b"] {
        q.add(k.to_string());
    }
    let stop = CancellationToken::new();
    let workers = tokio::spawn(host.workers(&q, "thing").run(sync, stop.clone()));
    sleep(Duration::from_millis(3500)).await;

    // Retried after 1 s, then 2 s more: the queue's per-key back-off.
    assert_eq!(
        attempts(&log, "bad"),
        [secs(0), secs(1), secs(3)],
        "{:?}",
        log.lock()
    );
    assert_eq!(attempts(&log, "a"), [secs(0)]);
    assert_eq!(attempts(&log, "b"), [secs(0)]);
    assert_eq!(q.num_requeues(&"bad".to_string()), 3);
    assert_eq!(host.inner.metrics.panics.get(), 3);
    assert!(host.health().ok(), "{:?}", host.health().reason());

    // New keys still get a worker.
    q.add("c".to_string());
    settle().await;
    assert_eq!(attempts(&log, "c"), [Duration::from_millis(3500)]);
    stop.cancel();
    workers.await.expect("the workers end cleanly");
}

#[tokio::test(start_paused = true)]
async fn a_sync_over_the_bound_is_cancelled_and_requeued() {
    let host = host("test-timeouts", secs(10), secs(60));
    let q = queue("test_host_timeouts");
    let log: Log = Arc::default();
    let dropped = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let (seen, flag) = (Arc::clone(&log), Arc::clone(&dropped));
    let sync = move |key: String| {
        let (seen, flag) = (Arc::clone(&seen), Arc::clone(&flag));
        async move {
            let first = attempts(&seen, &key).is_empty();
            seen.lock().push((key.clone(), t0.elapsed()));
            if key == "slow" && first {
                let _guard = DropFlag(flag);
                sleep(secs(3600)).await;
            }
            Ok::<(), String>(())
        }
    };
    q.add("slow".to_string());
    q.add("fast".to_string());
    let stop = CancellationToken::new();
    let workers = tokio::spawn(host.workers(&q, "thing").count(2).run(sync, stop.clone()));

    sleep(Duration::from_millis(9900)).await;
    assert_eq!(
        attempts(&log, "fast"),
        [secs(0)],
        "not held up by the slow one"
    );
    assert!(!dropped.load(Ordering::SeqCst));
    assert_eq!(host.inner.metrics.timeouts.get(), 0);

    sleep(Duration::from_millis(1600)).await;
    assert!(dropped.load(Ordering::SeqCst), "the slow sync was dropped");
    assert_eq!(host.inner.metrics.timeouts.get(), 1);
    // Cancelled at 10 s, retried after the 1 s back-off, then done.
    assert_eq!(attempts(&log, "slow"), [secs(0), secs(11)]);
    assert_eq!(
        q.num_requeues(&"slow".to_string()),
        0,
        "forgotten on success"
    );
    stop.cancel();
    workers.await.expect("the workers end cleanly");
}

#[tokio::test(start_paused = true)]
async fn a_stuck_sync_turns_health_unhealthy_until_it_finishes() {
    let host = host("test-stuck", secs(3600), secs(30));
    let q = queue("test_host_stuck");
    let gate = Arc::new(Semaphore::new(0));
    let g = Arc::clone(&gate);
    let sync = move |_key: String| {
        let g = Arc::clone(&g);
        async move {
            let _permit = g.acquire().await;
            Ok::<(), String>(())
        }
    };
    let health = host.health();
    q.add("stuck".to_string());
    let stop = CancellationToken::new();
    let workers = tokio::spawn(host.workers(&q, "thing").run(sync, stop.clone()));

    sleep(secs(29)).await;
    assert!(health.ok(), "{:?}", health.reason());
    sleep(secs(2)).await;
    let reason = health.reason().expect("unhealthy after the stall bound");
    assert_eq!(
        reason,
        "queue \"test_host_stuck\": sync of \"stuck\" has not finished or progressed for 31s \
         (stall bound 30s)"
    );

    gate.add_permits(1);
    settle().await;
    assert!(health.ok(), "healthy again: {:?}", health.reason());
    stop.cancel();
    workers.await.expect("the workers end cleanly");
}

#[tokio::test(start_paused = true)]
async fn keys_waiting_with_no_sync_finishing_turn_health_unhealthy_until_one_does() {
    // Every sync hangs and is cut at 10 s: no single sync runs past the
    // 30 s stall bound, but nothing finishes while keys pile up.
    let host = host("test-no-progress", secs(10), secs(30));
    let q = queue("test_host_no_progress");
    let working = Arc::new(AtomicBool::new(false));
    let w = Arc::clone(&working);
    let sync = move |_key: String| {
        let w = Arc::clone(&w);
        async move {
            if !w.load(Ordering::SeqCst) {
                futures::future::pending::<()>().await;
            }
            Ok::<(), String>(())
        }
    };
    let health = host.health();
    for i in 0..5 {
        q.add(format!("k{i}"));
    }
    let stop = CancellationToken::new();
    let workers = tokio::spawn(host.workers(&q, "thing").run(sync, stop.clone()));

    sleep(secs(29)).await;
    assert!(health.ok(), "{:?}", health.reason());
    sleep(secs(6)).await;
    let reason = health.reason().expect("unhealthy: no progress");
    assert_eq!(
        reason,
        "queue \"test_host_no_progress\": no sync finished for 35s while keys wait (the oldest \
         for 35s; stall bound 30s)"
    );
    assert_eq!(host.inner.metrics.timeouts.get(), 3);

    // Syncs work again: the one in flight is still cut at 40 s, the next
    // one finishes.
    working.store(true, Ordering::SeqCst);
    sleep(secs(4)).await;
    assert!(health.reason().is_some());
    sleep(secs(2)).await;
    assert!(health.ok(), "healthy again: {:?}", health.reason());
    stop.cancel();
    workers.await.expect("the workers end cleanly");
}

#[tokio::test(start_paused = true)]
async fn a_periodic_pass_is_bounded_by_its_progress_not_its_length() {
    let host = host("test-periodic", secs(10), secs(30));
    let health = host.health();
    let passes = Arc::new(AtomicUsize::new(0));
    let ended: Log = Arc::default();
    let t0 = Instant::now();
    let (n, log) = (Arc::clone(&passes), Arc::clone(&ended));
    let pass = move |progress: Progress| {
        let (n, log) = (Arc::clone(&n), Arc::clone(&log));
        async move {
            let i = n.fetch_add(1, Ordering::SeqCst);
            match i {
                // 60 s long, ticking every 5 s: never cut.
                0 => {
                    for _ in 0..12 {
                        sleep(secs(5)).await;
                        progress.tick();
                    }
                }
                1 => panic!("pass {i} panics"),
                2 => futures::future::pending::<()>().await,
                _ => {}
            }
            log.lock().push((format!("pass {i}"), t0.elapsed()));
        }
    };
    let stop = CancellationToken::new();
    let h = host.clone();
    let s = stop.clone();
    let runner = tokio::spawn(async move {
        h.run_periodic("pod GC", secs(20), || tracing::info_span!("pass"), pass, &s)
            .await;
    });
    sleep(secs(40)).await;
    assert!(
        health.ok(),
        "a moving pass is healthy: {:?}",
        health.reason()
    );
    // Pass 0 ends at 60 s, 1 panics at 80 s, 2 hangs from 100 s and is cut
    // at 110 s, 3 runs at 130 s.
    sleep(secs(65)).await;
    assert!(health.ok(), "{:?}", health.reason());
    sleep(secs(30)).await;
    assert_eq!(
        *ended.lock(),
        [
            ("pass 0".to_string(), secs(60)),
            ("pass 3".to_string(), secs(130))
        ]
    );
    assert_eq!(host.inner.metrics.panics.get(), 1);
    assert_eq!(host.inner.metrics.timeouts.get(), 1);
    stop.cancel();
    runner.await.expect("the loop ends on stop");
}

#[tokio::test(start_paused = true)]
async fn a_run_task_ending_before_stop_is_unhealthy() {
    let host = host("test-run-ends", secs(10), secs(30));
    let stop = CancellationToken::new();
    let started = host.start(async {}, stop.clone());
    started.run.await;
    assert_eq!(
        started.health.reason().as_deref(),
        Some("controller stopped: its workers ended")
    );

    let host = Host::with_settings("test-run-stops", HostSettings::default());
    let stop = CancellationToken::new();
    let s = stop.clone();
    let started = host.start(async move { s.cancelled().await }, stop.clone());
    stop.cancel();
    started.run.await;
    assert!(started.health.ok(), "{:?}", started.health.reason());
}

/// A client whose pod list holds one pod and whose watches never answer.
fn list_one_pod_client() -> kube::Client {
    let svc = tower::service_fn(|req: Request<Body>| async move {
        if req.uri().query().unwrap_or_default().contains("watch=true") {
            futures::future::pending::<()>().await;
        }
        let list = serde_json::json!({
            "apiVersion": "v1", "kind": "PodList", "metadata": { "resourceVersion": "7" },
            "items": [{ "metadata": { "name": "p", "namespace": "ns", "resourceVersion": "7" } }],
        });
        let res = Response::builder()
            .status(200)
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(&list)?))?;
        Ok::<_, BoxError>(res)
    });
    kube::Client::new(svc, "default")
}

fn start_informer(
    inf: &Arc<Informer<CachedPod>>,
    stop: &CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let api = kube::Api::all(list_one_pod_client());
    let config = kube::runtime::watcher::Config::default().any_semantic();
    tokio::spawn(Arc::clone(inf).run(api, config, stop.clone()))
}

#[tokio::test]
async fn waits_for_its_informers_and_fails_when_one_stops() {
    let host = host("test-informers", secs(10), secs(30));
    let pods = Arc::new(Informer::<CachedPod>::new());
    host.track(&pods);
    let stop = CancellationToken::new();
    let watch = start_informer(&pods, &stop);
    assert!(host.wait_for_sync(&stop).await);
    assert!(pods.store().get("ns/p").is_some());
    assert!(host.health().ok(), "{:?}", host.health().reason());
    // Stopped on request (shutdown): not a failure.
    stop.cancel();
    watch.await.expect("the watch ends");
    assert!(host.health().ok(), "{:?}", host.health().reason());

    // A handler panics: the watch task dies with it.
    let host = Host::with_settings("test-informer-dies", HostSettings::default());
    let pods = Arc::new(Informer::<CachedPod>::new());
    pods.add_handler(Arc::new(|c: &Change<CachedPod>| {
        panic!("handler fails on {}", c.key())
    }));
    host.track(&pods);
    let stop = CancellationToken::new();
    let watch = start_informer(&pods, &stop);
    assert!(watch.await.is_err(), "the watch task panicked");
    assert!(pods.watch_ended());
    assert_eq!(
        host.health().reason().as_deref(),
        Some("informer Pod stopped: its watch ended")
    );
}

#[tokio::test(start_paused = true)]
async fn wait_for_sync_gives_up_on_stop() {
    let host = host("test-sync-stop", secs(10), secs(30));
    let pods = Arc::new(Informer::<CachedPod>::new());
    host.track(&pods);
    let stop = CancellationToken::new();
    let s = stop.clone();
    tokio::spawn(async move {
        sleep(secs(5)).await;
        s.cancel();
    });
    assert!(!host.wait_for_sync(&stop).await, "never synced: stop wins");
}

#[test]
fn settings_default_and_durations_print_as_go() {
    let d = HostSettings::default();
    assert_eq!(d.sync_timeout, secs(300));
    assert_eq!(d.stall_timeout, secs(360));
    assert_eq!(health::fmt_duration(Duration::from_millis(250)), "250ms");
    assert_eq!(health::fmt_duration(secs(8)), "8s");
    assert_eq!(health::fmt_duration(Duration::from_millis(5240)), "5.2s");
    assert_eq!(health::fmt_duration(secs(360)), "6m0s");
    assert_eq!(health::fmt_duration(secs(3725)), "1h2m5s");
}
