//! `kcm_rs_controller_sync_panics_total{controller}` and
//! `kcm_rs_controller_sync_timeouts_total{controller}`.

use prometheus::{IntCounter, IntCounterVec, Opts, Registry};

/// The families on one registry ([`crate::metrics::Metrics`]).
pub(crate) struct Families {
    panics: IntCounterVec,
    timeouts: IntCounterVec,
}

impl Families {
    pub(crate) fn new(r: &Registry) -> Self {
        let counter = |name: &str, help: &str| {
            crate::metrics::register(
                r,
                IntCounterVec::new(Opts::new(name, help), &["controller"])
                    .expect("constant metric definition is valid"),
            )
        };
        Families {
            panics: counter(
                "kcm_rs_controller_sync_panics_total",
                "Syncs (or periodic passes) that panicked; each key was retried with back-off.",
            ),
            timeouts: counter(
                "kcm_rs_controller_sync_timeouts_total",
                "Syncs (or periodic passes) cancelled for running past the sync timeout; each \
                 key was retried with back-off.",
            ),
        }
    }
}

/// One controller's series, created at zero so alerts see them at once.
#[derive(Clone)]
pub(super) struct SyncMetrics {
    pub panics: IntCounter,
    pub timeouts: IntCounter,
}

impl SyncMetrics {
    pub fn new(f: &Families, controller: &str) -> Self {
        SyncMetrics {
            panics: f.panics.with_label_values(&[controller]),
            timeouts: f.timeouts.with_label_values(&[controller]),
        }
    }
}
