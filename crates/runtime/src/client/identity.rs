//! One identity per controller (KCM's `--use-service-account-credentials`):
//! each controller's client authenticates as its own ServiceAccount in
//! `kube-system`, with a token from the TokenRequest API that a background
//! task renews before it expires.
//!
//! The token lives only in memory ([`TokenSource`]); [`BearerLayer`] puts it
//! on every request as a sensitive header (never logged). The controller's
//! `kube::Config` keeps the cluster URL and CA but none of the process's
//! own credentials, so a controller can only do what its role allows.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{HeaderValue, Request, header};
use jiff::Timestamp;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use kube::api::PostParams;
use parking_lot::RwLock;
use tokio_util::sync::CancellationToken;
use tower::{Layer, Service};

/// Where KCM keeps its controllers' ServiceAccounts.
pub const NAMESPACE: &str = "kube-system";
/// Token lifetime asked for: the TokenRequest API's minimum (600 s), so a
/// leaked token is short-lived; renewed at 80 % (8 minutes).
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(600);
/// Renew once this fraction of a token's lifetime has passed.
const RENEW_AT: f64 = 0.8;

/// Why a controller identity could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error(
        "TokenRequest for ServiceAccount {NAMESPACE}/{account} refused: {source} (does the \
         ServiceAccount exist, and may this process create serviceaccounts/token for it?)"
    )]
    Refused {
        account: String,
        #[source]
        source: kube::Error,
    },
    #[error("TokenRequest for ServiceAccount {NAMESPACE}/{0} returned no usable token")]
    Empty(String),
}

/// The pod a token is bound to (`boundObjectRef`): the API server rejects
/// the token once that pod is gone, so a copy dies with the replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoundPod {
    pub name: String,
    pub uid: String,
}

impl BoundPod {
    /// From the downward-API variables `POD_NAME` and `POD_UID` (the
    /// Deployment sets them); `None` outside a pod.
    pub fn from_env() -> Option<Self> {
        let get = |k| std::env::var(k).ok().filter(|v: &String| !v.is_empty());
        Some(BoundPod {
            name: get("POD_NAME")?,
            uid: get("POD_UID")?,
        })
    }
}

/// The current bearer token of one controller, shared with its client.
#[derive(Clone, Debug)]
pub struct TokenSource {
    account: Arc<str>,
    header: Arc<RwLock<HeaderValue>>,
}

impl TokenSource {
    /// A source holding `token` (tests and the first fetch).
    pub fn new(account: &str, token: &str) -> Result<Self, IdentityError> {
        Ok(TokenSource {
            account: account.into(),
            header: Arc::new(RwLock::new(bearer(account, token)?)),
        })
    }

    pub fn account(&self) -> &str {
        &self.account
    }

    fn set(&self, token: &str) -> Result<(), IdentityError> {
        *self.header.write() = bearer(&self.account, token)?;
        Ok(())
    }

    fn header(&self) -> HeaderValue {
        self.header.read().clone()
    }
}

fn bearer(account: &str, token: &str) -> Result<HeaderValue, IdentityError> {
    let mut v = HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| IdentityError::Empty(account.to_string()))?;
    v.set_sensitive(true);
    Ok(v)
}

/// Asks for a token of `kube-system/<account>`; returns it with its expiry.
async fn request_token(
    client: &kube::Client,
    account: &str,
    bound: Option<&BoundPod>,
) -> Result<(String, Timestamp), IdentityError> {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), NAMESPACE);
    let req = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: i64::try_from(TOKEN_LIFETIME.as_secs()).ok(),
            bound_object_ref: bound.map(|p| BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(p.name.clone()),
                uid: Some(p.uid.clone()),
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let got = sas
        .create_subresource::<TokenRequest, TokenRequest>(
            "token",
            account,
            &PostParams::default(),
            &req,
        )
        .await
        .map_err(|source| IdentityError::Refused {
            account: account.to_string(),
            source,
        })?;
    let status = got.status.unwrap_or_default();
    match (status.token, status.expiration_timestamp) {
        (Some(token), Some(expires)) if !token.is_empty() => Ok((token, expires.0)),
        _ => Err(IdentityError::Empty(account.to_string())),
    }
}

/// When to renew a token issued at `now` that expires at `expires`.
pub fn renew_after(now: Timestamp, expires: Timestamp) -> Duration {
    let life = expires.duration_since(now).as_secs_f64().max(0.0);
    Duration::try_from_secs_f64(life * RENEW_AT).unwrap_or(Duration::ZERO)
}

/// Fetches the first token of `account` (an error here stops start-up) and
/// keeps renewing it until `stop`. A failed renewal is retried with
/// back-off while the old token is still valid.
///
/// `every` replaces the renewal time (tests only: API tokens live at least
/// ten minutes, too long to watch one renew).
pub async fn service_account_token(
    client: kube::Client,
    account: &str,
    bound: Option<BoundPod>,
    stop: CancellationToken,
    every: Option<Duration>,
) -> Result<TokenSource, IdentityError> {
    let (token, mut expires) = request_token(&client, account, bound.as_ref()).await?;
    let source = TokenSource::new(account, &token)?;
    let renewing = source.clone();
    let next = move |expires| every.unwrap_or_else(|| renew_after(Timestamp::now(), expires));
    tokio::spawn(async move {
        let mut wait = next(expires);
        let mut backoff = Duration::from_secs(1);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
            match request_token(&client, renewing.account(), bound.as_ref()).await {
                Ok((token, exp)) if renewing.set(&token).is_ok() => {
                    expires = exp;
                    backoff = Duration::from_secs(1);
                    wait = next(expires);
                    tracing::debug!(account = renewing.account(), %expires, "token renewed");
                }
                failed => {
                    let why = failed.err().map(|e| e.to_string()).unwrap_or_default();
                    tracing::warn!(account = renewing.account(), %expires, "token renewal failed: {why}");
                    wait = backoff;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                }
            }
        }
    });
    Ok(source)
}

/// Sets `Authorization` from a [`TokenSource`] on every request.
#[derive(Clone, Debug)]
pub struct BearerLayer(pub TokenSource);

impl<S> Layer<S> for BearerLayer {
    type Service = Bearer<S>;
    fn layer(&self, inner: S) -> Bearer<S> {
        Bearer {
            inner,
            source: self.0.clone(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Bearer<S> {
    inner: S,
    source: TokenSource,
}

impl<S, B> Service<Request<B>> for Bearer<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        req.headers_mut()
            .insert(header::AUTHORIZATION, self.source.header());
        self.inner.call(req)
    }
}

/// `config` without any credential of its own: cluster URL, CA, proxy and
/// timeouts stay; client certificates, tokens, exec plugins and
/// impersonation go.
pub fn without_credentials(mut config: kube::Config) -> kube::Config {
    config.auth_info = kube::config::AuthInfo::default();
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renews_at_four_fifths_of_the_lifetime() {
        let now = Timestamp::constant(1_700_000_000, 0);
        let exp = Timestamp::constant(1_700_003_600, 0);
        assert_eq!(renew_after(now, exp), Duration::from_secs(2880));
        assert_eq!(renew_after(exp, now), Duration::ZERO);
    }

    #[test]
    fn the_header_is_sensitive_and_swappable() {
        let s = TokenSource::new("job-controller", "abc").expect("token");
        assert!(s.header().is_sensitive());
        assert_eq!(s.header(), "Bearer abc");
        s.set("def").expect("token");
        assert_eq!(s.header(), "Bearer def");
        assert!(format!("{:?}", s.header()).contains("Sensitive"));
        assert!(TokenSource::new("x", "bad\ntoken").is_err());
    }
}
