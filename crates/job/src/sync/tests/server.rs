//! The model world's API server ([`Server`]: the Job and its pods as
//! stored) and the [`JobPort`] a model controller writes through
//! ([`WorldPort`]). Every write lands at once and is fed at once to the
//! controller's fed informers, as its watch event would be, so expectations
//! are observed before the next sync. A crash ([`Crash`]) makes every write
//! from its point on fail, as if the process had died there: the shipped
//! executor stops where it would have, and the world keeps what landed.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{Job, JobStatus};
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kcm_conditions::pod::{is_pod_active, is_pod_terminal};
use kcm_pod::CachedPod;
use kcm_runtime::client::Written;
use kcm_runtime::events::EventType;
use kcm_runtime::informer::Informer;
use parking_lot::Mutex;
use serde_json::json;

use super::world::{Crash, uid};
use crate::controller::port::{JobPort, Settle, Settled};
use crate::pods::JOB_TRACKING_FINALIZER;
use crate::sync::JobEvent;

/// Where a sync stands, as its writes show it: the pod work (creations,
/// deletions, and the finalizer patches of removals) comes before the
/// tracking writes (status flushes and finalizer removals of tracked pods).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Phase {
    #[default]
    Start,
    PodWork,
    Tracking,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Create,
    Delete,
    RemoveFinalizer,
    Status,
    Claim,
}

/// What one sync wrote, for [`super::world::Report`].
#[derive(Debug, Default)]
pub(crate) struct SyncLog {
    phase: Phase,
    /// The process died: every later write fails.
    pub dead: bool,
    pub created: Vec<Pod>,
    /// Deleted pods, in order; `removal`: some of them lost their
    /// finalizer first (a removal, not a finishing Job's deletion).
    pub deleted: Vec<CachedPod>,
    pub removal: bool,
    finalizer_removed: HashSet<String>,
    tracking_writes: usize,
    tracking_removals: usize,
    pub writes: Vec<JobStatus>,
    pub events: Vec<JobEvent>,
}

/// The API server's state, lent by the world for one sync.
#[derive(Debug, Default)]
pub(crate) struct Server {
    pub job: Job,
    pub pods: Vec<Pod>,
    pub now: Timestamp,
    pub next: u32,
    /// The last resourceVersion handed out (one sequence, as etcd's).
    rv: u64,
    /// The objects as the informers were last fed, to find what the test
    /// changed by hand (the kubelet, the user) since.
    fed_job: Option<Job>,
    fed_pods: HashMap<String, Pod>,
    pub crash: Crash,
    pub log: SyncLog,
}

/// Gone from the API server: deleted, no finalizer left, and no kubelet
/// still has to stop it (unbound, or terminal).
pub(crate) fn gone(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_some()
        && p.metadata.finalizers.as_ref().is_none_or(Vec::is_empty)
        && (p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none()
            || is_pod_terminal(&CachedPod::from(p)))
}

fn has_true(s: Option<&JobStatus>, type_: &str) -> bool {
    s.and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

fn api_error(code: u16, reason: &str, message: &str) -> kube::Error {
    let s = json!({"status": "Failure", "code": code, "reason": reason, "message": message});
    kube::Error::Api(Box::new(serde_json::from_value(s).expect("status")))
}

fn written(name: Option<String>, rv: u64) -> Written {
    let mut w = Written::default();
    w.metadata.name = name;
    w.metadata.resource_version = Some(rv.to_string());
    w
}

impl Server {
    fn bump(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    /// A new process: its informers start empty.
    pub fn forget_fed(&mut self) {
        self.fed_job = None;
        self.fed_pods.clear();
    }

    fn phase_of(&self, call: Call, pod: Option<&CachedPod>, status: Option<&JobStatus>) -> Phase {
        match call {
            Call::Claim => self.log.phase,
            Call::Create | Call::Delete => Phase::PodWork,
            // A removal patches an active pod it has not deleted before any
            // status write; a tracked pod loses its finalizer otherwise.
            Call::RemoveFinalizer => {
                let p = pod.expect("pod");
                if self.log.phase != Phase::Tracking
                    && is_pod_active(p)
                    && !self.log.deleted.iter().any(|d| d.uid() == p.uid())
                {
                    Phase::PodWork
                } else {
                    Phase::Tracking
                }
            }
            // The one status write before the pod work: a met success
            // policy recorded before deleting the pods still running.
            Call::Status => {
                let pre_delete = self.log.phase == Phase::Start
                    && has_true(status, "SuccessCriteriaMet")
                    && !has_true(self.job.status.as_ref(), "SuccessCriteriaMet")
                    && self.pods.iter().any(|p| is_pod_active(&CachedPod::from(p)));
                if pre_delete {
                    Phase::PodWork
                } else {
                    Phase::Tracking
                }
            }
        }
    }

    /// Whether the process dies before this write; logs it otherwise.
    fn dies(&mut self, call: Call, pod: Option<&CachedPod>, status: Option<&JobStatus>) -> bool {
        if self.log.dead {
            return true;
        }
        let phase = self.phase_of(call, pod, status);
        let l = &self.log;
        let tracking = phase == Phase::Tracking;
        let tracked = l.tracking_writes + l.tracking_removals;
        let die = match self.crash {
            Crash::None => false,
            Crash::AfterPodWork => tracking,
            // Only a first status write before any finalizer removal lands.
            Crash::AfterFlush => tracking && !(call == Call::Status && tracked == 0),
            Crash::MidRemoval(n) => {
                tracking && call == Call::RemoveFinalizer && l.tracking_removals == n
            }
            Crash::BeforeLastWrite => tracking && call == Call::Status && tracked > 0,
            Crash::MidCreation(n) => call == Call::Create && l.created.len() == n,
        };
        if die {
            self.log.dead = true;
            return true;
        }
        let l = &mut self.log;
        if phase != Phase::Start {
            l.phase = phase;
        }
        match (call, tracking) {
            (Call::Status, true) => l.tracking_writes += 1,
            (Call::RemoveFinalizer, true) => l.tracking_removals += 1,
            _ => {}
        }
        false
    }
}

fn died() -> kube::Error {
    api_error(503, "ServiceUnavailable", "the controller process died")
}

/// The world's [`JobPort`]: one per controller process, over the shared
/// server and that process's informers.
pub(crate) struct WorldPort {
    pub server: Arc<Mutex<Server>>,
    pub jobs: Arc<Informer<Job>>,
    pub pods: Arc<Informer<CachedPod>>,
}

impl WorldPort {
    /// Feeds the informers what changed since they were last fed (the
    /// test's edits between syncs), each change with a new resourceVersion.
    pub fn publish(&self) {
        let mut s = self.server.lock();
        let mut job = None;
        if s.fed_job.as_ref() != Some(&s.job) {
            let rv = s.bump();
            s.job.metadata.resource_version = Some(rv.to_string());
            s.fed_job = Some(s.job.clone());
            job = Some(s.job.clone());
        }
        let mut applied = Vec::new();
        for i in 0..s.pods.len() {
            let id = uid(&s.pods[i]);
            if s.fed_pods.get(&id) != Some(&s.pods[i]) {
                let rv = s.bump();
                s.pods[i].metadata.resource_version = Some(rv.to_string());
                let p = s.pods[i].clone();
                s.fed_pods.insert(id, p.clone());
                applied.push(p);
            }
        }
        let live: HashSet<String> = s.pods.iter().map(uid).collect();
        let mut deleted = Vec::new();
        s.fed_pods.retain(|id, p| {
            let keep = live.contains(id);
            if !keep {
                deleted.push(p.clone());
            }
            keep
        });
        drop(s);
        // The Job first: pod handlers look their owner up.
        if let Some(j) = job {
            self.jobs.feed_apply(j);
        }
        for p in applied {
            self.pods.feed_apply(p);
        }
        for p in deleted {
            self.pods.feed_delete(p);
        }
    }

    /// Applies `f` to the stored pod and feeds the result (a delete once
    /// it is [`gone`]); Moot when the pod is gone already, as NotFound is.
    fn write_pod(
        &self,
        call: Call,
        pod: &CachedPod,
        f: impl FnOnce(&mut Pod, Timestamp),
    ) -> Settle<Written> {
        let mut s = self.server.lock();
        if s.dies(call, Some(pod), None) {
            return Err(died());
        }
        let id = pod.uid().to_string();
        if call == Call::Delete {
            s.log.removal |= s.log.finalizer_removed.contains(&id);
            s.log.deleted.push(pod.clone());
        }
        if call == Call::RemoveFinalizer {
            s.log.finalizer_removed.insert(id.clone());
        }
        let Some(i) = s.pods.iter().position(|p| uid(p) == id) else {
            return Ok(Settled::Moot);
        };
        let now = s.now;
        f(&mut s.pods[i], now);
        let rv = s.bump();
        s.pods[i].metadata.resource_version = Some(rv.to_string());
        let p = s.pods[i].clone();
        let is_gone = gone(&p);
        if is_gone {
            s.pods.remove(i);
            s.fed_pods.remove(&id);
        } else {
            s.fed_pods.insert(id, p.clone());
        }
        drop(s);
        let name = p.metadata.name.clone();
        if is_gone {
            self.pods.feed_delete(p);
        } else {
            self.pods.feed_apply(p);
        }
        Ok(Settled::Written(written(name, rv)))
    }
}

impl JobPort for WorldPort {
    async fn create_pod(&self, _job: &Job, pod: &Pod) -> Settle<Written> {
        let mut s = self.server.lock();
        if s.dies(Call::Create, Some(&CachedPod::from(pod)), None) {
            return Err(died());
        }
        s.log.created.push(pod.clone());
        let mut p = pod.clone();
        s.next += 1;
        let id = format!("p{}", s.next);
        p.metadata.name = Some(id.clone());
        p.metadata.uid = Some(id.clone());
        p.metadata.creation_timestamp = Some(Time(s.now));
        p.status = Some(PodStatus {
            phase: Some("Pending".into()),
            ..Default::default()
        });
        let rv = s.bump();
        p.metadata.resource_version = Some(rv.to_string());
        s.pods.push(p.clone());
        s.fed_pods.insert(id.clone(), p.clone());
        drop(s);
        self.pods.feed_apply(p);
        Ok(Settled::Written(written(Some(id), rv)))
    }

    async fn delete_pod(&self, pod: &CachedPod) -> Settle<()> {
        let r = self.write_pod(Call::Delete, pod, |p, now| {
            if p.metadata.deletion_timestamp.is_none() {
                p.metadata.deletion_timestamp = Some(Time(now));
            }
        });
        r.map(|s| match s {
            Settled::Written(_) => Settled::Written(()),
            Settled::Moot => Settled::Moot,
        })
    }

    async fn remove_finalizer(&self, pod: &CachedPod) -> Settle<Written> {
        self.write_pod(Call::RemoveFinalizer, pod, |p, _| {
            if let Some(f) = p.metadata.finalizers.as_mut() {
                f.retain(|x| x != JOB_TRACKING_FINALIZER);
            }
        })
    }

    async fn adopt_pod(&self, job: &Job, pod: &CachedPod) -> Settle<Written> {
        self.write_pod(Call::Claim, pod, |p, _| {
            p.metadata
                .owner_references
                .get_or_insert_with(Vec::new)
                .push(crate::pods::controller_ref(job));
            p.metadata
                .finalizers
                .get_or_insert_with(Vec::new)
                .push(JOB_TRACKING_FINALIZER.into());
        })
    }

    async fn release_pod(&self, job: &Job, pod: &CachedPod) -> Settle<Written> {
        self.write_pod(Call::Claim, pod, |p, _| {
            if let Some(refs) = p.metadata.owner_references.as_mut() {
                refs.retain(|r| Some(&r.uid) != job.metadata.uid.as_ref());
            }
            if let Some(f) = p.metadata.finalizers.as_mut() {
                f.retain(|x| x != JOB_TRACKING_FINALIZER);
            }
        })
    }

    /// Only the status is written, as through the status subresource, and
    /// only over the stored resourceVersion (409 otherwise, as the API
    /// server answers a stale PUT).
    async fn write_status(&self, job: &Job) -> Result<Written, kube::Error> {
        let mut s = self.server.lock();
        if s.dies(Call::Status, None, job.status.as_ref()) {
            return Err(died());
        }
        if job.metadata.resource_version != s.job.metadata.resource_version {
            return Err(api_error(409, "Conflict", "the object has been modified"));
        }
        s.job.status = job.status.clone();
        let rv = s.bump();
        s.job.metadata.resource_version = Some(rv.to_string());
        s.fed_job = Some(s.job.clone());
        let stored = s.job.clone();
        s.log.writes.push(stored.status.clone().unwrap_or_default());
        drop(s);
        let name = stored.metadata.name.clone();
        self.jobs.feed_apply(stored);
        Ok(written(name, rv))
    }

    async fn read_job(&self, _job: &Job) -> Result<Option<Job>, kube::Error> {
        Ok(Some(self.server.lock().job.clone()))
    }

    /// A dead process records nothing.
    fn event(&self, _job: &Job, type_: EventType, reason: &str, message: String) {
        let mut s = self.server.lock();
        if !s.log.dead {
            s.log.events.push(JobEvent {
                warning: type_ == EventType::Warning,
                reason: reason.into(),
                message,
            });
        }
    }
}
