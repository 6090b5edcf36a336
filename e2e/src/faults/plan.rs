//! Which fault a request gets: a seeded generator, the faults that apply to
//! a verb, and the `metav1.Status` bodies the API server would send.

use std::time::Duration;

use http::Method;
use serde_json::{Value, json};

/// A small deterministic generator (xorshift64*), so a seed replays the
/// same sequence of decisions.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        // Any seed, 0 included, gives a non-zero state.
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15 | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        // 53 random bits: exact in an f64.
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in [0, n); n > 0.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
    /// Uniform in [lo, hi].
    pub fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let (lo, hi) = (
            lo.as_millis() as u64,
            hi.as_millis().max(lo.as_millis()) as u64,
        );
        Duration::from_millis(lo + self.next_u64() % (hi - lo + 1))
    }
}

/// A fault the proxy injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    /// 429 with `Retry-After: 1` and `details.retryAfterSeconds: 1`.
    TooManyRequests,
    /// 500, reason `InternalError`.
    InternalError,
    /// 503, reason `ServiceUnavailable`.
    ServiceUnavailable,
    /// 409, reason `Conflict` (writes only).
    Conflict,
    /// 404, reason `NotFound` (DELETE and PATCH only).
    NotFound,
    /// The real response held for the stall duration before it goes to the
    /// client (the request itself is forwarded at once).
    Stall,
    /// A watch stream cut (connection dropped mid-body) after a short
    /// random time.
    WatchCut,
    /// A watch answered with 200 and one `ERROR` event carrying a 410
    /// `Expired` Status, then ended: what the API server sends for a
    /// resourceVersion too old (not forwarded).
    WatchGone,
    /// The request held *before* it is forwarded, then forwarded whatever
    /// became of its client: a write that lands long after it was sent,
    /// possibly after its sender gave up or was killed. Only drawn when
    /// [`Planner::delay`] is set (scripts may always use it).
    Delay,
    /// A streaming list (`sendInitialEvents=true`) cut during its initial
    /// events: forwarded up to the line before the bookmark annotated
    /// `k8s.io/initial-events-end`, then dropped (no final chunk). Scripts
    /// only (never drawn, not in [`Fault::ALL`]); a watch without that
    /// bookmark runs uncut.
    WatchCutInitial,
}

impl Fault {
    pub const ALL: [Fault; 9] = [
        Fault::TooManyRequests,
        Fault::InternalError,
        Fault::ServiceUnavailable,
        Fault::Conflict,
        Fault::NotFound,
        Fault::Stall,
        Fault::WatchCut,
        Fault::WatchGone,
        Fault::Delay,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::TooManyRequests => "429",
            Fault::InternalError => "500",
            Fault::ServiceUnavailable => "503",
            Fault::Conflict => "409",
            Fault::NotFound => "404",
            Fault::Stall => "stall",
            Fault::WatchCut => "watch cut",
            Fault::WatchGone => "watch 410",
            Fault::Delay => "delay",
            Fault::WatchCutInitial => "watch cut in initial events",
        }
    }

    /// The status code of an error answer (`None`: not an error answer).
    pub fn code(self) -> Option<u16> {
        match self {
            Fault::TooManyRequests => Some(429),
            Fault::InternalError => Some(500),
            Fault::ServiceUnavailable => Some(503),
            Fault::Conflict => Some(409),
            Fault::NotFound => Some(404),
            Fault::Stall
            | Fault::WatchCut
            | Fault::WatchGone
            | Fault::Delay
            | Fault::WatchCutInitial => None,
        }
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// When an error answer replaces the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// Not forwarded: the write is not applied.
    Before,
    /// Forwarded, the real answer read and replaced: the write is applied
    /// but the client sees an error.
    After,
}

/// One decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Injection {
    pub fault: Fault,
    pub when: When,
    /// For [`Fault::WatchCut`]: how long the stream runs first.
    pub cut_after: Duration,
    /// For [`Fault::Delay`]: how long the request is held.
    pub hold: Duration,
}

pub fn is_write(m: &Method) -> bool {
    matches!(
        *m,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    )
}

/// `watch=true` (or `1`) in the query.
pub fn is_watch(query: Option<&str>) -> bool {
    query.is_some_and(|q| {
        q.split('&')
            .any(|kv| matches!(kv, "watch=true" | "watch=1" | "watch=True"))
    })
}

/// The faults that apply to a request: 429, 500, 503 and stall to all;
/// 409 to writes; 404 to DELETE and PATCH; cut and 410 to watches.
pub fn applicable(m: &Method, watch: bool) -> Vec<Fault> {
    let mut v = vec![
        Fault::TooManyRequests,
        Fault::InternalError,
        Fault::ServiceUnavailable,
        Fault::Stall,
    ];
    if is_write(m) {
        v.push(Fault::Conflict);
    }
    if matches!(*m, Method::DELETE | Method::PATCH) {
        v.push(Fault::NotFound);
    }
    if watch {
        v.extend([Fault::WatchCut, Fault::WatchGone]);
    }
    v
}

/// Seeded decisions at a rate.
#[derive(Debug, Clone)]
pub struct Planner {
    rng: Rng,
    pub rate: f64,
    /// The rate for watch requests (`None`: `rate`). Watches are few (one
    /// per informer, reopened when cut), so a run that must see watch
    /// faults raises theirs.
    pub watch_rate: Option<f64>,
    /// 404 also before forwarding (see [`super::FaultSettings::not_found_before`]);
    /// false: a 404 always replaces the answer of an applied write.
    pub not_found_before: bool,
    /// Range of [`Injection::cut_after`].
    pub cut_after: (Duration, Duration),
    /// Range of [`Injection::hold`]; `None`: no [`Fault::Delay`] drawn.
    pub delay: Option<(Duration, Duration)>,
}

impl Planner {
    pub fn new(seed: u64, rate: f64, cut_after: (Duration, Duration)) -> Self {
        Planner {
            rng: Rng::new(seed),
            rate,
            watch_rate: None,
            not_found_before: false,
            cut_after,
            delay: None,
        }
    }

    /// One draw per request, three more when it gets a fault; error
    /// answers to writes are half before, half after forwarding (404s all
    /// after unless `not_found_before`).
    pub fn decide(&mut self, m: &Method, watch: bool) -> Option<Injection> {
        let rate = if watch {
            self.watch_rate.unwrap_or(self.rate)
        } else {
            self.rate
        };
        if self.rng.unit() >= rate {
            return None;
        }
        let mut kinds = applicable(m, watch);
        if self.delay.is_some() && !watch {
            kinds.push(Fault::Delay);
        }
        let fault = kinds[self.rng.below(kinds.len())];
        let mut after = self.rng.next_u64() & 1 == 1;
        if fault == Fault::NotFound && !self.not_found_before {
            after = true;
        }
        let when = if after && is_write(m) && fault.code().is_some() {
            When::After
        } else {
            When::Before
        };
        let cut_after = self.rng.between(self.cut_after.0, self.cut_after.1);
        let hold = match (fault, self.delay) {
            (Fault::Delay, Some((lo, hi))) => self.rng.between(lo, hi),
            _ => Duration::ZERO,
        };
        Some(Injection {
            fault,
            when,
            cut_after,
            hold,
        })
    }
}

/// Group, resource and name of an API path (`/api/v1/namespaces/ns/pods/x`,
/// `/apis/batch/v1/namespaces/ns/jobs/x/status`, `/api/v1/nodes/n`).
pub fn target(path: &str) -> (String, String, String) {
    let segs: Vec<&str> = path
        .split('?')
        .next()
        .unwrap_or("")
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, rest) = match segs.first() {
        Some(&"api") => ("", segs.get(2..).unwrap_or(&[])),
        Some(&"apis") => (
            segs.get(1).copied().unwrap_or(""),
            segs.get(3..).unwrap_or(&[]),
        ),
        _ => ("", &segs[..]),
    };
    let rest = if rest.first() == Some(&"namespaces") && rest.len() >= 3 {
        &rest[2..]
    } else {
        rest
    };
    let get = |i: usize| rest.get(i).copied().unwrap_or("").to_string();
    (group.to_string(), get(0), get(1))
}

/// A `metav1.Status` failure as the API server writes it.
pub fn status(code: u16, reason: &str, message: &str, details: Option<Value>) -> Value {
    let mut s = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    });
    if let Some(d) = details {
        s["details"] = d;
    }
    s
}

/// The Status body of an error fault on `method path`.
pub fn fault_status(fault: Fault, path: &str) -> Value {
    let (group, resource, name) = target(path);
    let qualified = if group.is_empty() {
        resource.clone()
    } else {
        format!("{resource}.{group}")
    };
    let details = json!({"name": name, "group": group, "kind": resource});
    match fault {
        Fault::TooManyRequests => status(
            429,
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later \
             (injected by the kcm-e2e fault proxy)",
            Some(json!({"retryAfterSeconds": 1})),
        ),
        Fault::ServiceUnavailable => status(
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request (injected by the kcm-e2e fault proxy)",
            None,
        ),
        Fault::Conflict => status(
            409,
            "Conflict",
            &format!(
                "Operation cannot be fulfilled on {qualified} \"{name}\": the object has been \
                 modified; please apply your changes to the latest version and try again \
                 (injected by the kcm-e2e fault proxy)"
            ),
            Some(details),
        ),
        Fault::NotFound => status(
            404,
            "NotFound",
            &format!("{qualified} \"{name}\" not found (injected by the kcm-e2e fault proxy)"),
            Some(details),
        ),
        _ => status(
            500,
            "InternalError",
            "Internal error occurred: injected by the kcm-e2e fault proxy",
            Some(json!({"causes": [{"message": "injected by the kcm-e2e fault proxy"}]})),
        ),
    }
}

/// The one watch event of [`Fault::WatchGone`], with its newline.
pub fn gone_event() -> String {
    let s = status(
        410,
        "Expired",
        "too old resource version: 1 (2) (injected by the kcm-e2e fault proxy)",
        None,
    );
    format!("{}\n", json!({"type": "ERROR", "object": s}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Status, WatchEvent};

    #[test]
    fn a_seed_replays_and_seeds_differ() {
        let draws = |seed| {
            let mut p = Planner::new(
                seed,
                0.3,
                (Duration::from_millis(500), Duration::from_secs(5)),
            );
            (0..500)
                .map(|i| {
                    p.decide(
                        if i % 3 == 0 {
                            &Method::PATCH
                        } else {
                            &Method::GET
                        },
                        i % 7 == 0,
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(draws(7), draws(7));
        assert_ne!(draws(7), draws(8));
        let n = draws(7).iter().flatten().count();
        assert!((100..200).contains(&n), "{n} faults in 500 at 30%");
        let mut r = Rng::new(0);
        assert_ne!(r.next_u64(), r.next_u64());
    }

    #[test]
    fn rate_zero_and_one() {
        let range = (Duration::from_millis(500), Duration::from_secs(5));
        let mut p = Planner::new(1, 0.0, range);
        assert!((0..1000).all(|_| p.decide(&Method::POST, false).is_none()));
        let mut p = Planner::new(1, 1.0, range);
        assert!((0..1000).all(|_| p.decide(&Method::POST, false).is_some()));
        p.watch_rate = Some(0.0);
        assert!((0..1000).all(|_| p.decide(&Method::GET, true).is_none()));
        assert!((0..1000).all(|_| p.decide(&Method::GET, false).is_some()));
    }

    #[test]
    fn faults_by_verb() {
        use Fault::*;
        assert_eq!(
            applicable(&Method::GET, false),
            [TooManyRequests, InternalError, ServiceUnavailable, Stall]
        );
        assert_eq!(
            applicable(&Method::GET, true),
            [
                TooManyRequests,
                InternalError,
                ServiceUnavailable,
                Stall,
                WatchCut,
                WatchGone
            ]
        );
        for m in [Method::POST, Method::PUT] {
            assert!(applicable(&m, false).contains(&Conflict));
            assert!(!applicable(&m, false).contains(&NotFound));
        }
        for m in [Method::PATCH, Method::DELETE] {
            assert!(applicable(&m, false).contains(&Conflict));
            assert!(applicable(&m, false).contains(&NotFound));
        }
        // Every kind is drawn, After only for error answers to writes.
        let range = (Duration::from_millis(500), Duration::from_secs(5));
        let mut p = Planner::new(3, 1.0, range);
        p.not_found_before = true;
        let hold = (Duration::from_secs(2), Duration::from_secs(10));
        p.delay = Some(hold);
        let mut seen = std::collections::BTreeSet::new();
        let (mut before, mut after) = (0, 0);
        let mut not_found_before = 0;
        for i in 0..4000 {
            let (m, w) = match i % 4 {
                0 => (Method::GET, true),
                1 => (Method::DELETE, false),
                2 => (Method::PUT, false),
                _ => (Method::GET, false),
            };
            let inj = p.decide(&m, w).expect("rate 1");
            if inj.fault == Delay {
                assert!(!w && (hold.0..=hold.1).contains(&inj.hold), "{inj:?}");
            } else {
                assert!(applicable(&m, w).contains(&inj.fault));
            }
            assert!((range.0..=range.1).contains(&inj.cut_after));
            if inj.when == When::After {
                assert!(is_write(&m) && inj.fault.code().is_some(), "{inj:?} on {m}");
                after += 1;
            } else if is_write(&m) && inj.fault.code().is_some() {
                before += 1;
                not_found_before += usize::from(inj.fault == NotFound);
            }
            seen.insert(inj.fault);
        }
        assert_eq!(seen.len(), Fault::ALL.len());
        assert!(
            before > 300 && after > 300,
            "{before} before, {after} after"
        );
        assert!(not_found_before > 0);
        // By default a 404 only ever follows an applied write.
        let mut p = Planner::new(3, 1.0, range);
        for _ in 0..2000 {
            let inj = p.decide(&Method::DELETE, false).expect("rate 1");
            if inj.fault == NotFound {
                assert_eq!(inj.when, When::After);
            }
        }
    }

    #[test]
    fn watch_and_target() {
        assert!(is_watch(Some(
            "labelSelector=a&watch=true&resourceVersion=5"
        )));
        assert!(!is_watch(Some("watchX=true")));
        assert!(!is_watch(None));
        let t = |p| target(p);
        assert_eq!(
            t("/api/v1/namespaces/ns/pods/p1"),
            ("".into(), "pods".into(), "p1".into())
        );
        assert_eq!(
            t("/apis/batch/v1/namespaces/ns/jobs/j/status?x=1"),
            ("batch".into(), "jobs".into(), "j".into())
        );
        assert_eq!(
            t("/api/v1/nodes/n0"),
            ("".into(), "nodes".into(), "n0".into())
        );
        assert_eq!(
            t("/api/v1/namespaces/ns"),
            ("".into(), "namespaces".into(), "ns".into())
        );
        assert_eq!(
            t("/api/v1/namespaces/ns/pods"),
            ("".into(), "pods".into(), "".into())
        );
    }

    #[test]
    fn bodies_are_status_json() {
        for f in Fault::ALL.into_iter().filter(|f| f.code().is_some()) {
            let v = fault_status(f, "/apis/batch/v1/namespaces/ns/jobs/j/status");
            let s: Status = serde_json::from_value(v.clone()).expect("a metav1.Status");
            assert_eq!(s.code, f.code().map(i32::from), "{v}");
            assert_eq!(s.status.as_deref(), Some("Failure"));
            assert!(s.reason.is_some() && s.message.is_some());
            // What kube's client parses an error answer into.
            let e: kube::core::Status = serde_json::from_value(v).expect("kube Status");
            assert_eq!(Some(e.code), f.code());
        }
        let v = fault_status(Fault::Conflict, "/api/v1/namespaces/ns/pods/p");
        assert_eq!(v["reason"], "Conflict");
        assert_eq!(v["details"]["name"], "p");
        // What kube's watcher parses (and relists on) and what
        // k8s-openapi's WatchEvent reads.
        let line = gone_event();
        assert!(line.ends_with('\n') && !line.trim().contains('\n'));
        match serde_json::from_str::<kube::core::WatchEvent<Pod>>(line.trim()) {
            Ok(kube::core::WatchEvent::Error(s)) => {
                assert_eq!((s.code, s.reason.as_str()), (410, "Expired"));
            }
            other => panic!("{other:?}"),
        }
        let ev: WatchEvent<Pod> = serde_json::from_str(line.trim()).expect("a watch event");
        assert!(matches!(ev, WatchEvent::ErrorStatus(s) if s.code == Some(410)));
    }
}
