//! Reads back the core/v1 Events controllers record about an object, as one
//! comparable line each, so a test (or a differential test, against
//! upstream) can check what was reported.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::ListParams;

use crate::HarnessError;

/// The Events in `namespace` about the object named `involved` with
/// `reason`, each as `"<type> <message> [<source component>]"`, e.g.
/// `"Normal Marking for deletion Pod ns/p [taint-eviction-controller]"`.
pub async fn summaries(
    client: &kube::Client,
    namespace: &str,
    involved: &str,
    reason: &str,
) -> Result<BTreeSet<String>, HarnessError> {
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    let list = events.list(&ListParams::default()).await?;
    Ok(list
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(involved))
        .filter(|e| e.reason.as_deref() == Some(reason))
        .map(|e| {
            format!(
                "{} {} [{}]",
                e.type_.unwrap_or_default(),
                e.message.unwrap_or_default(),
                e.source.and_then(|s| s.component).unwrap_or_default()
            )
        })
        .collect())
}

/// Polls [`summaries`] until each of `want` is part of some line, for at
/// most `timeout`, and returns the lines as last read (whether or not all
/// of `want` came).
pub async fn wait_summaries(
    client: &kube::Client,
    namespace: &str,
    involved: &str,
    reason: &str,
    want: &[String],
    timeout: Duration,
) -> Result<BTreeSet<String>, HarnessError> {
    let end = Instant::now() + timeout;
    loop {
        let have = summaries(client, namespace, involved, reason).await?;
        let all = want
            .iter()
            .all(|w| have.iter().any(|h| h.contains(w.as_str())));
        if all || Instant::now() >= end {
            return Ok(have);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
