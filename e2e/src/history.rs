//! Records every watch event of the pods of a namespace, so a test can check
//! what a pod looked like before it disappeared (for example, that the
//! `DisruptionTarget` condition was written before the delete), and when
//! each event arrived.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use kube::Api;
use kube::runtime::watcher::{self, Event};
use parking_lot::Mutex;

/// What happened to a pod, in watch order.
#[derive(Debug, Clone)]
pub enum Seen {
    Applied(Box<Pod>),
    Deleted(Box<Pod>),
}

impl Seen {
    /// The pod as this event showed it.
    pub fn pod(&self) -> &Pod {
        match self {
            Seen::Applied(p) | Seen::Deleted(p) => p,
        }
    }

    /// A delete event, or the pod marked for deletion (`deletionTimestamp`
    /// set): the moment a DELETE took effect, even where a grace period or
    /// finalizers keep the object a while longer.
    pub fn deleting(&self) -> bool {
        matches!(self, Seen::Deleted(_)) || self.pod().metadata.deletion_timestamp.is_some()
    }
}

/// A background watch of one namespace's pods.
pub struct PodHistory {
    events: Arc<Mutex<Vec<(Instant, Seen)>>>,
    synced: bool,
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
                    Ok(Event::Apply(p) | Event::InitApply(p)) => sink
                        .lock()
                        .push((Instant::now(), Seen::Applied(Box::new(p)))),
                    Ok(Event::Delete(p)) => sink
                        .lock()
                        .push((Instant::now(), Seen::Deleted(Box::new(p)))),
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
        let ready = tokio::time::timeout(Duration::from_secs(20), ready_rx).await;
        let synced = matches!(ready, Ok(Ok(())));
        PodHistory {
            events,
            synced,
            task,
        }
    }

    /// Whether [`start`](Self::start) returned with the initial list in
    /// (rather than after its 20 s timeout): only then were all later events
    /// recorded as they happened.
    pub fn synced(&self) -> bool {
        self.synced
    }

    /// Every event seen for pod `name`, in order.
    /// Every event of every pod, in watch order.
    pub fn all(&self) -> Vec<Seen> {
        self.events.lock().iter().map(|(_, s)| s.clone()).collect()
    }

    pub fn of(&self, name: &str) -> Vec<Seen> {
        self.timed(name, None).into_iter().map(|(_, s)| s).collect()
    }

    /// Every event seen for pod `name`, in order, with the time it arrived;
    /// with `uid`, only those of that pod (one recreated under the same name
    /// has a new UID).
    pub fn timed(&self, name: &str, uid: Option<&str>) -> Vec<(Instant, Seen)> {
        self.events
            .lock()
            .iter()
            .filter(|(_, s)| {
                let meta = &s.pod().metadata;
                meta.name.as_deref() == Some(name) && (uid.is_none() || meta.uid.as_deref() == uid)
            })
            .cloned()
            .collect()
    }

    /// Index (among [`timed`](Self::timed)`(name, uid)`) and arrival time of
    /// the first event of the pod where `pred` holds, if any.
    pub fn first_at(
        &self,
        name: &str,
        uid: Option<&str>,
        pred: impl Fn(&Seen) -> bool,
    ) -> Option<(usize, Instant)> {
        self.timed(name, uid)
            .iter()
            .enumerate()
            .find(|(_, (_, s))| pred(s))
            .map(|(i, (at, _))| (i, *at))
    }

    /// When the pod (of `uid`, if given) was first seen deleted or
    /// terminating (see [`Seen::deleting`]).
    pub fn deleting_at(&self, name: &str, uid: Option<&str>) -> Option<Instant> {
        self.first_at(name, uid, Seen::deleting).map(|(_, at)| at)
    }

    /// Polls until the pod (of `uid`, if given) is seen deleted or
    /// terminating, for at most `timeout`; whether it was.
    pub async fn wait_deleting(&self, name: &str, uid: Option<&str>, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            if self.deleting_at(name, uid).is_some() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.deleting_at(name, uid).is_some()
    }

    /// The pod (of `uid`, if given) as last seen.
    pub fn last(&self, name: &str, uid: Option<&str>) -> Option<Pod> {
        self.timed(name, uid).pop().map(|(_, s)| s.pod().clone())
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

/// The pod's condition `type_`, whatever its status and reason.
pub fn condition<'a>(p: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
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
