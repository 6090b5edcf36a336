//! `kcm-rs lint` against a cluster: Jobs (and CronJobs' Job templates)
//! whose `spec.managedBy` names a controller that is not running. Such a
//! Job waits forever: KCM's job-controller leaves it alone and nothing
//! else syncs it.
//!
//! "Running" is told from leader Leases, the only cluster-wide trace of a
//! controller process. A Lease is held when its `holderIdentity` is set
//! and `renewTime + leaseDurationSeconds` is not in the past. Which Lease
//! belongs to a `managedBy` value:
//!
//! - kcm-rs's own (`--leader-elect-resource-namespace`/`-name`; by
//!   default the Lease `kcm-rs` the manifests or the chart made, found by
//!   its label in whatever namespace kcm-rs was installed, else
//!   `kube-system/kcm-rs`: [`locate`]) when it is held and its
//!   `kcm-rs.dev/job-managed-by` annotation ([`kcm_job::mode`]) is that
//!   value: the name it was started with beside KCM, or KCM's name when it
//!   replaces KCM's job-controller;
//! - `kubernetes.io/job-controller`: else KCM's,
//!   `kube-system/kube-controller-manager` (a held Lease does not prove
//!   KCM runs its job-controller: `--controllers` is not visible);
//! - `kcm-rs.dev/…` names: else kcm-rs's Lease, whatever its annotation
//!   (a kcm-rs from before the annotation writes none);
//! - any other name: no Lease is known to belong to it, so lint says it
//!   cannot tell and that nothing in the cluster is known to run it.
//!
//! A kcm-rs started with `--leader-elect=false` holds no Lease: lint
//! cannot see it. Finished Jobs need no controller and are skipped.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::coordination::v1::Lease;
use kcm_job::lint::Finding;
use kcm_job::mode;
use kcm_job::pods::{JOB_CONTROLLER_NAME, is_finished};
use kube::api::ListParams;
use kube::{Api, Resource, ResourceExt};

/// KCM's leader Lease (its `--leader-elect-resource-*` defaults).
pub const KCM_LEASE: (&str, &str) = ("kube-system", "kube-controller-manager");

/// The label the manifests and the chart put on the Lease they create.
pub const LEASE_LABEL: &str = "app.kubernetes.io/name=kcm-rs";

/// The namespace of kcm-rs's Lease `name` when none is given: the Leases of
/// that name labelled [`LEASE_LABEL`] across namespaces ([`choose`]);
/// kube-system (the flag's default) when none is found or they cannot be
/// listed (the finding then names the Lease it read).
pub async fn locate(client: &kube::Client, name: &str, now: Timestamp) -> String {
    let api: Api<Lease> = Api::all(client.clone());
    let lp = ListParams::default()
        .labels(LEASE_LABEL)
        .fields(&format!("metadata.name={name}"));
    let found = api.list(&lp).await.map(|l| l.items).unwrap_or_default();
    choose(&found, now).unwrap_or_else(|| "kube-system".into())
}

/// Of kcm-rs's Leases, the namespace of the one held (the most recently
/// renewed when several are), else of the first by namespace.
pub fn choose(leases: &[Lease], now: Timestamp) -> Option<String> {
    let renewed = |l: &Lease| {
        l.spec
            .as_ref()
            .and_then(|s| s.renew_time.as_ref())
            .map(|t| t.0)
    };
    let held = leases
        .iter()
        .filter(|l| matches!(LeaseState::of(l, now), LeaseState::Held { .. }))
        .max_by_key(|l| renewed(l));
    let first = leases.iter().min_by_key(|l| l.namespace());
    held.or(first).and_then(|l| l.namespace())
}

/// Check identifiers, as `kcm_job::lint`'s.
pub const NOT_RUNNING: &str = "managed-by-not-running";
pub const UNKNOWN: &str = "managed-by-unknown";

/// A Lease as lint found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseState {
    /// Held by `holder`; `answers_to` is kcm-rs's `job-managed-by` mark.
    Held {
        holder: String,
        answers_to: Option<String>,
    },
    /// A holder that stopped renewing: expired at this time.
    Expired {
        holder: String,
        at: Timestamp,
    },
    /// No holder (released on shutdown) or no renewal time.
    Released,
    Missing,
    /// Could not be read (RBAC, say).
    Unreadable(String),
}

impl LeaseState {
    /// From a Lease read at `now`.
    pub fn of(lease: &Lease, now: Timestamp) -> LeaseState {
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.unwrap_or_default();
        let (Some(renewed), false) = (spec.renew_time, holder.is_empty()) else {
            return LeaseState::Released;
        };
        let secs = i64::from(spec.lease_duration_seconds.unwrap_or(0));
        let until = renewed
            .0
            .checked_add(SignedDuration::from_secs(secs))
            .unwrap_or(renewed.0);
        if until < now {
            return LeaseState::Expired { holder, at: until };
        }
        let answers_to = lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(mode::JOB_MANAGED_BY))
            .cloned();
        LeaseState::Held { holder, answers_to }
    }

    fn describe(&self, at: &str) -> String {
        match self {
            LeaseState::Held { holder, answers_to } => match answers_to.as_deref() {
                Some("") => format!("{at} is held by {holder}, which runs no Job controller"),
                Some(n) => format!("{at} is held by {holder}, which syncs managedBy {n}"),
                None => format!("{at} is held by {holder}"),
            },
            LeaseState::Expired { holder, at: t } => {
                format!("{at} expired at {t} (last holder {holder})")
            }
            LeaseState::Released => format!("{at} has no holder"),
            LeaseState::Missing => format!("{at} does not exist"),
            LeaseState::Unreadable(e) => format!("{at} could not be read ({e})"),
        }
    }
}

/// The Leases lint knows, with where they are.
pub struct Leases {
    pub kcm_rs: ((String, String), LeaseState),
    pub kcm: LeaseState,
}

impl Leases {
    /// Reads kcm-rs's Lease at `(namespace, name)` and KCM's.
    pub async fn read(client: &kube::Client, kcm_rs: (String, String), now: Timestamp) -> Leases {
        let ours = read(client, &kcm_rs.0, &kcm_rs.1, now).await;
        let kcm = read(client, KCM_LEASE.0, KCM_LEASE.1, now).await;
        Leases {
            kcm_rs: (kcm_rs, ours),
            kcm,
        }
    }
}

async fn read(client: &kube::Client, ns: &str, name: &str, now: Timestamp) -> LeaseState {
    let api: Api<Lease> = Api::namespaced(client.clone(), ns);
    match api.get_opt(name).await {
        Ok(Some(l)) => LeaseState::of(&l, now),
        Ok(None) => LeaseState::Missing,
        Err(e) => LeaseState::Unreadable(e.to_string()),
    }
}

/// What lint reads a `managedBy` from: a Job, or a CronJob's Job template.
#[derive(Clone, Copy)]
pub enum Subject<'a> {
    Job(&'a Job),
    CronJob(&'a CronJob),
}

impl<'a> Subject<'a> {
    /// The `managedBy` named and where, for an unfinished Job or a
    /// CronJob's template.
    fn named(self) -> Option<(&'static str, &'a str)> {
        match self {
            Subject::Job(job) if !is_finished(job) => {
                Some(("spec.managedBy", job.spec.as_ref()?.managed_by.as_deref()?))
            }
            Subject::Job(_) => None,
            Subject::CronJob(cron) => Some((
                "spec.jobTemplate.spec.managedBy",
                cron.spec
                    .job_template
                    .spec
                    .as_ref()?
                    .managed_by
                    .as_deref()?,
            )),
        }
    }

    fn object(self) -> String {
        let (kind, meta) = match self {
            Subject::Job(j) => ("Job", j.meta()),
            Subject::CronJob(c) => ("CronJob", c.meta()),
        };
        let name = meta.name.as_deref().unwrap_or("<unnamed>");
        match meta.namespace.as_deref() {
            Some(ns) => format!("{kind} {ns}/{name}"),
            None => format!("{kind} {name}"),
        }
    }
}

/// Does any object name a controller (the Leases are read only then)?
pub fn any_named<'a>(subjects: impl IntoIterator<Item = Subject<'a>>) -> bool {
    subjects.into_iter().any(|s| s.named().is_some())
}

/// The finding for one object, given the Leases.
pub fn check(subject: Subject<'_>, leases: &Leases) -> Option<Finding> {
    let (path, value) = subject.named()?;
    let ((ours_ns, ours_name), ours) = &leases.kcm_rs;
    let ours_at = format!("kcm-rs's Lease {ours_ns}/{ours_name}");
    if let LeaseState::Held { answers_to, .. } = ours
        && answers_to.as_deref() == Some(value)
    {
        return None;
    }
    let finding = |check, problem: String, fix: String| Finding {
        object: subject.object(),
        path: path.to_string(),
        check,
        problem,
        fix,
    };
    if value == JOB_CONTROLLER_NAME {
        if matches!(leases.kcm, LeaseState::Held { .. }) {
            return None;
        }
        let kcm_at = format!("{}/{}", KCM_LEASE.0, KCM_LEASE.1);
        return Some(finding(
            NOT_RUNNING,
            format!(
                "{value} (kube-controller-manager's job-controller) has no Lease held for it: {}; {}",
                leases.kcm.describe(&format!("the Lease {kcm_at}")),
                ours.describe(&ours_at)
            ),
            "start kube-controller-manager, or kcm-rs replacing its job-controller; until then the Job waits".into(),
        ));
    }
    if value.starts_with("kcm-rs.dev/") {
        let fix = format!(
            "run kcm-rs with --job-managed-by={value} (its Lease: --leader-elect-resource-namespace/-name, if not {ours_ns}/{ours_name}); until then the Job waits"
        );
        return match ours {
            LeaseState::Held {
                answers_to: None, ..
            } => None,
            LeaseState::Held { .. } => Some(finding(
                NOT_RUNNING,
                format!(
                    "{value} is kcm-rs's, and kcm-rs syncs other Jobs: {}",
                    ours.describe(&ours_at)
                ),
                fix,
            )),
            _ => Some(finding(
                NOT_RUNNING,
                format!(
                    "{value} is kcm-rs's, and no Lease held for it: {}",
                    ours.describe(&ours_at)
                ),
                fix,
            )),
        };
    }
    Some(finding(
        UNKNOWN,
        format!(
            "no Lease is known to belong to {value}, so whether it runs cannot be told: nothing in the cluster is known to run it ({})",
            ours.describe(&ours_at)
        ),
        format!("check that the controller for {value} runs; the Job waits for it"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_lease_is_found_where_kcm_rs_runs() {
        let now = Timestamp::now();
        let at = |ns: &str, l: Lease| {
            let mut l = l;
            l.metadata.namespace = Some(ns.into());
            l
        };
        let stale = at("kube-system", lease("old", 600, 15, None));
        let held = at("kcm-system", lease("kcm-rs-abc", 1, 15, None));
        let newer = at("other", lease("kcm-rs-def", 0, 15, None));
        assert_eq!(choose(&[], now), None);
        assert_eq!(
            choose(std::slice::from_ref(&stale), now).as_deref(),
            Some("kube-system")
        );
        assert_eq!(
            choose(&[stale.clone(), held.clone()], now).as_deref(),
            Some("kcm-system")
        );
        assert_eq!(choose(&[held, stale, newer], now).as_deref(), Some("other"));
    }

    fn lease(holder: &str, renewed_ago: i64, duration: i32, answers_to: Option<&str>) -> Lease {
        let now = Timestamp::now();
        let mut l: Lease = serde_json::from_value(json!({
            "metadata": {"name": "kcm-rs", "namespace": "kube-system"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration,
                     "renewTime": now.checked_sub(SignedDuration::from_secs(renewed_ago)).expect("time")}
        }))
        .expect("lease");
        if let Some(a) = answers_to {
            l.metadata.annotations =
                Some([(mode::JOB_MANAGED_BY.to_string(), a.to_string())].into());
        }
        l
    }

    fn job(managed_by: Option<&str>, finished: bool) -> Job {
        let mut j = json!({"kind": "Job", "metadata": {"name": "j", "namespace": "ns"},
                           "spec": {"template": {}}});
        if let Some(m) = managed_by {
            j["spec"]["managedBy"] = m.into();
        }
        if finished {
            j["status"]["conditions"] = json!([{"type": "Complete", "status": "True"}]);
        }
        serde_json::from_value(j).expect("job")
    }

    fn check_job(job: &Job, leases: &Leases) -> Option<Finding> {
        check(Subject::Job(job), leases)
    }

    fn leases(ours: LeaseState, kcm: LeaseState) -> Leases {
        Leases {
            kcm_rs: (("kube-system".into(), "kcm-rs".into()), ours),
            kcm,
        }
    }

    fn held(answers_to: Option<&str>) -> LeaseState {
        LeaseState::Held {
            holder: "h".into(),
            answers_to: answers_to.map(str::to_string),
        }
    }

    #[test]
    fn a_lease_is_held_until_renew_time_plus_duration() {
        let now = Timestamp::now();
        let fresh = LeaseState::of(&lease("a", 5, 15, Some("x/y")), now);
        let want = LeaseState::Held {
            holder: "a".into(),
            answers_to: Some("x/y".into()),
        };
        assert_eq!(fresh, want);
        assert!(matches!(
            LeaseState::of(&lease("a", 20, 15, None), now),
            LeaseState::Expired { .. }
        ));
        assert_eq!(
            LeaseState::of(&lease("", 0, 15, None), now),
            LeaseState::Released
        );
    }

    #[test]
    fn each_managed_by_maps_to_its_lease() {
        let ours = "kcm-rs.dev/job-controller";
        let beside = leases(held(Some(ours)), LeaseState::Missing);
        assert_eq!(check_job(&job(Some(ours), false), &beside), None);
        assert_eq!(check_job(&job(None, false), &beside), None, "no managedBy");
        assert_eq!(check_job(&job(Some(ours), true), &beside), None, "finished");
        // kcm-rs's Lease gone: the opted-in Job waits.
        for state in [
            LeaseState::Missing,
            LeaseState::Released,
            LeaseState::Expired {
                holder: "h".into(),
                at: Timestamp::UNIX_EPOCH,
            },
        ] {
            let f =
                check_job(&job(Some(ours), false), &leases(state, held(None))).expect("finding");
            assert_eq!((f.check, f.path.as_str()), (NOT_RUNNING, "spec.managedBy"));
            assert!(f.problem.contains("no Lease held for it"), "{}", f.problem);
        }
        // Held, but started for another name.
        let other = leases(held(Some("kcm-rs.dev/other")), LeaseState::Missing);
        assert!(check_job(&job(Some(ours), false), &other).is_some());
        // KCM's name: KCM's Lease, or kcm-rs replacing it.
        let kcm = JOB_CONTROLLER_NAME;
        assert_eq!(
            check_job(
                &job(Some(kcm), false),
                &leases(LeaseState::Missing, held(None))
            ),
            None
        );
        assert_eq!(
            check_job(
                &job(Some(kcm), false),
                &leases(held(Some(kcm)), LeaseState::Missing)
            ),
            None
        );
        assert!(check_job(&job(Some(kcm), false), &beside).is_some());
        // Unknown names: known only through kcm-rs's mark.
        let f = check_job(&job(Some("example.com/mine"), false), &beside).expect("finding");
        assert_eq!(f.check, UNKNOWN);
        assert!(f.problem.contains("cannot be told"), "{}", f.problem);
        let custom = leases(held(Some("example.com/mine")), LeaseState::Missing);
        assert_eq!(
            check_job(&job(Some("example.com/mine"), false), &custom),
            None
        );
        // CronJobs: the template's field.
        let cron: CronJob = serde_json::from_value(json!({
            "kind": "CronJob", "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"managedBy": ours,
                "template": {}}}}}))
        .expect("cronjob");
        let cron = Subject::CronJob(&cron);
        let f = check(cron, &leases(LeaseState::Missing, held(None))).expect("finding");
        assert_eq!(f.path, "spec.jobTemplate.spec.managedBy");
        assert_eq!(f.object, "CronJob ns/c");
        assert!(any_named([cron]));
    }
}
