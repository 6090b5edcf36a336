//! /healthz (one check per running controller), /readyz (informers synced)
//! and /metrics (Prometheus text format), as KCM serves them: over HTTPS
//! behind delegated authentication and authorization (`kcm-serving`), on
//! a thread of its own; and /healthz, /livez and /readyz again on the
//! health port (`--health-port`, plain HTTP, another thread), for the
//! kubelet's probes. A `runtime` check fails when the controllers' runtime
//! stops turning, which the health thread would not otherwise notice.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use kcm_runtime::controller::Health;
use kcm_runtime::informer::InformerFactory;
use kcm_runtime::metrics::Metrics;
use kcm_serving::{Delegate, HealthServer, SecureServer, ServeError, TlsOptions};
use parking_lot::RwLock;
use tokio_util::sync::CancellationToken;

/// What the endpoints report on; filled in as the process starts up.
pub struct Status {
    /// What `/metrics` renders: the process's metrics, passed in.
    pub metrics: Metrics,
    pub checks: RwLock<Vec<(String, Health)>>,
    pub informers: RwLock<Option<InformerFactory>>,
    /// Waiting for the lease: ready (a standby must not block a rollout).
    pub standby: RwLock<bool>,
}

impl Status {
    pub fn new(metrics: Metrics) -> Self {
        Status {
            metrics,
            checks: RwLock::default(),
            informers: RwLock::default(),
            standby: RwLock::default(),
        }
    }
}

type Shared = Arc<Status>;

fn healthz_body(status: &Status, verbose: bool) -> (StatusCode, String) {
    let checks = status.checks.read();
    let mut lines = vec!["[+]ping ok".to_string()];
    let mut ok = true;
    for (name, h) in checks.iter() {
        if h.ok() {
            lines.push(format!("[+]{name} ok"));
        } else {
            ok = false;
            lines.push(format!("[-]{name} failed: reason withheld"));
        }
    }
    let code = if ok {
        StatusCode::OK
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    };
    if verbose || !ok {
        lines.push(if ok {
            "healthz check passed".into()
        } else {
            "healthz check failed".into()
        });
        (code, lines.join("\n") + "\n")
    } else {
        (code, "ok".into())
    }
}

async fn healthz(
    State(s): State<Shared>,
    Query(q): Query<Vec<(String, String)>>,
) -> impl IntoResponse {
    healthz_body(&s, q.iter().any(|(k, _)| k == "verbose"))
}

async fn healthz_one(State(s): State<Shared>, Path(name): Path<String>) -> impl IntoResponse {
    if name == "ping" {
        return (StatusCode::OK, "ok".to_string());
    }
    let checks = s.checks.read();
    // As KCM: the reason only here (an authorized path); `/healthz` is
    // public and withholds it.
    match checks
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, h)| h.reason())
    {
        Some(None) => (StatusCode::OK, "ok".to_string()),
        Some(Some(reason)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal server error: {reason}\n"),
        ),
        None => (StatusCode::NOT_FOUND, format!("no health check {name}\n")),
    }
}

async fn readyz(State(s): State<Shared>) -> impl IntoResponse {
    if *s.standby.read() {
        return (
            StatusCode::OK,
            "ok (standby: waiting for the lease)\n".to_string(),
        );
    }
    match s.informers.read().as_ref() {
        Some(f) if f.has_synced() => (StatusCode::OK, "ok".to_string()),
        Some(f) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "[-]informer-sync failed: waiting for {}\n",
                f.unsynced_kinds().join(", ")
            ),
        ),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "[-]informer-sync failed: not started\n".to_string(),
        ),
    }
}

async fn metrics(State(s): State<Shared>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            kcm_runtime::metrics::TEXT_CONTENT_TYPE,
        )],
        s.metrics.render(),
    )
}

/// The routes, before the authentication and authorization check.
pub fn router(status: Shared) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/healthz/{name}", get(healthz_one))
        .route("/livez", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(status)
}

/// The health port's routes: the always-allowed ones.
pub fn health_router(status: Shared) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/livez", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(status)
}

/// The paths [`router`] answers (the others get 404 before any review):
/// one per route, and `/healthz/<check>` only for a check that exists.
fn served(status: Shared) -> kcm_serving::Served {
    Arc::new(move |path: &str| match path {
        "/healthz" | "/livez" | "/readyz" | "/metrics" | "/healthz/ping" => true,
        _ => path
            .strip_prefix("/healthz/")
            .is_some_and(|name| status.checks.read().iter().any(|(n, _)| n == name)),
    })
}

/// How long the controllers' runtime may go without a turn of its
/// heartbeat before `/healthz` and `/livez` fail.
pub const RUNTIME_STALL: Duration = Duration::from_secs(30);

/// A check that fails when the current runtime stops running its tasks
/// (a task that blocks its thread): a task stamps the time every second.
pub fn runtime_heartbeat(stop: CancellationToken) -> Health {
    let clock = kcm_runtime::clock::Clock::system();
    let health = Health::healthy_on("runtime", clock.clone());
    let beat = Arc::new(parking_lot::Mutex::new(clock.instant()));
    {
        let beat = Arc::clone(&beat);
        let clock = clock.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = every.tick() => *beat.lock() = clock.instant(),
                }
            }
        });
    }
    health.add_check(move |now| {
        let since = now.saturating_duration_since(*beat.lock());
        if since > RUNTIME_STALL {
            Err(format!(
                "the controllers' runtime has not run its tasks for {since:?}"
            ))
        } else {
            Ok(())
        }
    });
    health
}

/// The secure port bound with its certificate and `delegate`, answering
/// 404 for what [`router`] does not serve; not yet serving. Certificate and
/// binding errors are start-up errors, not log lines.
pub async fn secure(
    addr: SocketAddr,
    status: &Shared,
    tls: &TlsOptions,
    delegate: Delegate,
) -> Result<SecureServer, ServeError> {
    Ok(SecureServer::bind(addr, tls, delegate)
        .await?
        .with_served(served(Arc::clone(status))))
}

/// Binds and serves the health port until `stop` fires, on a thread of
/// its own.
pub fn serve_health(
    addr: SocketAddr,
    status: Shared,
    stop: CancellationToken,
) -> Result<std::thread::JoinHandle<()>, ServeError> {
    HealthServer::bind(addr)?
        .spawn_thread(health_router(status), stop)
        .map_err(|source| ServeError::Bind { addr, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthz_lists_failing_checks() {
        let s = Status::new(Metrics::detached());
        let good = Health::default();
        good.set(true);
        let bad = Health::default();
        s.checks.write().push(("job-controller".into(), good));
        assert_eq!(healthz_body(&s, false), (StatusCode::OK, "ok".into()));
        s.checks.write().push(("disruption-controller".into(), bad));
        let (code, body) = healthz_body(&s, false);
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(body.contains("[+]job-controller ok"), "{body}");
        assert!(body.contains("[-]disruption-controller failed"), "{body}");
    }

    #[tokio::test]
    async fn one_check_gives_its_reason_and_the_aggregate_withholds_it() {
        let s = Arc::new(Status::new(Metrics::detached()));
        let h = Health::healthy("job-controller");
        s.checks.write().push(("job-controller".into(), h.clone()));
        let one = |s: &Shared| healthz_one(State(Arc::clone(s)), Path("job-controller".into()));
        let ok = one(&s).await.into_response();
        assert_eq!(ok.status(), StatusCode::OK);
        h.fail("queue \"job\": sync of \"ns/j\" stuck");
        let failed = one(&s).await.into_response();
        assert_eq!(failed.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = axum::body::to_bytes(failed.into_body(), 1 << 16)
            .await
            .expect("body");
        assert_eq!(
            String::from_utf8_lossy(&body),
            "internal server error: queue \"job\": sync of \"ns/j\" stuck\n"
        );
        let (_, verbose) = healthz_body(&s, true);
        assert!(
            verbose.contains("[-]job-controller failed: reason withheld"),
            "{verbose}"
        );
        assert!(!verbose.contains("ns/j"), "{verbose}");
        h.set(true);
        assert_eq!(one(&s).await.into_response().status(), StatusCode::OK);
    }
}
