//! Interned strings and toleration lists. Most of a cached pod's strings
//! repeat across pods: namespaces, label keys, node names, condition
//! types, container names, owner kinds, and the two default tolerations.
//! One shared copy each saves an allocation per pod and field.
//!
//! Entries nothing else holds any more are dropped when the pool has
//! doubled since the last sweep, so churn (namespaces, nodes) does not
//! grow it without bound.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::{Arc, LazyLock};

use parking_lot::Mutex;

use crate::Toleration;

struct Pool<T: ?Sized> {
    set: HashSet<Arc<T>>,
    sweep_at: usize,
}

/// Below this many entries the pool is never swept.
const MIN_SWEEP: usize = 1024;

impl<T: ?Sized + Eq + Hash> Pool<T> {
    fn new() -> Self {
        Pool {
            set: HashSet::new(),
            sweep_at: MIN_SWEEP,
        }
    }

    fn get(&mut self, value: &T, make: impl FnOnce(&T) -> Arc<T>) -> Arc<T> {
        if let Some(shared) = self.set.get(value) {
            return Arc::clone(shared);
        }
        if self.set.len() >= self.sweep_at {
            self.set.retain(|a| Arc::strong_count(a) > 1);
            self.sweep_at = MIN_SWEEP.max(2 * self.set.len());
        }
        let shared = make(value);
        self.set.insert(Arc::clone(&shared));
        shared
    }
}

static STRINGS: LazyLock<Mutex<Pool<str>>> = LazyLock::new(|| Mutex::new(Pool::new()));
static TOLERATIONS: LazyLock<Mutex<Pool<[Toleration]>>> = LazyLock::new(|| Mutex::new(Pool::new()));

/// The shared copy of `s`.
pub fn intern(s: &str) -> Arc<str> {
    STRINGS.lock().get(s, |v| Arc::from(v))
}

/// The shared copy of a toleration list.
pub fn intern_tolerations(list: Vec<Toleration>) -> Arc<[Toleration]> {
    TOLERATIONS.lock().get(&list[..], |l| Arc::from(l.to_vec()))
}

/// How many strings the pool holds (for tests).
pub fn interned_strings() -> usize {
    STRINGS.lock().set.len()
}
