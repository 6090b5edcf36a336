//! The API client every controller gets: one `kube::Client` per controller,
//! as KCM's `ControllerClientBuilder.ClientOrDie(name)` hands each controller
//! its own client, rate limiter and user agent.
//!
//! Stack, outermost first (each request passes through all of them):
//!
//! 1. [`Instrument`] sets the User-Agent and times the whole request into
//!    `rest_client_request_duration_seconds{verb,host}` (watches excepted).
//! 2. `tower::retry::Retry` with [`RetryPolicy`] makes at most
//!    [`MAX_RETRIES`] retries of idempotent verbs on 429/503 (and of GET on
//!    dropped connections). It replaces kube's default
//!    `RetryPolicy::server_retry()`, switched off through
//!    `Config::default_retry`.
//! 3. [`ClientRateLimit`] takes a token from the client's own bucket (QPS and
//!    burst) for every attempt, retries included, as client-go throttles
//!    retries too; watches are not throttled.
//! 4. [`Deadline`] bounds every attempt: non-watch requests by
//!    [`ClientOptions::request_timeout`], writes by the leadership
//!    [`Fence`] (refused once it has passed, cancelled when it passes).
//! 5. [`AttemptMetrics`] counts every HTTP attempt in
//!    `rest_client_requests_total{code,method,host}`.
//! 6. [`transport`]: the connection, shared by every client of the process
//!    that talks to the same server with the same TLS identity: HTTP/2 by
//!    ALPN (one multiplexed connection, on `h2` directly: `h2conn.rs`),
//!    HTTP/1.1 otherwise. (Through an HTTP proxy: kube's own connector,
//!    HTTP/1.1, behind a `tower` buffer that makes its boxed stack
//!    cloneable.)

mod deadline;
mod h2conn;
pub mod identity;
pub mod lean;
mod metrics;
mod ratelimit;
mod retry;
#[cfg(test)]
mod tests;
pub mod transport;

use std::sync::Arc;

use http::{HeaderValue, Request, Uri};
use kube::client::{Body, ClientBuilder};
use tower::buffer::BufferLayer;
use tower::retry::{Retry, RetryLayer};
use tower::{BoxError, Layer, Service, ServiceBuilder};

pub use self::deadline::{
    Deadline, DeadlineBody, DeadlineError, DeadlineLayer, Fence, REQUEST_TIMEOUT,
};
pub use self::lean::{LeanApi, Written};
pub use self::metrics::{
    AttemptMetrics, AttemptMetricsLayer, HostMetrics, Instrument, InstrumentLayer,
    RestClientMetrics, TimedBody,
};
pub use self::ratelimit::{ClientRateLimit, ClientRateLimitLayer, TokenBucket};
pub use self::retry::{
    INITIAL_BACKOFF, MAX_RETRIES, MAX_RETRY_AFTER, RetryPolicy, is_retryable_method, retry_delay,
};

/// Requests the buffer over kube's own stack (through an HTTP proxy) holds
/// before callers wait (kube's `Client` buffer uses the same bound).
const PROXY_BUFFER: usize = 1024;

/// KCM's `--kube-api-qps` default.
pub const DEFAULT_QPS: f32 = 20.0;
/// KCM's `--kube-api-burst` default.
pub const DEFAULT_BURST: u32 = 30;
/// Per-controller client settings.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Sustained requests per second (`--kube-api-qps`); finite and > 0.
    pub qps: f32,
    /// Bucket size (`--kube-api-burst`); at least 1.
    pub burst: u32,
    /// The controller's client name appended to the user agent, e.g.
    /// `job-controller` (KCM's `ClientOrDie("job-controller")`).
    pub user_agent_component: String,
    /// Bound on one non-watch request (body included).
    pub request_timeout: std::time::Duration,
    /// Writes stop when this fence passes (leader election moves it).
    pub fence: Fence,
    /// Where the `rest_client_*` series and the connection count go.
    pub metrics: crate::metrics::Metrics,
}

impl ClientOptions {
    /// KCM's default QPS and burst for the named controller client,
    /// counting into `metrics`.
    pub fn for_component(component: impl Into<String>, metrics: &crate::metrics::Metrics) -> Self {
        ClientOptions {
            qps: DEFAULT_QPS,
            burst: DEFAULT_BURST,
            user_agent_component: component.into(),
            request_timeout: REQUEST_TIMEOUT,
            fence: Fence::open(),
            metrics: metrics.clone(),
        }
    }
}

impl Default for ClientOptions {
    /// KCM defaults, no component suffix, metrics nobody serves.
    fn default() -> Self {
        ClientOptions::for_component("", &crate::metrics::Metrics::detached())
    }
}

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// QPS is zero, negative or not a number.
    #[error("invalid client QPS {0}: must be a finite number greater than 0")]
    InvalidQps(f32),
    /// Burst is zero (no request could ever be sent).
    #[error("invalid client burst 0: must be at least 1")]
    InvalidBurst,
    /// The user agent component contains characters a header cannot carry.
    #[error("invalid user agent component {0:?}")]
    InvalidUserAgent(String),
    /// The client was built outside a Tokio runtime (its buffers spawn tasks).
    #[error("a kube client must be built inside a Tokio runtime")]
    NoRuntime,
    /// kube rejected the configuration (TLS, auth, proxy, headers).
    #[error("building the kube client: {0}")]
    Kube(#[from] kube::Error),
}

/// Builds the client for one controller from a shared `kube::Config`.
///
/// Must be called inside a Tokio runtime. Each call creates a fresh token
/// bucket, so every controller is throttled independently, as in KCM.
pub fn build_client(
    config: kube::Config,
    opts: &ClientOptions,
) -> Result<kube::Client, ClientError> {
    build(config, opts, None)
}

/// [`build_client`] for a controller that authenticates as its own
/// ServiceAccount: `config`'s credentials are dropped and every request
/// carries `token`'s current bearer token instead.
pub fn build_client_as(
    config: kube::Config,
    opts: &ClientOptions,
    token: identity::TokenSource,
) -> Result<kube::Client, ClientError> {
    build(identity::without_credentials(config), opts, Some(token))
}

fn build(
    mut config: kube::Config,
    opts: &ClientOptions,
    token: Option<identity::TokenSource>,
) -> Result<kube::Client, ClientError> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(ClientError::NoRuntime);
    }
    let host = host_label(&config.cluster_url);
    let stack = ClientStack::new(opts, &host)?;
    // Off: kube's default would retry any verb (POST included) on
    // 429/503/504 up to 15 times, up to 1000 s apart. `stack` retries instead.
    config.default_retry = false;
    if config.proxy_url.is_some() {
        // kube's connector speaks to proxies; ours does not. Its stack is
        // boxed, not cloneable: a buffer makes it so for the retry layer.
        let builder = ClientBuilder::try_from(config)?
            .with_layer(&BufferLayer::<Request<Body>>::new(PROXY_BUFFER));
        return Ok(with_stack(builder, &stack, token));
    }
    let service = transport::service(&config, &host, transport::http2_from_env(), &opts.metrics)?;
    let builder = ClientBuilder::new(service, config.default_namespace);
    Ok(with_stack(builder, &stack, token))
}

/// `builder` under the client stack (and a controller's own token).
fn with_stack<S, B>(
    builder: ClientBuilder<S>,
    stack: &ClientStack,
    token: Option<identity::TokenSource>,
) -> kube::Client
where
    S: Service<Request<Body>, Response = http::Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError> + Send + Sync,
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    match token {
        Some(t) => builder
            .with_layer(stack)
            .with_layer(&identity::BearerLayer(t))
            .build(),
        None => builder.with_layer(stack).build(),
    }
}

/// The user agent of a controller client, shaped like KCM's
/// `kube-controller-manager/v1.34.0 (linux/amd64) kubernetes/<commit>/job-controller`.
pub fn user_agent(component: &str) -> String {
    let mut ua = format!(
        "kcm-rs/v{} ({}/{}) kcm-rs",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        go_arch(std::env::consts::ARCH),
    );
    if !component.is_empty() {
        ua.push('/');
        ua.push_str(component);
    }
    ua
}

/// Go's GOARCH spelling of Rust's target architecture names.
fn go_arch(arch: &str) -> &str {
    match arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

/// The `host` label: `host[:port]` of the API server URL, as client-go's
/// `req.URL.Host`, or `none` without one.
pub fn host_label(url: &Uri) -> String {
    match url.authority() {
        // Never leak credentials embedded in the URL into a label.
        Some(a) => a.as_str().rsplit('@').next().unwrap_or_default().to_owned(),
        None => "none".to_owned(),
    }
}

/// The whole per-controller middleware stack as one layer, applied over
/// kube's default service by [`build_client`]. Public so tests (here and in
/// controllers) can put it over a mocked API server.
#[derive(Clone, Debug)]
pub struct ClientStack {
    bucket: Arc<TokenBucket>,
    m: HostMetrics,
    user_agent: HeaderValue,
    deadline: DeadlineLayer,
}

impl ClientStack {
    /// A stack with a fresh token bucket; `host` labels the metrics.
    pub fn new(opts: &ClientOptions, host: &str) -> Result<Self, ClientError> {
        if !opts.qps.is_finite() || opts.qps <= 0.0 {
            return Err(ClientError::InvalidQps(opts.qps));
        }
        if opts.burst == 0 {
            return Err(ClientError::InvalidBurst);
        }
        let user_agent = HeaderValue::from_str(&user_agent(&opts.user_agent_component))
            .map_err(|_| ClientError::InvalidUserAgent(opts.user_agent_component.clone()))?;
        Ok(ClientStack {
            bucket: Arc::new(TokenBucket::new(opts.qps, opts.burst)),
            m: HostMetrics {
                families: Arc::clone(&opts.metrics.client),
                host: host.into(),
            },
            user_agent,
            deadline: DeadlineLayer::new(opts.request_timeout, opts.fence.clone()),
        })
    }
}

/// The service [`ClientStack`] produces over `S`.
pub type ClientStackService<S> =
    Instrument<Retry<RetryPolicy, ClientRateLimit<Deadline<AttemptMetrics<S>>>>>;

// `S` is cloned per request and per attempt (retry and rate limit take
// their own); no `tower::buffer` in between, whose worker task would add
// two wake-ups to every request (kube's `Client` already has one buffer,
// outermost).
impl<S> Layer<S> for ClientStack
where
    S: Service<Request<Body>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError> + Send + Sync,
{
    type Service = ClientStackService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ServiceBuilder::new()
            .layer(InstrumentLayer::new(
                self.m.clone(),
                self.user_agent.clone(),
            ))
            .layer(RetryLayer::new(RetryPolicy::new(self.m.clone())))
            .layer(ClientRateLimitLayer::new(
                self.bucket.clone(),
                self.m.clone(),
            ))
            .layer(self.deadline.clone())
            .layer(AttemptMetricsLayer::new(self.m.clone()))
            .service(inner)
    }
}
