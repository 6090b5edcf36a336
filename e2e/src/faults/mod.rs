//! A seeded fault-injecting proxy between kcm-rs and the real API server.
//!
//! [`FaultProxy`] listens on plain HTTP at `127.0.0.1:<port>` and forwards
//! every request to the API server over HTTPS as the admin kubeconfig's
//! user (its client certificate), so the client needs no credentials: it
//! gets a kubeconfig with `server: http://127.0.0.1:<port>` and an empty
//! user ([`FaultProxy::kubeconfig`]). Headers (User-Agent included) pass
//! unchanged; responses stream frame by frame, so watches work.
//!
//! At a rate (10% by default) a request gets one of the faults of
//! [`Fault`], drawn from a seeded generator (xorshift64*): the sequence of
//! decisions is fixed by the seed; which request meets which decision
//! depends on the order requests arrive in. Faults by verb:
//!
//! | fault | applies to | what the client sees |
//! |---|---|---|
//! | 429 | every request | `Retry-After: 1`, Status `TooManyRequests`, `retryAfterSeconds: 1` |
//! | 500, 503 | every request | Status `InternalError` / `ServiceUnavailable` |
//! | 409 | POST, PUT, PATCH, DELETE | Status `Conflict` (every kind) |
//! | 404 | DELETE, PATCH | Status `NotFound` (after the write; see below) |
//! | stall | every request | the real answer, held for the stall duration (30 s by default) |
//! | watch cut | watches | the stream dropped (no final chunk) after 0.5–5 s |
//! | watch 410 | watches | 200, one `ERROR` event with a 410 `Expired` Status, end of stream |
//! | watch cut in initial events | scripted streaming lists | the stream dropped just before the line of the `k8s.io/initial-events-end` bookmark |
//! | delay | every request but watches, when [`FaultSettings::delay`] is set | the request held 2–10 s *before* it is forwarded, then forwarded even if the client is gone |
//!
//! Error answers to writes are injected half **before** forwarding (the
//! write is not applied) and half **after** (forwarded, the real answer
//! read and replaced: the write is applied but the client sees an error).
//! Error answers to reads are always before. A 404 is only ever *after*
//! by default: a 404 on an object that exists is an answer no API server
//! gives (a PATCH or DELETE reads the object from storage), and a client
//! rightly takes it as "gone" — upstream KCM's Job controller, and
//! kcm-rs's, count a pod whose finalizer-removal PATCH got 404 and would
//! count it again when it shows up still terminal with its finalizer.
//! [`FaultSettings::not_found_before`] injects it before as well. A stall forwards at once and
//! holds the answer, so a stalled write is applied on time while its
//! client waits (or gives up on its own timeout).
//!
//! 410 on watches is an `ERROR` event in a 200 stream, not an initial HTTP
//! 410: that is what the API server sends for a too-old resourceVersion,
//! and both client-go's reflector and kube's watcher relist on it. (kube's
//! watcher retries an initial HTTP 410 with the same resourceVersion
//! instead, which against a real server would never end.)
//!
//! Every request is recorded ([`Record`]: start, forwarded, end, method,
//! path and query, user agent, `Accept`, real status, the status sent, the
//! fault; of a stream, the frames and bytes read from the API server).
//! [`FaultProxy::cut`] simulates a network cut: open connections (and the
//! streams and requests on them) are dropped at once; while cut, new
//! connections are accepted and held unread, and dropped when the cut
//! ends, so nothing sent during a cut reaches the API server.

mod forward;
pub mod plan;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use http::Method;
use kube::client::ConfigExt;
use kube::config::{KubeConfigOptions, Kubeconfig};
use parking_lot::Mutex;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{AbortHandle, JoinHandle};

pub use self::plan::{Fault, When};
use crate::{ControlPlane, HarnessError};

/// How a [`FaultProxy`] injects faults.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultSettings {
    pub seed: u64,
    /// Share of requests that get a fault, in [0, 1].
    pub rate: f64,
    /// Share of watch requests that get a fault (`None`: `rate`).
    pub watch_rate: Option<f64>,
    /// Also inject 404 *before* forwarding a DELETE or PATCH (the object
    /// exists but the client is told it does not). Off by default: no API
    /// server answers this (see the module documentation).
    pub not_found_before: bool,
    /// How long a [`Fault::Stall`] holds an answer.
    pub stall: Duration,
    /// Range of how long a watch runs before a [`Fault::WatchCut`].
    pub watch_cut: (Duration, Duration),
    /// Range of how long a [`Fault::Delay`] holds a request before it is
    /// forwarded; `None` (the default): no delay is drawn (scripts hold
    /// for [`FaultProxy::set_delay`], 5 s unless set).
    pub delay: Option<(Duration, Duration)>,
}

impl Default for FaultSettings {
    /// 10% of requests, a 30 s stall, watches cut after 0.5–5 s.
    fn default() -> Self {
        FaultSettings {
            seed: 1,
            rate: 0.10,
            watch_rate: None,
            not_found_before: false,
            stall: Duration::from_secs(30),
            watch_cut: (Duration::from_millis(500), Duration::from_secs(5)),
            delay: None,
        }
    }
}

impl FaultSettings {
    /// No faults: the proxy only forwards and records.
    pub fn none() -> Self {
        FaultSettings {
            rate: 0.0,
            ..Default::default()
        }
    }
}

/// One request through the proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// In arrival order, from 0.
    pub id: usize,
    /// The request's head was read.
    pub start: SystemTime,
    /// Sent upstream (`None`: never forwarded, e.g. a fault before).
    pub forwarded: Option<SystemTime>,
    /// The answer's last byte went to the client, or the exchange was
    /// dropped (client gone, network cut, watch cut); `None`: still open.
    pub end: Option<SystemTime>,
    pub method: String,
    /// Path and query.
    pub path: String,
    pub user_agent: String,
    /// The request's `Accept` header (which encoding it asked for).
    pub accept: String,
    pub watch: bool,
    /// The API server's status code (`None`: not forwarded, or no answer).
    pub status: Option<u16>,
    /// The status code the client got (the fault's, or `status`).
    pub sent: Option<u16>,
    pub fault: Option<Fault>,
    /// The fault replaced a real answer (write applied, error seen).
    pub after: bool,
    /// The answer's body ended normally (false: dropped or cut).
    pub completed: bool,
    /// A transport error talking to the API server.
    pub upstream_error: Option<String>,
    /// Of a streamed answer (a watch), the data frames read from the API
    /// server so far (about one per write the server flushed) and their
    /// bytes.
    pub frames: u64,
    pub bytes: u64,
    /// For a [`Fault::Delay`]ed create answered 201: the created object's
    /// name.
    pub created: Option<String>,
}

impl Record {
    /// A delayed request that reached the API server after its client was
    /// gone (killed, or gave up): nothing live asked for its effect.
    pub fn landed_after_client(&self) -> bool {
        matches!((self.end, self.forwarded), (Some(end), Some(fwd)) if end < fwd)
    }
}

impl Record {
    pub fn is_write(&self) -> bool {
        matches!(self.method.as_str(), "POST" | "PUT" | "PATCH" | "DELETE")
    }
    /// Reached the API server: forwarded, so possibly applied.
    pub fn reached_server(&self) -> bool {
        self.forwarded.is_some()
    }
}

/// A fault for chosen requests, whatever the rate: the next `times`
/// requests with method `method` whose path (and query) contains
/// `path_contains` get `fault`, injected `when`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    pub method: String,
    pub path_contains: String,
    pub fault: Fault,
    /// Ignored (before) for faults that are not error answers, and for
    /// error answers to reads.
    pub when: When,
    pub times: usize,
}

struct Inner {
    upstream: String,
    scripts: Mutex<Vec<Script>>,
    client: forward::Upstream,
    planner: Mutex<plan::Planner>,
    stall: Mutex<Duration>,
    /// How long a scripted [`Fault::Delay`] holds its request.
    delay: Mutex<Duration>,
    records: Mutex<Vec<Record>>,
    cut: AtomicBool,
    conns: Mutex<HashMap<u64, AbortHandle>>,
    held: Mutex<Vec<TcpStream>>,
    next_conn: AtomicU64,
    /// [`FaultProxy::gone_once_per_watch`]: the collections whose resumed
    /// watch got its 410 already (`None`: off).
    gone_once: Mutex<Option<std::collections::HashSet<String>>>,
}

impl Inner {
    /// A [`Fault::WatchGone`] for the first resumed watch of a collection
    /// once [`FaultProxy::gone_once_per_watch`] is on.
    fn gone_once(&self, path: &str) -> Option<plan::Injection> {
        if !plan::is_watch(path.split_once('?').map(|(_, q)| q))
            || path.contains("sendInitialEvents=true")
        {
            return None;
        }
        let mut armed = self.gone_once.lock();
        let seen = armed.as_mut()?;
        let collection = path.split('?').next().unwrap_or(path).to_string();
        seen.insert(collection).then_some(plan::Injection {
            fault: Fault::WatchGone,
            when: When::Before,
            cut_after: Duration::ZERO,
            hold: Duration::ZERO,
        })
    }

    /// The injection of the first script matching, counted down.
    fn scripted(&self, method: &Method, path: &str) -> Option<plan::Injection> {
        let mut scripts = self.scripts.lock();
        let s = scripts.iter_mut().find(|s| {
            s.times > 0
                && s.method.eq_ignore_ascii_case(method.as_str())
                && path.contains(&s.path_contains)
        })?;
        s.times -= 1;
        let when = if plan::is_write(method) && s.fault.code().is_some() {
            s.when
        } else {
            When::Before
        };
        Some(plan::Injection {
            fault: s.fault,
            when,
            cut_after: self.planner.lock().cut_after.0,
            hold: *self.delay.lock(),
        })
    }

    fn update(&self, id: usize, f: impl FnOnce(&mut Record)) {
        if let Some(r) = self.records.lock().get_mut(id) {
            f(r);
        }
    }
}

/// The proxy; stops (dropping every connection) when dropped.
pub struct FaultProxy {
    inner: Arc<Inner>,
    addr: SocketAddr,
    kubeconfig: PathBuf,
    accept: JoinHandle<()>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.inner.upstream)
            .field("kubeconfig", &self.kubeconfig)
            .finish()
    }
}

impl FaultProxy {
    /// A proxy in front of `cp`, its kubeconfig written to
    /// `cp.dir()/fault-proxy-<port>.kubeconfig`. Inside a Tokio runtime.
    pub async fn start(cp: &ControlPlane, settings: FaultSettings) -> Result<Self, HarnessError> {
        Self::start_with(cp.kubeconfig(), cp.dir(), settings).await
    }

    /// A proxy to the API server of the `admin` kubeconfig (as its user),
    /// writing the client's kubeconfig into `dir`.
    pub async fn start_with(
        admin: &Path,
        dir: &Path,
        settings: FaultSettings,
    ) -> Result<Self, HarnessError> {
        let err = |message: String| HarnessError::Kubeconfig {
            path: admin.to_path_buf(),
            message,
        };
        let kc = Kubeconfig::read_from(admin).map_err(|e| err(e.to_string()))?;
        let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .map_err(|e| err(e.to_string()))?;
        let connector = config.rustls_https_connector()?;
        let upstream = config
            .cluster_url
            .to_string()
            .trim_end_matches('/')
            .to_string();
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let kubeconfig = dir.join(format!("fault-proxy-{}.kubeconfig", addr.port()));
        std::fs::write(&kubeconfig, client_kubeconfig(addr))?;
        let inner = Arc::new(Inner {
            upstream,
            scripts: Mutex::new(Vec::new()),
            client: forward::upstream_client(connector),
            planner: Mutex::new({
                let mut p = plan::Planner::new(settings.seed, settings.rate, settings.watch_cut);
                p.watch_rate = settings.watch_rate;
                p.not_found_before = settings.not_found_before;
                p.delay = settings.delay;
                p
            }),
            stall: Mutex::new(settings.stall),
            delay: Mutex::new(Duration::from_secs(5)),
            records: Mutex::new(Vec::new()),
            cut: AtomicBool::new(false),
            conns: Mutex::new(HashMap::new()),
            held: Mutex::new(Vec::new()),
            next_conn: AtomicU64::new(0),
            gone_once: Mutex::new(None),
        });
        let accept = tokio::spawn(accept_loop(listener, Arc::clone(&inner)));
        Ok(FaultProxy {
            inner,
            addr,
            kubeconfig,
            accept,
        })
    }

    /// The client kubeconfig (`http://127.0.0.1:<port>`, no user).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Changes the fault rate of every request, watches included, from
    /// the next request on.
    pub fn set_rate(&self, rate: f64) {
        let mut p = self.inner.planner.lock();
        p.rate = rate.clamp(0.0, 1.0);
        p.watch_rate = None;
    }
    /// Changes the rate of watch requests alone (`None`: as the others).
    pub fn set_watch_rate(&self, rate: Option<f64>) {
        self.inner.planner.lock().watch_rate = rate.map(|r| r.clamp(0.0, 1.0));
    }
    pub fn rate(&self) -> f64 {
        self.inner.planner.lock().rate
    }
    /// Adds a scripted fault (see [`Script`]); scripts are tried in the
    /// order added, before the rate.
    /// From now on, the first resumed watch (one without
    /// `sendInitialEvents=true`) of each collection path is answered 410
    /// (a [`Fault::WatchGone`]); later ones, and every streaming list, are
    /// forwarded. With [`FaultProxy::cut`] to reopen every watch: a relist
    /// storm, every informer relisting once.
    pub fn gone_once_per_watch(&self) {
        *self.inner.gone_once.lock() = Some(Default::default());
    }

    pub fn script(&self, s: Script) {
        self.inner.scripts.lock().push(s);
    }
    /// Scripted faults not injected yet (`times` left).
    pub fn scripts_left(&self) -> usize {
        self.inner.scripts.lock().iter().map(|s| s.times).sum()
    }

    /// Changes how long a scripted [`Fault::Delay`] holds its request.
    pub fn set_delay(&self, delay: Duration) {
        *self.inner.delay.lock() = delay;
    }

    /// Changes how long a stall holds an answer.
    pub fn set_stall(&self, stall: Duration) {
        *self.inner.stall.lock() = stall;
    }

    /// Starts (`true`) or ends a network cut. Starting one drops every open
    /// connection at once (requests in flight, watch streams); during it
    /// new connections are accepted and held unread; ending it drops those.
    pub fn cut(&self, on: bool) {
        self.inner.cut.store(on, Ordering::SeqCst);
        if on {
            let conns: Vec<AbortHandle> = self.inner.conns.lock().drain().map(|(_, h)| h).collect();
            for h in conns {
                h.abort();
            }
        } else {
            self.inner.held.lock().clear();
        }
    }
    pub fn is_cut(&self) -> bool {
        self.inner.cut.load(Ordering::SeqCst)
    }

    /// Every request so far, in arrival order.
    pub fn records(&self) -> Vec<Record> {
        self.inner.records.lock().clone()
    }
    /// How many requests so far.
    pub fn requests(&self) -> usize {
        self.inner.records.lock().len()
    }
    /// Faults injected so far, per kind (kinds never injected: absent).
    pub fn fault_counts(&self) -> BTreeMap<Fault, usize> {
        fault_counts(&self.inner.records.lock())
    }
}

/// Faults per kind in `records`.
pub fn fault_counts(records: &[Record]) -> BTreeMap<Fault, usize> {
    let mut m = BTreeMap::new();
    for f in records.iter().filter_map(|r| r.fault) {
        *m.entry(f).or_insert(0) += 1;
    }
    m
}

/// `429 ×3, 500 ×2 (1 after)`-style summary of `records`' faults; "none".
pub fn summary(records: &[Record]) -> String {
    let counts = fault_counts(records);
    if counts.is_empty() {
        return "none".into();
    }
    counts
        .iter()
        .map(|(f, n)| {
            let after = records
                .iter()
                .filter(|r| r.fault == Some(*f) && r.after)
                .count();
            if after > 0 {
                format!("{f} ×{n} ({after} after the write)")
            } else {
                format!("{f} ×{n}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// RFC 3339 with microseconds (as the audit log), `-` for none.
pub fn rfc3339(t: Option<std::time::SystemTime>) -> String {
    t.and_then(|t| jiff::Timestamp::try_from(t).ok())
        .map_or_else(|| "-".into(), |t| format!("{t:.6}"))
}

/// Writes `records` to `path`, one request a line (times in RFC 3339).
pub fn write_records(path: &std::path::Path, records: &[Record]) -> std::io::Result<()> {
    use std::fmt::Write as _;
    let mut s = String::from(
        "# id start forwarded end method path status sent fault after completed user-agent\n",
    );
    for r in records {
        let _ = writeln!(
            s,
            "{} {} {} {} {} {} {} {} {} {} {} {}{}",
            r.id,
            rfc3339(Some(r.start)),
            rfc3339(r.forwarded),
            rfc3339(r.end),
            r.method,
            r.path,
            r.status.map_or("-".into(), |c| c.to_string()),
            r.sent.map_or("-".into(), |c| c.to_string()),
            r.fault.map_or("-".into(), |f| f.name().replace(' ', "-")),
            r.after,
            r.completed,
            r.user_agent,
            r.upstream_error
                .as_deref()
                .map_or(String::new(), |e| format!(" upstream-error: {e}")),
        );
    }
    std::fs::write(path, s)
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        for (_, h) in self.inner.conns.lock().drain() {
            h.abort();
        }
        self.inner.held.lock().clear();
    }
}

fn client_kubeconfig(addr: SocketAddr) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fault-proxy\n  cluster:\n    \
         server: http://{addr}\ncontexts:\n- name: fault-proxy\n  context:\n    \
         cluster: fault-proxy\n    user: fault-proxy\ncurrent-context: fault-proxy\n\
         users:\n- name: fault-proxy\n  user: {{}}\n"
    )
}

async fn accept_loop(listener: TcpListener, inner: Arc<Inner>) {
    loop {
        let tcp = match listener.accept().await {
            Ok((tcp, _)) => tcp,
            Err(_) => {
                // Out of descriptors and the like: try again shortly.
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        if inner.cut.load(Ordering::SeqCst) {
            inner.held.lock().push(tcp);
            continue;
        }
        let id = inner.next_conn.fetch_add(1, Ordering::Relaxed);
        let task = tokio::spawn(forward::serve(Arc::clone(&inner), tcp, id));
        {
            let mut conns = inner.conns.lock();
            conns.retain(|_, h| !h.is_finished());
            conns.insert(id, task.abort_handle());
        }
        // A cut that began between the check and the insert.
        if inner.cut.load(Ordering::SeqCst) {
            task.abort();
        }
    }
}

/// Is `m` a write (POST, PUT, PATCH, DELETE)?
pub fn is_write(m: &str) -> bool {
    Method::from_bytes(m.as_bytes()).is_ok_and(|m| plan::is_write(&m))
}
