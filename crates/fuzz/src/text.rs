//! What the operator or a file gives kcm-rs: kubeconfigs, flag values,
//! manifests for `explain` and `lint`.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod};
use kcm_features::{Emulation, FeatureGates, KubeVersion};
use kcm_job::explain::{self, Request, WhatIf};
use kube::client::ConfigExt;
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::Value;

/// A kubeconfig as `cmd/kcm-rs/src/kubeconfig.rs` loads it (kube's YAML
/// parser and its merge of documents, then the config with its base64
/// data) and the TLS configuration a client builds from it (the PEM
/// certificates and key). File paths and exec/auth-provider plugins are
/// dropped first: the fuzzer must not open files or run commands.
pub fn kubeconfig(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(mut kc) = Kubeconfig::from_yaml(text) else {
        return;
    };
    for c in kc.clusters.iter_mut().filter_map(|c| c.cluster.as_mut()) {
        c.certificate_authority = None;
    }
    for a in kc
        .auth_infos
        .iter_mut()
        .filter_map(|a| a.auth_info.as_mut())
    {
        a.client_certificate = None;
        a.client_key = None;
        a.token_file = None;
        a.exec = None;
        a.auth_provider = None;
    }
    // Nothing in it awaits (kube keeps it async for plugins).
    let loaded = futures::executor::block_on(kube::Config::from_custom_kubeconfig(
        kc,
        &KubeConfigOptions::default(),
    ));
    if let Ok(config) = loaded {
        let _ = config.rustls_client_config();
    }
}

/// Splits off the first byte as a selector for the parsers that take one.
fn selector_and_text(data: &[u8]) -> (u8, std::borrow::Cow<'_, str>) {
    match data.split_first() {
        Some((b, rest)) => (*b, String::from_utf8_lossy(rest)),
        None => (0, "".into()),
    }
}

/// `--feature-gates` at the emulation version the first byte picks, as
/// one value and as the flag given twice (split at the first `;`).
pub fn feature_gates(data: &[u8]) {
    let (sel, text) = selector_and_text(data);
    let all: Vec<Emulation> = Emulation::all().collect();
    let emulation = all[usize::from(sel) % all.len()];
    let _ = FeatureGates::parse_at(emulation, &text);
    let (first, second) = text.split_once(';').unwrap_or((&text, ""));
    let mut gates = FeatureGates::default();
    if gates.apply(first).is_ok()
        && gates.apply(second).is_ok()
        && let Ok(g) = gates.resolve_at(emulation)
    {
        let _ = (g.ignored(), g.emulation_deviations());
    }
}

/// The other flag values: Go durations and booleans, `--emulated-version`
/// with a server's `gitVersion` (split at the first newline), TLS
/// versions and cipher suites, `--job-managed-by`.
pub fn flag_values(data: &[u8]) {
    let (_, text) = selector_and_text(data);
    let text = &*text;
    let _ = kcm_runtime::flag_values::parse_go_duration(text);
    let _ = kcm_runtime::flag_values::parse_go_bool(text);
    let _ = KubeVersion::from_flag(text);
    let _ = KubeVersion::from_git_version(text);
    let (flag, server) = text.split_once('\n').unwrap_or((text, "v1.34.0"));
    let _ = kcm_features::Emulation::choose(Some(flag), server);
    let _ = kcm_features::Emulation::choose(None, flag);
    let _ = kcm_serving::parse_min_version(text);
    for suite in text.split(',') {
        let _ = kcm_serving::parse_cipher_suite(suite);
    }
    let _ = kcm_job::settings::validate_managed_by(text);
}

/// A manifest file as `explain -f` and `lint -f` read it: the documents,
/// each linted, and the first Job explained with the file's pods and
/// events (its own podFailurePolicy as the what-if), at a fixed time.
pub fn manifests(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(docs) = kcm_yaml_docs::documents(text) else {
        return;
    };
    for d in &docs {
        let _ = kcm_job::lint::lint_document(d);
    }
    let of_kind = |kind: &'static str| {
        docs.iter()
            .filter(move |d| d["kind"].as_str().is_none_or(|k| k == kind))
            .cloned()
    };
    let Some(job) = of_kind("Job").find_map(|d| serde_json::from_value::<Job>(d).ok()) else {
        return;
    };
    let pods: Vec<Pod> = decoded(of_kind("Pod"));
    let events: Vec<Event> = decoded(of_kind("Event"));
    let spec = job.spec.as_ref();
    let what_if = WhatIf {
        policy: spec.and_then(|s| s.pod_failure_policy.clone()),
        backoff_limit: spec.and_then(|s| s.backoff_limit),
        backoff_limit_per_index: spec.and_then(|s| s.backoff_limit_per_index),
    };
    let gates = FeatureGates::default();
    let report = explain::explain(&Request {
        job: &job,
        pods: &pods,
        events: &events,
        config: kcm_job::sync::Config::new(&gates),
        now: jiff::Timestamp::from_second(1_767_225_600).unwrap_or_default(),
        what_if: what_if.policy.is_some().then_some(&what_if),
    });
    let _ = serde_json::to_string(&report);
}

fn decoded<T: serde::de::DeserializeOwned>(docs: impl Iterator<Item = Value>) -> Vec<T> {
    docs.filter_map(|d| serde_json::from_value(d).ok())
        .collect()
}
