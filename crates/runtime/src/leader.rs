//! Leader election on a coordination.k8s.io Lease, with client-go's
//! algorithm and KCM's timing flags: acquire when the holder has not renewed
//! for a lease duration (by our own clock, so clock skew between nodes does
//! not matter), renew every retry period, and give up leadership when a
//! renewal has not succeeded within the renew deadline.
//!
//! Fencing: every successful renewal moves the process's write [`Fence`] to
//! "when that renewal was started + renew deadline". A standby acquires no
//! sooner than a lease duration after it saw the renewal, which is later,
//! so the old leader's controller clients stop writing (refused, in-flight
//! ones cancelled) before a new leader can start. Losing the lease, or
//! failing to renew in time, closes the fence at once.
//!
//! Hand-over: on shutdown the leader closes its fence and clears the Lease
//! with a compare-and-swap on its own last write (see
//! [`LeaderElector::release`]), and a standby watches the Lease it waits
//! for, so it acquires a released Lease at once instead of at its next
//! retry (client-go only polls; a listed deviation that makes a graceful
//! hand-over take about a second).
//!
//! Time: every read goes through the runtime's [`Clock`]
//! ([`LeaderElector::with_clock`]): wall time for the Lease's renew and
//! acquire times, monotonic time for how long a holder has gone unrenewed
//! and for the fence, so tests run elections on paused tokio time.
//!
//! Marks: [`LeaderElector::with_annotations`] gives annotations every
//! write of the Lease carries (kcm-rs says there which mode it runs in).
//! They ride on the same compare-and-swap writes as the spec: no extra
//! request, and a write refused for a stale resourceVersion changes
//! neither. client-go writes only the spec; a Lease that KCM reads or
//! writes keeps them (its PUTs carry the metadata it read).

use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::{ObjectMeta, PostParams, WatchEvent, WatchParams};
use prometheus::IntGaugeVec;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client::Fence;
use crate::clock::Clock;
use crate::metrics;

#[derive(Debug, Clone)]
pub struct LeaderElectionConfig {
    pub name: String,
    pub namespace: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("leader election lost: lease {namespace}/{name} not renewed within {deadline:?}")]
    Lost {
        namespace: String,
        name: String,
        deadline: Duration,
    },
    #[error("invalid leader election timing: {0}")]
    Config(String),
}

/// `leader_election_master_status{name}` on `registry`
/// ([`crate::metrics::Metrics`]).
pub(crate) fn master_status(registry: &prometheus::Registry) -> IntGaugeVec {
    let g = IntGaugeVec::new(
        prometheus::Opts::new(
            "leader_election_master_status",
            "1 while this process holds the named lease, 0 otherwise.",
        ),
        &["name"],
    )
    .expect("constant metric definition is valid");
    metrics::register(registry, g)
}

/// Validates KCM's rules: lease duration > renew deadline > jitter × retry
/// period (client-go's JitterFactor is 1.2).
pub fn validate(cfg: &LeaderElectionConfig) -> Result<(), LeaderError> {
    if cfg.lease_duration <= cfg.renew_deadline {
        return Err(LeaderError::Config(
            "--leader-elect-lease-duration must be greater than --leader-elect-renew-deadline"
                .into(),
        ));
    }
    if cfg.renew_deadline.as_secs_f64() <= 1.2 * cfg.retry_period.as_secs_f64() {
        return Err(LeaderError::Config(
            "--leader-elect-renew-deadline must be greater than 1.2 × --leader-elect-retry-period"
                .into(),
        ));
    }
    if cfg.retry_period.is_zero() {
        return Err(LeaderError::Config(
            "--leader-elect-retry-period must be positive".into(),
        ));
    }
    Ok(())
}

pub struct LeaderElector {
    api: Api<Lease>,
    cfg: LeaderElectionConfig,
    /// The last lease spec seen and when we first saw it (our clock).
    observed: Option<(LeaseSpec, Instant)>,
    /// Moved by every renewal; closed when leadership is lost.
    fence: Fence,
    /// The Lease as our last successful write left it: what
    /// [`release`](Self::release) swaps.
    written: Option<Lease>,
    /// The resourceVersion of the last Lease read held by someone else:
    /// where a standby's watch starts.
    held_at: Option<String>,
    /// Set on the Lease by every acquisition and renewal.
    annotations: BTreeMap<String, String>,
    clock: Clock,
    /// `leader_election_master_status{name=<the lease>}`.
    master: prometheus::IntGauge,
}

impl LeaderElector {
    /// `fence` should start closed; the elector opens it on acquiring.
    /// Whether it leads shows in `metrics`.
    pub fn new(
        client: kube::Client,
        cfg: LeaderElectionConfig,
        fence: Fence,
        metrics: &metrics::Metrics,
    ) -> Result<Self, LeaderError> {
        validate(&cfg)?;
        let master = metrics.leader.with_label_values(&[&cfg.name]);
        master.set(0);
        Ok(LeaderElector {
            master,
            api: Api::namespaced(client, &cfg.namespace),
            cfg,
            observed: None,
            fence,
            written: None,
            held_at: None,
            annotations: BTreeMap::new(),
            clock: Clock::system(),
        })
    }

    /// Reads time from `clock` (tests pass one that follows paused tokio
    /// time; the process its one clock).
    #[must_use]
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Annotations every acquisition and renewal sets on the Lease, over
    /// what it holds (others' annotations stay). A previous holder's value
    /// of a key is replaced, so give each key a value (empty for none)
    /// rather than leaving it out.
    #[must_use]
    pub fn with_annotations(mut self, annotations: BTreeMap<String, String>) -> Self {
        self.annotations = annotations;
        self
    }

    /// One acquisition or renewal attempt; on success the fence moves to
    /// the attempt's start + renew deadline.
    async fn attempt(&mut self) -> Result<bool, kube::Error> {
        let started = self.clock.instant();
        let won = self.try_acquire_or_renew().await?;
        if won {
            self.fence.extend_to(started + self.cfg.renew_deadline);
        }
        Ok(won)
    }

    pub fn identity(&self) -> &str {
        &self.cfg.identity
    }

    /// Tries until this process leads (true) or `stop` fires (false).
    pub async fn acquire(&mut self, stop: &CancellationToken) -> bool {
        loop {
            match self.attempt().await {
                Ok(true) => {
                    self.master.set(1);
                    tracing::info!(lease = %self.cfg.name, identity = %self.cfg.identity, "acquired leadership");
                    return true;
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(lease = %self.cfg.name, "acquiring lease: {e}"),
            }
            let released = wait_released(self.api.clone(), &self.cfg.name, self.held_at.take());
            tokio::select! {
                _ = stop.cancelled() => return false,
                _ = tokio::time::sleep(jitter(self.cfg.retry_period)) => {}
                _ = released => {
                    tracing::info!(lease = %self.cfg.name, "lease released by its holder; trying at once");
                }
            }
        }
    }

    /// Renews every retry period until `stop` fires (Ok) or a renewal has
    /// not succeeded within the renew deadline (Err: the caller must stop
    /// all work and exit, as KCM does).
    pub async fn hold(&mut self, stop: &CancellationToken) -> Result<(), LeaderError> {
        // The fence is the deadline: it passes exactly when writes stop.
        let deadline = self.cfg.renew_deadline;
        let left = move |f: &Fence| f.remaining().unwrap_or(deadline);
        loop {
            let wait = self.cfg.retry_period.min(left(&self.fence));
            tokio::select! {
                _ = stop.cancelled() => return Ok(()),
                _ = tokio::time::sleep(wait) => {}
            }
            if self.fence.is_closed() {
                return Err(self.lost());
            }
            let budget = left(&self.fence);
            match tokio::time::timeout(budget, self.attempt()).await {
                Ok(Ok(true)) | Err(_) => {}
                // Someone else holds it: we lost it outright.
                Ok(Ok(false)) => return Err(self.lost()),
                Ok(Err(e)) => tracing::warn!(lease = %self.cfg.name, "renewing lease: {e}"),
            }
            if self.fence.is_closed() {
                return Err(self.lost());
            }
        }
    }

    /// The fence this elector moves.
    pub fn fence(&self) -> &Fence {
        &self.fence
    }

    fn lost(&self) -> LeaderError {
        self.fence.close();
        self.master.set(0);
        LeaderError::Lost {
            namespace: self.cfg.namespace.clone(),
            name: self.cfg.name.clone(),
            deadline: self.cfg.renew_deadline,
        }
    }

    /// Gives the lease up (on graceful shutdown), so a standby takes over at
    /// once instead of waiting a full lease duration.
    ///
    /// The fence closes first: no controller write is sent after this. The
    /// Lease is then cleared by a compare-and-swap on this process's own
    /// last write (a PUT carrying that resourceVersion), so it is safe even
    /// after the fence passed (in-flight syncs cancelled at the drain's
    /// end): a standby that acquired in between changed the Lease, and the
    /// PUT is refused. If our last write is not the newest (a renewal whose
    /// answer we never saw), one read that still names us as holder gives
    /// the version to swap. Bounded by the renew deadline.
    pub async fn release(&mut self) {
        self.master.set(0);
        self.fence.close();
        let Some(last) = self.written.take() else {
            return;
        };
        let bound = self.cfg.renew_deadline;
        match tokio::time::timeout(bound, self.swap_out(last)).await {
            Ok(Ok(true)) => {
                tracing::info!(lease = %self.cfg.name, "lease released");
            }
            Ok(Ok(false)) => {
                tracing::info!(lease = %self.cfg.name, "lease not released: another holder has it");
            }
            Ok(Err(e)) => tracing::warn!(lease = %self.cfg.name, "releasing lease: {e}"),
            Err(_) => {
                tracing::warn!(lease = %self.cfg.name, "releasing lease: no answer in {bound:?}")
            }
        }
    }

    /// The compare-and-swap of [`release`](Self::release): true when the
    /// Lease was cleared, false when someone else holds it.
    async fn swap_out(&self, last: Lease) -> Result<bool, kube::Error> {
        match self.put_released(last).await {
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            other => return other.map(|()| true),
        }
        let Some(now) = self.api.get_opt(&self.cfg.name).await? else {
            return Ok(false);
        };
        let holder = now.spec.as_ref().and_then(|s| s.holder_identity.as_deref());
        if holder != Some(self.cfg.identity.as_str()) {
            return Ok(false);
        }
        match self.put_released(now).await {
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            other => other.map(|()| true),
        }
    }

    async fn put_released(&self, mut lease: Lease) -> Result<(), kube::Error> {
        let spec = lease.spec.get_or_insert_with(Default::default);
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(self.clock.now()));
        self.api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await
            .map(drop)
    }

    /// One step of client-go's tryAcquireOrRenew.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let now = self.clock.now();
        let secs = i32::try_from(self.cfg.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let Some(mut lease) = self.api.get_opt(&self.cfg.name).await? else {
            let mut lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.cfg.name.clone()),
                    namespace: Some(self.cfg.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.cfg.identity.clone()),
                    lease_duration_seconds: Some(secs),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            mark(&mut lease.metadata, &self.annotations);
            let created = self.api.create(&PostParams::default(), &lease).await;
            return self.took(created);
        };
        let spec = lease.spec.clone().unwrap_or_default();
        if self.observed.as_ref().is_none_or(|(s, _)| *s != spec) {
            self.observed = Some((spec.clone(), self.clock.instant()));
        }
        let holder = spec.holder_identity.as_deref().unwrap_or("");
        let me = holder == self.cfg.identity;
        let held_for = spec
            .lease_duration_seconds
            .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0)))
            .unwrap_or(self.cfg.lease_duration);
        let now_mono = self.clock.instant();
        let observed_at = self.observed.as_ref().map_or(now_mono, |(_, t)| *t);
        if !holder.is_empty() && !me && now_mono.saturating_duration_since(observed_at) < held_for {
            self.held_at = lease.metadata.resource_version.clone();
            return Ok(false);
        }
        let mut next = spec.clone();
        next.holder_identity = Some(self.cfg.identity.clone());
        next.lease_duration_seconds = Some(secs);
        next.renew_time = Some(MicroTime(now));
        if !me {
            next.acquire_time = Some(MicroTime(now));
            next.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        lease.spec = Some(next);
        mark(&mut lease.metadata, &self.annotations);
        // The PUT carries the resourceVersion we read: two candidates racing
        // for an expired lease cannot both win.
        let replaced = self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await;
        self.took(replaced)
    }

    /// What a create or a compare-and-swap PUT of the Lease came to: held
    /// (the written Lease is what we observe now), lost to another writer
    /// (409), or an error.
    fn took(&mut self, written: Result<Lease, kube::Error>) -> Result<bool, kube::Error> {
        match written {
            Ok(l) => {
                self.observed = l.spec.clone().map(|s| (s, self.clock.instant()));
                self.written = Some(l);
                Ok(true)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// Sets `annotations` on a Lease about to be written, keeping the rest of
/// its metadata (the resourceVersion of the compare-and-swap included).
fn mark(meta: &mut ObjectMeta, annotations: &BTreeMap<String, String>) {
    if annotations.is_empty() {
        return;
    }
    meta.annotations
        .get_or_insert_with(BTreeMap::new)
        .extend(annotations.clone());
}

/// Resolves when a watch of the Lease from `rv` shows it without a holder
/// (released); never, when there is nothing to watch from or the watch
/// fails (the caller's retry timer still runs).
async fn wait_released(api: Api<Lease>, name: &str, rv: Option<String>) {
    let Some(rv) = rv else {
        return std::future::pending().await;
    };
    let wp = WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(290);
    let Ok(stream) = api.watch(&wp, &rv).await else {
        return std::future::pending().await;
    };
    let mut stream = std::pin::pin!(stream);
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(WatchEvent::Modified(l)) | Ok(WatchEvent::Added(l))
                if l.spec
                    .as_ref()
                    .and_then(|s| s.holder_identity.as_deref())
                    .is_none_or(str::is_empty) =>
            {
                return;
            }
            Ok(WatchEvent::Deleted(_)) => return,
            Ok(WatchEvent::Error(_)) | Err(_) => break,
            Ok(_) => {}
        }
    }
    std::future::pending().await
}

/// client-go waits retryPeriod × (1 + up to 1.2) between acquisition
/// attempts; the fraction is random (the standard library's per-map seed).
fn jitter(d: Duration) -> Duration {
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let frac = f64::from(u32::try_from(random % 1000).unwrap_or(0)) / 1000.0;
    d.mul_f64(1.0 + 1.2 * frac)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(l: u64, r: u64, p: u64) -> LeaderElectionConfig {
        LeaderElectionConfig {
            name: "kcm-rs".into(),
            namespace: "kube-system".into(),
            identity: "me".into(),
            lease_duration: Duration::from_secs(l),
            renew_deadline: Duration::from_secs(r),
            retry_period: Duration::from_secs(p),
        }
    }

    #[test]
    fn kcm_defaults_are_valid_and_bad_timings_are_not() {
        assert!(validate(&cfg(15, 10, 2)).is_ok());
        assert!(validate(&cfg(10, 10, 2)).is_err());
        assert!(validate(&cfg(15, 2, 2)).is_err());
        assert!(validate(&cfg(15, 10, 0)).is_err());
    }

    fn marks() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("kcm-rs.dev/mode".to_string(), "beside-kcm".to_string()),
            (
                "kcm-rs.dev/job-managed-by".to_string(),
                "kcm-rs.dev/job-controller".to_string(),
            ),
        ])
    }

    #[test]
    fn marks_replace_their_keys_and_keep_everything_else() {
        let mut meta = ObjectMeta {
            resource_version: Some("7".into()),
            annotations: Some(BTreeMap::from([
                ("team".to_string(), "x".to_string()),
                ("kcm-rs.dev/mode".to_string(), "replacement".to_string()),
            ])),
            ..Default::default()
        };
        mark(&mut meta, &marks());
        let a = meta.annotations.clone().unwrap_or_default();
        assert_eq!(a["team"], "x");
        assert_eq!(a["kcm-rs.dev/mode"], "beside-kcm");
        assert_eq!(a["kcm-rs.dev/job-managed-by"], "kcm-rs.dev/job-controller");
        assert_eq!(meta.resource_version.as_deref(), Some("7"));
        let mut bare = ObjectMeta::default();
        mark(&mut bare, &BTreeMap::new());
        assert!(bare.annotations.is_none(), "no marks: metadata untouched");
    }

    /// The marks go out with the compare-and-swap itself: the PUT carries
    /// the resourceVersion read, a 409 is a lost race (no write of its
    /// own), and a Lease created from nothing is marked too.
    #[tokio::test]
    async fn marked_writes_keep_the_compare_and_swap() {
        use kcm_mock_api::{MockApi, Reply};
        let released = serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "kcm-rs", "namespace": "kube-system", "resourceVersion": "7",
                         "annotations": {"team": "x"}},
            "spec": {"leaseDurationSeconds": 1, "leaseTransitions": 3}});
        let mock = MockApi::new()
            .on(
                "GET",
                [Reply::json(200, released), Reply::status(404, "NotFound")],
            )
            .on("PUT", [Reply::status(409, "Conflict")])
            .on("POST", [Reply::Echo(201)]);
        let mut el = LeaderElector::new(
            mock.client(),
            cfg(15, 10, 2),
            Fence::closed(),
            &Default::default(),
        )
        .expect("elector")
        .with_annotations(marks());
        assert!(
            !el.try_acquire_or_renew().await.expect("answer"),
            "409: lost"
        );
        assert!(el.written.is_none());
        assert!(el.try_acquire_or_renew().await.expect("answer"), "created");
        let seen = mock.seen();
        let verbs: Vec<_> = seen.iter().map(|s| s.method.as_str().to_string()).collect();
        assert_eq!(verbs, ["GET", "PUT", "GET", "POST"]);
        let put = &seen[1].body;
        assert_eq!(put["metadata"]["resourceVersion"], "7");
        assert_eq!(put["metadata"]["annotations"]["team"], "x");
        assert_eq!(
            put["metadata"]["annotations"]["kcm-rs.dev/mode"],
            "beside-kcm"
        );
        assert_eq!(put["spec"]["holderIdentity"], "me");
        assert_eq!(put["spec"]["leaseTransitions"], 4);
        let post = &seen[3].body;
        assert_eq!(
            post["metadata"]["annotations"]["kcm-rs.dev/job-managed-by"],
            "kcm-rs.dev/job-controller"
        );
        assert_eq!(post["spec"]["holderIdentity"], "me");
    }

    /// A standby on paused tokio time: the holder's Lease never changes, so
    /// it is taken over once a lease duration has passed on the elector's
    /// clock since the standby first saw it (not earlier, and with no real
    /// time passing), the write carrying that clock's wall time; the fence
    /// then runs to the attempt's start plus the renew deadline.
    #[tokio::test(start_paused = true)]
    async fn a_standby_takes_over_an_unrenewed_lease_on_its_own_clock() {
        use kcm_mock_api::{MockApi, Reply};
        let held = serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "kcm-rs", "namespace": "kube-system", "resourceVersion": "7"},
            "spec": {"holderIdentity": "other", "leaseDurationSeconds": 15,
                     "renewTime": "2020-01-01T00:00:00.000000Z", "leaseTransitions": 2}});
        let mock = MockApi::new()
            .on("GET", [Reply::json(200, held)])
            .on("PUT", [Reply::Echo(200)]);
        let start = jiff::Timestamp::from_second(1_700_000_000).expect("valid");
        let fence = Fence::closed();
        let mut el = LeaderElector::new(
            mock.client(),
            cfg(15, 10, 2),
            fence.clone(),
            &Default::default(),
        )
        .expect("elector")
        .with_clock(Clock::following_tokio(start));
        let t0 = Instant::now();
        let stop = CancellationToken::new();
        let won = tokio::time::timeout(Duration::from_secs(120), el.acquire(&stop))
            .await
            .expect("acquired within two minutes of paused time");
        assert!(won);
        let put = mock
            .seen()
            .into_iter()
            .find(|s| s.method == "PUT")
            .expect("a PUT");
        let waited = put.at - t0;
        assert!(
            waited >= Duration::from_secs(15) && waited <= Duration::from_millis(19_400),
            "took over after {waited:?}: a lease duration, plus at most one jittered retry"
        );
        let renewed: jiff::Timestamp = put.body["spec"]["renewTime"]
            .as_str()
            .expect("renewTime")
            .parse()
            .expect("a time");
        let wall = start + jiff::SignedDuration::try_from(waited).expect("small");
        assert!(
            renewed.duration_since(wall).abs() < jiff::SignedDuration::from_millis(1),
            "renewTime {renewed} is the elector's clock ({wall})"
        );
        assert_eq!(put.body["spec"]["holderIdentity"], "me");
        assert_eq!(put.body["spec"]["leaseTransitions"], 3);
        let left = fence.remaining().expect("open");
        assert!(
            left <= Duration::from_secs(10) && left > Duration::from_secs(9),
            "{left:?}"
        );
    }

    #[test]
    fn jitter_stays_within_client_go_bounds() {
        for _ in 0..100 {
            let j = jitter(Duration::from_secs(2));
            assert!(
                j >= Duration::from_secs(2) && j <= Duration::from_millis(4400),
                "{j:?}"
            );
        }
    }
}
