//! Event recorder writing core/v1 `Event`s the way client-go's
//! `record.EventRecorder` does for kube-controller-manager.
//!
//! * `source.component` and `reportingComponent` are the controller's
//!   component name (`job-controller`, `taint-eviction-controller`, …),
//!   `reportingInstance` is the host name; the involved object is the given
//!   `ObjectReference`; the event lives in its namespace, `default` for
//!   cluster-scoped objects; its name is `<object name>.<16 hex digits>`.
//! * Identical events (same object, type, reason and message) within
//!   [`CORRELATION_WINDOW`] of the previous one are folded: the existing
//!   object's `count`, `lastTimestamp` and `message` are patched.
//! * Similar events (same object, type and reason, different message) are
//!   aggregated as client-go does: from the [`AGGREGATE_MAX_EVENTS`]th
//!   distinct message within [`AGGREGATE_WINDOW`] on, they are written as
//!   one event whose message is [`COMBINED_PREFIX`] plus the latest message,
//!   and whose repeats are count patches (see [`aggregate`]).
//! * Spam filter: each object (and event type) has a token bucket of
//!   [`SPAM_BURST`] writes refilled by one every [`SPAM_REFILL_PERIOD`];
//!   events finding it empty are dropped and counted in
//!   `kcm_event_recorder_spam_filtered_events_total{component}` (a counter
//!   of its own, so queue overload stays distinguishable from throttling).
//! * [`Recorder::annotated`] also puts fixed annotations on every event
//!   it creates (kcm-rs's Job controller marks its mode there; upstream's
//!   `AnnotatedEventf` is the same field), leaving the fields above as
//!   upstream writes them.
//! * [`Recorder::event`] never blocks: the event is queued to a background
//!   task through a bounded channel, and dropped (counted in
//!   `kcm_event_recorder_dropped_events_total{component}` and logged) when
//!   the queue is full, as client-go's broadcaster drops when overloaded.

pub mod aggregate;
mod cache;
mod correlate;
pub mod spam;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::client::LeanApi;
use crate::clock::Clock;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, ObjectReference};
use kube::api::{Patch, PatchParams, PostParams};
use prometheus::{IntCounter, IntCounterVec, Opts, Registry};

use crate::metrics::Metrics;
use tokio::sync::{mpsc, oneshot};

pub use self::aggregate::{AGGREGATE_MAX_EVENTS, AGGREGATE_WINDOW, COMBINED_PREFIX};
pub use self::cache::{EventType, MAX_CACHE_ENTRIES};
pub use self::correlate::{
    CORRELATION_WINDOW, CacheEntry, Correlator, Decision, EventCorrelator, EventData, EventKey,
    Planned, build_event, count_patch, event_name, event_namespace, unix_nanos,
};
pub use self::spam::{SPAM_BURST, SPAM_REFILL_PERIOD};

/// Events queued before new ones are dropped (client-go's broadcaster
/// `maxQueuedEvents`).
pub const QUEUE_CAPACITY: usize = 1000;
/// Attempts to write one event when the API server is unreachable or
/// overloaded (429/5xx). client-go tries 12 times, 10 s apart, stalling its
/// queue for up to two minutes; we give up sooner.
const WRITE_ATTEMPTS: u32 = 3;
/// Pause between write attempts.
const WRITE_RETRY_DELAY: Duration = Duration::from_secs(1);

enum Msg {
    Event(Box<Pending>),
    Flush(oneshot::Sender<()>),
}

struct Pending {
    involved: ObjectReference,
    type_: EventType,
    reason: String,
    message: String,
    at: Timestamp,
}

/// Records events for one controller. Cheap to clone; all clones feed the
/// same background writer, which stops when the last clone is dropped.
#[derive(Clone, Debug)]
pub struct Recorder {
    tx: mpsc::Sender<Msg>,
    component: &'static str,
    dropped: Arc<AtomicU64>,
    /// `kcm_event_recorder_dropped_events_total{component}`.
    dropped_metric: IntCounter,
    /// When an event happened (and so how it aggregates and is rate
    /// limited): the runtime's one clock.
    clock: Clock,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Msg::Event(_) => "Event",
            Msg::Flush(_) => "Flush",
        })
    }
}

impl Recorder {
    /// A recorder writing as `component`, with the host name as
    /// `reportingInstance` and a queue of [`QUEUE_CAPACITY`] events.
    ///
    /// Spawns the writer task, so it must be called inside a Tokio runtime.
    /// Its drops count in `metrics`.
    pub fn new(client: kube::Client, component: &'static str, metrics: &Metrics) -> Recorder {
        Recorder::with_options(
            client,
            component,
            &hostname(component),
            QUEUE_CAPACITY,
            metrics,
        )
    }

    /// Like [`Recorder::new`], and every event it creates carries
    /// `annotations` (count updates of an existing event leave them).
    pub fn annotated(
        client: kube::Client,
        component: &'static str,
        annotations: BTreeMap<String, String>,
        metrics: &Metrics,
    ) -> Recorder {
        Recorder::spawn(
            client,
            component,
            &hostname(component),
            QUEUE_CAPACITY,
            annotations,
            metrics,
        )
    }

    /// Like [`Recorder::new`] with an explicit `reportingInstance` and queue
    /// capacity (at least 1).
    pub fn with_options(
        client: kube::Client,
        component: &'static str,
        instance: &str,
        capacity: usize,
        metrics: &Metrics,
    ) -> Recorder {
        Recorder::spawn(
            client,
            component,
            instance,
            capacity,
            BTreeMap::new(),
            metrics,
        )
    }

    fn spawn(
        client: kube::Client,
        component: &'static str,
        instance: &str,
        capacity: usize,
        annotations: BTreeMap<String, String>,
        metrics: &Metrics,
    ) -> Recorder {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let m = &metrics.events;
        let writer = Writer {
            client,
            component,
            instance: instance.into(),
            annotations,
            correlator: EventCorrelator::default(),
            last_suffix: 0,
            filtered: 0,
            spam_filtered: m.spam_filtered.with_label_values(&[component]),
        };
        tokio::spawn(writer.run(rx));
        Recorder {
            tx,
            component,
            dropped: Arc::default(),
            dropped_metric: m.dropped.with_label_values(&[component]),
            clock: Clock::system(),
        }
    }

    /// Stamps events with `clock`'s wall time (the controller's clock;
    /// tests pass one that follows paused tokio time).
    #[must_use]
    pub fn with_clock(mut self, clock: Clock) -> Recorder {
        self.clock = clock;
        self
    }

    /// The component this recorder writes as.
    pub fn component(&self) -> &'static str {
        self.component
    }

    /// Records an event about `involved`. Never waits: when the queue is
    /// full the event is dropped and counted.
    pub fn event(
        &self,
        involved: &ObjectReference,
        type_: EventType,
        reason: &str,
        message: impl Into<String>,
    ) {
        let pending = Pending {
            involved: involved.clone(),
            type_,
            reason: reason.to_owned(),
            message: message.into(),
            at: self.clock.now(),
        };
        match self.tx.try_send(Msg::Event(Box::new(pending))) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.dropped_metric.inc();
                let n = self.dropped.fetch_add(1, Ordering::Relaxed);
                // Overload produces floods of drops: log the first and then
                // every thousandth.
                if n.is_multiple_of(1000) {
                    tracing::warn!(
                        component = self.component,
                        dropped = n + 1,
                        reason,
                        "event queue full, dropping event"
                    );
                }
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                tracing::warn!(
                    component = self.component,
                    reason,
                    "event writer stopped, dropping event"
                );
            }
        }
    }

    /// Formats the message like client-go's `Eventf`.
    pub fn eventf(
        &self,
        involved: &ObjectReference,
        type_: EventType,
        reason: &str,
        args: std::fmt::Arguments<'_>,
    ) {
        self.event(involved, type_, reason, args.to_string());
    }

    /// Waits until every event recorded before this call has been written
    /// (or given up on).
    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Msg::Flush(done)).await.is_ok() {
            let _ = wait.await;
        }
    }
}

/// The recorder's own counters by `component` (kcm-rs only; client-go
/// drops silently): `kcm_event_recorder_dropped_events_total`, events
/// dropped because the recorder's queue was full, and
/// `kcm_event_recorder_spam_filtered_events_total`, events dropped by the
/// per-object spam filter.
pub(crate) struct RecorderMetrics {
    dropped: IntCounterVec,
    pub(crate) spam_filtered: IntCounterVec,
}

impl RecorderMetrics {
    pub(crate) fn new(r: &Registry) -> Self {
        let counter = |name: &str, help: &str| {
            let c = IntCounterVec::new(Opts::new(name, help), &["component"])
                .expect("static metric definition is valid");
            crate::metrics::register(r, c)
        };
        RecorderMetrics {
            dropped: counter(
                "kcm_event_recorder_dropped_events_total",
                "Events dropped because the event recorder's queue was full.",
            ),
            spam_filtered: counter(
                "kcm_event_recorder_spam_filtered_events_total",
                "Events dropped because their object exceeded the event rate limit.",
            ),
        }
    }
}

/// The `reportingInstance`: the host (pod) name, or the component name when
/// it cannot be found.
fn hostname(component: &str) -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| component.to_owned())
}

/// The background task owning the correlation state.
struct Writer {
    client: kube::Client,
    component: &'static str,
    instance: Arc<str>,
    /// Put on every event created (none: as upstream).
    annotations: BTreeMap<String, String>,
    correlator: EventCorrelator,
    last_suffix: u64,
    /// Spam-filtered events so far, to rate-limit the log line.
    filtered: u64,
    /// `kcm_event_recorder_spam_filtered_events_total{component}`.
    spam_filtered: IntCounter,
}

impl Writer {
    async fn run(mut self, mut rx: mpsc::Receiver<Msg>) {
        while let Some(msg) = rx.recv().await {
            match msg {
                Msg::Event(p) => self.write(*p).await,
                Msg::Flush(done) => {
                    let _ = done.send(());
                }
            }
        }
    }

    /// A name suffix from the event time, strictly increasing so that two
    /// events about one object in the same nanosecond get distinct names.
    fn next_suffix(&mut self, at: Timestamp) -> u64 {
        self.last_suffix = unix_nanos(at).max(self.last_suffix.saturating_add(1));
        self.last_suffix
    }

    async fn write(&mut self, p: Pending) {
        tracing::debug!(
            component = self.component,
            kind = p.involved.kind.as_deref().unwrap_or_default(),
            namespace = p.involved.namespace.as_deref().unwrap_or_default(),
            name = p.involved.name.as_deref().unwrap_or_default(),
            type_ = p.type_.as_str(),
            reason = %p.reason,
            message = %p.message,
            "event"
        );
        let (key, message, decision) =
            match self
                .correlator
                .correlate(&p.involved, p.type_, &p.reason, &p.message, p.at)
            {
                Some(Planned {
                    key,
                    message,
                    decision,
                }) => (key, message, decision),
                None => {
                    self.spam_filtered.inc();
                    // Throttling is expected under event storms: log the
                    // first drop and then every hundredth.
                    if self.filtered.is_multiple_of(100) {
                        tracing::info!(
                            component = self.component,
                            filtered = self.filtered + 1,
                            reason = %p.reason,
                            "too many events about one object, dropping event"
                        );
                    }
                    self.filtered += 1;
                    return;
                }
            };
        let instance = self.instance.clone();
        let data = EventData {
            involved: &p.involved,
            type_: p.type_,
            reason: &p.reason,
            message: &message,
            component: self.component,
            instance: &instance,
        };
        let api: LeanApi<Event> =
            LeanApi::namespaced(self.client.clone(), &event_namespace(&p.involved));

        if let Decision::Patch(entry) = decision {
            let patch = count_patch(entry.count, entry.last, &message);
            match api
                .patch(&entry.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    self.correlator.record(key, entry);
                    return;
                }
                Err(kube::Error::Api(s)) if s.is_not_found() => {
                    // Expired (event TTL) or deleted: create it again under
                    // the same name with the count so far, as client-go does.
                    let ev = self.annotate(build_event(
                        &data,
                        entry.name.clone(),
                        entry.count,
                        entry.first,
                        entry.last,
                    ));
                    if self.create(&api, &ev).await {
                        self.correlator.record(key, entry);
                    } else {
                        self.correlator.forget(&key);
                    }
                    return;
                }
                Err(e) => {
                    tracing::warn!(component = self.component, event = %entry.name, error = %e, "could not update event");
                    return;
                }
            }
        }

        let name = event_name(
            p.involved.name.as_deref().unwrap_or_default(),
            self.next_suffix(p.at),
        );
        let ev = self.annotate(build_event(&data, name.clone(), 1, p.at, p.at));
        if self.create(&api, &ev).await {
            self.correlator.record(
                key,
                CacheEntry {
                    name,
                    namespace: event_namespace(&p.involved),
                    count: 1,
                    first: p.at,
                    last: p.at,
                },
            );
        }
    }

    fn annotate(&self, mut ev: Event) -> Event {
        if !self.annotations.is_empty() {
            ev.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .extend(self.annotations.clone());
        }
        ev
    }

    /// Creates `ev`, retrying transient failures. An AlreadyExists answer
    /// means an earlier attempt landed. Returns whether the event exists.
    async fn create(&self, api: &LeanApi<Event>, ev: &Event) -> bool {
        let name = ev.metadata.name.as_deref().unwrap_or_default();
        for attempt in 1..=WRITE_ATTEMPTS {
            match api.create(&PostParams::default(), ev).await {
                Ok(_) => return true,
                Err(kube::Error::Api(s)) if s.is_already_exists() => return true,
                Err(e) if attempt < WRITE_ATTEMPTS && is_transient(&e) => {
                    tracing::debug!(component = self.component, event = name, error = %e, "retrying event write");
                    tokio::time::sleep(WRITE_RETRY_DELAY).await;
                }
                Err(e) => {
                    tracing::warn!(component = self.component, event = name, error = %e, "could not write event");
                    return false;
                }
            }
        }
        false
    }
}

/// Transport failures and overload answers are worth another attempt;
/// validation, authorization and namespace-terminating errors are not.
fn is_transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests;
