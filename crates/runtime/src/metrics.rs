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

/// Registers `kcm_rs_build_info{version,git_commit,kubernetes_version} 1`,
/// as Go components export `kubernetes_build_info`.
pub fn register_build_info(version: &str, git_commit: &str) {
    let opts = prometheus::Opts::new(
        "kcm_rs_build_info",
        "A metric with a constant '1' value labeled by the kcm-rs version, the git commit \
         it was built from and the Kubernetes API version it was built against.",
    );
    let labels = ["version", "git_commit", "kubernetes_version"];
    match prometheus::IntGaugeVec::new(opts, &labels) {
        Ok(g) => register(g)
            .with_label_values(&[version, git_commit, kubernetes_api_version()])
            .set(1),
        Err(e) => tracing::error!("kcm_rs_build_info: {e}"),
    }
}

/// Registers `kcm_rs_version_skew{server_version,behaves_as}`: how many
/// minors the API server is newer than the KCM kcm-rs behaves as (0, or 1
/// within KCM's skew policy), so an upgrade left half-done can alert.
pub fn register_version_skew(server_version: &str, behaves_as: &str, minors_newer: i64) {
    let opts = prometheus::Opts::new(
        "kcm_rs_version_skew",
        "How many minor versions the API server is newer than the kube-controller-manager \
         kcm-rs behaves as (1: kcm-rs lags its control plane and should be upgraded).",
    );
    match prometheus::IntGaugeVec::new(opts, &["server_version", "behaves_as"]) {
        Ok(g) => register(g)
            .with_label_values(&[server_version, behaves_as])
            .set(minors_newer),
        Err(e) => tracing::error!("kcm_rs_version_skew: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_info_is_one_series_with_its_labels() {
        register_build_info("1.2.3", "abc123");
        let text = render();
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
