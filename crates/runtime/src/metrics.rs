//! The process-wide Prometheus registry. Every metric kcm-rs exposes is
//! registered here under its upstream name, so dashboards and alerts written
//! for kube-controller-manager keep working.

use std::sync::OnceLock;

use prometheus::{Encoder, Registry, TextEncoder};

/// The registry `/metrics` serves.
pub fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Registry::new)
}

/// Registers a collector, tolerating a second registration of the same
/// metric (tests build several controllers in one process).
pub fn register<C: prometheus::core::Collector + Clone + 'static>(c: C) -> C {
    match registry().register(Box::new(c.clone())) {
        Ok(()) | Err(prometheus::Error::AlreadyReg) => {}
        Err(e) => tracing::error!("registering metric: {e}"),
    }
    c
}

/// Content type of the Prometheus text format 0.0.4, as KCM serves it.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Renders every registered metric in the text format.
pub fn render() -> String {
    let mut buf = Vec::new();
    let families = registry().gather();
    if let Err(e) = TextEncoder::new().encode(&families, &mut buf) {
        tracing::error!("encoding metrics: {e}");
    }
    String::from_utf8(buf).unwrap_or_default()
}
