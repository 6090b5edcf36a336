//! The in-memory executor of the sync stages ([`World`]) and builders of
//! Jobs and pods for the table and property tests. A sync lends the world
//! as the controller's [`JobPort`] ([`WorldPort`]): its pod and status
//! writes go through the same port as the real executor's.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use futures::executor::block_on;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::{Job, JobStatus};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodCondition, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kcm_runtime::client::Written;
use kcm_runtime::events::EventType;
use parking_lot::Mutex;
use serde_json::json;

use crate::backoff::BackoffRecord;
use crate::controller::port::{JobPort, Settle, Settled};
use crate::pods::{JOB_COMPLETION_INDEX, JOB_TRACKING_FINALIZER, is_terminal};
use crate::sync::manage::{Outcome, PodWork, apply_outcome, pod_work};
use crate::sync::tracking::{finish, plan};
use crate::sync::{Config, Input, JobEvent, prepare};

pub(crate) const T0: i64 = 1_700_000_000;

/// A Job named `j` in `ns` with the given spec fields over a one-container
/// `restartPolicy: Never` template.
pub(crate) fn job(spec: serde_json::Value) -> Job {
    let mut j = json!({
        "metadata": {"name": "j", "namespace": "ns", "uid": "job-uid"},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox"}]}}}
    });
    if let (Some(dst), Some(src)) = (j["spec"].as_object_mut(), spec.as_object()) {
        for (k, v) in src {
            dst.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(j).expect("job")
}

/// A pod `name` (also its UID) of Job `j` with the tracking finalizer.
pub(crate) fn pod(name: &str, phase: &str) -> Pod {
    let mut p: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": name,
            "finalizers": [JOB_TRACKING_FINALIZER],
            "creationTimestamp": Time(Timestamp::constant(T0, 0)),
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j",
                "uid": "job-uid", "controller": true}]},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        "status": {"phase": phase}
    }))
    .expect("pod");
    if matches!(phase, "Succeeded" | "Failed") {
        set_exit(
            &mut p,
            i32::from(phase == "Failed"),
            Timestamp::constant(T0, 0),
        );
    }
    p
}

pub(crate) fn set_exit(p: &mut Pod, code: i32, at: Timestamp) {
    let status = p.status.get_or_insert_with(PodStatus::default);
    status.container_statuses = Some(vec![ContainerStatus {
        name: "main".into(),
        state: Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                finished_at: Some(Time(at)),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }]);
}

pub(crate) fn with_exit(mut p: Pod, code: i32) -> Pod {
    set_exit(&mut p, code, Timestamp::constant(T0, 0));
    p
}

pub(crate) fn ready(mut p: Pod) -> Pod {
    p.status.get_or_insert_with(Default::default).conditions = Some(vec![PodCondition {
        type_: "Ready".into(),
        status: "True".into(),
        ..Default::default()
    }]);
    p
}

pub(crate) fn deleting(mut p: Pod) -> Pod {
    p.metadata.deletion_timestamp = Some(Time(Timestamp::constant(T0, 0)));
    p
}

pub(crate) fn indexed(mut p: Pod, i: i32) -> Pod {
    p.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(JOB_COMPLETION_INDEX.into(), i.to_string());
    p
}

pub(crate) fn uid(p: &Pod) -> String {
    p.metadata.uid.clone().unwrap_or_default()
}

/// What one sync did, as the executor saw it.
#[derive(Debug, Clone)]
pub(crate) struct Report {
    pub work: PodWork,
    /// Status after each write, in order.
    pub writes: Vec<JobStatus>,
    pub finished: bool,
    pub events: Vec<JobEvent>,
    pub action: &'static str,
}

impl Report {
    pub fn created(&self) -> Vec<Pod> {
        match &self.work {
            PodWork::Create(p) => p.clone(),
            _ => Vec::new(),
        }
    }
    pub fn removed(&self) -> Vec<String> {
        match &self.work {
            PodWork::Remove(p) => p.iter().map(|p| uid(p)).collect(),
            _ => Vec::new(),
        }
    }
}

/// Where an aborted sync stops (the controller crashed or lost its lease).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Crash {
    None,
    /// After the pod work, before any status write.
    AfterPodWork,
    /// After the first status write, before finalizer removals.
    AfterFlush,
    /// After removing the first `n` finalizers.
    MidRemoval(usize),
    /// After every finalizer removal, before the last status write.
    BeforeLastWrite,
}

/// The API server and kubelet in memory: the Job, its pods, and the
/// controller's back-off record (lost on a crash).
#[derive(Debug, Clone)]
pub(crate) struct World {
    pub job: Job,
    pub pods: Vec<Pod>,
    pub backoff: Option<BackoffRecord>,
    pub now: Timestamp,
    pub next: u32,
    pub config: Config,
}

impl World {
    pub fn new(job: Job) -> Self {
        World {
            job,
            pods: Vec::new(),
            backoff: None,
            now: Timestamp::constant(T0, 0),
            next: 0,
            config: Config {
                pod_failure_policy: true,
                ..Config::default()
            },
        }
    }

    pub fn with_pods(mut self, pods: Vec<Pod>) -> Self {
        self.pods = pods;
        self
    }

    pub fn advance(&mut self, secs: i64) {
        self.now += SignedDuration::from_secs(secs);
    }

    /// Drops pods that are being deleted and hold no finalizer, unless a
    /// kubelet still has to stop them (bound and not terminal).
    pub fn gc(&mut self) {
        self.pods.retain(|p| {
            let gone = p.metadata.deletion_timestamp.is_some()
                && p.metadata.finalizers.as_ref().is_none_or(Vec::is_empty)
                && (p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none() || is_terminal(p));
            !gone
        });
    }

    /// One sync of the Job, as `sync_job` runs it, with every API call
    /// succeeding and observed at once (expectations always satisfied).
    /// The writes go through the world's [`JobPort`].
    pub fn sync(&mut self, crash: Crash) -> Report {
        let input = Input {
            job: self.job.clone(),
            pods: self.pods.iter().cloned().map(Arc::new).collect(),
            satisfied: true,
            expected_rm_finalizers: HashSet::new(),
            stored_backoff: self.backoff,
            now: self.now,
            config: self.config,
        };
        WorldPort(Mutex::new(self)).sync(input, crash)
    }
}

/// The world lent to one sync as the executor's [`JobPort`]: the API
/// server's half (pods and the Job's status) for the writes it simulates.
pub(crate) struct WorldPort<'w>(Mutex<&'w mut World>);

impl WorldPort<'_> {
    fn gc(&self) {
        self.0.lock().gc();
    }

    fn lose_backoff(&self) {
        self.0.lock().backoff = None;
    }

    /// Every simulated write succeeds.
    fn must<T>(r: Settle<T>) {
        assert!(r.is_ok(), "the world refuses no write");
    }

    fn write(&self, job: &Job, writes: &mut Vec<JobStatus>) {
        let w = block_on(self.write_status(job));
        assert!(w.is_ok(), "the world refuses no status write");
        writes.push(self.0.lock().job.status.clone().unwrap_or_default());
    }

    fn sync(&self, input: Input, crash: Crash) -> Report {
        let mut ctx = prepare(input);
        let work = pod_work(&mut ctx);
        let mut report_writes = Vec::new();
        if super::super::tracking::record_success_before_deletes(&mut ctx, &work) {
            self.write(&ctx.job, &mut report_writes);
        }
        let mut outcome = Outcome::default();
        match &work {
            PodWork::DeleteActive(pods) => {
                for p in pods {
                    Self::must(block_on(self.delete_pod(p)));
                    outcome.deleted += 1;
                    outcome.deleted_ready += i32::from(crate::pods::is_ready(p));
                }
            }
            PodWork::Remove(pods) => {
                for p in pods {
                    Self::must(block_on(self.remove_finalizer(p)));
                    Self::must(block_on(self.delete_pod(p)));
                    outcome.deleted += 1;
                    outcome.deleted_ready += i32::from(crate::pods::is_ready(p));
                }
            }
            PodWork::Create(pods) => {
                for p in pods {
                    Self::must(block_on(self.create_pod(&ctx.job, p)));
                }
            }
            PodWork::Backoff(_) | PodWork::Nothing => {}
        }
        self.gc();
        apply_outcome(&mut ctx, &work, outcome);
        let events = std::mem::take(&mut ctx.events);
        let mut report = Report {
            work: work.clone(),
            writes: report_writes,
            finished: false,
            events,
            action: ctx.action,
        };
        if crash == Crash::AfterPodWork {
            self.lose_backoff();
            return report;
        }
        let status = ctx.job.status.get_or_insert_with(JobStatus::default);
        let needs_flush = ctx.suspend_changed
            || ctx.active != status.active.unwrap_or(0)
            || Some(ctx.ready) != status.ready
            || Some(ctx.terminating) != status.terminating;
        status.active = (ctx.active != 0).then_some(ctx.active);
        status.ready = Some(ctx.ready);
        status.terminating = Some(ctx.terminating);
        let mut tracking = plan(&mut ctx, needs_flush);
        if tracking.flush {
            self.write(&ctx.job, &mut report.writes);
            self.0.lock().backoff = Some(ctx.new_backoff);
        }
        if crash == Crash::AfterFlush {
            self.lose_backoff();
            return report;
        }
        let mut removed = HashSet::new();
        for (n, p) in tracking.remove_finalizers.iter().enumerate() {
            if crash == Crash::MidRemoval(n) {
                self.gc();
                self.lose_backoff();
                return report;
            }
            Self::must(block_on(self.remove_finalizer(p)));
            removed.insert(uid(p));
        }
        self.gc();
        if crash == Crash::BeforeLastWrite {
            self.lose_backoff();
            return report;
        }
        let fin = finish(&mut ctx, &mut tracking, &removed, false);
        if fin.flush {
            self.write(&ctx.job, &mut report.writes);
        }
        report.finished = fin.finished;
        report
    }
}

/// The world's pod, or Moot when it is gone (as NotFound is for the API).
fn with_pod<T>(w: &mut World, pod: &Pod, f: impl FnOnce(&mut Pod, Timestamp) -> T) -> Settle<T> {
    let now = w.now;
    let uid_ = uid(pod);
    Ok(
        match w
            .pods
            .iter_mut()
            .find(|p| p.metadata.uid.as_deref() == Some(uid_.as_str()))
        {
            Some(p) => Settled::Written(f(p, now)),
            None => Settled::Moot,
        },
    )
}

impl JobPort for WorldPort<'_> {
    async fn create_pod(&self, _job: &Job, pod: &Pod) -> Settle<Written> {
        let mut w = self.0.lock();
        let mut p = pod.clone();
        w.next += 1;
        let id = format!("p{}", w.next);
        p.metadata.name = Some(id.clone());
        p.metadata.uid = Some(id.clone());
        p.metadata.creation_timestamp = Some(Time(w.now));
        p.status = Some(PodStatus {
            phase: Some("Pending".into()),
            ..Default::default()
        });
        w.pods.push(p);
        let mut written = Written::default();
        written.metadata.name = Some(id);
        Ok(Settled::Written(written))
    }

    async fn delete_pod(&self, pod: &Pod) -> Settle<()> {
        with_pod(&mut self.0.lock(), pod, |p, now| {
            if p.metadata.deletion_timestamp.is_none() {
                p.metadata.deletion_timestamp = Some(Time(now));
            }
        })
    }

    async fn remove_finalizer(&self, pod: &Pod) -> Settle<Written> {
        with_pod(&mut self.0.lock(), pod, |p, _| {
            if let Some(f) = p.metadata.finalizers.as_mut() {
                f.retain(|x| x != JOB_TRACKING_FINALIZER);
            }
            Written::default()
        })
    }

    async fn adopt_pod(&self, job: &Job, pod: &Pod) -> Settle<Written> {
        with_pod(&mut self.0.lock(), pod, |p, _| {
            p.metadata
                .owner_references
                .get_or_insert_with(Vec::new)
                .push(crate::sync::manage::controller_ref(job));
            p.metadata
                .finalizers
                .get_or_insert_with(Vec::new)
                .push(JOB_TRACKING_FINALIZER.into());
            Written::default()
        })
    }

    async fn release_pod(&self, job: &Job, pod: &Pod) -> Settle<Written> {
        with_pod(&mut self.0.lock(), pod, |p, _| {
            if let Some(refs) = p.metadata.owner_references.as_mut() {
                refs.retain(|r| Some(&r.uid) != job.metadata.uid.as_ref());
            }
            if let Some(f) = p.metadata.finalizers.as_mut() {
                f.retain(|x| x != JOB_TRACKING_FINALIZER);
            }
            Written::default()
        })
    }

    /// Only the status is written, as through the status subresource.
    async fn write_status(&self, job: &Job) -> Result<Written, kube::Error> {
        self.0.lock().job.status = job.status.clone();
        Ok(Written::default())
    }

    async fn read_job(&self, _job: &Job) -> Result<Option<Job>, kube::Error> {
        Ok(Some(self.0.lock().job.clone()))
    }

    /// The stages' events are checked in [`Report::events`].
    fn event(&self, _job: &Job, _type: EventType, _reason: &str, _message: String) {}
}

pub(crate) fn conditions(s: &JobStatus) -> Vec<(String, String, String)> {
    s.conditions
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.type_, c.status, c.reason.unwrap_or_default()))
        .collect()
}

pub(crate) fn types(s: &JobStatus) -> Vec<String> {
    conditions(s).into_iter().map(|c| c.0).collect()
}

pub(crate) fn uncounted(s: &JobStatus) -> (Vec<String>, Vec<String>) {
    let u = s.uncounted_terminated_pods.clone().unwrap_or_default();
    (
        u.succeeded.unwrap_or_default(),
        u.failed.unwrap_or_default(),
    )
}
