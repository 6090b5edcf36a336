//! One informer per kind for the whole process, created on demand by the
//! controllers that need it and started together.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{Informable, Informer, ListWatch};

type Starter = Box<dyn FnOnce(kube::Client, CancellationToken) + Send>;

struct Entry {
    informer: Arc<dyn Any + Send + Sync>,
    starter: Option<Starter>,
    /// The informer's synced flag (true once its first list is applied).
    synced: watch::Receiver<bool>,
    kind: String,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<TypeId, Entry>,
    stop: Option<CancellationToken>,
}

/// The encoding informers ask the API server for
/// (`--kube-api-content-type`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ContentType {
    /// JSON for every kind.
    Json,
    /// Protobuf for kinds with a protobuf decoder (pods), JSON for the
    /// rest; KCM's default and kcm-rs's: the API server encodes a JSON
    /// watch event about twice as dearly (`docs/apiserver-cost.md`).
    #[default]
    Protobuf,
}

impl std::str::FromStr for ContentType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "application/json" => Ok(ContentType::Json),
            super::PROTOBUF => Ok(ContentType::Protobuf),
            other => Err(format!(
                "unsupported content type {other:?}: use application/json or {}",
                super::PROTOBUF
            )),
        }
    }
}

/// Hands out shared informers; `start` runs the watches.
#[derive(Clone)]
pub struct InformerFactory {
    client: kube::Client,
    content_type: ContentType,
    inner: Arc<Mutex<Inner>>,
}

impl InformerFactory {
    /// A factory whose informers use kcm-rs's default encoding (protobuf
    /// pods).
    pub fn new(client: kube::Client) -> Self {
        Self::with_content_type(client, ContentType::default())
    }

    pub fn with_content_type(client: kube::Client, content_type: ContentType) -> Self {
        InformerFactory {
            client,
            content_type,
            inner: Arc::new(Mutex::new(Inner::default())),
        }
    }

    /// The shared informer of kind `K` (cluster-wide). Created on first use;
    /// if the factory already started, its watch starts at once.
    pub fn informer<K: Informable>(&self) -> Arc<Informer<K>> {
        let mut inner = self.inner.lock();
        if let Some(e) = inner.entries.get(&TypeId::of::<K>())
            && let Ok(inf) = Arc::clone(&e.informer).downcast::<Informer<K>>()
        {
            return inf;
        }
        let inf = Arc::new(Informer::<K>::new());
        let for_start = Arc::clone(&inf);
        let proto = K::DECODE_PROTO.filter(|_| self.content_type == ContentType::Protobuf);
        let starter: Starter = Box::new(move |client, stop| {
            let settings = ListWatch::from_env();
            match proto {
                Some(decode) => tokio::spawn(for_start.run_proto(client, decode, settings, stop)),
                None => tokio::spawn(for_start.run_with(client, settings, stop)),
            };
        });
        let mut entry = Entry {
            informer: inf.clone(),
            starter: Some(starter),
            synced: inf.synced.subscribe(),
            kind: inf.kind().to_string(),
        };
        if let Some(stop) = inner.stop.clone()
            && let Some(start) = entry.starter.take()
        {
            start(self.client.clone(), stop);
        }
        inner.entries.insert(TypeId::of::<K>(), entry);
        inf
    }

    /// Starts every informer created so far (and any created later).
    pub fn start(&self, stop: CancellationToken) {
        let mut inner = self.inner.lock();
        inner.stop = Some(stop.clone());
        for e in inner.entries.values_mut() {
            if let Some(start) = e.starter.take() {
                start(self.client.clone(), stop.clone());
            }
        }
    }

    /// True when every informer has applied its first full list.
    pub fn has_synced(&self) -> bool {
        let inner = self.inner.lock();
        inner.entries.values().all(|e| *e.synced.borrow())
    }

    /// Kinds whose first list has not arrived yet.
    pub fn unsynced_kinds(&self) -> Vec<String> {
        let inner = self.inner.lock();
        inner
            .entries
            .values()
            .filter(|e| !*e.synced.borrow())
            .map(|e| e.kind.clone())
            .collect()
    }

    /// Waits until every informer has synced, woken by the informers
    /// themselves (no polling). Informers created meanwhile are waited
    /// for too: the set is read again once the ones seen have synced.
    pub async fn wait_for_sync(&self) {
        loop {
            let waiting: Vec<watch::Receiver<bool>> = {
                let inner = self.inner.lock();
                inner
                    .entries
                    .values()
                    .filter(|e| !*e.synced.borrow())
                    .map(|e| e.synced.clone())
                    .collect()
            };
            if waiting.is_empty() {
                return;
            }
            for mut rx in waiting {
                // The factory holds every informer, so its sender lives
                // as long as the entry; a closed channel would never
                // sync, and must not make this loop spin.
                if rx.wait_for(|s| *s).await.is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
