//! A second Job controller (KCM's job-controller left on): the API server
//! records every status writer of a Job in `metadata.managedFields`, so a
//! Job whose status another controller manager wrote while kcm-rs runs is
//! managed twice. Pure decisions over the Job; the executor
//! (`controller::conflict`) logs, records the event and the gauge.

use std::collections::HashMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use parking_lot::Mutex;

/// kcm-rs's own field manager (the user agent's first word).
pub const OWN_MANAGER: &str = "kcm-rs";
/// A foreign write older than this no longer counts: the other controller
/// has stopped writing (managedFields keep its entry's `time`).
pub const WINDOW: Duration = Duration::from_secs(120);

/// `--on-conflict`: what the Job controller does while another controller
/// writes the Jobs it leads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OnConflict {
    /// Stop syncing Jobs until the conflict clears.
    #[default]
    Stop,
    /// Keep syncing (report only).
    Continue,
}

/// The other controller's last status write of a Job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignWrite {
    pub manager: String,
    pub at: Timestamp,
}

/// A controller manager other than kcm-rs: KCM's `kube-controller-manager`
/// (client-go names the manager after the binary, so a renamed build such
/// as the test harness's `kcm-e2e-controller-manager` counts too).
fn is_other_controller_manager(manager: &str) -> bool {
    manager != OWN_MANAGER && manager.ends_with("controller-manager")
}

/// The latest `Update` of `job`'s status subresource by another controller
/// manager, if any.
pub fn foreign_status_write(job: &Job) -> Option<ForeignWrite> {
    job.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|f| f.subresource.as_deref() == Some("status"))
        .filter(|f| f.operation.as_deref() == Some("Update"))
        .filter_map(|f| {
            let manager = f.manager.as_deref()?;
            let at = f.time.as_ref()?.0;
            is_other_controller_manager(manager).then(|| ForeignWrite {
                manager: manager.to_string(),
                at,
            })
        })
        .max_by_key(|w| w.at)
}

/// Whether a foreign write is a live conflict at `now`: made after this
/// process started (KCM's writes before a hand-over are not) and within
/// [`WINDOW`].
pub fn is_live(w: &ForeignWrite, started: Timestamp, now: Timestamp) -> bool {
    let recent = now.duration_since(w.at).unsigned_abs() < WINDOW || w.at > now;
    w.at > started && recent
}

/// What [`Tracker::observe`] saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    /// A live conflict not reported before for this Job.
    New(ForeignWrite),
    /// Already reported, or none.
    Known,
}

/// Jobs with a live foreign write, by key.
#[derive(Debug)]
pub struct Tracker {
    on_conflict: OnConflict,
    started: Timestamp,
    live: Mutex<HashMap<String, ForeignWrite>>,
}

impl Tracker {
    pub fn new(on_conflict: OnConflict, started: Timestamp) -> Self {
        Tracker {
            on_conflict,
            started,
            live: Mutex::default(),
        }
    }

    /// Records what `job` (key `key`) shows at `now`.
    pub fn observe(&self, key: &str, job: &Job, now: Timestamp) -> Observed {
        let seen = foreign_status_write(job).filter(|w| is_live(w, self.started, now));
        let mut live = self.live.lock();
        match seen {
            Some(w) => match live.insert(key.to_string(), w.clone()) {
                None => Observed::New(w),
                Some(_) => Observed::Known,
            },
            None => {
                live.remove(key);
                Observed::Known
            }
        }
    }

    /// The Job is gone.
    pub fn forget(&self, key: &str) {
        self.live.lock().remove(key);
    }

    /// Any live conflict at `now` (expired ones are dropped).
    pub fn active(&self, now: Timestamp) -> bool {
        let mut live = self.live.lock();
        live.retain(|_, w| is_live(w, self.started, now));
        !live.is_empty()
    }

    /// Whether syncs stop now.
    pub fn blocks(&self, now: Timestamp) -> bool {
        self.on_conflict == OnConflict::Stop && self.active(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(entries: serde_json::Value) -> Job {
        serde_json::from_value(json!({ "metadata": { "name": "j", "managedFields": entries } }))
            .expect("job")
    }

    fn entry(manager: &str, sub: Option<&str>, time: &str) -> serde_json::Value {
        let mut e = json!({ "manager": manager, "operation": "Update",
            "apiVersion": "batch/v1", "time": time, "fieldsType": "FieldsV1", "fieldsV1": {} });
        if let Some(s) = sub {
            e["subresource"] = json!(s);
        }
        e
    }

    #[test]
    fn only_another_controller_managers_status_writes_count() {
        let t = "2025-01-01T00:01:00Z";
        let j = job(json!([
            entry("kubectl-create", None, t),
            entry("kcm-rs", Some("status"), t),
            entry("kubectl-patch", Some("status"), t),
        ]));
        assert_eq!(foreign_status_write(&j), None);
        let j = job(json!([
            entry(
                "kube-controller-manager",
                Some("status"),
                "2025-01-01T00:00:30Z"
            ),
            entry("kcm-e2e-controller-manager", Some("status"), t),
        ]));
        let w = foreign_status_write(&j).expect("foreign");
        assert_eq!(w.manager, "kcm-e2e-controller-manager");
    }

    #[test]
    fn live_after_start_and_within_the_window() {
        let at: Timestamp = "2025-01-01T00:01:00Z".parse().expect("ts");
        let w = ForeignWrite {
            manager: "kube-controller-manager".into(),
            at,
        };
        let before: Timestamp = "2025-01-01T00:00:00Z".parse().expect("ts");
        let soon: Timestamp = "2025-01-01T00:01:30Z".parse().expect("ts");
        let late: Timestamp = "2025-01-01T00:05:00Z".parse().expect("ts");
        assert!(is_live(&w, before, soon));
        assert!(!is_live(&w, before, late), "expired");
        assert!(!is_live(&w, soon, soon), "written before we started");
    }

    #[test]
    fn the_tracker_reports_once_and_clears() {
        let started: Timestamp = "2025-01-01T00:00:00Z".parse().expect("ts");
        let now: Timestamp = "2025-01-01T00:01:10Z".parse().expect("ts");
        let j = job(json!([entry(
            "kube-controller-manager",
            Some("status"),
            "2025-01-01T00:01:00Z"
        )]));
        let t = Tracker::new(OnConflict::Stop, started);
        assert!(matches!(t.observe("ns/j", &j, now), Observed::New(_)));
        assert_eq!(t.observe("ns/j", &j, now), Observed::Known);
        assert!(t.blocks(now));
        let later: Timestamp = "2025-01-01T01:00:00Z".parse().expect("ts");
        assert!(!t.blocks(later));
        let c = Tracker::new(OnConflict::Continue, started);
        c.observe("ns/j", &j, now);
        assert!(c.active(now) && !c.blocks(now));
        c.forget("ns/j");
        assert!(!c.active(now));
    }
}
