//! The worker loop, and the guard every sync of the host runs under.

use std::any::Any;
use std::fmt::{Debug, Display};
use std::future::Future;
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Span};

use super::health::fmt_duration;
use super::{Activity, Host, RunningSync};
use crate::workqueue::WorkQueue;

/// How a guarded sync ended.
#[derive(Debug)]
pub enum Guarded<T> {
    /// It returned `T`.
    Finished(T),
    /// It ran past the sync timeout (without progress) and was cancelled.
    TimedOut,
    /// It panicked; the panic message.
    Panicked(String),
}

/// The message of a panic payload.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_string()
    }
}

impl Host {
    /// Runs the future `make` returns inside `span` under the host's
    /// rules: cancelled once [`sync_timeout`](super::HostSettings::sync_timeout)
    /// has passed since `slot` started or last reported progress; a panic
    /// (also in `make` itself) caught. Timeouts and panics are logged at
    /// error level, saying `then` (what the caller does next), and counted.
    pub async fn guard<T, Fut>(
        &self,
        slot: &RunningSync,
        span: &Span,
        then: &str,
        make: impl FnOnce() -> Fut,
    ) -> Guarded<T>
    where
        Fut: Future<Output = T>,
    {
        let fut = match std::panic::catch_unwind(AssertUnwindSafe(make)) {
            Ok(fut) => fut,
            Err(p) => return self.panicked(slot, span, then, p.as_ref()),
        };
        let fut = AssertUnwindSafe(fut.instrument(span.clone())).catch_unwind();
        tokio::pin!(fut);
        let bound = self.inner.settings.sync_timeout;
        loop {
            let Some(deadline) = slot.since().checked_add(bound) else {
                // A bound too far to represent: no timeout.
                return match fut.await {
                    Ok(v) => Guarded::Finished(v),
                    Err(p) => self.panicked(slot, span, then, p.as_ref()),
                };
            };
            tokio::select! {
                biased;
                out = &mut fut => {
                    return match out {
                        Ok(v) => Guarded::Finished(v),
                        Err(p) => self.panicked(slot, span, then, p.as_ref()),
                    };
                }
                () = tokio::time::sleep_until(deadline) => {
                    // Progress may have moved the deadline meanwhile.
                    let moved = slot.since().checked_add(bound);
                    if moved.is_none_or(|d| self.inner.clock.instant() < d) {
                        continue;
                    }
                    self.inner.metrics.timeouts.inc();
                    let (controller, label) = (self.inner.controller, slot.label());
                    span.in_scope(|| tracing::error!(
                        controller,
                        "{label} cancelled: no result within the sync timeout of {}; {then}",
                        fmt_duration(bound)
                    ));
                    return Guarded::TimedOut;
                }
            }
        }
    }

    fn panicked<T>(
        &self,
        slot: &RunningSync,
        span: &Span,
        then: &str,
        payload: &(dyn Any + Send),
    ) -> Guarded<T> {
        self.inner.metrics.panics.inc();
        let message = panic_message(payload);
        let (controller, label) = (self.inner.controller, slot.label());
        span.in_scope(|| tracing::error!(controller, "{label} panicked: {message}; {then}"));
        Guarded::Panicked(message)
    }

    /// The worker loop over `queue` (see [`Workers`]); `noun` names what a
    /// key stands for in logs (`syncing job: ...`).
    pub fn workers<K>(&self, queue: &WorkQueue<K>, noun: &'static str) -> Workers<K>
    where
        K: Clone + Eq + Hash + Debug + Send + Sync + 'static,
    {
        let name = queue.name().to_string();
        Workers {
            host: self.clone(),
            queue: queue.clone(),
            noun,
            count: 1,
            span: Arc::new(move |k: &K| tracing::info_span!("sync", queue = %name, key = ?k)),
        }
    }
}

type SpanFn<K> = Arc<dyn Fn(&K) -> Span + Send + Sync>;

/// A pool of workers over one queue, built by [`Host::workers`].
pub struct Workers<K> {
    host: Host,
    queue: WorkQueue<K>,
    noun: &'static str,
    count: usize,
    span: SpanFn<K>,
}

impl<K> Workers<K>
where
    K: Clone + Eq + Hash + Debug + Send + Sync + 'static,
{
    /// How many workers (at least one; one by default).
    pub fn count(mut self, n: usize) -> Self {
        self.count = n.max(1);
        self
    }

    /// The span each sync runs in (default `sync{queue, key}`).
    pub fn span(mut self, f: impl Fn(&K) -> Span + Send + Sync + 'static) -> Self {
        self.span = Arc::new(f);
        self
    }

    /// Runs the workers until `stop`, then shuts the queue down and waits
    /// for the syncs in flight. Each worker: take a key, run `sync` under
    /// [`Host::guard`]; `Ok`: `forget` it; `Err`: log a warning and
    /// `add_rate_limited`; timed out or panicked: `add_rate_limited`; then
    /// `done`.
    pub async fn run<F, Fut, E>(self, sync: F, stop: CancellationToken)
    where
        F: Fn(K) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Display + Send + 'static,
    {
        let count = self.count;
        let lane = Arc::new(self.lane(sync));
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..count {
            let lane = Arc::clone(&lane);
            tasks.spawn(async move {
                while let Some(key) = lane.queue.get().await {
                    lane.process(key).await;
                }
            });
        }
        stop.cancelled().await;
        lane.queue.shutdown();
        while tasks.join_next().await.is_some() {}
    }

    /// The handling of this pool's keys by `sync`, its activity started.
    pub(super) fn lane<F>(self, sync: F) -> Lane<K, F> {
        let activity = self.host.queue_activity(&self.queue);
        activity.start();
        Lane {
            host: self.host,
            queue: self.queue,
            noun: self.noun,
            span: self.span,
            sync,
            activity,
        }
    }
}

/// What a worker does with the keys of one queue, written once for
/// [`Workers`] and for [`Sharded`](super::Sharded) workers.
pub(super) struct Lane<K, F> {
    host: Host,
    pub(super) queue: WorkQueue<K>,
    noun: &'static str,
    span: SpanFn<K>,
    sync: F,
    activity: Activity,
}

impl<K, F, Fut, E> Lane<K, F>
where
    K: Clone + Eq + Hash + Debug + Send + Sync + 'static,
    F: Fn(K) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: Display + Send + 'static,
{
    /// One key taken from the queue: `sync` under [`Host::guard`];
    /// `forget` on success, `add_rate_limited` on an error, a timeout or a
    /// panic; `done` always.
    pub(super) async fn process(&self, key: K) {
        let span = (self.span)(&key);
        let slot = self.activity.begin(format!("sync of {key:?}"));
        let then = "requeued with back-off";
        match self
            .host
            .guard(&slot, &span, then, || (self.sync)(key.clone()))
            .await
        {
            Guarded::Finished(Ok(())) => {
                slot.finish(true);
                self.queue.forget(&key);
            }
            Guarded::Finished(Err(e)) => {
                slot.finish(true);
                let noun = self.noun;
                span.in_scope(|| tracing::warn!("syncing {noun}: {e}"));
                self.queue.add_rate_limited(key.clone());
            }
            Guarded::TimedOut | Guarded::Panicked(_) => {
                drop(slot);
                self.queue.add_rate_limited(key.clone());
            }
        }
        self.queue.done(&key);
    }
}
