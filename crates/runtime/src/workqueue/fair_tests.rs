//! Tests of [`WorkQueue::fair`]: the fairness bound, and client-go's
//! semantics (dedupe, one worker per key, delays, shutdown) unchanged,
//! checked against a model over random operation sequences.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex as PMutex;
use tokio::time::{Instant, advance, timeout};

use super::ready::InFlightLimit;
use super::*;

fn fair(name: &str) -> WorkQueue<String> {
    WorkQueue::fair(
        name,
        RetryRateLimit::per_key(Duration::from_secs(1), Duration::from_secs(60)),
        namespace_lane::<String>,
        &crate::metrics::Metrics::detached(),
    )
}

async fn get_now(q: &WorkQueue<String>) -> Option<String> {
    timeout(Duration::ZERO, q.get()).await.ok().flatten()
}

/// xorshift64*: a small deterministic generator, so a failing seed can be
/// replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform enough in `0..n` (0 when `n` is 0).
    fn below(&mut self, n: usize) -> usize {
        let n = u64::try_from(n.max(1)).unwrap_or(u64::MAX);
        usize::try_from(self.next() % n).unwrap_or(0)
    }
}

/// client-go's queue as sets: what must be ready, dirty and processing.
#[derive(Default)]
struct Model {
    ready: HashSet<String>,
    dirty: HashSet<String>,
    processing: HashSet<String>,
}

impl Model {
    fn add(&mut self, k: &str) {
        if self.dirty.insert(k.to_string()) && !self.processing.contains(k) {
            self.ready.insert(k.to_string());
        }
    }

    fn got(&mut self, k: &str) {
        assert!(self.ready.remove(k), "{k} handed out but not ready");
        assert!(self.dirty.remove(k));
        assert!(
            self.processing.insert(k.to_string()),
            "{k} handed out twice"
        );
    }

    /// Keys of `lane` in flight.
    fn busy(&self, lane: &str) -> usize {
        self.processing
            .iter()
            .filter(|k| namespace_lane(*k) == lane)
            .count()
    }

    fn done(&mut self, k: &str) {
        assert!(self.processing.remove(k));
        if self.dirty.contains(k) {
            self.ready.insert(k.to_string());
        }
    }
}

/// Random adds, re-adds of keys in flight, gets (up to five in flight) and
/// dones over `floods` namespaces on `q`; at a random step one key of a
/// quiet namespace is added. After every step the queue agrees with the
/// model. Returns how many keys were handed out after the quiet key was
/// added and before it, and how many flooding namespaces there were.
async fn run_seed(q: &WorkQueue<String>, seed: u64) -> (usize, usize) {
    run_seed_limited(q, seed, None).await
}

/// [`run_seed`] on a queue with `limit` (five workers): also every key
/// handed out was admitted by the limit, and when none is, no ready key
/// was.
async fn run_seed_limited(
    q: &WorkQueue<String>,
    seed: u64,
    limit: Option<InFlightLimit>,
) -> (usize, usize) {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let floods = 1 + rng.below(8);
    let mut m = Model::default();
    let mut before_quiet = None;
    let quiet_at = 20 + rng.below(400);
    let mut since_quiet: Option<usize> = None;
    for step in 0..1500 {
        if step == quiet_at {
            q.add("quiet/j".to_string());
            m.add("quiet/j");
            since_quiet = Some(0);
        }
        match rng.below(10) {
            // Mostly adds, so the flooding lanes stay deep.
            0..=4 => {
                let k = format!("flood-{}/j{}", rng.below(floods), rng.below(300));
                q.add(k.clone());
                m.add(&k);
            }
            5 if !m.processing.is_empty() => {
                let mut held: Vec<&String> = m.processing.iter().collect();
                held.sort();
                let k = held[rng.below(held.len())].clone();
                q.add(k.clone());
                m.add(&k);
            }
            6 | 7 if !m.processing.is_empty() => {
                let mut held: Vec<&String> = m.processing.iter().collect();
                held.sort();
                let k = held[rng.below(held.len())].clone();
                q.done(&k);
                m.done(&k);
            }
            _ if m.processing.len() < 5 => match get_now(q).await {
                Some(k) => {
                    if let Some(l) = limit {
                        let busy = m.busy(namespace_lane(&k));
                        assert!(
                            l.admits(m.processing.len(), busy),
                            "seed {seed}: {k} not admitted"
                        );
                    }
                    m.got(&k);
                    if k == "quiet/j" {
                        if let Some(n) = since_quiet.take() {
                            before_quiet = Some(n);
                        }
                    } else if let Some(n) = since_quiet.as_mut() {
                        *n += 1;
                    }
                }
                None => {
                    let admitted = |k: &String| {
                        limit
                            .is_none_or(|l| l.admits(m.processing.len(), m.busy(namespace_lane(k))))
                    };
                    assert!(
                        !m.ready.iter().any(admitted),
                        "seed {seed}: nothing handed out"
                    );
                }
            },
            _ => {}
        }
        assert_eq!(q.len(), m.ready.len(), "seed {seed}, step {step}");
    }
    // Whatever is left drains, each key once.
    let mut seen = HashSet::new();
    for k in m.processing.clone() {
        q.done(&k);
        m.done(&k);
    }
    while let Some(k) = get_now(q).await {
        assert!(seen.insert(k.clone()));
        m.got(&k);
        q.done(&k);
        m.done(&k);
    }
    assert!(m.ready.is_empty() && m.dirty.is_empty());
    assert_eq!(
        q.inner.state.lock().queue.lanes(),
        0,
        "no lane outlives its keys"
    );
    let before = before_quiet.unwrap_or_else(|| panic!("seed {seed}: quiet key never handed out"));
    (before, floods)
}

#[tokio::test(start_paused = true)]
async fn model_and_fairness_bound_over_random_runs() {
    for seed in 0..200 {
        let (before, floods) = run_seed(&fair("test_fair_model"), seed).await;
        assert!(
            before <= floods,
            "seed {seed}: {before} keys handed out before the quiet one, {floods} flooding lanes"
        );
    }
}

/// The same with an in-flight limit of three plus two spares: the bound
/// holds, and so does the limit (checked on every hand-out).
#[tokio::test(start_paused = true)]
async fn model_and_fairness_bound_with_an_in_flight_limit() {
    let limit = InFlightLimit { base: 3, spare: 2 };
    for seed in 0..200 {
        let q = fair("test_fair_model_limited");
        q.limit_in_flight(limit);
        let (before, floods) = run_seed_limited(&q, seed, Some(limit)).await;
        assert!(
            before <= floods,
            "seed {seed}: {before} before, {floods} lanes"
        );
    }
}

/// The control: the same runs on client-go's FIFO queue keep the model
/// but break the bound (the quiet key waits for the flood ahead of it).
#[tokio::test(start_paused = true)]
async fn fifo_queue_breaks_the_bound() {
    let mut broken = 0;
    for seed in 0..50 {
        let q = WorkQueue::new(
            "test_fifo_model",
            RetryRateLimit::controller_default(),
            &crate::metrics::Metrics::detached(),
        );
        let (before, floods) = run_seed(&q, seed).await;
        if before > floods {
            broken += 1;
        }
    }
    assert!(
        broken > 40,
        "only {broken} of 50 runs waited longer on FIFO"
    );
}

#[tokio::test(start_paused = true)]
async fn quiet_key_overtakes_a_flood() {
    let q = fair("test_fair_overtake");
    for i in 0..1000 {
        q.add(format!("flood/j{i}"));
    }
    q.add("quiet/j".to_string());
    assert_eq!(get_now(&q).await.as_deref(), Some("flood/j0"));
    assert_eq!(get_now(&q).await.as_deref(), Some("quiet/j"));
    // Then the flood, in its order.
    for i in 1..1000 {
        assert_eq!(get_now(&q).await, Some(format!("flood/j{i}")));
    }
    assert_eq!(get_now(&q).await, None);
}

/// Workers with real (paused) sleeps: a 1,000-key flood of 10 ms syncs on
/// four workers, then one quiet key. On the fair queue the quiet key starts
/// within one sync's time; on client-go's FIFO queue (the control: the
/// test can tell the two apart) it waits for the flood, ~2.5 s.
#[tokio::test(start_paused = true)]
async fn quiet_key_waits_one_sync_not_the_flood() {
    async fn quiet_start(q: WorkQueue<String>) -> Duration {
        let started: Arc<PMutex<Option<Instant>>> = Arc::default();
        let mut workers = Vec::new();
        for _ in 0..4 {
            let (q, started) = (q.clone(), Arc::clone(&started));
            workers.push(tokio::spawn(async move {
                while let Some(k) = q.get().await {
                    if k == "quiet/j" {
                        *started.lock() = Some(Instant::now());
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    q.done(&k);
                }
            }));
        }
        for i in 0..1000 {
            q.add(format!("flood/j{i}"));
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
        let t0 = Instant::now();
        q.add("quiet/j".to_string());
        while started.lock().is_none() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        q.shutdown();
        for w in workers {
            assert!(w.await.is_ok());
        }
        started.lock().map_or(Duration::MAX, |s| s - t0)
    }
    let fair_wait = quiet_start(fair("test_fair_workers")).await;
    let fifo_wait = quiet_start(WorkQueue::new(
        "test_fifo_workers",
        RetryRateLimit::per_key(Duration::from_secs(1), Duration::from_secs(60)),
        &crate::metrics::Metrics::detached(),
    ))
    .await;
    assert!(
        fair_wait <= Duration::from_millis(10),
        "fair: {fair_wait:?}"
    );
    assert!(fifo_wait >= Duration::from_secs(2), "fifo: {fifo_wait:?}");
}

#[tokio::test(start_paused = true)]
async fn delayed_and_rate_limited_adds_join_their_lane() {
    let q = fair("test_fair_delayed");
    for i in 0..3 {
        q.add(format!("a/j{i}"));
    }
    q.add_after("b/j0".to_string(), Duration::from_secs(5));
    q.add_rate_limited("c/j0".to_string());
    assert_eq!(q.scheduled_len(), 2);
    advance(Duration::from_secs(1)).await;
    // c's 1 s back-off is over; b is still scheduled.
    assert_eq!(get_now(&q).await.as_deref(), Some("a/j0"));
    assert_eq!(get_now(&q).await.as_deref(), Some("c/j0"));
    advance(Duration::from_secs(4)).await;
    assert_eq!(get_now(&q).await.as_deref(), Some("a/j1"));
    assert_eq!(get_now(&q).await.as_deref(), Some("b/j0"));
    assert_eq!(get_now(&q).await.as_deref(), Some("a/j2"));
}

#[tokio::test(start_paused = true)]
async fn a_key_in_flight_is_requeued_in_its_lane_on_done() {
    let q = fair("test_fair_in_flight");
    q.add("a/x".to_string());
    assert_eq!(get_now(&q).await.as_deref(), Some("a/x"));
    // Re-added twice while processing: dirty, not ready.
    q.add("a/x".to_string());
    q.add("a/x".to_string());
    q.add("b/y".to_string());
    assert_eq!(q.len(), 1);
    assert_eq!(get_now(&q).await.as_deref(), Some("b/y"));
    assert_eq!(get_now(&q).await, None);
    q.done(&"a/x".to_string());
    assert_eq!(get_now(&q).await.as_deref(), Some("a/x"));
    assert_eq!(get_now(&q).await, None);
}

#[tokio::test(start_paused = true)]
async fn longest_waiting_is_the_oldest_lane_head() {
    let q = fair("test_fair_longest");
    assert_eq!(q.longest_waiting(), None);
    q.add("a/1".to_string());
    advance(Duration::from_secs(3)).await;
    q.add("b/1".to_string());
    q.add("a/2".to_string());
    advance(Duration::from_secs(1)).await;
    assert_eq!(q.longest_waiting(), Some(Duration::from_secs(4)));
    assert_eq!(get_now(&q).await.as_deref(), Some("a/1"));
    // Heads now: b/1 and a/2, both added 1 s ago.
    assert_eq!(q.longest_waiting(), Some(Duration::from_secs(1)));
}

/// A tenant with many namespaces: lanes are as many as namespaces with
/// ready keys, and none is kept once its keys are handed out or the queue
/// stops.
#[tokio::test(start_paused = true)]
async fn lanes_are_bounded_by_ready_keys() {
    let q = fair("test_fair_lanes");
    for i in 0..10_000 {
        q.add(format!("ns-{i}/j"));
    }
    assert_eq!(q.inner.state.lock().queue.lanes(), 10_000);
    let mut handed = HashMap::new();
    for _ in 0..5_000 {
        let k = get_now(&q).await.unwrap_or_default();
        *handed.entry(k.clone()).or_insert(0) += 1;
        q.done(&k);
    }
    assert_eq!(handed.len(), 5_000);
    assert_eq!(q.inner.state.lock().queue.lanes(), 5_000);
    q.shutdown();
    assert_eq!(q.inner.state.lock().queue.lanes(), 0);
    assert_eq!(q.len(), 0);
    q.add("late/j".to_string());
    assert_eq!(
        q.inner.state.lock().queue.lanes(),
        0,
        "ignored after shutdown"
    );
}

fn limited(name: &str, base: usize, spare: usize) -> WorkQueue<String> {
    let q = fair(name);
    q.limit_in_flight(InFlightLimit { base, spare });
    q
}

#[tokio::test(start_paused = true)]
async fn one_lane_holds_at_most_base_and_spares_go_to_idle_lanes() {
    let q = limited("test_fair_limit", 2, 2);
    for i in 0..5 {
        q.add(format!("a/j{i}"));
    }
    assert_eq!(get_now(&q).await.as_deref(), Some("a/j0"));
    assert_eq!(get_now(&q).await.as_deref(), Some("a/j1"));
    // Lane a holds the two base workers: its other keys wait, as upstream
    // with two workers.
    assert_eq!(get_now(&q).await, None);
    assert_eq!(q.len(), 3);
    // A lane with nothing in flight takes a spare, once.
    q.add("b/j0".to_string());
    q.add("b/j1".to_string());
    assert_eq!(get_now(&q).await.as_deref(), Some("b/j0"));
    assert_eq!(get_now(&q).await, None);
    q.add("c/j0".to_string());
    assert_eq!(get_now(&q).await.as_deref(), Some("c/j0"));
    // Base and spares all held.
    q.add("d/j0".to_string());
    assert_eq!(get_now(&q).await, None);
    // One done: four in flight is under base + spare, and d has none.
    q.done(&"a/j0".to_string());
    assert_eq!(get_now(&q).await.as_deref(), Some("d/j0"));
    assert_eq!(get_now(&q).await, None);
    // Three more done, one left in flight: under base, so the lane whose
    // turn it is (a), then a spare for b, which has none in flight again.
    for k in ["c/j0", "d/j0", "b/j0"] {
        q.done(&k.to_string());
    }
    assert_eq!(get_now(&q).await.as_deref(), Some("a/j2"));
    assert_eq!(get_now(&q).await.as_deref(), Some("b/j1"));
    assert_eq!(get_now(&q).await, None);
    for k in ["a/j1", "a/j2", "b/j1"] {
        q.done(&k.to_string());
    }
    assert!(q.inner.state.lock().processing.is_empty());
    match &q.inner.state.lock().queue {
        ready::Ready::Fair(l) => {
            assert!(l.busy_lanes() == 0, "in-flight counts outlived their keys")
        }
        ready::Ready::Fifo(_) => unreachable!(),
    }
}

/// Workers blocked while every ready key is held back by the limit wake
/// when a key is done.
#[tokio::test(start_paused = true)]
async fn a_held_back_key_starts_when_a_worker_frees() {
    let q = limited("test_fair_limit_wake", 1, 0);
    q.add("a/j0".to_string());
    q.add("a/j1".to_string());
    assert_eq!(get_now(&q).await.as_deref(), Some("a/j0"));
    let q2 = q.clone();
    let waiter = tokio::spawn(async move { q2.get().await });
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!waiter.is_finished());
    q.done(&"a/j0".to_string());
    let got = timeout(Duration::from_millis(10), waiter).await;
    assert!(matches!(got, Ok(Ok(Some(ref k))) if k == "a/j1"), "{got:?}");
}

/// Scenario B of docs/fair-share.md: five workers held by one lane's long
/// syncs. Without spares the quiet key waits for one of them to end; with
/// five spares it starts at once, and the flood still gets only five.
#[tokio::test(start_paused = true)]
async fn spare_workers_start_a_quiet_key_while_long_syncs_hold_the_base() {
    async fn quiet_start(q: WorkQueue<String>, workers: usize) -> (Duration, usize) {
        let started: Arc<PMutex<Option<Instant>>> = Arc::default();
        let flood_busy = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..workers {
            let (q, started, busy, most) = (
                q.clone(),
                Arc::clone(&started),
                Arc::clone(&flood_busy),
                Arc::clone(&most),
            );
            tasks.push(tokio::spawn(async move {
                use std::sync::atomic::Ordering::SeqCst;
                while let Some(k) = q.get().await {
                    if k == "quiet/j" {
                        *started.lock() = Some(Instant::now());
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    } else {
                        let now = busy.fetch_add(1, SeqCst) + 1;
                        most.fetch_max(now, SeqCst);
                        tokio::time::sleep(Duration::from_secs(60)).await;
                        busy.fetch_sub(1, SeqCst);
                    }
                    q.done(&k);
                }
            }));
        }
        for i in 0..20 {
            q.add(format!("flood/j{i}"));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let t0 = Instant::now();
        q.add("quiet/j".to_string());
        while started.lock().is_none() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        q.shutdown();
        for t in tasks {
            t.abort();
        }
        let waited = started.lock().map_or(Duration::MAX, |s| s - t0);
        (waited, most.load(std::sync::atomic::Ordering::SeqCst))
    }
    let (without, _) = quiet_start(limited("test_fair_spares_off", 5, 0), 5).await;
    let (with, flood_most) = quiet_start(limited("test_fair_spares_on", 5, 5), 10).await;
    assert!(
        without >= Duration::from_secs(58),
        "without spares: {without:?}"
    );
    assert!(with <= Duration::from_millis(1), "with spares: {with:?}");
    assert_eq!(flood_most, 5, "one lane never holds more than base workers");
}
