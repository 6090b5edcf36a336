//! The pods `explain` was given, by name: the report decides on their
//! cached form (what the controller reads) and shows what only the fetched
//! form holds (condition reasons, containers).

use k8s_openapi::api::core::v1::Pod;
use kcm_pod::CachedPod;

/// The fetched pods by name, beside their cached form.
pub(super) struct Fetched<'a>(std::collections::HashMap<&'a str, &'a Pod>);

impl<'a> Fetched<'a> {
    pub(super) fn new(pods: &'a [Pod]) -> Self {
        Fetched(
            pods.iter()
                .map(|p| (p.metadata.name.as_deref().unwrap_or(""), p))
                .collect(),
        )
    }

    /// The fetched form of `p` (every cached pod here was fetched).
    pub(super) fn of(&self, p: &CachedPod) -> &'a Pod {
        static NONE: std::sync::LazyLock<Pod> = std::sync::LazyLock::new(Pod::default);
        self.0.get(p.name()).copied().unwrap_or(&NONE)
    }
}
