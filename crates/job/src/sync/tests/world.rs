//! The model world ([`World`]): an API server and kubelet in memory, and
//! the shipped Job controller (`JobController::sync_job`, with its
//! handlers, expectations and back-off store) running against it through
//! the world's [`JobPort`] and fed informers (see [`super::server`]). Also
//! builders of Jobs and pods for the table and property tests.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::executor::block_on;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::{Job, JobStatus};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodCondition, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kcm_pod::CachedPod;
use kcm_runtime::clock::Clock;
use kcm_runtime::informer::Informer;
use parking_lot::Mutex;
use serde_json::json;

use super::server::{Server, SyncLog, WorldPort, gone};
use crate::controller::{JobController, add_indexes};
use crate::pods::{JOB_COMPLETION_INDEX, JOB_TRACKING_FINALIZER, is_finished};
use crate::sync::manage::PodWork;
use crate::sync::{Config, JobEvent};

/// The one Job of the world.
const KEY: &str = "ns/j";

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

/// The Job controller's pod predicates over the world's stored (API) pods,
/// through the cached form the controller reads.
pub(crate) mod full {
    use k8s_openapi::api::core::v1::Pod;
    use kcm_pod::CachedPod;

    pub fn is_active(p: &Pod) -> bool {
        kcm_conditions::pod::is_pod_active(&CachedPod::from(p))
    }
    pub fn is_terminal(p: &Pod) -> bool {
        kcm_conditions::pod::is_pod_terminal(&CachedPod::from(p))
    }
    pub fn is_terminating(p: &Pod) -> bool {
        kcm_conditions::pod::is_pod_terminating(&CachedPod::from(p))
    }
    pub fn phase(p: &Pod) -> String {
        CachedPod::from(p).phase().to_string()
    }
    pub fn has_tracking_finalizer(p: &Pod) -> bool {
        CachedPod::from(p).has_tracking_finalizer()
    }
    pub fn completion_index(p: &Pod) -> Option<i32> {
        crate::pods::completion_index(&CachedPod::from(p))
    }
}

pub(crate) fn uid(p: &Pod) -> String {
    p.metadata.uid.clone().unwrap_or_default()
}

/// What one sync did, as the world's API server saw it.
#[derive(Debug, Clone)]
pub(crate) struct Report {
    /// The pod writes: creations, a removal (finalizer patch, then DELETE)
    /// or a finishing Job's deletions; `Nothing` without any.
    pub work: PodWork,
    /// Status after each write, in order.
    pub writes: Vec<JobStatus>,
    /// The sync added the terminal condition.
    pub finished: bool,
    /// Every event the controller recorded, in order.
    pub events: Vec<JobEvent>,
    /// The process died part-way (the crash point was reached).
    pub crashed: bool,
    /// How long the controller's back-off record holds creations back
    /// after the sync (None: not at all).
    pub backoff: Option<Duration>,
}

impl Report {
    fn new(log: SyncLog, finished: bool, backoff: Option<Duration>) -> Self {
        let arcs = |pods: Vec<CachedPod>| pods.into_iter().map(Arc::new).collect();
        let work = if !log.created.is_empty() {
            PodWork::Create(log.created)
        } else if log.removal {
            PodWork::Remove(arcs(log.deleted))
        } else if !log.deleted.is_empty() {
            PodWork::DeleteActive(arcs(log.deleted))
        } else {
            PodWork::Nothing
        };
        Report {
            work,
            writes: log.writes,
            finished,
            events: log.events,
            crashed: log.dead,
            backoff,
        }
    }

    /// The pods the sync created, as it asked for them.
    pub fn created(&self) -> Vec<Pod> {
        match &self.work {
            PodWork::Create(p) => p.clone(),
            _ => Vec::new(),
        }
    }

    pub fn removed(&self) -> Vec<String> {
        match &self.work {
            PodWork::Remove(p) => p.iter().map(|p| p.uid().to_string()).collect(),
            _ => Vec::new(),
        }
    }

    /// The reasons of the events, in order.
    pub fn reasons(&self) -> Vec<&str> {
        self.events.iter().map(|e| e.reason.as_str()).collect()
    }
}

/// Where the controller process dies during a sync: every write from that
/// point on fails (the API server keeps what landed), and the next sync
/// runs in a fresh process (empty expectations, back-off records and
/// caches). Points the sync does not reach do not crash it. The world
/// tells the points apart by the writes alone (see `Server::dies`): a lone
/// tracking status write with no finalizer removal counts as the first
/// flush, so `AfterFlush` and `BeforeLastWrite` let it land.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Crash {
    #[default]
    None,
    /// After the pod work, before any tracking write (status flush or
    /// finalizer removal of a tracked pod).
    AfterPodWork,
    /// After the first tracking status write, before finalizer removals.
    AfterFlush,
    /// After removing the first `n` finalizers of tracked pods.
    MidRemoval(usize),
    /// After every finalizer removal, before the status write that follows.
    BeforeLastWrite,
    /// After creating the first `n` pods of the sync's creations.
    MidCreation(usize),
}

/// The API server and kubelet in memory (the Job, its pods, the clock),
/// and the controller process syncing the Job. Tests edit the fields
/// between syncs as the user and the kubelet would; a sync feeds those
/// edits to the controller's informers first.
pub(crate) struct World {
    pub job: Job,
    pub pods: Vec<Pod>,
    pub now: Timestamp,
    pub next: u32,
    pub config: Config,
    server: Arc<Mutex<Server>>,
    /// What the controller's clock reads.
    clock: Arc<Mutex<Timestamp>>,
    /// The controller process; None before the first sync and after a crash.
    process: Option<Arc<JobController<WorldPort>>>,
}

impl World {
    pub fn new(job: Job) -> Self {
        let now = Timestamp::constant(T0, 0);
        World {
            job,
            pods: Vec::new(),
            now,
            next: 0,
            config: Config {
                pod_failure_policy: true,
                ..Config::default()
            },
            server: Arc::default(),
            clock: Arc::new(Mutex::new(now)),
            process: None,
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
        self.pods.retain(|p| !gone(p));
    }

    /// The running controller, or a fresh one (a new process: informers
    /// fed from scratch, handlers registered as in KCM).
    fn process(&mut self) -> Arc<JobController<WorldPort>> {
        if let Some(p) = &self.process
            && *p.config() == self.config
        {
            return Arc::clone(p);
        }
        self.server.lock().forget_fed();
        let jobs = Arc::new(Informer::<Job>::fed());
        let pods = Arc::new(Informer::<CachedPod>::fed());
        add_indexes(&jobs, &pods);
        let port = WorldPort {
            server: Arc::clone(&self.server),
            jobs: Arc::clone(&jobs),
            pods: Arc::clone(&pods),
        };
        let now = Arc::clone(&self.clock);
        let clock = Clock::from_fn(move || *now.lock());
        let jc = Arc::new(JobController::new(
            port,
            jobs,
            pods,
            self.config.clone(),
            clock,
            &kcm_runtime::metrics::Metrics::detached(),
            crate::metrics::Metrics::new(&Default::default(), kcm_features::KubeVersion::NEWEST),
        ));
        jc.register();
        self.process = Some(Arc::clone(&jc));
        jc
    }

    /// How long the controller's back-off record holds creations back now.
    fn backoff_wait(&self) -> Option<Duration> {
        let record = self.process.as_ref()?.backoff().get(KEY)?;
        Some(crate::backoff::remaining_time(&record, self.now)).filter(|d| !d.is_zero())
    }

    /// One run of the shipped `sync_job` for the Job, the world lent to it
    /// as the API server; every write is observed at once, so expectations
    /// are always satisfied when a sync starts. `crash` kills the process
    /// part-way (see [`Crash`]).
    pub fn sync(&mut self, crash: Crash) -> Report {
        let jc = self.process();
        *self.clock.lock() = self.now;
        {
            let mut s = self.server.lock();
            s.job = std::mem::take(&mut self.job);
            s.pods = std::mem::take(&mut self.pods);
            (s.now, s.next, s.crash) = (self.now, self.next, crash);
            s.log = SyncLog::default();
        }
        jc.port().publish();
        assert!(
            jc.expectations().satisfied(KEY),
            "an API call of the last sync was not observed"
        );
        let was_finished = is_finished(&self.server.lock().job);
        let result = block_on(jc.sync_job(KEY));
        let log = {
            let mut s = self.server.lock();
            self.job = std::mem::take(&mut s.job);
            self.pods = std::mem::take(&mut s.pods);
            self.next = s.next;
            std::mem::take(&mut s.log)
        };
        // The world refuses nothing else: a sync fails exactly when its
        // process died.
        assert_eq!(result.is_err(), log.dead, "{result:?}");
        if log.dead {
            // The process is gone; the world keeps what was written.
            self.process = None;
        }
        let finished = !was_finished && is_finished(&self.job);
        Report::new(log, finished, self.backoff_wait())
    }
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
