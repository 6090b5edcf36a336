//! Waiting helpers: poll until a predicate holds, and on timeout report what
//! was last seen, so a failing test says why.

use std::fmt::Debug;
use std::time::Duration;

use kube::api::ListParams;
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// How often waits poll the API server.
const POLL: Duration = Duration::from_millis(100);

#[derive(Debug, thiserror::Error)]
#[error("timed out after {timeout:?} waiting for {what}; last seen:\n{last}")]
pub struct WaitTimeout {
    pub what: String,
    pub timeout: Duration,
    pub last: String,
}

fn render<T: Serialize>(value: &T) -> String {
    serde_yaml_ng::to_string(value).unwrap_or_else(|e| format!("<unprintable: {e}>"))
}

/// Polls `name` until `pred` holds; returns the object that satisfied it.
pub async fn wait_for<K>(
    api: &Api<K>,
    name: &str,
    timeout: Duration,
    what: &str,
    pred: impl Fn(&K) -> bool,
) -> Result<K, WaitTimeout>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last;
    loop {
        match api.get_opt(name).await {
            Ok(Some(obj)) => {
                if pred(&obj) {
                    return Ok(obj);
                }
                last = render(&obj);
            }
            Ok(None) => last = format!("<{name} not found>"),
            Err(e) => last = format!("<error reading {name}: {e}>"),
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(WaitTimeout {
                what: format!("{what} ({name})"),
                timeout,
                last,
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Polls until `name` no longer exists.
pub async fn wait_gone<K>(api: &Api<K>, name: &str, timeout: Duration) -> Result<(), WaitTimeout>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let last = match api.get_opt(name).await {
            Ok(None) => return Ok(()),
            Ok(Some(obj)) => render(&obj),
            Err(e) => format!("<error reading {name}: {e}>"),
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(WaitTimeout {
                what: format!("{name} to be deleted"),
                timeout,
                last,
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Polls a list until `pred` holds for its items.
pub async fn wait_for_list<K>(
    api: &Api<K>,
    params: &ListParams,
    timeout: Duration,
    what: &str,
    pred: impl Fn(&[K]) -> bool,
) -> Result<Vec<K>, WaitTimeout>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last;
    loop {
        match api.list(params).await {
            Ok(list) => {
                if pred(&list.items) {
                    return Ok(list.items);
                }
                last = render(&list.items);
            }
            Err(e) => last = format!("<error listing: {e}>"),
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(WaitTimeout {
                what: what.to_string(),
                timeout,
                last,
            });
        }
        tokio::time::sleep(POLL).await;
    }
}
