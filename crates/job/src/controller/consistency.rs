//! Read-your-writes (KCM 1.36+, `StaleControllerConsistencyJob`): the
//! highest resourceVersion each of the controller's own writes returned,
//! per Job and resource (pod creates and patches filed under the pod's
//! controller; Job status writes), and the check before a sync that the
//! informers have caught up with them. A sync that would run on caches
//! older than its own writes is skipped and the Job retried with back-off
//! (`job_controller_stale_sync_skips_total`). Pod deletes are not recorded,
//! as upstream. Off (1.34, 1.35, or the gate off): nothing is recorded.

use std::collections::HashMap;

use parking_lot::Mutex;

/// A resource whose writes are tracked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Resource {
    Pods,
    Jobs,
}

impl Resource {
    /// The `group` and `resource` labels of the skip metric.
    pub fn labels(self) -> [&'static str; 2] {
        match self {
            Resource::Pods => ["", "pods"],
            Resource::Jobs => ["batch", "jobs"],
        }
    }

    fn group_resource(self) -> &'static str {
        match self {
            Resource::Pods => "pods",
            Resource::Jobs => "jobs.batch",
        }
    }
}

/// The informers have not yet seen a write of ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "read version: {read} is not as new as written version: {written} for group resource {}",
    .resource.group_resource()
)]
pub struct Stale {
    pub resource: Resource,
    pub read: u64,
    pub written: u64,
}

#[derive(Debug, Default)]
struct Written {
    uid: String,
    rvs: HashMap<Resource, u64>,
}

/// The written versions of every Job, keyed `namespace/name`.
#[derive(Debug, Default)]
pub struct ReadYourWrites {
    enabled: bool,
    written: Mutex<HashMap<String, Written>>,
}

impl ReadYourWrites {
    pub fn new(enabled: bool) -> Self {
        ReadYourWrites {
            enabled,
            written: Mutex::default(),
        }
    }

    /// Records a successful write of ours that returned `rv`.
    pub fn on_write(&self, key: &str, uid: &str, resource: Resource, rv: Option<&str>) {
        let Some(rv) = rv.and_then(kcm_runtime::informer::parse_rv) else {
            return;
        };
        if !self.enabled || key.is_empty() {
            return;
        }
        let mut map = self.written.lock();
        let w = map.entry(key.to_string()).or_default();
        if w.uid != uid {
            // A new Job under the same name: start over.
            *w = Written {
                uid: uid.to_string(),
                rvs: HashMap::new(),
            };
        }
        let slot = w.rvs.entry(resource).or_insert(0);
        *slot = (*slot).max(rv);
    }

    /// Whether the informers (`read` gives each resource's last applied
    /// version, `None` when unknown) have seen every write recorded for
    /// `key`. Caught up: the record is dropped.
    pub fn check(&self, key: &str, read: impl Fn(Resource) -> Option<u64>) -> Result<(), Stale> {
        if !self.enabled {
            return Ok(());
        }
        let mut map = self.written.lock();
        let Some(w) = map.get(key) else {
            return Ok(());
        };
        for (&resource, &written) in &w.rvs {
            // Unknown read versions are skipped, as upstream does.
            if let Some(read) = read(resource)
                && written > read
            {
                return Err(Stale {
                    resource,
                    read,
                    written,
                });
            }
        }
        map.remove(key);
        Ok(())
    }

    /// Forgets `key`'s writes (the Job was deleted or is gone): all of them,
    /// or only those of the Job with `uid`.
    pub fn forget(&self, key: &str, uid: Option<&str>) {
        let mut map = self.written.lock();
        if uid.is_none_or(|u| map.get(key).is_some_and(|w| w.uid == u)) {
            map.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sync_waits_until_every_write_is_seen() {
        let r = ReadYourWrites::new(true);
        r.on_write("ns/j", "u1", Resource::Pods, Some("105"));
        r.on_write("ns/j", "u1", Resource::Pods, Some("101"));
        r.on_write("ns/j", "u1", Resource::Jobs, Some("110"));
        let seen = |pods, jobs| move |res| if res == Resource::Pods { pods } else { jobs };
        assert_eq!(
            r.check("ns/j", seen(Some(104), Some(200))),
            Err(Stale {
                resource: Resource::Pods,
                read: 104,
                written: 105
            })
        );
        let e = r
            .check("ns/j", seen(Some(200), Some(109)))
            .expect_err("jobs stale");
        assert_eq!(
            e.to_string(),
            "read version: 109 is not as new as written version: 110 for group resource jobs.batch"
        );
        // Unknown read versions do not hold a sync back.
        assert!(r.check("ns/j", seen(Some(105), None)).is_ok());
        // Caught up once: forgotten.
        assert!(r.check("ns/j", seen(Some(1), Some(1))).is_ok());
    }

    #[test]
    fn off_records_nothing_and_bad_versions_are_ignored() {
        let off = ReadYourWrites::new(false);
        off.on_write("ns/j", "u", Resource::Pods, Some("9"));
        assert!(off.check("ns/j", |_| Some(1)).is_ok());
        let on = ReadYourWrites::new(true);
        for bad in [None, Some(""), Some("012"), Some("x1")] {
            on.on_write("ns/j", "u", Resource::Pods, bad);
        }
        assert!(on.check("ns/j", |_| Some(1)).is_ok());
    }

    #[test]
    fn forget_by_uid_and_a_recreated_job_starts_over() {
        let r = ReadYourWrites::new(true);
        r.on_write("ns/j", "old", Resource::Pods, Some("50"));
        r.forget("ns/j", Some("other"));
        assert!(r.check("ns/j", |_| Some(1)).is_err());
        r.on_write("ns/j", "new", Resource::Jobs, Some("60"));
        assert_eq!(
            r.check("ns/j", |_| Some(55)),
            Err(Stale {
                resource: Resource::Jobs,
                read: 55,
                written: 60
            })
        );
        r.forget("ns/j", Some("new"));
        assert!(r.check("ns/j", |_| Some(1)).is_ok());
        r.on_write("ns/j", "x", Resource::Pods, Some("70"));
        r.forget("ns/j", None);
        assert!(r.check("ns/j", |_| Some(1)).is_ok());
    }
}
