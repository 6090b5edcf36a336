//! The keys of a queue that are ready for a worker, in hand-out order:
//! one FIFO (client-go's order), or, for a queue built with
//! [`WorkQueue::fair`](super::WorkQueue::fair), one FIFO lane per lane name
//! (a namespace) with the lanes taking turns.
//!
//! Turns are plain round-robin, one key per turn: a key is one sync, and
//! what a sync costs is only known once it ran, so a deficit counter
//! (DRR) would have nothing to count ahead of time. What round-robin
//! bounds is what the issue asks for: a key that becomes ready in a lane
//! with nothing else ready is handed out after at most one key of each
//! other lane, however many keys those lanes hold.
//!
//! Memory: a lane exists only while it holds ready keys (it is removed
//! when its last key is handed out or on shutdown), so the lanes never
//! outnumber the ready keys, and lane names a tenant chose (namespaces)
//! do not outlive their keys.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::Arc;

use tokio::time::Instant;

/// Which lane a key belongs to (for example the namespace of `ns/name`).
pub type LaneFn<K> = fn(&K) -> &str;

/// The lane of a `namespace/name` key: its namespace; a key without a `/`
/// (a cluster-scoped object) is in the lane `""`, as client-go's
/// `SplitMetaNamespaceKey` gives it no namespace.
pub fn namespace_lane<K: AsRef<str>>(key: &K) -> &str {
    key.as_ref().split_once('/').map_or("", |(ns, _)| ns)
}

pub(super) enum Ready<K> {
    Fifo(VecDeque<K>),
    Fair(Lanes<K>),
}

pub(super) struct Lanes<K> {
    lane_of: LaneFn<K>,
    /// Ready keys of each lane in arrival order; never an empty lane.
    lanes: HashMap<Arc<str>, VecDeque<K>>,
    /// Every lane of `lanes` once, in turn order.
    turns: VecDeque<Arc<str>>,
    len: usize,
}

impl<K: Eq + Hash> Ready<K> {
    pub(super) fn fifo() -> Self {
        Ready::Fifo(VecDeque::new())
    }

    pub(super) fn fair(lane_of: LaneFn<K>) -> Self {
        Ready::Fair(Lanes {
            lane_of,
            lanes: HashMap::new(),
            turns: VecDeque::new(),
            len: 0,
        })
    }

    /// Queues `key` last in its lane (a new lane takes the last turn).
    pub(super) fn push_back(&mut self, key: K) {
        match self {
            Ready::Fifo(q) => q.push_back(key),
            Ready::Fair(l) => l.push_back(key),
        }
    }

    /// The next key: the FIFO's first, or the first of the lane whose turn
    /// it is (that lane then takes the last turn, if it has keys left).
    pub(super) fn pop_front(&mut self) -> Option<K> {
        match self {
            Ready::Fifo(q) => q.pop_front(),
            Ready::Fair(l) => l.pop_front(),
        }
    }

    pub(super) fn len(&self) -> usize {
        match self {
            Ready::Fifo(q) => q.len(),
            Ready::Fair(l) => l.len,
        }
    }

    pub(super) fn clear(&mut self) {
        match self {
            Ready::Fifo(q) => q.clear(),
            Ready::Fair(l) => {
                l.lanes.clear();
                l.turns.clear();
                l.len = 0;
            }
        }
    }

    /// The earliest of `added` over the keys at the head of each lane (the
    /// FIFO's head alone): how long the queue has kept a key waiting.
    pub(super) fn oldest(&self, added: impl Fn(&K) -> Option<Instant>) -> Option<Instant> {
        match self {
            Ready::Fifo(q) => q.front().and_then(added),
            Ready::Fair(l) => l
                .lanes
                .values()
                .filter_map(|lane| lane.front().and_then(&added))
                .min(),
        }
    }

    /// How many lanes hold ready keys (1 or 0 for a FIFO).
    #[cfg(test)]
    pub(super) fn lanes(&self) -> usize {
        match self {
            Ready::Fifo(q) => usize::from(!q.is_empty()),
            Ready::Fair(l) => l.lanes.len(),
        }
    }
}

impl<K> Lanes<K> {
    fn push_back(&mut self, key: K) {
        let name = (self.lane_of)(&key);
        if let Some(lane) = self.lanes.get_mut(name) {
            lane.push_back(key);
        } else {
            let name: Arc<str> = Arc::from(name);
            self.turns.push_back(Arc::clone(&name));
            self.lanes.insert(name, VecDeque::from([key]));
        }
        self.len += 1;
    }

    fn pop_front(&mut self) -> Option<K> {
        // Every lane in `turns` is in `lanes` and not empty; the loop only
        // guards against that invariant breaking (a stale turn is dropped).
        while let Some(name) = self.turns.pop_front() {
            let Some(lane) = self.lanes.get_mut(&name) else {
                continue;
            };
            let Some(key) = lane.pop_front() else {
                self.lanes.remove(&name);
                continue;
            };
            if lane.is_empty() {
                self.lanes.remove(&name);
            } else {
                self.turns.push_back(name);
            }
            self.len = self.len.saturating_sub(1);
            return Some(key);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fair() -> Ready<String> {
        Ready::fair(namespace_lane::<String>)
    }

    fn drain(r: &mut Ready<String>) -> Vec<String> {
        std::iter::from_fn(|| r.pop_front()).collect()
    }

    #[test]
    fn lane_of_a_key_is_its_namespace() {
        assert_eq!(namespace_lane(&"ns/a".to_string()), "ns");
        assert_eq!(namespace_lane(&"ns/a/b".to_string()), "ns");
        assert_eq!(namespace_lane(&"node-1".to_string()), "");
        assert_eq!(namespace_lane(&"/x".to_string()), "");
    }

    #[test]
    fn lanes_take_turns_fifo_within_a_lane() {
        let mut r = fair();
        for k in ["a/1", "a/2", "a/3", "b/1", "a/4", "c/1", "b/2"] {
            r.push_back(k.to_string());
        }
        assert_eq!(r.len(), 7);
        assert_eq!(r.lanes(), 3);
        assert_eq!(
            drain(&mut r),
            ["a/1", "b/1", "c/1", "a/2", "b/2", "a/3", "a/4"]
        );
        assert_eq!(r.len(), 0);
        assert_eq!(r.lanes(), 0, "empty lanes are dropped");
    }

    #[test]
    fn fifo_keeps_arrival_order() {
        let mut r: Ready<String> = Ready::fifo();
        for k in ["a/1", "a/2", "b/1"] {
            r.push_back(k.to_string());
        }
        assert_eq!(drain(&mut r), ["a/1", "a/2", "b/1"]);
    }

    #[test]
    fn a_lane_emptied_and_refilled_takes_the_last_turn() {
        let mut r = fair();
        for k in ["a/1", "b/1", "b/2"] {
            r.push_back(k.to_string());
        }
        assert_eq!(r.pop_front().as_deref(), Some("a/1"));
        r.push_back("a/2".to_string());
        assert_eq!(drain(&mut r), ["b/1", "a/2", "b/2"]);
    }

    #[test]
    fn clear_forgets_every_lane() {
        let mut r = fair();
        for i in 0..100 {
            r.push_back(format!("ns-{i}/j"));
        }
        assert_eq!(r.lanes(), 100);
        r.clear();
        assert_eq!((r.len(), r.lanes()), (0, 0));
        assert_eq!(r.pop_front(), None);
    }

    #[test]
    fn oldest_is_the_earliest_lane_head() {
        let t0 = Instant::now();
        let at = |k: &String| -> Option<Instant> {
            let n: u64 = k.rsplit('/').next()?.parse().ok()?;
            Some(t0 + std::time::Duration::from_secs(n))
        };
        let mut r = fair();
        assert_eq!(r.oldest(at), None);
        for k in ["a/5", "a/1", "b/3"] {
            r.push_back(k.to_string());
        }
        // Lane heads are a/5 and b/3.
        assert_eq!(r.oldest(at), Some(t0 + std::time::Duration::from_secs(3)));
    }
}
