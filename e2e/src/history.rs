//! Records every watch event of the pods of a namespace, so a test can check
//! what a pod looked like before it disappeared (for example, that the
//! `DisruptionTarget` condition was written before the delete).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::watcher::{self, Event};
use parking_lot::Mutex;

/// What happened to a pod, in watch order.
#[derive(Debug, Clone)]
pub enum Seen {
    Applied(Box<Pod>),
    Deleted(Box<Pod>),
}

/// A background watch of one namespace's pods.
pub struct PodHistory {
    events: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PodHistory {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PodHistory {
    /// Starts watching and returns once the initial list is in.
    pub async fn start(client: &kube::Client, namespace: &str) -> Self {
        let events = Arc::new(Mutex::new(Vec::new()));
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let sink = Arc::clone(&events);
        let task = tokio::spawn(async move {
            let mut ready = Some(ready_tx);
            let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(Event::Apply(p) | Event::InitApply(p)) => {
                        sink.lock().push(Seen::Applied(Box::new(p)))
                    }
                    Ok(Event::Delete(p)) => sink.lock().push(Seen::Deleted(Box::new(p))),
                    Ok(Event::InitDone) => {
                        if let Some(tx) = ready.take() {
                            let _ = tx.send(());
                        }
                    }
                    Ok(Event::Init) => {}
                    Err(e) => tracing::warn!("pod history watch: {e}"),
                }
            }
        });
        let _ = tokio::time::timeout(Duration::from_secs(20), ready_rx).await;
        PodHistory { events, task }
    }

    /// Every event seen for pod `name`, in order.
    pub fn of(&self, name: &str) -> Vec<Seen> {
        self.events
            .lock()
            .iter()
            .filter(|s| {
                let p = match s {
                    Seen::Applied(p) | Seen::Deleted(p) => p,
                };
                p.metadata.name.as_deref() == Some(name)
            })
            .cloned()
            .collect()
    }

    /// Index of the first event where `pred` holds, if any.
    pub fn first(&self, name: &str, pred: impl Fn(&Seen) -> bool) -> Option<usize> {
        self.of(name).iter().position(pred)
    }

    /// True once the watch reported the pod deleted.
    pub fn deleted(&self, name: &str) -> bool {
        self.first(name, |s| matches!(s, Seen::Deleted(_)))
            .is_some()
    }
}

/// True when the pod carries condition `type_` with status True and `reason`.
pub fn has_condition(p: &Pod, type_: &str, reason: &str) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == type_ && c.status == "True" && c.reason.as_deref() == Some(reason)
            })
        })
}
