//! The start-up steps that talk to the API server before any controller
//! runs, in order: the version probe, then (with
//! `--use-service-account-credentials`) the Secret the tokens are bound to
//! (in a pod) and one token per controller, each checked with a
//! SelfSubjectReview. All of it happens before the Lease is
//! sought, so a process whose identities are broken never holds the Lease.
//!
//! Every step retries transient failures (no connection, 429, 5xx) with
//! exponential back-off for at most [`RETRY_BOUND`]; a process that gives up
//! after that exits 1 (the cluster, not the command line, is at fault). A
//! permanent answer (401, 403, 404, a bad certificate) is reported at once
//! as the user's to fix.

use kcm_runtime::metrics::Metrics;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kcm_runtime::client::identity::{self, BoundObject, IdentityError, InPod, TokenSource};
use kcm_runtime::client::{ClientOptions, build_client, build_client_as};
use kcm_runtime::clock::Clock;
use kcm_runtime::controller::ControllerSpec;
use kube::Api;
use kube::api::PostParams;
use tokio_util::sync::CancellationToken;

/// How long one start-up step keeps retrying transient failures, as KCM
/// waits for its API server at start.
pub const RETRY_BOUND: Duration = Duration::from_secs(15);
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(4);

/// How one attempt failed.
#[derive(Debug)]
pub enum Attempt {
    /// Worth another try: the server may come up or recover.
    Transient(String),
    /// Another try would get the same answer.
    Permanent(String),
}

/// Why a step failed for good.
#[derive(Debug)]
pub enum StartError {
    /// The user's to fix (flags, RBAC, certificates): exit 2.
    Permanent(String),
    /// Transient failures for the whole [`RETRY_BOUND`]: exit 1.
    GaveUp(String),
}

/// Is `e` worth another attempt?
pub fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

fn classify(e: &kube::Error, what: impl FnOnce() -> String) -> Attempt {
    if transient(e) {
        Attempt::Transient(what())
    } else {
        Attempt::Permanent(what())
    }
}

/// How long a step may retry, on which clock, until what stops it.
#[derive(Clone, Copy)]
pub struct Bound<'a> {
    pub stop: &'a CancellationToken,
    pub clock: &'a Clock,
    pub within: Duration,
}

impl<'a> Bound<'a> {
    /// [`RETRY_BOUND`] on `clock`, ended early by `stop`.
    pub fn start_up(stop: &'a CancellationToken, clock: &'a Clock) -> Self {
        Bound {
            stop,
            clock,
            within: RETRY_BOUND,
        }
    }
}

/// Runs `step` until it succeeds, fails permanently, or `bound.within`
/// has passed on `bound.clock`; `what` names the step in messages. The
/// wait between two attempts doubles from 250 ms up to 4 s. A cancelled
/// `bound.stop` ends the retries at once.
pub async fn with_retries<T, F, Fut>(
    what: &str,
    bound: Bound<'_>,
    mut step: F,
) -> Result<T, StartError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Attempt>>,
{
    let Bound {
        stop,
        clock,
        within: bound,
    } = bound;
    let deadline = clock.instant() + bound;
    let mut backoff = FIRST_BACKOFF;
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let last = match tokio::time::timeout_at(deadline, step()).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(Attempt::Permanent(msg))) => return Err(StartError::Permanent(msg)),
            Ok(Err(Attempt::Transient(msg))) => msg,
            Err(_) => "no answer".to_string(),
        };
        let now = clock.instant();
        if now + backoff >= deadline || stop.is_cancelled() {
            return Err(StartError::GaveUp(format!(
                "{what}: gave up after {bound:?} ({attempts} attempts; last: {last})"
            )));
        }
        tracing::warn!(step = what, error = %last, retry_in = ?backoff, "transient failure at start, retrying");
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = stop.cancelled() => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// The API server's `gitVersion`.
pub async fn server_version(
    client: &kube::Client,
    url: &str,
    retry: Bound<'_>,
) -> Result<String, StartError> {
    with_retries(
        &format!("asking the API server at {url} for its version"),
        retry,
        || async {
            client
                .apiserver_version()
                .await
                .map(|v| v.git_version)
                .map_err(|e| {
                    classify(&e, || {
                        format!("the API server at {url} answered with an error: {e}")
                    })
                })
        },
    )
    .await
}

/// Asks the API server who `token` is. 403 means it authenticated but this
/// cluster's policy does not let it ask (the bootstrap `system:basic-user`
/// role normally does): accepted with a warning, since a bad token gets 401.
async fn check_token(
    config: &kube::Config,
    token: &TokenSource,
    retry: Bound<'_>,
    metrics: &Metrics,
) -> Result<(), StartError> {
    let account = token.account().to_string();
    let client = build_client_as(
        config.clone(),
        &ClientOptions::for_component("token-requests", metrics),
        token.clone(),
    )
    .map_err(|e| StartError::Permanent(e.to_string()))?;
    let api: Api<SelfSubjectReview> = Api::all(client);
    let expected = token.user();
    let who = with_retries(
        &format!("SelfSubjectReview as {expected}"),
        retry,
        || async {
            match api
                .create(&PostParams::default(), &SelfSubjectReview::default())
                .await
            {
                Ok(r) => Ok(r.status.and_then(|s| s.user_info).and_then(|u| u.username)),
                Err(kube::Error::Api(s)) if s.code == 403 => Ok(None),
                Err(e) => Err(classify(&e, || {
                    format!("SelfSubjectReview with the token of {expected} failed: {e}")
                })),
            }
        },
    )
    .await?;
    match who {
        Some(user) if user == expected => {
            tracing::info!(service_account = %account, user = %user, "token checked");
            Ok(())
        }
        Some(user) => Err(StartError::Permanent(format!(
            "the token minted for {expected} authenticates as {user:?}"
        ))),
        None => {
            tracing::warn!(
                service_account = %account,
                "SelfSubjectReview forbidden: the token authenticates, its user name is not confirmed"
            );
            Ok(())
        }
    }
}

/// Where the controllers' ServiceAccounts are and what their tokens are
/// bound to.
pub struct Accounts<'a> {
    /// `<prefix><controller client name>` is each controller's account.
    pub prefix: &'a str,
    pub namespace: &'a str,
    /// The pod kcm-rs runs in: its tokens are bound to a Secret the pod owns.
    pub pod: &'a InPod,
}

/// The Secret the tokens are bound to: made in a pod whose namespace is the
/// accounts' (an owner reference cannot cross namespaces); `None` outside a
/// pod, with a warning when the namespaces differ.
async fn anchor(
    client: &kube::Client,
    accounts: &Accounts<'_>,
    retry: Bound<'_>,
) -> Result<Option<BoundObject>, StartError> {
    let Some(pod) = accounts.pod.pod() else {
        tracing::info!("not in a pod (no POD_NAME and POD_UID): controller tokens are not bound");
        return Ok(None);
    };
    let ns = accounts.namespace;
    if accounts.pod.namespace.as_deref() != Some(ns) {
        tracing::warn!(
            pod_namespace = accounts.pod.namespace.as_deref().unwrap_or(""),
            accounts_namespace = ns,
            "the controllers' ServiceAccounts are not in the pod's namespace: their tokens are \
             not bound to the pod and stay valid up to 10 minutes after it is gone"
        );
        return Ok(None);
    }
    let name = identity::anchor_name(pod.0);
    let bound = with_retries(&format!("creating Secret {ns}/{name}"), retry, || async {
        identity::token_anchor(client, ns, pod)
            .await
            .map_err(Attempt::from)
    })
    .await?;
    tracing::info!(secret = %name, pod = pod.0, "controller tokens bound to a Secret the pod owns");
    Ok(Some(bound))
}

/// `--use-service-account-credentials`: a renewed, checked token per
/// selected controller, bound to the pod's Secret in a pod.
pub async fn controller_identities(
    config: &kube::Config,
    accounts: &Accounts<'_>,
    selected: &[&'static ControllerSpec],
    renewal: Option<Duration>,
    retry: Bound<'_>,
    metrics: &Metrics,
) -> Result<Arc<HashMap<String, TokenSource>>, StartError> {
    let client = build_client(
        config.clone(),
        &ClientOptions::for_component("token-requests", metrics),
    )
    .map_err(|e| StartError::Permanent(e.to_string()))?;
    let bound = anchor(&client, accounts, retry).await?;
    let ns = accounts.namespace;
    let mut map = HashMap::new();
    for spec in selected {
        let account = format!("{}{}", accounts.prefix, spec.client_name);
        let token = with_retries(
            &format!("TokenRequest for {ns}/{account}"),
            retry,
            || async {
                identity::service_account_token(
                    client.clone(),
                    ns,
                    &account,
                    bound.clone(),
                    retry.stop.child_token(),
                    renewal,
                    retry.clock.clone(),
                )
                .await
                .map_err(Attempt::from)
            },
        )
        .await?;
        check_token(config, &token, retry, metrics).await?;
        tracing::info!(controller = spec.name, service_account = %token.user(), "using its own identity");
        map.insert(spec.client_name.to_string(), token);
    }
    Ok(Arc::new(map))
}

impl From<IdentityError> for Attempt {
    fn from(e: IdentityError) -> Self {
        if e.api_error().is_some_and(transient) {
            Attempt::Transient(e.to_string())
        } else {
            Attempt::Permanent(e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("x", "y")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn only_429_and_5xx_are_transient_among_api_answers() {
        for code in [429, 500, 503, 504] {
            assert!(transient(&api(code)), "{code}");
        }
        for code in [400, 401, 403, 404, 409, 422] {
            assert!(!transient(&api(code)), "{code}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn transient_failures_are_retried_with_back_off_until_the_bound() {
        let (stop, clock) = (CancellationToken::new(), Clock::system());
        let started = tokio::time::Instant::now();
        let mut calls = 0;
        let bound = Duration::from_secs(1);
        let retry = Bound {
            stop: &stop,
            clock: &clock,
            within: bound,
        };
        let got: Result<(), _> = with_retries("probe", retry, || {
            calls += 1;
            async { Err(Attempt::Transient("refused".into())) }
        })
        .await;
        let Err(StartError::GaveUp(msg)) = got else {
            panic!("expected GaveUp, got {got:?}")
        };
        assert!(msg.contains("last: refused"), "{msg}");
        // Waits of 0.25 s and 0.5 s; the next, 1 s, would pass the bound.
        assert_eq!(calls, 3);
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(750) && took <= bound,
            "{took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_permanent_answer_ends_at_once_and_a_late_success_wins() {
        let (stop, clock) = (CancellationToken::new(), Clock::system());
        let retry = Bound::start_up(&stop, &clock);
        let got: Result<(), _> = with_retries("probe", retry, || async {
            Err(Attempt::Permanent("401".into()))
        })
        .await;
        assert!(matches!(got, Err(StartError::Permanent(m)) if m == "401"));

        let mut calls = 0;
        let got = with_retries("probe", retry, || {
            calls += 1;
            let n = calls;
            async move {
                if n < 3 {
                    Err(Attempt::Transient("503".into()))
                } else {
                    Ok(n)
                }
            }
        })
        .await;
        assert_eq!(got.ok(), Some(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_attempt_counts_against_the_bound() {
        let (stop, clock) = (CancellationToken::new(), Clock::system());
        let started = tokio::time::Instant::now();
        let bound = Duration::from_millis(300);
        let retry = Bound {
            stop: &stop,
            clock: &clock,
            within: bound,
        };
        let got: Result<(), _> = with_retries("probe", retry, || {
            std::future::pending::<Result<(), Attempt>>()
        })
        .await;
        assert!(matches!(got, Err(StartError::GaveUp(m)) if m.contains("no answer")));
        assert!(started.elapsed() >= bound);
    }
}
