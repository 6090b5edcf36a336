//! Metrics are passed in, never global: [`Metrics`] holds the runtime's
//! families (work queues, clients, hosts, event recorders, leader election,
//! connections) registered once on the [`Registry`] it is built with, and
//! everything the runtime builds takes it at construction
//! ([`ControllerContext`](crate::controller::ControllerContext) carries it
//! to the controllers, which register their own families on
//! [`Metrics::registry`]). Two contexts on two registries share nothing, so
//! tests do not see each other's counters. Every family keeps its upstream
//! name, so dashboards and alerts written for kube-controller-manager keep
//! working.
//!
//! [`registry`], [`render`] and [`register_build_info`] are the binary's
//! registry, what its `/metrics` serves: only `cmd/kcm-rs` reads them (it
//! hands the registry to the context and to serving); no library does.
//! Each has a form that takes the registry ([`Metrics::new`],
//! [`render_of`], [`build_info`]), so the binary can own it as a value.

use std::sync::Arc;

use prometheus::core::Collector;
use prometheus::{Encoder, IntGaugeVec, Registry, TextEncoder};

/// The runtime's metric families on one registry; cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    pub(crate) workqueue: Arc<crate::workqueue::Families>,
    pub(crate) client: Arc<crate::client::RestClientMetrics>,
    pub(crate) host: Arc<crate::host::Families>,
    pub(crate) events: Arc<crate::events::RecorderMetrics>,
    pub(crate) leader: IntGaugeVec,
    pub(crate) connections: IntGaugeVec,
}

impl Metrics {
    /// The runtime's families, registered on `registry`. Building them can
    /// fail only on invalid names or buckets, constants here; registering,
    /// only on a second registration of the same family, a bug (logged).
    pub fn new(registry: &Registry) -> Self {
        Metrics {
            registry: registry.clone(),
            workqueue: Arc::new(crate::workqueue::Families::new(registry)),
            client: Arc::new(crate::client::RestClientMetrics::new(registry)),
            host: Arc::new(crate::host::Families::new(registry)),
            events: Arc::new(crate::events::RecorderMetrics::new(registry)),
            leader: crate::leader::master_status(registry),
            connections: crate::client::transport::connections_gauge(registry),
        }
    }

    /// On a registry of its own that nobody serves: for tests and tools.
    pub fn detached() -> Self {
        Metrics::new(&Registry::new())
    }

    /// The registry, for the families of a controller.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// `rest_client_connections{host,protocol}`: the open connections of
    /// the clients built with these metrics.
    pub fn connections(&self) -> &IntGaugeVec {
        &self.connections
    }

    /// Registers `c` on [`Metrics::registry`].
    pub fn register<C: Collector + Clone + 'static>(&self, c: C) -> C {
        register(&self.registry, c)
    }

    /// Every family in the text format.
    pub fn render(&self) -> String {
        render_of(&self.registry)
    }
}

impl Default for Metrics {
    /// [`Metrics::detached`].
    fn default() -> Self {
        Metrics::detached()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

/// Registers a collector on `registry`: a second registration of the same
/// family is a bug, logged rather than fatal (metrics never stop a
/// controller).
pub fn register<C: Collector + Clone + 'static>(registry: &Registry, c: C) -> C {
    if let Err(e) = registry.register(Box::new(c.clone())) {
        tracing::error!("registering metric: {e}");
    }
    c
}

/// Content type of the Prometheus text format 0.0.4, as KCM serves it.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Every family of `registry` in the text format.
pub fn render_of(registry: &Registry) -> String {
    let mut buf = Vec::new();
    let families = registry.gather();
    if let Err(e) = TextEncoder::new().encode(&families, &mut buf) {
        tracing::error!("encoding metrics: {e}");
    }
    String::from_utf8(buf).unwrap_or_default()
}

/// The Kubernetes API version kcm-rs is built against (k8s-openapi's
/// `v1_*` feature the binary selects), e.g. `v1.37`.
#[allow(unreachable_code)]
pub fn kubernetes_api_version() -> &'static str {
    k8s_openapi::k8s_if_1_33! { return "v1.33"; }
    k8s_openapi::k8s_if_1_34! { return "v1.34"; }
    k8s_openapi::k8s_if_1_35! { return "v1.35"; }
    k8s_openapi::k8s_if_1_36! { return "v1.36"; }
    k8s_openapi::k8s_if_1_37! { return "v1.37"; }
    "unknown"
}

/// `kcm_rs_build_info{version,git_commit,kubernetes_version} 1` on
/// `registry`.
pub fn build_info(registry: &Registry, version: &str, git_commit: &str) {
    let opts = prometheus::Opts::new(
        "kcm_rs_build_info",
        "A metric with a constant '1' value labeled by the kcm-rs version, the git commit \
         it was built from and the Kubernetes API version it was built against.",
    );
    let labels = ["version", "git_commit", "kubernetes_version"];
    match prometheus::IntGaugeVec::new(opts, &labels) {
        Ok(g) => register(registry, g)
            .with_label_values(&[version, git_commit, kubernetes_api_version()])
            .set(1),
        Err(e) => tracing::error!("kcm_rs_build_info: {e}"),
    }
}

/// Registers `kcm_rs_version_skew{server_version,behaves_as}`: how many
/// minors the API server is newer than the KCM kcm-rs behaves as (0, or 1
/// within KCM's skew policy), so an upgrade left half-done can alert.
pub fn register_version_skew(
    registry: &Registry,
    server_version: &str,
    behaves_as: &str,
    minors_newer: i64,
) {
    let opts = prometheus::Opts::new(
        "kcm_rs_version_skew",
        "How many minor versions the API server is newer than the kube-controller-manager \
         kcm-rs behaves as (1: kcm-rs lags its control plane and should be upgraded).",
    );
    match prometheus::IntGaugeVec::new(opts, &["server_version", "behaves_as"]) {
        Ok(g) => register(registry, g)
            .with_label_values(&[server_version, behaves_as])
            .set(minors_newer),
        Err(e) => tracing::error!("kcm_rs_version_skew: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workqueue::{RetryRateLimit, WorkQueue};

    #[test]
    fn two_registries_share_no_series() {
        let (a, b) = (Metrics::detached(), Metrics::detached());
        let q: WorkQueue<u32> = WorkQueue::new("q", RetryRateLimit::default(), &a);
        q.add(1);
        assert!(
            a.render().contains("workqueue_depth{name=\"q\"} 1"),
            "{}",
            a.render()
        );
        assert!(!b.render().contains("name=\"q\""), "{}", b.render());
    }

    #[test]
    fn build_info_is_one_series_with_its_labels() {
        let registry = Registry::new();
        build_info(&registry, "1.2.3", "abc123");
        let text = render_of(&registry);
        let line = text.lines().find(|l| l.starts_with("kcm_rs_build_info{"));
        let line = line.unwrap_or_else(|| panic!("no kcm_rs_build_info in:\n{text}"));
        for want in [
            "version=\"1.2.3\"",
            "git_commit=\"abc123\"",
            "kubernetes_version=\"v1.37\"",
        ] {
            assert!(line.contains(want), "{line}");
        }
        assert!(line.ends_with(" 1"), "{line}");
    }
}
