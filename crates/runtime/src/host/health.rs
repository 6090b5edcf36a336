//! Liveness that can fail: a controller's [`Health`] is the list of checks
//! its host registered (each worker pool's [`Activity`], its informers, its
//! run task), evaluated whenever `/healthz` asks, so it recovers by itself
//! once progress resumes.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::Clock;

type Check = Box<dyn Fn(Instant) -> Result<(), String> + Send + Sync>;

/// Liveness of one controller, served under `/healthz` and
/// `/healthz/<controller>`. Cloning shares it.
#[derive(Clone)]
pub struct Health(Arc<HealthInner>);

struct HealthInner {
    controller: String,
    clock: Clock,
    /// Set by [`Health::set`]`(false)` or [`Health::fail`]; checked first.
    marked: Mutex<Option<String>>,
    checks: Mutex<Vec<Check>>,
    /// Whether the last evaluation failed, so transitions are logged once.
    failing: Mutex<bool>,
}

impl Default for Health {
    /// Fails ("not started") until [`set`](Health::set)`(true)`.
    fn default() -> Self {
        Health::with_mark("", Some("not started".into()), Clock::system())
    }
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health")
            .field("controller", &self.0.controller)
            .field("reason", &self.reason())
            .finish()
    }
}

impl Health {
    /// Passes until a check is added that fails, or [`fail`](Self::fail).
    pub fn healthy(controller: &str) -> Self {
        Health::with_mark(controller, None, Clock::system())
    }

    /// [`healthy`](Self::healthy) reading time from `clock`.
    pub fn healthy_on(controller: &str, clock: Clock) -> Self {
        Health::with_mark(controller, None, clock)
    }

    fn with_mark(controller: &str, marked: Option<String>, clock: Clock) -> Self {
        Health(Arc::new(HealthInner {
            controller: controller.to_string(),
            clock,
            marked: Mutex::new(marked),
            checks: Mutex::new(Vec::new()),
            failing: Mutex::new(false),
        }))
    }

    /// Marks the controller healthy (clears [`fail`](Self::fail)) or
    /// unhealthy; the registered checks still apply.
    pub fn set(&self, ok: bool) {
        *self.0.marked.lock() = (!ok).then(|| "marked unhealthy".to_string());
    }

    /// Marks the controller unhealthy for `reason` until [`set`](Self::set)`(true)`.
    pub fn fail(&self, reason: impl Into<String>) {
        *self.0.marked.lock() = Some(reason.into());
    }

    /// Adds a check: given the time now, `Err(reason)` when failing.
    pub fn add_check(&self, check: impl Fn(Instant) -> Result<(), String> + Send + Sync + 'static) {
        self.0.checks.lock().push(Box::new(check));
    }

    pub fn ok(&self) -> bool {
        self.reason().is_none()
    }

    /// Why the controller is unhealthy (every failing check, `; `-joined),
    /// or `None` when healthy. Logs when the answer turns from healthy to
    /// unhealthy and back.
    pub fn reason(&self) -> Option<String> {
        let now = self.0.clock.instant();
        let mut failures: Vec<String> = self.0.marked.lock().iter().cloned().collect();
        for check in self.0.checks.lock().iter() {
            if let Err(r) = check(now) {
                failures.push(r);
            }
        }
        let reason = (!failures.is_empty()).then(|| failures.join("; "));
        let mut failing = self.0.failing.lock();
        if *failing != reason.is_some() {
            *failing = reason.is_some();
            let controller = self.0.controller.as_str();
            match &reason {
                Some(r) => tracing::warn!(controller, reason = %r, "health check failing"),
                None => tracing::info!(controller, "health check passing again"),
            }
        }
        reason
    }
}

/// `5.2s`, `6m0s`, `250ms`: short, as Go prints durations (tenths of a
/// second below a minute, whole seconds above).
pub(crate) fn fmt_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs == 0 {
        return format!("{}ms", d.as_millis());
    }
    let tenths = d.subsec_millis() / 100;
    match (secs / 3600, secs % 3600 / 60, secs % 60) {
        (0, 0, s) if tenths > 0 => format!("{s}.{tenths}s"),
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, m, s) => format!("{h}h{m}m{s}s"),
    }
}

/// What one pool of workers, or one periodic loop, is doing: its running
/// syncs and when it last made progress. Its [`check`](Self::check) fails
/// when a sync has been running (without progress) past the stall bound,
/// or when keys have been waiting for longer than the bound and no sync
/// finished within it.
#[derive(Clone)]
pub struct Activity(Arc<ActivityInner>);

type Waiting = Box<dyn Fn() -> Option<Duration> + Send + Sync>;

struct ActivityInner {
    /// E.g. `queue "job"`, used in reasons.
    what: String,
    stall: Duration,
    clock: Clock,
    /// How long the oldest ready key has waited (`None`: nothing waits).
    waiting: Option<Waiting>,
    state: Mutex<ActivityState>,
}

#[derive(Default)]
struct ActivityState {
    running: HashMap<u64, Running>,
    next_id: u64,
    /// When a sync last finished (or the workers started); `None` before
    /// they start, so keys queued while caches sync do not count.
    last_progress: Option<Instant>,
}

struct Running {
    label: String,
    /// Start, or last [`Progress::tick`].
    since: Instant,
}

impl Activity {
    pub(crate) fn new(
        what: String,
        stall: Duration,
        clock: Clock,
        waiting: Option<Waiting>,
    ) -> Self {
        Activity(Arc::new(ActivityInner {
            what,
            stall,
            clock,
            waiting,
            state: Mutex::new(ActivityState::default()),
        }))
    }

    /// The workers start now: from here, waiting keys with no finished
    /// sync count as no progress.
    pub fn start(&self) {
        let now = self.0.clock.instant();
        self.0.state.lock().last_progress.get_or_insert(now);
    }

    /// Records a sync starting; dropping the slot ends it.
    pub fn begin(&self, label: String) -> RunningSync {
        let now = self.0.clock.instant();
        let mut st = self.0.state.lock();
        st.next_id = st.next_id.wrapping_add(1);
        let id = st.next_id;
        st.running.insert(id, Running { label, since: now });
        RunningSync {
            progress: Progress {
                activity: Arc::clone(&self.0),
                id,
            },
        }
    }

    /// `Err(reason)` when stalled at `now`.
    pub fn check(&self, now: Instant) -> Result<(), String> {
        let a = &self.0;
        let st = a.state.lock();
        if let Some(r) = st.running.values().min_by_key(|r| r.since) {
            let d = now.saturating_duration_since(r.since);
            if d > a.stall {
                return Err(format!(
                    "{}: {} has not finished or progressed for {} (stall bound {})",
                    a.what,
                    r.label,
                    fmt_duration(d),
                    fmt_duration(a.stall)
                ));
            }
        }
        let last = st.last_progress;
        drop(st);
        let (Some(last), Some(waiting)) = (last, a.waiting.as_ref()) else {
            return Ok(());
        };
        let idle = now.saturating_duration_since(last);
        match waiting() {
            Some(age) if age > a.stall && idle > a.stall => Err(format!(
                "{}: no sync finished for {} while keys wait (the oldest for {}; stall bound {})",
                a.what,
                fmt_duration(idle),
                fmt_duration(age),
                fmt_duration(a.stall)
            )),
            _ => Ok(()),
        }
    }
}

/// A running sync of an [`Activity`]; dropping it without
/// [`finish`](Self::finish)`(true)` records no progress (a timeout, a panic).
pub struct RunningSync {
    progress: Progress,
}

impl RunningSync {
    /// A handle the sync may keep to report progress.
    pub fn progress(&self) -> Progress {
        self.progress.clone()
    }

    /// Start, or last progress.
    pub fn since(&self) -> Instant {
        let p = &self.progress;
        let st = p.activity.state.lock();
        st.running
            .get(&p.id)
            .map_or_else(|| p.activity.clock.instant(), |r| r.since)
    }

    pub(crate) fn label(&self) -> String {
        let p = &self.progress;
        let st = p.activity.state.lock();
        st.running
            .get(&p.id)
            .map(|r| r.label.clone())
            .unwrap_or_default()
    }

    /// Ends the sync; `progressed`: it finished (successfully or with an
    /// error), as opposed to being cancelled or panicking.
    pub fn finish(self, progressed: bool) {
        if progressed {
            let now = self.progress.activity.clock.instant();
            self.progress.activity.state.lock().last_progress = Some(now);
        }
    }
}

impl Drop for RunningSync {
    fn drop(&mut self) {
        let p = &self.progress;
        p.activity.state.lock().running.remove(&p.id);
    }
}

/// Lets a long sync (a pod GC pass) report progress: each
/// [`tick`](Self::tick) restarts its stall and sync-time bounds.
#[derive(Clone)]
pub struct Progress {
    activity: Arc<ActivityInner>,
    id: u64,
}

impl Progress {
    pub fn tick(&self) {
        let now = self.activity.clock.instant();
        let mut st = self.activity.state.lock();
        if let Some(r) = st.running.get_mut(&self.id) {
            r.since = now;
        }
        st.last_progress = Some(now);
    }
}
