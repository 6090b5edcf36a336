//! A second Job controller: a change of a Job's status that kcm-rs did not
//! make. Pure bookkeeping; the executor (`controller::conflict`) feeds it
//! the watch's Job updates and its own status writes, and reports.
//!
//! Only a writer with `jobs/status` rights can trip it. The API server
//! clears a Job's status on create and keeps the stored one on every
//! update of the Job itself, so its status changes only through the status
//! subresource; what a Job's author can write (labels, annotations,
//! `managedFields`, times) is never read to decide. Attribution follows
//! the API server's own ordering, the resourceVersion: each status write of
//! ours returns the version it made, and a status change at any other
//! version is someone else's. The watch may deliver our own change before
//! our write returns, so a change seen while a write of ours to that Job is
//! in flight is judged when the write ends. The writer is named by the
//! `managedFields` entry the API server moved in that very change (never
//! by entries the author may have planted), "unknown" when none moved.
//!
//! What is seen on one Job stops at most that Job. Every foreign change is
//! reported; with `--on-conflict=stop` a Job whose status is changed again
//! by others within [`WINDOW`] ([`STOP_AFTER`] changes: a controller keeps
//! writing, a person's one-off edit does not) waits until [`WINDOW`] passes
//! with no foreign change on it; every other Job syncs on.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, JobStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kcm_runtime::informer::parse_rv;
use parking_lot::Mutex;
use tokio::time::Instant;

/// kcm-rs's own field manager (the user agent's first word).
pub const OWN_MANAGER: &str = "kcm-rs";
/// A Job stays contested this long after the last foreign change on it.
pub const WINDOW: Duration = Duration::from_secs(120);
/// Foreign changes within [`WINDOW`] that stop a Job's syncs.
pub const STOP_AFTER: u32 = 2;
/// The writer's name when no `managedFields` entry moved with the change.
pub const UNKNOWN_WRITER: &str = "unknown";
/// Writers named on the gauge; later ones count under [`OTHER_WRITER`].
/// Only holders of status rights can add names, but a bound costs nothing.
pub const MAX_WRITERS: usize = 16;
pub const OTHER_WRITER: &str = "other";
/// Versions of our own writes kept per Job until the watch shows them; a
/// sync makes at most three status writes.
const OWN_KEPT: usize = 8;
/// Changes kept per Job while a write of ours is in flight.
const PENDING_KEPT: usize = 16;

/// `--on-conflict`: what the Job controller does with a Job whose status
/// another writer changes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OnConflict {
    /// Stop syncing that Job until the other writer has left it alone for
    /// two minutes.
    #[default]
    Stop,
    /// Keep syncing (report only).
    Continue,
}

/// A status change seen on the watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub rv: u64,
    /// Who the API server says made it (`managedFields`), if anyone moved.
    pub writer: Option<String>,
    /// Fingerprint of the new status (see [`fingerprint`]).
    pub print: u64,
}

/// A status change that is not ours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Foreign {
    pub writer: String,
    pub rv: u64,
    /// Foreign changes of this Job within [`WINDOW`], this one included.
    pub count: u32,
}

/// How a status write of ours ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Written at this resourceVersion.
    Written(u64),
    /// Refused by the API server: nothing was written.
    Refused,
    /// No answer (timeout, cut, a 5xx): it may have been written. `print`
    /// is the fingerprint of the status we sent.
    Unknown { print: u64 },
}

/// The status change between two versions of a Job, if its status changed.
pub fn status_change(old: &Job, new: &Job) -> Option<Change> {
    if old.status == new.status {
        return None;
    }
    let rv = parse_rv(new.metadata.resource_version.as_deref()?)?;
    Some(Change {
        rv,
        writer: moved_status_writer(
            old.metadata.managed_fields.as_deref().unwrap_or_default(),
            new.metadata.managed_fields.as_deref().unwrap_or_default(),
        ),
        print: fingerprint(new.status.as_ref()),
    })
}

/// The manager of the status entry that is new or different in `new`.
fn moved_status_writer(old: &[ManagedFieldsEntry], new: &[ManagedFieldsEntry]) -> Option<String> {
    let status = |e: &&ManagedFieldsEntry| e.subresource.as_deref() == Some("status");
    new.iter()
        .filter(status)
        .find(|e| !old.iter().filter(status).any(|o| o == *e))
        .and_then(|e| e.manager.clone())
}

/// A fingerprint of what a status says, insensitive to how the API server
/// spells it back (empty lists and objects dropped, numbers as numbers):
/// recognises our own write when its answer was lost.
pub fn fingerprint(status: Option<&JobStatus>) -> u64 {
    let mut v = serde_json::to_value(status.cloned().unwrap_or_default()).unwrap_or_default();
    prune(&mut v);
    // In-process only: std's hasher with its fixed keys is enough.
    let mut h = std::hash::DefaultHasher::new();
    std::hash::Hash::hash(&v.to_string(), &mut h);
    std::hash::Hasher::finish(&h)
}

fn prune(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            m.values_mut().for_each(prune);
            m.retain(|_, x| !is_empty(x));
        }
        Value::Array(a) => a.iter_mut().for_each(prune),
        _ => {}
    }
}

fn is_empty(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Null => true,
        serde_json::Value::Array(a) => a.is_empty(),
        serde_json::Value::Object(m) => m.is_empty(),
        _ => false,
    }
}

#[derive(Debug, Default)]
struct JobLedger {
    in_flight: u32,
    /// Versions our writes made that the watch has not shown yet.
    own: VecDeque<u64>,
    /// Fingerprints of writes of ours that ended without an answer.
    unknown: VecDeque<u64>,
    /// Changes seen while a write was in flight, judged when it ends.
    pending: Vec<Change>,
    /// The last foreign change: writer, when it was seen, how many
    /// within [`WINDOW`] of each other.
    contested: Option<(String, Instant, u32)>,
}

impl JobLedger {
    fn judge(&mut self, c: Change, now: Instant) -> Option<Foreign> {
        if let Some(i) = self.own.iter().position(|rv| *rv == c.rv) {
            // Ours; the watch is ordered, so older versions are past too.
            self.own.drain(..=i);
            return None;
        }
        if let Some(i) = self.unknown.iter().position(|p| *p == c.print) {
            self.unknown.remove(i);
            return None;
        }
        let writer = c.writer.unwrap_or_else(|| UNKNOWN_WRITER.to_string());
        let count = self.live(now).map_or(0, |(_, n)| n) + 1;
        self.contested = Some((writer.clone(), now, count));
        Some(Foreign {
            writer,
            rv: c.rv,
            count,
        })
    }

    fn live(&self, now: Instant) -> Option<(&str, u32)> {
        self.contested
            .as_ref()
            .filter(|(_, at, _)| now.saturating_duration_since(*at) < WINDOW)
            .map(|(w, _, n)| (w.as_str(), *n))
    }

    fn idle(&self, now: Instant) -> bool {
        self.in_flight == 0
            && self.own.is_empty()
            && self.unknown.is_empty()
            && self.pending.is_empty()
            && self.live(now).is_none()
    }
}

fn push_bounded<T>(q: &mut VecDeque<T>, v: T) {
    if q.len() == OWN_KEPT {
        q.pop_front();
    }
    q.push_back(v);
}

/// The status writes of every Job kcm-rs syncs, and the foreign ones seen.
#[derive(Debug)]
pub struct Ledger {
    on_conflict: OnConflict,
    jobs: Mutex<HashMap<String, JobLedger>>,
}

impl Ledger {
    pub fn new(on_conflict: OnConflict) -> Self {
        Ledger {
            on_conflict,
            jobs: Mutex::default(),
        }
    }

    /// A status write of ours to `key` is about to be sent.
    pub fn begin(&self, key: &str) {
        self.jobs
            .lock()
            .entry(key.to_string())
            .or_default()
            .in_flight += 1;
    }

    /// That write ended; the changes seen meanwhile that were not ours.
    pub fn end(&self, key: &str, outcome: Outcome, now: Instant) -> Vec<Foreign> {
        let mut jobs = self.jobs.lock();
        let Some(l) = jobs.get_mut(key) else {
            return Vec::new();
        };
        l.in_flight = l.in_flight.saturating_sub(1);
        match outcome {
            Outcome::Written(rv) => push_bounded(&mut l.own, rv),
            Outcome::Unknown { print } => push_bounded(&mut l.unknown, print),
            Outcome::Refused => {}
        }
        if l.in_flight > 0 {
            return Vec::new();
        }
        let pending = std::mem::take(&mut l.pending);
        let found = pending
            .into_iter()
            .filter_map(|c| l.judge(c, now))
            .collect();
        if l.idle(now) {
            jobs.remove(key);
        }
        found
    }

    /// A status change of `key` seen on the watch: foreign, or not (yet).
    pub fn observe(&self, key: &str, change: Change, now: Instant) -> Option<Foreign> {
        let mut jobs = self.jobs.lock();
        let l = jobs.entry(key.to_string()).or_default();
        if l.in_flight > 0 && !l.own.contains(&change.rv) {
            if l.pending.len() < PENDING_KEPT {
                l.pending.push(change);
            }
            return None;
        }
        let found = l.judge(change, now);
        if l.idle(now) {
            jobs.remove(key);
        }
        found
    }

    /// The writer contesting `key` at `now`, if any.
    pub fn contested(&self, key: &str, now: Instant) -> Option<String> {
        self.jobs
            .lock()
            .get(key)
            .and_then(|l| l.live(now))
            .map(|(w, _)| w.to_string())
    }

    /// Whether `key`'s sync waits now: stopping, and others changed its
    /// status [`STOP_AFTER`] times within [`WINDOW`].
    pub fn blocks(&self, key: &str, now: Instant) -> bool {
        self.on_conflict == OnConflict::Stop
            && self
                .jobs
                .lock()
                .get(key)
                .and_then(|l| l.live(now))
                .is_some_and(|(_, n)| n >= STOP_AFTER)
    }

    /// The Job is gone.
    pub fn forget(&self, key: &str) {
        self.jobs.lock().remove(key);
    }

    /// Contested Jobs per writer at `now` (at most [`MAX_WRITERS`] names,
    /// the rest under [`OTHER_WRITER`]); expired contests are dropped.
    pub fn by_writer(&self, now: Instant) -> BTreeMap<String, i64> {
        let mut jobs = self.jobs.lock();
        jobs.retain(|_, l| !l.idle(now));
        let mut out: BTreeMap<String, i64> = BTreeMap::new();
        for (w, _) in jobs.values().filter_map(|l| l.live(now)) {
            let name = if out.contains_key(w) || out.len() < MAX_WRITERS {
                w
            } else {
                OTHER_WRITER
            };
            *out.entry(name.to_string()).or_default() += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests;
