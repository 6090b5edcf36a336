//! The `workqueue_*` metric families, with the names, types, label and
//! buckets component-base registers for client-go queues, so existing
//! dashboards keep working.

use prometheus::{
    Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts,
};

use prometheus::Registry;

use crate::metrics::register;

/// The label every family is split by: the queue's name.
const LABEL: &str = "name";

/// Upstream's latency buckets, `ExponentialBuckets(10e-7, 10, 10)`: 1 µs up
/// to 1000 s, computed by repeated multiplication like Go so the bucket
/// bounds are bit-identical.
fn duration_buckets() -> Vec<f64> {
    prometheus::exponential_buckets(1e-6, 10.0, 10)
        .unwrap_or_else(|_| vec![1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0])
}

/// The `workqueue_*` families on one registry ([`crate::metrics::Metrics`]).
pub(crate) struct Families {
    depth: IntGaugeVec,
    adds: IntCounterVec,
    queue_duration: HistogramVec,
    work_duration: HistogramVec,
    unfinished_work: GaugeVec,
    longest_running: GaugeVec,
    retries: IntCounterVec,
}

impl Families {
    /// Builds the families and registers them on `r`. Building can only
    /// fail on invalid names or buckets, which are constants here; the
    /// `expect`s document that invariant.
    pub(crate) fn new(r: &Registry) -> Self {
        Families {
        depth: register(
            r,
            IntGaugeVec::new(
                Opts::new("workqueue_depth", "Number of keys currently waiting in the work queue."),
                &[LABEL],
            )
            .expect("valid workqueue_depth"),
        ),
        adds: register(
            r,
            IntCounterVec::new(
                Opts::new(
                    "workqueue_adds_total",
                    "Number of keys accepted by the work queue, not counting duplicates of a waiting key.",
                ),
                &[LABEL],
            )
            .expect("valid workqueue_adds_total"),
        ),
        queue_duration: register(
            r,
            HistogramVec::new(
                HistogramOpts::new(
                    "workqueue_queue_duration_seconds",
                    "Seconds a key waited in the work queue before a worker picked it up.",
                )
                .buckets(duration_buckets()),
                &[LABEL],
            )
            .expect("valid workqueue_queue_duration_seconds"),
        ),
        work_duration: register(
            r,
            HistogramVec::new(
                HistogramOpts::new(
                    "workqueue_work_duration_seconds",
                    "Seconds a worker spent on one key, from pick-up to done.",
                )
                .buckets(duration_buckets()),
                &[LABEL],
            )
            .expect("valid workqueue_work_duration_seconds"),
        ),
        unfinished_work: register(
            r,
            GaugeVec::new(
                Opts::new(
                    "workqueue_unfinished_work_seconds",
                    "Sum of the ages of all keys workers are still processing; growth without \
                     completions points at stuck workers.",
                ),
                &[LABEL],
            )
            .expect("valid workqueue_unfinished_work_seconds"),
        ),
        longest_running: register(
            r,
            GaugeVec::new(
                Opts::new(
                    "workqueue_longest_running_processor_seconds",
                    "Age in seconds of the key that has been in processing the longest.",
                ),
                &[LABEL],
            )
            .expect("valid workqueue_longest_running_processor_seconds"),
        ),
        retries: register(
            r,
            IntCounterVec::new(
                Opts::new(
                    "workqueue_retries_total",
                    "Number of delayed or rate-limited re-adds requested of the work queue.",
                ),
                &[LABEL],
            )
            .expect("valid workqueue_retries_total"),
        ),
        }
    }
}

/// The children of every family for one queue name.
#[derive(Clone)]
pub(super) struct QueueMetrics {
    pub(super) depth: IntGauge,
    pub(super) adds: IntCounter,
    pub(super) queue_duration: Histogram,
    pub(super) work_duration: Histogram,
    pub(super) unfinished_work: Gauge,
    pub(super) longest_running: Gauge,
    pub(super) retries: IntCounter,
}

impl QueueMetrics {
    pub(super) fn new(f: &Families, name: &str) -> Self {
        let l = [name];
        Self {
            depth: f.depth.with_label_values(&l),
            adds: f.adds.with_label_values(&l),
            queue_duration: f.queue_duration.with_label_values(&l),
            work_duration: f.work_duration.with_label_values(&l),
            unfinished_work: f.unfinished_work.with_label_values(&l),
            longest_running: f.longest_running.with_label_values(&l),
            retries: f.retries.with_label_values(&l),
        }
    }
}
