//! Evictions waiting for their time, keyed by pod `namespace/name`, with
//! cancel (upstream timed_workers.go `TimedWorkerQueue`).
//!
//! Each scheduled eviction is one tokio task sleeping until its fire time;
//! cancelling aborts it. This rather than the runtime `WorkQueue` because the
//! semantics differ where it matters: the *first* schedule of a key wins (the
//! work queue keeps the earliest), a key stays occupied while its work runs
//! (so a re-evaluation does not start a second eviction), fired work runs
//! at once and concurrently as upstream's per-timer goroutines do (a slow
//! API call for one pod never delays another pod's eviction), and upstream
//! has no work-queue metrics for these timers that we would have to invent.
//! Time is the runtime's [`Clock`] (tokio's monotonic time), so tests pause
//! and advance it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use kcm_runtime::clock::Clock;
use kcm_runtime::informer::key_of;
use parking_lot::Mutex;
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

/// The pod an eviction is for. The key is `namespace/name` (as upstream);
/// the UID, when known, lets the controller notice a pod that was replaced
/// by a namesake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkArgs {
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    /// The node the pod was on when the eviction was scheduled (for logs).
    pub node: String,
}

impl WorkArgs {
    /// The pod's key ([`key_of`]).
    pub fn key(&self) -> String {
        key_of(&self.namespace, &self.name)
    }
}

/// The work run when an eviction fires: the pod and the time it was due.
pub type WorkFn = Arc<dyn Fn(WorkArgs, Instant) -> BoxFuture<'static, ()> + Send + Sync>;

/// Where a scheduled eviction stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for its fire time; can be cancelled.
    Pending,
    /// Fired; its work is running and cannot be stopped.
    Running,
}

/// A scheduled eviction as seen from outside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scheduled {
    pub uid: Option<String>,
    pub created_at: Instant,
    pub fire_at: Instant,
    pub phase: Phase,
}

struct Entry {
    /// Tells this entry from a later one of the same key, so finishing work
    /// never removes a newer schedule.
    id: u64,
    info: Scheduled,
    timer: Option<AbortHandle>,
}

#[derive(Default)]
struct State {
    entries: HashMap<String, Entry>,
    next_id: u64,
    closed: bool,
}

/// Longest single sleep of a timer task; longer waits sleep in steps, so a
/// far deadline never depends on how the timer wheel treats huge delays.
const MAX_SLEEP_STEP: Duration = Duration::from_secs(24 * 3600);

/// Scheduled evictions. Cheap to clone; clones share the schedule.
#[derive(Clone)]
pub struct TimedQueue {
    state: Arc<Mutex<State>>,
    work: WorkFn,
    tracker: TaskTracker,
    clock: Clock,
}

impl std::fmt::Debug for TimedQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimedQueue")
            .field("entries", &self.state.lock().entries.len())
            .finish_non_exhaustive()
    }
}

impl TimedQueue {
    pub fn new(work: WorkFn, clock: Clock) -> Self {
        TimedQueue {
            state: Arc::default(),
            work,
            tracker: TaskTracker::new(),
            clock,
        }
    }

    /// Schedules `args` to run at `fire_at` (at once when that is not in the
    /// future). Does nothing and returns false when the pod already has an
    /// eviction, pending or running (upstream `AddWork`), or after
    /// [`shutdown`](Self::shutdown). Must be called inside a tokio runtime.
    pub fn add(&self, args: WorkArgs, fire_at: Instant) -> bool {
        let key = args.key();
        let mut st = self.state.lock();
        if st.closed || st.entries.contains_key(&key) {
            return false;
        }
        st.next_id = st.next_id.wrapping_add(1);
        let id = st.next_id;
        let now = self.clock.instant();
        let immediate = fire_at <= now;
        let info = Scheduled {
            uid: args.uid.clone(),
            created_at: now,
            fire_at,
            phase: if immediate {
                Phase::Running
            } else {
                Phase::Pending
            },
        };
        let task = {
            let state = Arc::clone(&self.state);
            let work = Arc::clone(&self.work);
            let key = key.clone();
            let clock = self.clock.clone();
            async move {
                if !immediate {
                    sleep_until(&clock, fire_at).await;
                    if !start(&state, &key, id) {
                        return;
                    }
                }
                work(args, fire_at).await;
                let mut st = state.lock();
                if st.entries.get(&key).is_some_and(|e| e.id == id) {
                    st.entries.remove(&key);
                }
            }
        };
        // The lock is held, so the task cannot look at its entry before the
        // entry exists.
        let handle = self.tracker.spawn(task);
        let timer = (!immediate).then(|| handle.abort_handle());
        st.entries.insert(key, Entry { id, info, timer });
        true
    }

    /// Withdraws the pod's eviction. Returns true only when a pending timer
    /// was stopped. Running work is not interrupted, but its key is freed
    /// (as upstream), so a later [`add`](Self::add) schedules anew.
    pub fn cancel(&self, key: &str) -> bool {
        let mut st = self.state.lock();
        let Some(entry) = st.entries.remove(key) else {
            return false;
        };
        match (entry.info.phase, entry.timer) {
            (Phase::Pending, Some(timer)) => {
                timer.abort();
                true
            }
            _ => false,
        }
    }

    /// The pod's eviction, if one is pending or running.
    pub fn get(&self, key: &str) -> Option<Scheduled> {
        self.state.lock().entries.get(key).map(|e| e.info.clone())
    }

    /// Number of evictions pending or running.
    pub fn len(&self) -> usize {
        self.state.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops every pending timer and refuses new work; running work goes on
    /// (await [`wait`](Self::wait) for it).
    pub fn shutdown(&self) {
        let mut st = self.state.lock();
        st.closed = true;
        st.entries.retain(|_, e| match e.info.phase {
            Phase::Pending => {
                if let Some(t) = &e.timer {
                    t.abort();
                }
                false
            }
            Phase::Running => true,
        });
        drop(st);
        self.tracker.close();
    }

    /// Waits until every task has ended; only returns after
    /// [`shutdown`](Self::shutdown).
    pub async fn wait(&self) {
        self.tracker.wait().await;
    }
}

/// Marks a fired timer's entry as running; false when it was cancelled or
/// replaced meanwhile.
fn start(state: &Mutex<State>, key: &str, id: u64) -> bool {
    let mut st = state.lock();
    match st.entries.get_mut(key) {
        Some(e) if e.id == id && e.info.phase == Phase::Pending => {
            e.info.phase = Phase::Running;
            e.timer = None;
            true
        }
        _ => false,
    }
}

async fn sleep_until(clock: &Clock, at: Instant) {
    loop {
        let now = clock.instant();
        if now >= at {
            return;
        }
        let step = now.checked_add(MAX_SLEEP_STEP).map_or(at, |s| s.min(at));
        tokio::time::sleep_until(step).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::Semaphore;

    type Log = Arc<Mutex<Vec<(String, Instant, Instant)>>>;

    /// A queue whose work records (key, fire_at, ran_at) and, when `gate` is
    /// given, waits for a permit before finishing.
    fn queue(gate: Option<Arc<Semaphore>>) -> (TimedQueue, Log) {
        let log: Log = Arc::default();
        let sink = Arc::clone(&log);
        let work: WorkFn = Arc::new(move |args, fire_at| {
            let sink = Arc::clone(&sink);
            let gate = gate.clone();
            Box::pin(async move {
                sink.lock().push((args.key(), fire_at, Instant::now()));
                if let Some(g) = gate {
                    let _permit = g.acquire().await;
                }
            })
        });
        (TimedQueue::new(work, Clock::system()), log)
    }

    fn args(name: &str, uid: &str) -> WorkArgs {
        WorkArgs {
            namespace: "ns".into(),
            name: name.into(),
            uid: Some(uid.into()),
            node: "n1".into(),
        }
    }

    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn fires_at_its_time_not_before() {
        let (q, log) = queue(None);
        let t0 = Instant::now();
        assert!(q.add(args("a", "1"), t0 + Duration::from_secs(30)));
        assert_eq!(q.get("ns/a").map(|s| s.phase), Some(Phase::Pending));
        tokio::time::sleep(Duration::from_millis(29_999)).await;
        settle().await;
        assert!(log.lock().is_empty());
        tokio::time::sleep(Duration::from_millis(2)).await;
        settle().await;
        let fired = log.lock().clone();
        assert_eq!(fired.len(), 1);
        assert_eq!(fired[0].0, "ns/a");
        assert_eq!(fired[0].1, t0 + Duration::from_secs(30));
        assert!(q.get("ns/a").is_none(), "finished work frees the key");
    }

    #[tokio::test(start_paused = true)]
    async fn cancelled_timers_never_fire() {
        let (q, log) = queue(None);
        let t0 = Instant::now();
        q.add(args("a", "1"), t0 + Duration::from_secs(10));
        q.add(args("b", "2"), t0 + Duration::from_secs(10));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(q.cancel("ns/a"));
        assert!(!q.cancel("ns/a"), "a second cancel finds nothing");
        assert!(!q.cancel("ns/never"));
        tokio::time::sleep(Duration::from_secs(60)).await;
        settle().await;
        let keys: Vec<_> = log.lock().iter().map(|e| e.0.clone()).collect();
        assert_eq!(keys, ["ns/b"]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_schedule_wins() {
        let (q, log) = queue(None);
        let t0 = Instant::now();
        assert!(q.add(args("a", "1"), t0 + Duration::from_secs(10)));
        assert!(!q.add(args("a", "1"), t0 + Duration::from_secs(1)));
        assert!(!q.add(args("a", "1"), t0));
        tokio::time::sleep(Duration::from_secs(5)).await;
        settle().await;
        assert!(log.lock().is_empty());
        tokio::time::sleep(Duration::from_secs(6)).await;
        settle().await;
        assert_eq!(log.lock().len(), 1);
        assert_eq!(log.lock()[0].1, t0 + Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn immediate_work_runs_at_once_and_cannot_be_cancelled() {
        let gate = Arc::new(Semaphore::new(0));
        let (q, log) = queue(Some(Arc::clone(&gate)));
        let t0 = Instant::now();
        assert!(q.add(args("a", "1"), t0));
        assert_eq!(q.get("ns/a").map(|s| s.phase), Some(Phase::Running));
        settle().await;
        assert_eq!(log.lock().len(), 1, "started without a timer");
        assert!(!q.add(args("a", "1"), t0), "running work occupies the key");
        assert!(!q.cancel("ns/a"), "running work is not a pending timer");
        assert!(q.get("ns/a").is_none(), "but its key is freed, as upstream");
        // A new schedule may now be added; the old work finishing must not
        // remove it.
        assert!(q.add(args("a", "2"), t0 + Duration::from_secs(5)));
        gate.add_permits(1);
        settle().await;
        assert_eq!(
            q.get("ns/a").map(|s| (s.phase, s.uid)),
            Some((Phase::Pending, Some("2".into())))
        );
        gate.add_permits(1);
        tokio::time::sleep(Duration::from_secs(6)).await;
        settle().await;
        assert_eq!(log.lock().len(), 2);
        assert!(q.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn fired_timers_become_running() {
        let gate = Arc::new(Semaphore::new(0));
        let (q, log) = queue(Some(Arc::clone(&gate)));
        q.add(args("a", "1"), Instant::now() + Duration::from_secs(1));
        tokio::time::sleep(Duration::from_secs(2)).await;
        settle().await;
        assert_eq!(log.lock().len(), 1);
        assert_eq!(q.get("ns/a").map(|s| s.phase), Some(Phase::Running));
        assert!(!q.cancel("ns/a"));
        gate.add_permits(1);
        settle().await;
        assert!(q.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn far_deadlines_do_not_overflow_or_fire() {
        let (q, log) = queue(None);
        let far = Instant::now() + Duration::from_secs(200 * 365 * 86_400);
        assert!(q.add(args("a", "1"), far));
        tokio::time::sleep(Duration::from_secs(3 * 365 * 86_400)).await;
        settle().await;
        assert!(log.lock().is_empty());
        assert!(q.cancel("ns/a"));
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_stops_timers_and_waits_for_running_work() {
        let gate = Arc::new(Semaphore::new(0));
        let (q, log) = queue(Some(Arc::clone(&gate)));
        q.add(args("a", "1"), Instant::now() + Duration::from_secs(1));
        q.add(args("b", "2"), Instant::now());
        settle().await;
        q.shutdown();
        assert!(!q.add(args("c", "3"), Instant::now()), "closed");
        assert_eq!(q.len(), 1, "only the running one is left");
        let waiter = tokio::spawn({
            let q = q.clone();
            async move { q.wait().await }
        });
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!waiter.is_finished(), "waits for running work");
        gate.add_permits(1);
        waiter.await.expect("wait");
        let keys: Vec<_> = log.lock().iter().map(|e| e.0.clone()).collect();
        assert_eq!(keys, ["ns/b"]);
    }
}
