//! The small value types a [`crate::CachedPod`] is made of.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;

use crate::intern::intern;

/// A pod's labels: sorted by key (keys interned), looked up by binary
/// search. A `BTreeMap<String, String>` costs a 560 B leaf per pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Labels(Box<[(Arc<str>, Box<str>)]>);

impl Labels {
    /// From key/value pairs in any order; a repeated key keeps its last
    /// value, as a JSON object does.
    pub fn from_pairs<K: AsRef<str>, V: Into<Box<str>>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Labels {
        let mut v: Vec<(Arc<str>, Box<str>)> = pairs
            .into_iter()
            .map(|(k, v)| (intern(k.as_ref()), v.into()))
            .collect();
        // Stable: among equal keys the last one stays last, then wins.
        v.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<(Arc<str>, Box<str>)> = Vec::with_capacity(v.len());
        for (k, val) in v {
            match out.last_mut() {
                Some(last) if last.0 == k => last.1 = val,
                _ => out.push((k, val)),
            }
        }
        Labels(out.into_boxed_slice())
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| k.as_ref().cmp(key))
            .ok()
            .map(|i| self.0[i].1.as_ref())
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// In key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_ref(), v.as_ref()))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// As the API type's map (for writes and tests).
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

/// The three Job annotations the Job controller reads, as raw strings (a
/// bad value is logged where it is parsed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobAnnotations {
    /// `batch.kubernetes.io/job-completion-index`.
    pub completion_index: Option<Box<str>>,
    /// `batch.kubernetes.io/job-index-failure-count`.
    pub index_failure_count: Option<Box<str>>,
    /// `batch.kubernetes.io/job-index-ignored-failure-count`.
    pub index_ignored_failure_count: Option<Box<str>>,
}

impl JobAnnotations {
    pub(crate) fn is_empty(&self) -> bool {
        self.completion_index.is_none()
            && self.index_failure_count.is_none()
            && self.index_ignored_failure_count.is_none()
    }
}

/// The pod's controller ownerReference (`controller: true`); the other
/// owner references are not cached.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ControllerRef {
    pub api_version: Arc<str>,
    pub kind: Arc<str>,
    pub name: Box<str>,
    pub uid: Box<str>,
    pub block_owner_deletion: Option<bool>,
}

impl ControllerRef {
    /// With the repeated parts (`apiVersion`, `kind`) interned.
    pub fn new(
        api_version: &str,
        kind: &str,
        name: &str,
        uid: &str,
        block_owner_deletion: Option<bool>,
    ) -> Self {
        ControllerRef {
            api_version: intern(api_version),
            kind: intern(kind),
            name: name.into(),
            uid: uid.into(),
            block_owner_deletion,
        }
    }
}

/// A toleration, every field (taint eviction matches on all five).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Toleration {
    pub key: Option<Box<str>>,
    pub operator: Option<Box<str>>,
    pub value: Option<Box<str>>,
    pub effect: Option<Box<str>>,
    pub toleration_seconds: Option<i64>,
}

/// A pod condition as the controllers read it: type, status and when the
/// status last changed. Reason and message are cached for
/// `DisruptionTarget` only ([`crate::CachedPod::disruption_target`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Condition {
    pub type_: Arc<str>,
    pub status: Arc<str>,
    pub last_transition_time: Option<Timestamp>,
}

/// A container's status as the controllers read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerState {
    pub name: Arc<str>,
    pub restart_count: i32,
    /// `state.terminated`, when the container has terminated.
    pub terminated: Option<Terminated>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Terminated {
    pub exit_code: i32,
    pub finished_at: Option<Timestamp>,
}
