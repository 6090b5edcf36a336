//! Shared informers: one watch per resource kind for the whole process, an
//! indexed store, and fan-out of full events (add, update with the old
//! object, delete with the last state) to every registered handler.
//!
//! Layout: `reflector.rs` lists and watches (streaming lists where the
//! server serves them, client-go's fallback otherwise) in the encoding of
//! `encoding.rs` (JSON; protobuf for kinds with a protobuf decoder when
//! the factory is set to it, `--kube-api-content-type`), with watch frames
//! bounded; `store.rs` holds the indexed cache, `factory.rs` hands out one
//! informer per kind, `wire.rs`/`trim.rs` shape what is cached. Objects
//! missing from a relist are reported as deletes.

mod encoding;
mod factory;
mod reflector;
mod store;
mod trim;
mod wire;

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use kcm_pod::CachedPod;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource};
use parking_lot::RwLock;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use encoding::{INITIAL_EVENTS_END, MAX_FRAME, PROTOBUF, ProtoDecoder, content_type};
pub use factory::{ContentType, InformerFactory};
/// An object's key (`namespace/name`, or `name`): one spelling, in
/// `kcm_pod::meta`; [`Informable::key`] is it for a cached object.
pub use kcm_pod::meta::key_of;
pub use reflector::ListWatch;
pub use store::{
    BY_CONTROLLER_UID, BY_NAMESPACE, BY_NODE_NAME, IndexFn, Store, controller_uid_index,
    namespace_index, namespace_of, pod_controller_uid_index, pod_node_index,
};
pub use wire::WirePod;

/// A change to one object, as handlers see it.
#[derive(Debug)]
pub enum Change<K> {
    Added(Arc<K>),
    Updated { old: Arc<K>, new: Arc<K> },
    Deleted(Arc<K>),
}

/// An event handler. Handlers run on the informer's task and must be quick:
/// map the change to work-queue keys and return.
pub type Handler<K> = Arc<dyn Fn(&Change<K>) + Send + Sync>;

/// What a cached type needs to be informed on. `Wire` is the type its
/// watch decodes (a kube `Resource`): the kind itself, or for pods a
/// [`WirePod`] carrying the [`CachedPod`] decoded straight from the JSON.
/// The cached type itself need not be a `Resource`: it only names its
/// kind, key and resourceVersion.
pub trait Informable: Clone + Debug + Send + Sync + 'static {
    type Wire: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static;
    /// The object as the cache keeps it (trimmed).
    fn from_wire(wire: Self::Wire) -> Self;
    /// The API kind, e.g. `Pod`.
    fn kind() -> String {
        Self::Wire::kind(&()).into_owned()
    }
    /// `metadata.namespace`, "" when cluster-scoped or unset.
    fn namespace(&self) -> &str;
    /// `metadata.name`, "" when unset.
    fn name(&self) -> &str;
    /// `metadata.resourceVersion`, "" when unset.
    fn resource_version(&self) -> &str;
    /// The key the store, the queues and the logs know it by ([`key_of`]).
    fn key(&self) -> String {
        key_of(self.namespace(), self.name())
    }
    /// Decodes the kind's protobuf message, for kinds the informer may
    /// read in protobuf; `None`: JSON only.
    const DECODE_PROTO: Option<ProtoDecoder<Self>> = None;
}

impl Informable for CachedPod {
    type Wire = WirePod;
    const DECODE_PROTO: Option<ProtoDecoder<Self>> = Some(CachedPod::decode_proto);
    fn from_wire(wire: WirePod) -> CachedPod {
        wire.into()
    }
    fn namespace(&self) -> &str {
        CachedPod::namespace(self)
    }
    fn name(&self) -> &str {
        CachedPod::name(self)
    }
    fn resource_version(&self) -> &str {
        CachedPod::resource_version(self)
    }
}

/// Kinds cached as the API types (only their `managedFields` are dropped,
/// by `trim`).
macro_rules! informable_as_is {
    ($($kind:ty),* $(,)?) => {$(
        impl Informable for $kind {
            type Wire = $kind;
            fn from_wire(wire: $kind) -> $kind {
                trim::trim(wire)
            }
            fn namespace(&self) -> &str {
                self.meta().namespace.as_deref().unwrap_or("")
            }
            fn name(&self) -> &str {
                self.meta().name.as_deref().unwrap_or("")
            }
            fn resource_version(&self) -> &str {
                self.meta().resource_version.as_deref().unwrap_or("")
            }
        }
    )*};
}

informable_as_is!(
    k8s_openapi::api::batch::v1::Job,
    k8s_openapi::api::core::v1::Node,
    k8s_openapi::api::core::v1::Namespace,
    k8s_openapi::api::core::v1::ReplicationController,
    k8s_openapi::api::apps::v1::ReplicaSet,
    k8s_openapi::api::apps::v1::Deployment,
    k8s_openapi::api::apps::v1::StatefulSet,
    k8s_openapi::api::policy::v1::PodDisruptionBudget,
);

/// One resource kind's shared informer.
pub struct Informer<K: Informable> {
    store: Store<K>,
    handlers: RwLock<Vec<Handler<K>>>,
    synced: watch::Sender<bool>,
    kind: String,
    /// Where the watch task stands: one of the `WATCH_*` values.
    watch: AtomicU8,
    /// The highest resourceVersion applied to the store (0: none yet).
    last_rv: AtomicU64,
}

/// [`Informer::run`] has not been called.
const WATCH_IDLE: u8 = 0;
/// The watch task runs.
const WATCH_RUNNING: u8 = 1;
/// The watch task ended because its stop token was cancelled.
const WATCH_STOPPED: u8 = 2;
/// The watch task ended on its own: the stream ended or a handler panicked.
const WATCH_ENDED: u8 = 3;

/// Marks the watch as running while alive and records how it ended when
/// dropped, unwinding included.
struct WatchGuard<'a> {
    state: &'a AtomicU8,
    stop: &'a CancellationToken,
}

impl<'a> WatchGuard<'a> {
    fn new(state: &'a AtomicU8, stop: &'a CancellationToken) -> Self {
        state.store(WATCH_RUNNING, Ordering::Release);
        WatchGuard { state, stop }
    }
}

impl Drop for WatchGuard<'_> {
    fn drop(&mut self) {
        let end = if self.stop.is_cancelled() {
            WATCH_STOPPED
        } else {
            WATCH_ENDED
        };
        self.state.store(end, Ordering::Release);
    }
}

impl<K: Informable> Informer<K> {
    pub(crate) fn new() -> Self {
        Informer {
            store: Store::default(),
            handlers: RwLock::new(Vec::new()),
            synced: watch::channel(false).0,
            kind: K::kind(),
            watch: AtomicU8::new(WATCH_IDLE),
            last_rv: AtomicU64::new(0),
        }
    }

    /// An informer with no watch, fed by hand: a test or a tool owns it and
    /// plays the API server's part. It counts as synced at once (there is no
    /// initial list to wait for); [`feed_apply`](Self::feed_apply) and
    /// [`feed_delete`](Self::feed_delete) take the path watch events take
    /// (store, indexes, resourceVersion tracking, handlers).
    pub fn fed() -> Self {
        let inf = Self::new();
        inf.synced.send_replace(true);
        inf
    }

    /// Applies `obj` as a watch event would: added, or an update of the
    /// stored object with the same namespace/name.
    pub fn feed_apply(&self, obj: impl Into<K>) {
        self.apply(Event::Apply(obj.into()), &mut None);
    }

    /// Removes `obj` as a watch delete event would; handlers see the last
    /// stored state (or `obj` when nothing was stored).
    pub fn feed_delete(&self, obj: impl Into<K>) {
        self.apply(Event::Delete(obj.into()), &mut None);
    }

    /// True once the watch task has ended without being asked to stop: its
    /// stream ended or a handler panicked. The store then no longer
    /// changes; the controller host reports its controllers unhealthy.
    pub fn watch_ended(&self) -> bool {
        self.watch.load(Ordering::Acquire) == WATCH_ENDED
    }

    /// The highest resourceVersion of an object this informer has applied
    /// (added, updated or deleted), `None` before the first. A write that
    /// returned resourceVersion `r` is visible here once this is `>= r`:
    /// the write's own watch event carries `r`. (Upstream's informer also
    /// counts list versions and bookmarks, which kube's watcher does not
    /// surface; our own writes always come back as events.)
    pub fn last_resource_version(&self) -> Option<u64> {
        match self.last_rv.load(Ordering::Acquire) {
            0 => None,
            rv => Some(rv),
        }
    }

    fn saw(&self, obj: &K) {
        if let Some(rv) = parse_rv(obj.resource_version()) {
            self.last_rv.fetch_max(rv, Ordering::AcqRel);
        }
    }

    /// The kind this informer watches, e.g. `Pod`.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The indexed store (read-only to controllers).
    pub fn store(&self) -> &Store<K> {
        &self.store
    }

    /// Adds an index. Call before the informer starts.
    pub fn add_index(&self, name: &'static str, f: IndexFn<K>) {
        self.store.add_index(name, f);
    }

    /// Registers a handler. A handler registered after the initial list sees
    /// every object already known as an add, then live changes; it never
    /// misses or duplicates one (the store cannot change while it is added).
    pub fn add_handler(&self, h: Handler<K>) {
        let mut handlers = self.handlers.write();
        if *self.synced.borrow() {
            for obj in self.store.list() {
                h(&Change::Added(obj));
            }
        }
        handlers.push(h);
    }

    /// True once the first full list has been applied.
    pub fn has_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Waits for the first full list.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Applies one watch event to the store and tells the handlers. The
    /// handler lock is held while the store changes, so a handler being
    /// registered sees each change exactly once.
    fn apply(&self, event: Event<K>, relist: &mut Option<Vec<K>>) {
        if let Event::InitApply(obj) | Event::Apply(obj) | Event::Delete(obj) = &event {
            self.saw(obj);
        }
        match event {
            Event::Init => *relist = Some(Vec::new()),
            Event::InitApply(obj) => match relist {
                Some(buf) => buf.push(obj),
                None => self.upsert(obj),
            },
            Event::InitDone => {
                let objs = relist.take().unwrap_or_default();
                let guard = self.handlers.read();
                for change in self.store.replace(objs) {
                    for h in guard.iter() {
                        h(&change);
                    }
                }
                self.synced.send_replace(true);
            }
            Event::Apply(obj) => self.upsert(obj),
            Event::Delete(obj) => {
                let key = obj.key();
                let guard = self.handlers.read();
                let last = self.store.remove(&key).unwrap_or_else(|| Arc::new(obj));
                for h in guard.iter() {
                    h(&Change::Deleted(Arc::clone(&last)));
                }
            }
        }
    }

    fn upsert(&self, obj: K) {
        let guard = self.handlers.read();
        let new = Arc::new(obj);
        let change = match self.store.insert(Arc::clone(&new)) {
            Some(old) => Change::Updated { old, new },
            None => Change::Added(new),
        };
        for h in guard.iter() {
            h(&change);
        }
    }

    /// Runs the list+watch of `api`'s objects in JSON until `stop` is
    /// cancelled, as `config` says: its selectors, and streaming lists
    /// only with [`InitialListStrategy::StreamingList`] (kube's default is
    /// list, then watch). Its page size and list semantic are not read.
    ///
    /// [`InitialListStrategy::StreamingList`]: watcher::InitialListStrategy::StreamingList
    pub async fn run(
        self: Arc<Self>,
        api: Api<K::Wire>,
        config: watcher::Config,
        stop: CancellationToken,
    ) {
        let streaming = config.initial_list_strategy == watcher::InitialListStrategy::StreamingList;
        let env = ListWatch::from_env();
        let settings = ListWatch {
            no_streaming: env.no_streaming || !streaming,
            label_selector: config.label_selector,
            field_selector: config.field_selector,
        };
        self.run_with(api.into_client(), settings, stop).await;
    }

    /// Runs the list+watch of every object of the kind in JSON.
    pub async fn run_with(
        self: Arc<Self>,
        client: kube::Client,
        settings: ListWatch,
        stop: CancellationToken,
    ) {
        let src = reflector::Source {
            client,
            path: path_of::<K>(),
            encoding: encoding::Encoding::Json,
            settings,
        };
        self.reflect(src, stop).await;
    }

    /// Runs the list+watch in protobuf, `decode` reading each object.
    pub async fn run_proto(
        self: Arc<Self>,
        client: kube::Client,
        decode: ProtoDecoder<K>,
        settings: ListWatch,
        stop: CancellationToken,
    ) {
        let src = reflector::Source {
            client,
            path: path_of::<K>(),
            encoding: encoding::Encoding::Protobuf(decode),
            settings,
        };
        self.reflect(src, stop).await;
    }
}

/// The cluster-wide collection path of the kind, e.g. `/api/v1/pods`.
fn path_of<K: Informable>() -> String {
    <K::Wire as Resource>::url_path(&(), None)
}

/// A resourceVersion as etcd writes them: a decimal without a leading zero
/// (apimachinery's `CompareResourceVersion` refuses anything else).
pub fn parse_rv(rv: &str) -> Option<u64> {
    if rv.is_empty() || rv.starts_with('0') || !rv.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    rv.parse().ok()
}

/// The namespace/name of a change's object, for handlers.
impl<K: Informable> Change<K> {
    pub fn object(&self) -> &Arc<K> {
        match self {
            Change::Added(o) | Change::Deleted(o) => o,
            Change::Updated { new, .. } => new,
        }
    }
    pub fn key(&self) -> String {
        self.object().key()
    }
    pub fn name(&self) -> String {
        self.object().name().to_string()
    }
}

#[cfg(test)]
mod tests;
