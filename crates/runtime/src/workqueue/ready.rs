//! The keys of a queue that are ready for a worker, in hand-out order:
//! one FIFO (client-go's order), or, for a queue built with
//! [`WorkQueue::fair`](super::WorkQueue::fair), one FIFO lane per lane name
//! (a namespace) with the lanes taking turns.
//!
//! Turns are plain round-robin, one key per turn: a key is one sync, and
//! what a sync costs is only known once it ran, so a deficit counter
//! (DRR) would have nothing to count ahead of time. The client's token
//! bucket hands its tokens to waiting requests by the same turns. What round-robin
//! bounds is what the issue asks for: a key that becomes ready in a lane
//! with nothing else ready is handed out after at most one key of each
//! other lane, however many keys those lanes hold.
//!
//! Turns alone cannot help a key while every worker is held by another
//! lane's long syncs (a few Jobs creating hundreds of pods each). With an
//! [`InFlightLimit`] a lane holds at most `base` workers, and up to `spare`
//! more workers serve only lanes that have none: a newcomer starts at once
//! unless `spare` other lanes already hold one of them each.
//!
//! Memory: a lane exists only while it holds ready keys (it is removed
//! when its last key is handed out or on shutdown), and a lane's in-flight
//! count only while it has keys in flight, so neither outnumbers the keys
//! that are ready or in flight, and lane names a tenant chose (namespaces)
//! do not outlive their keys.

use std::collections::{HashMap, VecDeque};
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

/// How many keys of a fair queue may be in flight (see the module notes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlightLimit {
    /// Keys in flight at most, from any lanes.
    pub base: usize,
    /// Further keys in flight, each of a lane that has no other in flight.
    pub spare: usize,
}

impl InFlightLimit {
    /// Whether a key of a lane with `lane_busy` keys in flight may start
    /// while `total` keys are in flight.
    pub(super) fn admits(self, total: usize, lane_busy: usize) -> bool {
        total < self.base || (lane_busy == 0 && total < self.base.saturating_add(self.spare))
    }
}

pub(crate) enum Ready<K> {
    Fifo(VecDeque<K>),
    Fair(Lanes<K>),
}

pub(crate) struct Lanes<K> {
    lane_of: LaneFn<K>,
    /// Ready keys of each lane in arrival order; never an empty lane.
    lanes: HashMap<Arc<str>, VecDeque<K>>,
    /// Every lane of `lanes` once, in turn order.
    turns: VecDeque<Arc<str>>,
    len: usize,
    /// Keys in flight per lane; never a zero count.
    busy: HashMap<Arc<str>, usize>,
    limit: Option<InFlightLimit>,
}

impl<K> Ready<K> {
    pub(super) fn fifo() -> Self {
        Ready::Fifo(VecDeque::new())
    }

    pub(crate) fn fair(lane_of: LaneFn<K>) -> Self {
        Ready::Fair(Lanes {
            lane_of,
            lanes: HashMap::new(),
            turns: VecDeque::new(),
            len: 0,
            busy: HashMap::new(),
            limit: None,
        })
    }

    /// Sets the in-flight limit of a fair queue (a FIFO has none).
    pub(super) fn set_limit(&mut self, limit: InFlightLimit) {
        if let Ready::Fair(l) = self {
            l.limit = Some(limit);
        }
    }

    /// Queues `key` last in its lane (a new lane takes the last turn).
    pub(crate) fn push_back(&mut self, key: K) {
        match self {
            Ready::Fifo(q) => q.push_back(key),
            Ready::Fair(l) => l.push_back(key),
        }
    }

    /// The next key to start while `in_flight` keys are in flight: the
    /// FIFO's first, or the first key of the first lane in turn order that
    /// the limit admits (that lane then takes the last turn, if it has keys
    /// left; lanes passed over keep their places). `None` when no ready key
    /// may start.
    pub(crate) fn pop_front(&mut self, in_flight: usize) -> Option<K> {
        match self {
            Ready::Fifo(q) => q.pop_front(),
            Ready::Fair(l) => l.pop_front(in_flight),
        }
    }

    /// A key handed out by [`pop_front`](Self::pop_front) is done.
    pub(super) fn finished(&mut self, key: &K) {
        if let Ready::Fair(l) = self {
            let name = (l.lane_of)(key);
            if let Some(n) = l.busy.get_mut(name) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    l.busy.remove(name);
                }
            }
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Ready::Fifo(q) => q.len(),
            Ready::Fair(l) => l.len,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
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
    /// How many lanes have keys in flight.
    #[cfg(test)]
    pub(super) fn busy_lanes(&self) -> usize {
        self.busy.len()
    }

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

    fn pop_front(&mut self, in_flight: usize) -> Option<K> {
        // Every lane in `turns` is in `lanes` and not empty; the loop only
        // guards against that invariant breaking (a stale turn is dropped).
        loop {
            let at = match self.limit {
                None => 0,
                // Lanes passed over all have keys in flight, so this looks
                // at no more lanes than there are keys in flight.
                Some(limit) => self.turns.iter().position(|name| {
                    limit.admits(in_flight, self.busy.get(name).copied().unwrap_or(0))
                })?,
            };
            let name = self.turns.remove(at)?;
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
                self.turns.push_back(Arc::clone(&name));
            }
            // In-flight counts only matter (and are only released by
            // `finished`) under a limit; the client's token turns have none.
            if self.limit.is_some() {
                *self.busy.entry(name).or_insert(0) += 1;
            }
            self.len = self.len.saturating_sub(1);
            return Some(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fair() -> Ready<String> {
        Ready::fair(namespace_lane::<String>)
    }

    fn drain(r: &mut Ready<String>) -> Vec<String> {
        std::iter::from_fn(|| r.pop_front(0)).collect()
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
        assert_eq!(r.pop_front(0).as_deref(), Some("a/1"));
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
        assert_eq!(r.pop_front(0), None);
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
