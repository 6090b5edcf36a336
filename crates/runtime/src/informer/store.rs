//! The indexed store behind an informer: objects by `namespace/name`, plus
//! named secondary indexes (pods by node, by controller UID, by namespace).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use kcm_pod::CachedPod;
use kube::Resource;
use parking_lot::RwLock;

use super::{Change, Informable};

/// Maps an object to the index values it is filed under.
pub type IndexFn<K> = Arc<dyn Fn(&K) -> Vec<String> + Send + Sync>;

struct Inner<K> {
    objects: HashMap<String, Arc<K>>,
    indexers: HashMap<&'static str, IndexFn<K>>,
    indexes: HashMap<&'static str, HashMap<String, HashSet<String>>>,
}

/// A thread-safe, indexed map of the latest known objects.
pub struct Store<K> {
    inner: RwLock<Inner<K>>,
}

impl<K> Default for Store<K> {
    fn default() -> Self {
        Store {
            inner: RwLock::new(Inner {
                objects: HashMap::new(),
                indexers: HashMap::new(),
                indexes: HashMap::new(),
            }),
        }
    }
}

impl<K> Inner<K> {
    fn index(&mut self, key: &str, obj: &K) {
        for (name, f) in &self.indexers {
            let idx = self.indexes.entry(name).or_default();
            for value in f(obj) {
                idx.entry(value).or_default().insert(key.to_string());
            }
        }
    }

    fn unindex(&mut self, key: &str, obj: &K) {
        for (name, f) in &self.indexers {
            if let Some(idx) = self.indexes.get_mut(name) {
                for value in f(obj) {
                    if let Some(keys) = idx.get_mut(&value) {
                        keys.remove(key);
                        if keys.is_empty() {
                            idx.remove(&value);
                        }
                    }
                }
            }
        }
    }
}

impl<K: Informable> Store<K> {
    /// Adds a named index and files every known object under it.
    pub fn add_index(&self, name: &'static str, f: IndexFn<K>) {
        let mut inner = self.inner.write();
        let mut idx: HashMap<String, HashSet<String>> = HashMap::new();
        for (key, obj) in &inner.objects {
            for value in f(obj) {
                idx.entry(value).or_default().insert(key.clone());
            }
        }
        inner.indexes.insert(name, idx);
        inner.indexers.insert(name, f);
    }

    pub fn get(&self, key: &str) -> Option<Arc<K>> {
        self.inner.read().objects.get(key).cloned()
    }

    pub fn list(&self) -> Vec<Arc<K>> {
        self.inner.read().objects.values().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.inner.read().objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Objects filed under `value` in index `name` (empty for an unknown index).
    pub fn by_index(&self, name: &str, value: &str) -> Vec<Arc<K>> {
        let inner = self.inner.read();
        inner
            .indexes
            .get(name)
            .and_then(|idx| idx.get(value))
            .map(|keys| {
                keys.iter()
                    .filter_map(|k| inner.objects.get(k).cloned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Inserts or replaces an object; returns the previous version.
    pub(crate) fn insert(&self, obj: Arc<K>) -> Option<Arc<K>> {
        let key = obj.key();
        let mut inner = self.inner.write();
        let old = inner.objects.insert(key.clone(), Arc::clone(&obj));
        if let Some(old) = &old {
            inner.unindex(&key, old);
        }
        inner.index(&key, &obj);
        old
    }

    pub(crate) fn remove(&self, key: &str) -> Option<Arc<K>> {
        let mut inner = self.inner.write();
        let old = inner.objects.remove(key);
        if let Some(old) = &old {
            inner.unindex(key, old);
        }
        old
    }

    /// Replaces the whole content with a fresh list and returns what changed:
    /// new objects as adds, changed resourceVersions as updates, and objects
    /// absent from the list (deleted while the watch was down) as deletes.
    pub(crate) fn replace(&self, objs: Vec<K>) -> Vec<Change<K>> {
        let mut changes = Vec::new();
        let mut inner = self.inner.write();
        let mut seen = HashSet::with_capacity(objs.len());
        for obj in objs {
            let key = obj.key();
            seen.insert(key.clone());
            let unchanged = inner.objects.get(&key).is_some_and(|old| {
                !old.resource_version().is_empty()
                    && old.resource_version() == obj.resource_version()
            });
            if unchanged {
                continue;
            }
            let new = Arc::new(obj);
            let old = inner.objects.insert(key.clone(), Arc::clone(&new));
            if let Some(old) = &old {
                inner.unindex(&key, old);
            }
            inner.index(&key, &new);
            changes.push(match old {
                Some(old) => Change::Updated { old, new },
                None => Change::Added(new),
            });
        }
        let gone: Vec<String> = inner
            .objects
            .keys()
            .filter(|k| !seen.contains(*k))
            .cloned()
            .collect();
        for key in gone {
            if let Some(old) = inner.objects.remove(&key) {
                inner.unindex(&key, &old);
                changes.push(Change::Deleted(old));
            }
        }
        changes
    }
}

/// Index name: objects by namespace.
pub const BY_NAMESPACE: &str = "namespace";
/// Index name: objects by the UID of their controller ownerReference.
pub const BY_CONTROLLER_UID: &str = "controller-uid";
/// Index name: pods by `spec.nodeName`.
pub const BY_NODE_NAME: &str = "node-name";

/// Files objects under their namespace.
pub fn namespace_index<K: Informable>() -> IndexFn<K> {
    Arc::new(|o: &K| namespace_of(o))
}

/// An object's namespace as index values (none when unset).
pub fn namespace_of<K: Informable>(o: &K) -> Vec<String> {
    let ns = o.namespace();
    (!ns.is_empty())
        .then(|| ns.to_string())
        .into_iter()
        .collect()
}

/// Files pods under the UID of their controller ownerReference.
pub fn pod_controller_uid_index() -> IndexFn<CachedPod> {
    Arc::new(|p: &CachedPod| {
        p.controller()
            .map(|c| c.uid.to_string())
            .into_iter()
            .collect()
    })
}

/// Files objects under the UID of their controller ownerReference.
pub fn controller_uid_index<K: Resource>() -> IndexFn<K> {
    Arc::new(|o: &K| {
        o.meta()
            .owner_references
            .iter()
            .flatten()
            .filter(|r| r.controller == Some(true))
            .map(|r| r.uid.clone())
            .collect()
    })
}

/// Files pods under the node they are bound to.
pub fn pod_node_index() -> IndexFn<CachedPod> {
    Arc::new(|p: &CachedPod| {
        p.node_name()
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .into_iter()
            .collect()
    })
}
