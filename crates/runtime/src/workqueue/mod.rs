//! A keyed work queue with client-go semantics (`util/workqueue`): event
//! handlers add keys, a pool of workers takes them one at a time.
//!
//! * A key waiting in the queue is held once, however often it is added.
//! * A key a worker is processing is never handed to a second worker; adding
//!   it meanwhile marks it dirty and it is queued again on [`WorkQueue::done`].
//! * [`WorkQueue::add_after`] schedules a key; when the same key is scheduled
//!   twice the earlier time wins. Unlike client-go a scheduled key can be
//!   withdrawn with [`WorkQueue::cancel`] (taint eviction needs it).
//! * [`WorkQueue::add_rate_limited`] schedules a retry after the key's
//!   exponential backoff or the queue's token bucket, whichever is longer.
//! * The `workqueue_*` metrics are kept under the queue's name.
//! * Beyond client-go, a queue built with [`WorkQueue::fair`] hands out
//!   ready keys by lane (a namespace) in turns, FIFO within a lane, so one
//!   namespace's burst cannot hold back another namespace's keys (see
//!   `ready.rs` and `docs/fair-share.md`); everything above holds as is.
//!
//! Time comes from `tokio::time`, so tests drive it with `tokio::time::pause`
//! and `advance`.

#[cfg(test)]
mod fair_tests;
mod metrics;
mod rate_limit;
pub(crate) mod ready;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::Hash;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

pub use rate_limit::{BucketLimit, RetryRateLimit};
pub use ready::{InFlightLimit, LaneFn, namespace_lane};

pub(crate) use metrics::Families;
use metrics::QueueMetrics;

use crate::metrics::Metrics;
use rate_limit::RetryRateLimiter;
use ready::Ready;

/// How often the unfinished-work gauges are refreshed (client-go's
/// `defaultUnfinishedWorkUpdatePeriod`). The same tick also moves due
/// scheduled keys into the queue while every worker is busy, so
/// `workqueue_depth` never lags by more than this. An idle queue (nothing
/// processing, nothing scheduled) does not tick: its gauges are 0 and stay
/// so until a worker takes a key or a key is scheduled, which wakes it
/// (client-go ticks regardless; with eight queues that was most of an idle
/// kcm-rs's wake-ups).
const MAINTENANCE_PERIOD: Duration = Duration::from_millis(500);

/// Longer delays are clamped to this (about 30 years) so the fire time
/// cannot overflow `Instant`.
const MAX_DELAY: Duration = Duration::from_secs(30 * 365 * 86_400);

/// A keyed work queue shared by event handlers and workers; cloning is cheap
/// and every clone is the same queue.
///
/// Workers loop on [`get`](Self::get), process the key, then call
/// [`done`](Self::done) — always, also on failure, or the key is never handed
/// out again. On failure they call [`add_rate_limited`](Self::add_rate_limited),
/// on success [`forget`](Self::forget).
pub struct WorkQueue<K> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K> fmt::Debug for WorkQueue<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkQueue")
            .field("name", &self.inner.name)
            .finish_non_exhaustive()
    }
}

struct Inner<K> {
    name: String,
    state: Mutex<State<K>>,
    /// Wakes workers blocked in `get`: a key was queued, the schedule moved
    /// earlier, or the queue shut down.
    ready: Notify,
    /// Wakes `shutdown_with_drain` when the last in-flight key is done.
    idle: Notify,
    /// Wakes an idle maintenance task: a worker took a key, a key was
    /// scheduled, or the queue was dropped.
    busy: Arc<Notify>,
    metrics: QueueMetrics,
}

struct State<K> {
    /// Keys ready for a worker, in hand-out order (arrival order, or lanes
    /// in turns). Each is also in `dirty` and never in `processing`.
    queue: Ready<K>,
    /// Keys that need processing, with the time they were first added (for
    /// `workqueue_queue_duration_seconds`). A key both here and in
    /// `processing` is re-queued on `done`.
    dirty: HashMap<K, Instant>,
    /// Keys handed to a worker, with the time they were handed out.
    processing: HashMap<K, Instant>,
    /// Scheduled keys by fire time; the sequence number makes slots unique.
    waiting: BTreeMap<(Instant, u64), K>,
    /// The slot of each scheduled key, so re-scheduling and cancelling find it.
    waiting_at: HashMap<K, (Instant, u64)>,
    seq: u64,
    limiter: RetryRateLimiter<K>,
    shutting_down: bool,
    /// Set by `shutdown_with_drain`, cleared by `shutdown` to stop waiting.
    drain: bool,
}

impl<K: Clone + Eq + Hash> State<K> {
    /// Marks `key` as needing processing. Returns true when it was pushed to
    /// the ready queue (a worker should be woken).
    fn insert(&mut self, key: K, added_at: Instant, m: &QueueMetrics) -> bool {
        if self.shutting_down || self.dirty.contains_key(&key) {
            return false;
        }
        m.adds.inc();
        let in_flight = self.processing.contains_key(&key);
        if !in_flight {
            self.queue.push_back(key.clone());
        }
        self.dirty.insert(key, added_at);
        self.update_depth(m);
        !in_flight
    }

    /// Schedules `key` for `at` unless it is already scheduled no later.
    /// Returns true when the schedule changed.
    fn schedule(&mut self, key: K, at: Instant) -> bool {
        if let Some(&slot) = self.waiting_at.get(&key) {
            if slot.0 <= at {
                return false;
            }
            self.waiting.remove(&slot);
        }
        self.seq = self.seq.wrapping_add(1);
        let slot = (at, self.seq);
        self.waiting.insert(slot, key.clone());
        self.waiting_at.insert(key, slot);
        true
    }

    /// Moves every scheduled key whose time has come into the queue; returns
    /// how many were pushed.
    fn promote_due(&mut self, now: Instant, m: &QueueMetrics) -> usize {
        let mut pushed = 0;
        while let Some(entry) = self.waiting.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let ((at, _), key) = entry.remove_entry();
            self.waiting_at.remove(&key);
            // Queue time counts from when the key became due, not from when
            // it was noticed, as if a timer had fired exactly on time.
            if self.insert(key, at, m) {
                pushed += 1;
            }
        }
        pushed
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.waiting.first_key_value().map(|((at, _), _)| *at)
    }

    fn update_depth(&self, m: &QueueMetrics) {
        m.depth
            .set(i64::try_from(self.dirty.len()).unwrap_or(i64::MAX));
    }

    fn update_unfinished(&self, now: Instant, m: &QueueMetrics) {
        let (total, longest) = self
            .processing
            .values()
            .map(|start| now.saturating_duration_since(*start).as_secs_f64())
            .fold((0.0, 0.0), |(t, l): (f64, f64), age| (t + age, l.max(age)));
        m.unfinished_work.set(total);
        m.longest_running.set(longest);
    }
}

impl<K> WorkQueue<K>
where
    K: Clone + Eq + Hash + Send + Sync + 'static,
{
    /// Creates a queue whose `workqueue_*` series (of `metrics`) carry
    /// `name` as the `name` label and whose retries follow `rate_limit`.
    ///
    /// Inside a tokio runtime this also starts a small background task
    /// (ending when the last handle is dropped or the queue shuts down) that
    /// refreshes the unfinished-work gauges; without a runtime those gauges
    /// only move on [`update_unfinished_work_metrics`](Self::update_unfinished_work_metrics).
    pub fn new(name: &str, rate_limit: RetryRateLimit, metrics: &Metrics) -> Self {
        Self::build(name, rate_limit, Ready::fifo(), metrics)
    }

    /// Like [`new`](Self::new), but ready keys are handed out by lane in
    /// turns (one key of each lane with ready keys, round-robin; FIFO
    /// within a lane), `lane` naming a key's lane, e.g. [`namespace_lane`].
    /// A key that becomes ready in a lane with nothing else ready is handed
    /// out after at most one key of every other lane. Dedupe, one worker
    /// per key, delays, back-off, shutdown and metrics are those of `new`.
    pub fn fair(
        name: &str,
        rate_limit: RetryRateLimit,
        lane: LaneFn<K>,
        metrics: &Metrics,
    ) -> Self {
        Self::build(name, rate_limit, Ready::fair(lane), metrics)
    }

    /// Limits how many keys of a fair queue are in flight at once (no
    /// effect on a FIFO queue): `limit.base` from any lanes, and up to
    /// `limit.spare` more, each of a lane with no other key in flight. Run
    /// `base + spare` workers: one lane then never holds more than `base`
    /// of them, and a lane that has none in flight starts a key at once
    /// unless `spare` other lanes already hold a spare worker each.
    pub fn limit_in_flight(&self, limit: InFlightLimit) {
        self.inner.state.lock().queue.set_limit(limit);
    }

    fn build(name: &str, rate_limit: RetryRateLimit, ready: Ready<K>, metrics: &Metrics) -> Self {
        let now = Instant::now();
        let inner = Arc::new(Inner {
            name: name.to_owned(),
            state: Mutex::new(State {
                queue: ready,
                dirty: HashMap::new(),
                processing: HashMap::new(),
                waiting: BTreeMap::new(),
                waiting_at: HashMap::new(),
                seq: 0,
                limiter: RetryRateLimiter::new(rate_limit, now),
                shutting_down: false,
                drain: false,
            }),
            ready: Notify::new(),
            idle: Notify::new(),
            busy: Arc::new(Notify::new()),
            metrics: QueueMetrics::new(&metrics.workqueue, name),
        });
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(maintain(Arc::downgrade(&inner), Arc::clone(&inner.busy)));
        }
        Self { inner }
    }

    /// The queue's name, as used in the metric label.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Marks `key` as needing processing. A key already waiting is not added
    /// twice; a key being processed is queued again once it is done. Ignored
    /// after shutdown.
    pub fn add(&self, key: K) {
        let pushed = self
            .inner
            .state
            .lock()
            .insert(key, Instant::now(), &self.inner.metrics);
        if pushed {
            self.inner.ready.notify_one();
        }
    }

    /// Adds `key` once `delay` has passed (at once when `delay` is zero). If
    /// the key is already scheduled the earlier time wins. Every call counts
    /// in `workqueue_retries_total`, as in client-go. Ignored after shutdown.
    pub fn add_after(&self, key: K, delay: Duration) {
        let mut st = self.inner.state.lock();
        self.add_after_locked(&mut st, key, delay);
    }

    /// Adds `key` after its rate-limited delay: the larger of its exponential
    /// backoff (which grows with every call until [`forget`](Self::forget))
    /// and the wait for a token of the shared bucket.
    pub fn add_rate_limited(&self, key: K) {
        let mut st = self.inner.state.lock();
        if st.shutting_down {
            return;
        }
        let delay = st.limiter.when(&key, Instant::now());
        self.add_after_locked(&mut st, key, delay);
    }

    fn add_after_locked(&self, st: &mut State<K>, key: K, delay: Duration) {
        if st.shutting_down {
            return;
        }
        let m = &self.inner.metrics;
        m.retries.inc();
        let now = Instant::now();
        if delay.is_zero() {
            if st.insert(key, now, m) {
                self.inner.ready.notify_one();
            }
            return;
        }
        let at = now.checked_add(delay.min(MAX_DELAY)).unwrap_or(now);
        if st.schedule(key, at) {
            // A worker sleeping until a later deadline must re-arm its timer.
            self.inner.ready.notify_one();
            self.inner.busy.notify_one();
        }
    }

    /// Withdraws a scheduled key that has not fired yet; returns whether one
    /// was withdrawn. Keys already in the queue or being processed are not
    /// affected.
    pub fn cancel(&self, key: &K) -> bool {
        let mut st = self.inner.state.lock();
        let pushed = st.promote_due(Instant::now(), &self.inner.metrics);
        let removed = match st.waiting_at.remove(key) {
            Some(slot) => st.waiting.remove(&slot).is_some(),
            None => false,
        };
        drop(st);
        self.wake(pushed);
        removed
    }

    /// Waits for a key to process. Returns `None` once the queue is shut
    /// down; the caller must pass every returned key to [`done`](Self::done).
    pub async fn get(&self) -> Option<K> {
        loop {
            // Register for wake-ups before looking, so a key added between
            // the look and the wait is not missed.
            let notified = self.inner.ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();

            let deadline = {
                let mut st = self.inner.state.lock();
                if st.shutting_down {
                    return None;
                }
                let now = Instant::now();
                let m = &self.inner.metrics;
                let pushed = st.promote_due(now, m);
                let in_flight = st.processing.len();
                if let Some(key) = st.queue.pop_front(in_flight) {
                    if let Some(added) = st.dirty.remove(&key) {
                        m.queue_duration
                            .observe(now.saturating_duration_since(added).as_secs_f64());
                    }
                    st.update_depth(m);
                    st.processing.insert(key.clone(), now);
                    drop(st);
                    self.inner.busy.notify_one();
                    // This worker takes one; others may take the rest.
                    self.wake(pushed.saturating_sub(1));
                    return Some(key);
                }
                st.next_deadline()
            };
            match deadline {
                Some(at) => {
                    tokio::select! {
                        () = &mut notified => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Marks `key` as finished. If it was added again while being processed
    /// it is queued again now.
    pub fn done(&self, key: &K) {
        let mut st = self.inner.state.lock();
        let Some(started) = st.processing.remove(key) else {
            return;
        };
        st.queue.finished(key);
        let now = Instant::now();
        self.inner
            .metrics
            .work_duration
            .observe(now.saturating_duration_since(started).as_secs_f64());
        let requeue = st.dirty.contains_key(key) && !st.shutting_down;
        if requeue {
            st.queue.push_back(key.clone());
        }
        // A key the in-flight limit held back may start now.
        let wake = !st.queue.is_empty();
        let idle = st.processing.is_empty();
        drop(st);
        if wake {
            self.inner.ready.notify_one();
        }
        if idle {
            self.inner.idle.notify_waiters();
        }
    }

    /// Clears the key's failure count, so its next rate-limited add starts
    /// again from the base delay. Does not withdraw a scheduled add.
    pub fn forget(&self, key: &K) {
        self.inner.state.lock().limiter.forget(key);
    }

    /// How many rate-limited adds the key has had since it was last forgotten.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.inner.state.lock().limiter.num_requeues(key)
    }

    /// Number of keys ready for a worker (not counting scheduled ones or
    /// ones being processed).
    pub fn len(&self) -> usize {
        let mut st = self.inner.state.lock();
        let pushed = st.promote_due(Instant::now(), &self.inner.metrics);
        let len = st.queue.len();
        drop(st);
        self.wake(pushed);
        len
    }

    /// True when no key is ready for a worker.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How long the key at the head of the ready queue (the longest-waiting
    /// lane head of a fair queue) has been waiting for a worker (since it
    /// was added or became due); `None` when no key is ready. The
    /// controller host's liveness check reads it.
    pub fn longest_waiting(&self) -> Option<Duration> {
        let mut st = self.inner.state.lock();
        let now = Instant::now();
        let pushed = st.promote_due(now, &self.inner.metrics);
        let State { queue, dirty, .. } = &*st;
        let age = queue
            .oldest(|k| dirty.get(k).copied())
            .map(|added| now.saturating_duration_since(added));
        drop(st);
        self.wake(pushed);
        age
    }

    /// Number of keys scheduled for later that have not fired yet.
    pub fn scheduled_len(&self) -> usize {
        let mut st = self.inner.state.lock();
        let pushed = st.promote_due(Instant::now(), &self.inner.metrics);
        let len = st.waiting.len();
        drop(st);
        self.wake(pushed);
        len
    }

    /// True once [`shutdown`](Self::shutdown) or
    /// [`shutdown_with_drain`](Self::shutdown_with_drain) has been called.
    pub fn is_shutting_down(&self) -> bool {
        self.inner.state.lock().shutting_down
    }

    /// Stops the queue: pending and scheduled keys are dropped, new adds are
    /// ignored and every [`get`](Self::get) returns `None`. Keys already being
    /// processed may still be passed to `done`. Also releases a pending
    /// [`shutdown_with_drain`](Self::shutdown_with_drain).
    pub fn shutdown(&self) {
        self.stop(false);
    }

    /// Like [`shutdown`](Self::shutdown), then waits until every key handed
    /// out has been passed to [`done`](Self::done). Callers bound the wait
    /// with a timeout (or call `shutdown` to release it).
    pub async fn shutdown_with_drain(&self) {
        self.stop(true);
        loop {
            let notified = self.inner.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let st = self.inner.state.lock();
                if st.processing.is_empty() || !st.drain {
                    return;
                }
            }
            notified.await;
        }
    }

    fn stop(&self, drain: bool) {
        let mut st = self.inner.state.lock();
        st.shutting_down = true;
        st.drain = drain;
        st.queue.clear();
        st.dirty.clear();
        st.waiting.clear();
        st.waiting_at.clear();
        st.update_depth(&self.inner.metrics);
        drop(st);
        self.inner.ready.notify_waiters();
        self.inner.idle.notify_waiters();
        // An idle maintenance task wakes to see the shutdown and end.
        self.inner.busy.notify_one();
    }

    /// Recomputes `workqueue_unfinished_work_seconds` and
    /// `workqueue_longest_running_processor_seconds` now; the background task
    /// does this every 500 ms.
    pub fn update_unfinished_work_metrics(&self) {
        self.inner.maintain_once();
    }

    fn wake(&self, n: usize) {
        self.inner.wake(n);
    }
}

impl<K: Clone + Eq + Hash> Inner<K> {
    fn wake(&self, n: usize) {
        for _ in 0..n {
            self.ready.notify_one();
        }
    }

    /// One maintenance tick; returns false once the queue is shut down.
    fn maintain_once(&self) -> bool {
        self.maintain_tick().is_some()
    }

    /// One maintenance tick: `None` once the queue is shut down, else
    /// whether it is idle (nothing processing, nothing scheduled).
    fn maintain_tick(&self) -> Option<bool> {
        let mut st = self.state.lock();
        if st.shutting_down {
            return None;
        }
        let now = Instant::now();
        let pushed = st.promote_due(now, &self.metrics);
        st.update_unfinished(now, &self.metrics);
        let idle = st.processing.is_empty() && st.waiting.is_empty();
        drop(st);
        self.wake(pushed);
        Some(idle)
    }
}

/// Background upkeep of one queue; holds only a weak reference so dropping
/// every handle ends it (the queue's drop wakes it through `busy`). Idle,
/// it sleeps until `busy` says a key is processing or scheduled.
async fn maintain<K: Clone + Eq + Hash>(inner: Weak<Inner<K>>, busy: Arc<Notify>) {
    let mut tick = tokio::time::interval(MAINTENANCE_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let idle = {
            let Some(inner) = inner.upgrade() else {
                return;
            };
            match inner.maintain_tick() {
                None => return,
                Some(idle) => idle,
            }
        };
        if idle {
            // A notify_one between the tick and here leaves a permit, so
            // this returns at once.
            busy.notified().await;
            tick.reset();
        }
    }
}

impl<K> Drop for Inner<K> {
    fn drop(&mut self) {
        self.busy.notify_one();
    }
}
