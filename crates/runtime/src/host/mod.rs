//! The controller host: the machinery every kcm-rs controller runs on
//! besides its own decisions, written once.
//!
//! * [`Host::workers`]: the worker loop over a [`WorkQueue`]: take a key,
//!   run the sync inside a `tracing` span, then `forget` on success,
//!   `add_rate_limited` on an error, always `done`. A sync running past
//!   [`HostSettings::sync_timeout`] is cancelled (dropped at its next
//!   `.await`) and its key requeued with back-off; a sync that panics is
//!   caught, its key requeued with back-off. Both are logged at error level
//!   and counted (`kcm_rs_controller_sync_timeouts_total{controller}`,
//!   `kcm_rs_controller_sync_panics_total{controller}`); the worker goes on.
//! * [`Host::run_periodic`]: the same rules for a loop that runs a pass
//!   every period (pod GC). A pass reports [`Progress`] as it goes; the
//!   bounds then apply to the time since its last progress, so a long but
//!   moving pass (thousands of deletes at the client's QPS) is never cut.
//! * [`Host::sharded`]: workers that own shards of the keys of one or more
//!   queues, served in priority order, with the same handling of each key
//!   (taint eviction's node and pod queues, as upstream lays them out).
//! * [`Host::guard`] and [`Host::activity`]: the parts, for work that is
//!   not a queue's (taint eviction's eviction timers).
//! * [`Host::track`] and [`Host::wait_for_sync`]: the controller's
//!   informers, waited for once before the workers start.
//! * [`Health`]: fed by all of the above. `/healthz/<controller>` fails
//!   when a sync has run (without progress) past
//!   [`HostSettings::stall_timeout`], when keys have waited longer than
//!   that bound while no sync finished within it (a timed-out or panicking
//!   sync is not progress; one that returned an error is), when one of its
//!   informers' watch task ended on its own, or when its run task ended
//!   before the process stopped. It passes again as soon as that is no
//!   longer true.
//!
//! Time is the runtime's one [`Clock`] (its monotonic part is tokio's):
//! tests drive every bound with `tokio::time::pause` and `advance`.
//!
//! Layout: `mod.rs` the host and its settings; `worker.rs` the guard and
//! the worker pool over one queue; `sharded.rs` sharded workers over
//! several; `periodic.rs` periodic passes; `health.rs` activities and the
//! health they feed; `metrics.rs` the panic and timeout counters.
//!
//! # The bounds, and why
//!
//! Neither exists in KCM, whose workers wait for ever and whose
//! per-controller `/healthz` checks do not watch the workers. They must
//! never fire on a slow but healthy controller: cutting a legitimate Job
//! sync leaves its raised expectations to expire (5 min), and a failing
//! liveness probe restarts the process (`manifests/`: 6 failures 10 s
//! apart), which costs a leader change and a relist of every pod.
//!
//! * **Sync timeout: 5 minutes.** The longest legitimate sync is a Job sync
//!   at the client's default 20 QPS: up to 500 pod creates and 500
//!   finalizer removals, with `--concurrent-job-syncs=5` workers sharing
//!   one client, some 5000 requests or 250 s. Single requests have their
//!   own, shorter bound in the client, so only a wedge (a lost wake-up, a
//!   lock never released) or a great many slow requests reach 5 minutes.
//!   It is also upstream's `ExpectationsTimeout`, the longest a Job may
//!   already wait on a lost watch event, so a cut sync costs no more than
//!   upstream accepts.
//! * **Stall bound: 6 minutes**, the sync timeout plus one minute for the
//!   cancelled syncs to give way and the next ones to finish. A sync still
//!   running then could not be cancelled (code that does not yield); keys
//!   waiting that long with no finished sync mean every worker is wedged
//!   or gone. With the Deployment's probe the process restarts about 7
//!   minutes after a wedge, the standby taking over; a controller that is
//!   merely slow never trips it. (kubelet's own `/healthz` uses the same
//!   kind of rule: its pod lifecycle relist must complete within 3
//!   minutes.)
//!
//! Both are flags (`--controller-sync-timeout`, `--controller-stall-timeout`)
//! that reach each controller through `ControllerContext::host`.
//!

mod health;
mod metrics;
mod periodic;
mod sharded;
mod worker;

#[cfg(test)]
mod tests;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::informer::{Informable, Informer};
use crate::workqueue::WorkQueue;

pub use health::{Activity, Health, Progress, RunningSync};
pub use sharded::Sharded;
pub use worker::{Guarded, Workers};

pub(crate) use metrics::Families;
use metrics::SyncMetrics;

use crate::metrics::Metrics;

/// Default [`HostSettings::sync_timeout`].
pub const DEFAULT_SYNC_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// Default [`HostSettings::stall_timeout`].
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(6 * 60);

/// The host's bounds (see the module documentation for the defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostSettings {
    /// A sync (or a periodic pass without progress) running longer is
    /// cancelled and retried with back-off.
    pub sync_timeout: Duration,
    /// The controller turns unhealthy when a sync has run (without
    /// progress) longer, or keys waited longer with no sync finished.
    pub stall_timeout: Duration,
}

impl Default for HostSettings {
    fn default() -> Self {
        HostSettings {
            sync_timeout: DEFAULT_SYNC_TIMEOUT,
            stall_timeout: DEFAULT_STALL_TIMEOUT,
        }
    }
}

impl HostSettings {
    /// The settings from the two flags: a sync timeout alone moves the
    /// stall bound to one minute past it (the stall bound must be longer).
    pub fn from_flags(sync_timeout: Option<Duration>, stall_timeout: Option<Duration>) -> Self {
        let sync_timeout = sync_timeout.unwrap_or(DEFAULT_SYNC_TIMEOUT);
        let stall_timeout = stall_timeout
            .unwrap_or_else(|| DEFAULT_STALL_TIMEOUT.max(sync_timeout + Duration::from_secs(60)));
        HostSettings {
            sync_timeout,
            stall_timeout,
        }
    }
}

/// The host reads the runtime's one clock (its monotonic part).
pub use crate::clock::Clock;

/// A running controller's workers.
pub type RunFuture = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// A controller that has registered its handlers and is ready to run:
/// its workers and their health ([`Host::start`]).
pub struct Started {
    pub run: RunFuture,
    pub health: Health,
}

/// An informer as the host sees it.
trait Tracked: Send + Sync {
    fn kind(&self) -> &str;
    fn watch_ended(&self) -> bool;
    fn wait_synced(&self) -> BoxFuture<'_, ()>;
}

impl<K: Informable> Tracked for Informer<K> {
    fn kind(&self) -> &str {
        Informer::kind(self)
    }
    fn watch_ended(&self) -> bool {
        Informer::watch_ended(self)
    }
    fn wait_synced(&self) -> BoxFuture<'_, ()> {
        Box::pin(Informer::wait_synced(self))
    }
}

/// One controller's host. Cloning shares it.
#[derive(Clone)]
pub struct Host {
    inner: Arc<Inner>,
}

struct Inner {
    controller: &'static str,
    settings: HostSettings,
    clock: Clock,
    health: Health,
    metrics: SyncMetrics,
    informers: Arc<Mutex<Vec<Arc<dyn Tracked>>>>,
}

impl Host {
    /// A host on the system clock whose metrics nobody serves (tests).
    pub fn with_settings(controller: &'static str, settings: HostSettings) -> Self {
        Host::new(controller, settings, Clock::system(), &Metrics::detached())
    }

    /// A host reading time from `clock` (tests pass one that follows
    /// paused tokio time), counting its panics and timeouts in `metrics`.
    pub fn new(
        controller: &'static str,
        settings: HostSettings,
        clock: Clock,
        metrics: &Metrics,
    ) -> Self {
        let health = Health::healthy_on(controller, clock.clone());
        let informers: Arc<Mutex<Vec<Arc<dyn Tracked>>>> = Arc::default();
        let watched = Arc::clone(&informers);
        health.add_check(move |_| {
            let ended: Vec<String> = watched
                .lock()
                .iter()
                .filter(|i| i.watch_ended())
                .map(|i| i.kind().to_string())
                .collect();
            if ended.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "informer {} stopped: its watch ended",
                    ended.join(", ")
                ))
            }
        });
        Host {
            inner: Arc::new(Inner {
                controller,
                settings,
                clock,
                health,
                metrics: SyncMetrics::new(&metrics.host, controller),
                informers,
            }),
        }
    }

    pub fn controller(&self) -> &'static str {
        self.inner.controller
    }

    pub fn settings(&self) -> HostSettings {
        self.inner.settings
    }

    /// The controller's liveness, for [`Started::health`].
    pub fn health(&self) -> Health {
        self.inner.health.clone()
    }

    /// Takes an informer the controller reads: [`wait_for_sync`](Self::wait_for_sync)
    /// waits for it, and the controller is unhealthy once its watch ends.
    pub fn track<K: Informable>(&self, informer: &Arc<Informer<K>>) {
        let tracked: Arc<dyn Tracked> = Arc::clone(informer) as Arc<dyn Tracked>;
        self.inner.informers.lock().push(tracked);
    }

    /// Waits until every tracked informer has its first list; false when
    /// `stop` came first.
    pub async fn wait_for_sync(&self, stop: &CancellationToken) -> bool {
        let informers = self.inner.informers.lock().clone();
        let controller = self.inner.controller;
        let kinds: Vec<&str> = informers.iter().map(|i| i.kind()).collect();
        tracing::info!(controller, ?kinds, "waiting for caches to sync");
        let all = futures::future::join_all(informers.iter().map(|i| i.wait_synced()));
        tokio::select! {
            () = stop.cancelled() => false,
            _ = all => {
                tracing::info!(controller, "caches are synced");
                true
            }
        }
    }

    /// An [`Activity`] for a loop of the controller's own, checked by its
    /// health. `waiting`: how long the oldest key has waited, if any (the
    /// queue's [`longest_waiting`](crate::workqueue::WorkQueue::longest_waiting)).
    pub fn activity(
        &self,
        what: impl Into<String>,
        waiting: Option<Box<dyn Fn() -> Option<Duration> + Send + Sync>>,
    ) -> Activity {
        let activity = Activity::new(
            what.into(),
            self.inner.settings.stall_timeout,
            self.inner.clock.clone(),
            waiting,
        );
        let checked = activity.clone();
        self.inner.health.add_check(move |now| checked.check(now));
        activity
    }

    /// The [`Activity`] of workers over `queue`, named after it, whose
    /// waiting keys are the queue's ready ones.
    pub fn queue_activity<K>(&self, queue: &WorkQueue<K>) -> Activity
    where
        K: Clone + Eq + std::hash::Hash + Send + Sync + 'static,
    {
        let q = queue.clone();
        let waiting = Box::new(move || q.longest_waiting());
        self.activity(format!("queue {:?}", queue.name()), Some(waiting))
    }

    /// The controller's run future, with its health: if it ends (returns
    /// or panics) before `stop`, the controller is unhealthy.
    pub fn start(
        &self,
        run: impl Future<Output = ()> + Send + 'static,
        stop: CancellationToken,
    ) -> Started {
        let health = self.health();
        let controller = self.inner.controller;
        let metrics = self.inner.metrics.clone();
        let run = async move {
            let ended = AssertUnwindSafe(run).catch_unwind().await;
            if stop.is_cancelled() {
                return;
            }
            let reason = match ended {
                Ok(()) => "its workers ended".to_string(),
                Err(p) => {
                    metrics.panics.inc();
                    format!(
                        "its workers panicked: {}",
                        worker::panic_message(p.as_ref())
                    )
                }
            };
            tracing::error!(controller, "controller stopped: {reason}");
            health.fail(format!("controller stopped: {reason}"));
        };
        Started {
            run: Box::pin(run),
            health: self.health(),
        }
    }
}
