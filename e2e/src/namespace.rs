//! A fresh namespace per test, so tests sharing one control plane never see
//! each other's objects.

use std::sync::atomic::{AtomicU32, Ordering};

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};

use crate::HarnessError;

pub struct TestNamespace {
    pub name: String,
}

impl TestNamespace {
    /// Creates a namespace named after `prefix` with a unique suffix.
    pub async fn create(client: &kube::Client, prefix: &str) -> Result<Self, HarnessError> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() % 1_000_000_000)
            .unwrap_or_default();
        let mut base: String = prefix
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .collect();
        base.truncate(40);
        let name = format!("{}-{}-{}", base.trim_matches('-'), stamp, n);
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await?;
        Ok(TestNamespace { name })
    }
}
