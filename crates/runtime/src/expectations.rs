//! Expectations: what a controller has asked the API server to do and has
//! not yet seen come back through its informers (client-go
//! `ControllerExpectations` in `pkg/controller/controller_utils.go`, and the
//! Job controller's `uidTrackingExpectations` in
//! `pkg/controller/job/tracking_utils.go`).
//!
//! A controller that just created three pods must not count them missing on
//! its next sync only because the watch events are still in flight; it
//! records "3 creations expected", each observed pod lowers the count, and
//! the controller only acts on its (possibly stale) cache once the count is
//! down to zero — or after a timeout, so a lost event cannot wedge it.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::clock::Clock;

/// How long unmet expectations hold back a sync (upstream
/// `ExpectationsTimeout`). If a watch drops the event for a pod the
/// controller created or deleted, the count never reaches zero; after this
/// long the controller syncs anyway and trusts its cache again.
pub const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// The outstanding counts recorded for one controller key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expectation {
    /// Creations still expected; zero or less means none.
    pub add: i64,
    /// Deletions still expected; zero or less means none.
    pub del: i64,
}

impl Expectation {
    /// True when nothing more is expected.
    pub fn fulfilled(&self) -> bool {
        self.add <= 0 && self.del <= 0
    }
}

#[derive(Debug)]
struct Record {
    counts: Expectation,
    /// When the counts were last set; raising or lowering does not refresh
    /// it, as upstream.
    set_at: Instant,
}

/// Per controller key (e.g. a Job's "namespace/name"), how many creations
/// and deletions of owned objects are still to be observed.
///
/// Shared between the sync (which sets expectations before issuing requests)
/// and the event handlers (which lower them); all methods take `&self`.
pub struct ControllerExpectations {
    records: Mutex<HashMap<String, Record>>,
    clock: Clock,
    ttl: Duration,
}

impl fmt::Debug for ControllerExpectations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControllerExpectations")
            .field("records", &*self.records.lock())
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl Default for ControllerExpectations {
    fn default() -> Self {
        Self::new()
    }
}

impl ControllerExpectations {
    /// Expectations on the system clock with the upstream 5-minute timeout.
    pub fn new() -> Self {
        Self::with_clock(Clock::system())
    }

    /// Expectations reading time from `clock` (its monotonic part).
    pub fn with_clock(clock: Clock) -> Self {
        Self {
            records: Mutex::new(HashMap::new()),
            clock,
            ttl: EXPECTATIONS_TIMEOUT,
        }
    }

    /// The outstanding counts for `key`, if any were recorded (expired ones
    /// included, as upstream keeps them until overwritten or deleted).
    pub fn get_expectations(&self, key: &str) -> Option<Expectation> {
        self.records.lock().get(key).map(|r| r.counts)
    }

    /// Replaces whatever was recorded for `key` with `add` creations and
    /// `del` deletions, starting the timeout afresh.
    pub fn set_expectations(&self, key: &str, add: i64, del: i64) {
        let record = Record {
            counts: Expectation { add, del },
            set_at: self.clock.instant(),
        };
        self.records.lock().insert(key.to_owned(), record);
    }

    /// Records that `adds` creations are about to be requested (replacing
    /// any earlier record for `key`).
    pub fn expect_creations(&self, key: &str, adds: i64) {
        self.set_expectations(key, adds, 0);
    }

    /// Records that `dels` deletions are about to be requested (replacing
    /// any earlier record for `key`).
    pub fn expect_deletions(&self, key: &str, dels: i64) {
        self.set_expectations(key, 0, dels);
    }

    /// Lowers both counts of an existing record; used when requests failed
    /// and their objects will never be observed. No-op without a record.
    pub fn lower_expectations(&self, key: &str, add: i64, del: i64) {
        self.adjust(key, add.saturating_neg(), del.saturating_neg());
    }

    /// Raises both counts of an existing record. No-op without a record.
    pub fn raise_expectations(&self, key: &str, add: i64, del: i64) {
        self.adjust(key, add, del);
    }

    /// An owned object's creation was seen.
    pub fn creation_observed(&self, key: &str) {
        self.lower_expectations(key, 1, 0);
    }

    /// An owned object's deletion was seen.
    pub fn deletion_observed(&self, key: &str) {
        self.lower_expectations(key, 0, 1);
    }

    fn adjust(&self, key: &str, add: i64, del: i64) {
        if let Some(r) = self.records.lock().get_mut(key) {
            r.counts.add = r.counts.add.saturating_add(add);
            r.counts.del = r.counts.del.saturating_add(del);
        }
    }

    /// Whether the controller may trust its cache and sync `key`: true when
    /// nothing was recorded, when everything recorded was observed, or when
    /// the record is older than the timeout (a lost watch event must not
    /// block the controller forever).
    pub fn satisfied(&self, key: &str) -> bool {
        let records = self.records.lock();
        let Some(r) = records.get(key) else {
            return true;
        };
        if r.counts.fulfilled() {
            return true;
        }
        let age = self.clock.instant().saturating_duration_since(r.set_at);
        if age > self.ttl {
            tracing::debug!(key, ?age, counts = ?r.counts, "controller expectations expired");
            return true;
        }
        false
    }

    /// Forgets `key`, e.g. when its controller object is deleted.
    pub fn delete_expectations(&self, key: &str) {
        self.records.lock().remove(key);
    }
}

/// Per Job key, the UIDs of pods whose tracking-finalizer removal was
/// requested but not yet observed. A pod in this set must not be counted
/// again as a newly finished pod while its patch is in flight.
#[derive(Debug, Default)]
pub struct UidTrackingExpectations {
    sets: Mutex<HashMap<String, HashSet<String>>>,
}

impl UidTrackingExpectations {
    /// An empty tracker.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `uids` to the removals expected for `key` (joining any already
    /// expected).
    pub fn expect_finalizers_removed<I, S>(&self, key: &str, uids: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut sets = self.sets.lock();
        let set = sets.entry(key.to_owned()).or_default();
        set.extend(uids.into_iter().map(Into::into));
        if set.is_empty() {
            sets.remove(key);
        }
    }

    /// The finalizer of pod `uid` was seen gone; returns whether it was
    /// expected.
    pub fn finalizer_removal_observed(&self, key: &str, uid: &str) -> bool {
        let mut sets = self.sets.lock();
        let Some(set) = sets.get_mut(key) else {
            return false;
        };
        let removed = set.remove(uid);
        // An empty set means the same as no set; drop it to bound memory.
        if set.is_empty() {
            sets.remove(key);
        }
        removed
    }

    /// A copy of the UIDs still expected for `key` (empty if none).
    pub fn get_uids(&self, key: &str) -> HashSet<String> {
        self.sets.lock().get(key).cloned().unwrap_or_default()
    }

    /// Forgets `key`, e.g. when the Job is deleted.
    pub fn delete_expectations(&self, key: &str) {
        self.sets.lock().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_record_is_satisfied() {
        let exp = ControllerExpectations::new();
        assert!(exp.satisfied("ns/job"));
        assert_eq!(exp.get_expectations("ns/job"), None);
        // Observations without a record do not create one.
        exp.creation_observed("ns/job");
        exp.deletion_observed("ns/job");
        assert_eq!(exp.get_expectations("ns/job"), None);
    }

    #[test]
    fn creations_must_all_be_observed() {
        let exp = ControllerExpectations::new();
        exp.expect_creations("ns/job", 2);
        assert!(!exp.satisfied("ns/job"));
        exp.creation_observed("ns/job");
        assert!(!exp.satisfied("ns/job"));
        exp.creation_observed("ns/job");
        assert!(exp.satisfied("ns/job"));
        // Extra observations go negative and stay satisfied.
        exp.creation_observed("ns/job");
        assert_eq!(
            exp.get_expectations("ns/job"),
            Some(Expectation { add: -1, del: 0 })
        );
        assert!(exp.satisfied("ns/job"));
        // Other keys are independent.
        exp.expect_deletions("ns/other", 1);
        assert!(!exp.satisfied("ns/other"));
        assert!(exp.satisfied("ns/job"));
    }

    #[test]
    fn set_replaces_and_lower_or_raise_adjust() {
        let exp = ControllerExpectations::new();
        exp.expect_creations("k", 5);
        exp.expect_deletions("k", 3);
        assert_eq!(
            exp.get_expectations("k"),
            Some(Expectation { add: 0, del: 3 })
        );
        exp.deletion_observed("k");
        exp.lower_expectations("k", 0, 2);
        assert!(exp.satisfied("k"));
        exp.raise_expectations("k", 1, 0);
        assert!(!exp.satisfied("k"));
        exp.set_expectations("k", 0, 0);
        assert!(exp.satisfied("k"));
    }

    #[tokio::test(start_paused = true)]
    async fn unmet_expectations_expire_after_timeout() {
        let exp = ControllerExpectations::new();
        exp.expect_creations("k", 1);
        tokio::time::advance(EXPECTATIONS_TIMEOUT).await;
        // Upstream expires strictly after the timeout.
        assert!(!exp.satisfied("k"));
        tokio::time::advance(Duration::from_nanos(1)).await;
        assert!(exp.satisfied("k"));
        // The expired record is kept until replaced.
        assert_eq!(
            exp.get_expectations("k"),
            Some(Expectation { add: 1, del: 0 })
        );

        // Lowering or raising does not restart the timeout; setting does.
        exp.raise_expectations("k", 1, 0);
        assert!(exp.satisfied("k"));
        exp.expect_creations("k", 1);
        assert!(!exp.satisfied("k"));
        tokio::time::advance(Duration::from_secs(299)).await;
        assert!(!exp.satisfied("k"));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(exp.satisfied("k"));
    }

    #[tokio::test(start_paused = true)]
    async fn default_clock_follows_paused_tokio_time() {
        let exp = ControllerExpectations::new();
        exp.expect_deletions("k", 1);
        tokio::time::advance(Duration::from_secs(299)).await;
        assert!(!exp.satisfied("k"));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(exp.satisfied("k"));
    }

    #[test]
    fn delete_expectations_forgets_key() {
        let exp = ControllerExpectations::new();
        exp.expect_creations("k", 3);
        exp.delete_expectations("k");
        assert!(exp.satisfied("k"));
        assert_eq!(exp.get_expectations("k"), None);
    }

    #[test]
    fn uid_tracking_joins_and_observes() {
        let u = UidTrackingExpectations::new();
        assert!(u.get_uids("ns/job").is_empty());
        u.expect_finalizers_removed("ns/job", ["uid-1", "uid-2"]);
        u.expect_finalizers_removed("ns/job", vec!["uid-2".to_string(), "uid-3".to_string()]);
        u.expect_finalizers_removed("ns/other", ["uid-9"]);
        let want: HashSet<String> = ["uid-1", "uid-2", "uid-3"].map(String::from).into();
        assert_eq!(u.get_uids("ns/job"), want);

        assert!(u.finalizer_removal_observed("ns/job", "uid-2"));
        assert!(!u.finalizer_removal_observed("ns/job", "uid-2"));
        assert!(!u.finalizer_removal_observed("ns/job", "uid-9"));
        assert!(!u.finalizer_removal_observed("ns/missing", "uid-1"));
        let want: HashSet<String> = ["uid-1", "uid-3"].map(String::from).into();
        assert_eq!(u.get_uids("ns/job"), want);

        assert!(u.finalizer_removal_observed("ns/job", "uid-1"));
        assert!(u.finalizer_removal_observed("ns/job", "uid-3"));
        assert!(u.get_uids("ns/job").is_empty());
        assert_eq!(u.get_uids("ns/other").len(), 1);

        u.expect_finalizers_removed("ns/job", Vec::<String>::new());
        assert!(u.get_uids("ns/job").is_empty());
        u.delete_expectations("ns/other");
        assert!(u.get_uids("ns/other").is_empty());
    }
}
