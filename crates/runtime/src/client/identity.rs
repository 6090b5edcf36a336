//! One identity per controller (KCM's `--use-service-account-credentials`):
//! each controller's client authenticates as its own ServiceAccount, with a
//! token from the TokenRequest API that a background task renews before it
//! expires.
//!
//! The accounts live in one namespace: KCM's `kube-system` by default, the
//! pod's own namespace when kcm-rs runs in a pod ([`InPod`]), or what the
//! caller says. In a pod, the tokens are bound ([`BoundObject`]) to a Secret
//! the pod owns ([`token_anchor`]): the API server binds a token to a pod
//! only when the pod runs as that token's ServiceAccount, which kcm-rs's
//! pod does not, so the Secret stands in for the pod; the garbage collector
//! deletes it with the pod, and the API server then refuses the tokens.
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
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Api;
use kube::api::PostParams;
use parking_lot::RwLock;
use tokio_util::sync::CancellationToken;
use tower::{Layer, Service};

use crate::clock::Clock;

/// Where KCM keeps its controllers' ServiceAccounts; kcm-rs's default
/// outside a pod.
pub const KCM_NAMESPACE: &str = "kube-system";
/// Token lifetime asked for: the TokenRequest API's minimum (600 s), so a
/// leaked token is short-lived; renewed at 80 % (8 minutes).
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(600);
/// Renew once this fraction of a token's lifetime has passed.
const RENEW_AT: f64 = 0.8;
/// The in-cluster namespace file (the pod's namespace), as client-go reads it.
pub const NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
/// The Secret type of [`token_anchor`]'s Secrets (no data; only its
/// existence matters).
pub const ANCHOR_TYPE: &str = "kcm-rs.dev/token-binding";

/// Why a controller identity could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error(
        "TokenRequest for ServiceAccount {namespace}/{account} refused: {source} (does the \
         ServiceAccount exist, and may this process create serviceaccounts/token for it?)"
    )]
    Refused {
        namespace: String,
        account: String,
        #[source]
        source: kube::Error,
    },
    #[error("TokenRequest for ServiceAccount {namespace}/{account} returned no usable token")]
    Empty { namespace: String, account: String },
    #[error(
        "creating Secret {namespace}/{name}, which the controllers' tokens are bound to, \
         failed: {source} (may this process create secrets in {namespace}?)"
    )]
    Anchor {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

impl IdentityError {
    /// The API error behind this one, if any (to tell transient from permanent).
    pub fn api_error(&self) -> Option<&kube::Error> {
        match self {
            IdentityError::Refused { source, .. } | IdentityError::Anchor { source, .. } => {
                Some(source)
            }
            IdentityError::Empty { .. } => None,
        }
    }
}

/// What the downward API and the pod's files say about the pod kcm-rs runs
/// in (the Deployment sets `POD_NAME`, `POD_UID` and `POD_NAMESPACE`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InPod {
    pub name: Option<String>,
    pub uid: Option<String>,
    /// `POD_NAMESPACE`, else the in-cluster namespace file (read only when
    /// `KUBERNETES_SERVICE_HOST` says this is a pod).
    pub namespace: Option<String>,
}

impl InPod {
    /// From the process environment and [`NAMESPACE_FILE`].
    pub fn from_env() -> Self {
        let get = |k| std::env::var(k).ok().map(|v: String| v.trim().to_string());
        let get = |k| get(k).filter(|v| !v.is_empty());
        let in_pod = get("KUBERNETES_SERVICE_HOST").is_some();
        let file = || {
            let ns = std::fs::read_to_string(NAMESPACE_FILE).ok()?;
            Some(ns.trim().to_string()).filter(|n| !n.is_empty())
        };
        InPod {
            name: get("POD_NAME"),
            uid: get("POD_UID"),
            namespace: get("POD_NAMESPACE").or_else(|| in_pod.then(file).flatten()),
        }
    }

    /// The pod's name and UID, when both are known.
    pub fn pod(&self) -> Option<(&str, &str)> {
        Some((self.name.as_deref()?, self.uid.as_deref()?))
    }
}

/// The namespace of the controllers' ServiceAccounts: `flag` if given, else
/// the pod's namespace, else KCM's `kube-system`. Also says where it came
/// from, for the start-up log.
pub fn accounts_namespace(flag: Option<&str>, pod: &InPod) -> (String, &'static str) {
    match (flag.filter(|f| !f.is_empty()), pod.namespace.as_deref()) {
        (Some(f), _) => (f.to_string(), "flag"),
        (None, Some(ns)) => (ns.to_string(), "pod"),
        (None, None) => (KCM_NAMESPACE.to_string(), "default"),
    }
}

/// The object a token is bound to (`boundObjectRef`): the API server refuses
/// the token once that object is gone (or replaced: a UID that no longer
/// matches). `uid` empty: the API server fills in the object's current UID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoundObject {
    pub kind: &'static str,
    pub name: String,
    pub uid: Option<String>,
}

/// The name of the Secret a pod's controller tokens are bound to.
pub fn anchor_name(pod: &str) -> String {
    format!("{pod}-controller-tokens")
}

/// Creates the Secret `<pod>-controller-tokens` in `namespace`, owned by the
/// pod (`pod` = name, UID), and returns it as the object to bind the
/// controllers' tokens to. When kcm-rs restarts in the same pod the Secret
/// is already there (409): it is bound by name, its UID left to the API
/// server (this process may create Secrets, not read them). The garbage
/// collector deletes it once the pod is gone, and with it every token.
pub async fn token_anchor(
    client: &kube::Client,
    namespace: &str,
    pod: (&str, &str),
) -> Result<BoundObject, IdentityError> {
    let (pod_name, pod_uid) = pod;
    let name = anchor_name(pod_name);
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.to_string()),
            labels: Some([("app.kubernetes.io/name".into(), "kcm-rs".into())].into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: pod_name.to_string(),
                uid: pod_uid.to_string(),
                ..Default::default()
            }]),
            ..Default::default()
        },
        type_: Some(ANCHOR_TYPE.into()),
        ..Default::default()
    };
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let uid = match secrets.create(&PostParams::default(), &secret).await {
        Ok(made) => made.metadata.uid,
        Err(kube::Error::Api(s)) if s.code == 409 => None,
        Err(source) => {
            return Err(IdentityError::Anchor {
                namespace: namespace.to_string(),
                name,
                source,
            });
        }
    };
    Ok(BoundObject {
        kind: "Secret",
        name,
        uid,
    })
}

/// The current bearer token of one controller, shared with its client.
#[derive(Clone, Debug)]
pub struct TokenSource {
    namespace: Arc<str>,
    account: Arc<str>,
    header: Arc<RwLock<HeaderValue>>,
}

impl TokenSource {
    /// A source holding `token` of `namespace/account` (tests and the first
    /// fetch).
    pub fn new(namespace: &str, account: &str, token: &str) -> Result<Self, IdentityError> {
        Ok(TokenSource {
            namespace: namespace.into(),
            account: account.into(),
            header: Arc::new(RwLock::new(bearer(namespace, account, token)?)),
        })
    }

    pub fn account(&self) -> &str {
        &self.account
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The user name the token authenticates as.
    pub fn user(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.account)
    }

    fn set(&self, token: &str) -> Result<(), IdentityError> {
        *self.header.write() = bearer(&self.namespace, &self.account, token)?;
        Ok(())
    }

    fn header(&self) -> HeaderValue {
        self.header.read().clone()
    }
}

fn bearer(namespace: &str, account: &str, token: &str) -> Result<HeaderValue, IdentityError> {
    let mut v =
        HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| IdentityError::Empty {
            namespace: namespace.to_string(),
            account: account.to_string(),
        })?;
    v.set_sensitive(true);
    Ok(v)
}

/// The TokenRequest for a [`TOKEN_LIFETIME`] token bound to `bound`.
pub fn token_request(bound: Option<&BoundObject>) -> TokenRequest {
    TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: i64::try_from(TOKEN_LIFETIME.as_secs()).ok(),
            bound_object_ref: bound.map(|b| BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some(b.kind.into()),
                name: Some(b.name.clone()),
                uid: b.uid.clone(),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Asks for a token of `namespace/account`; returns it with its expiry.
async fn request_token(
    client: &kube::Client,
    namespace: &str,
    account: &str,
    bound: Option<&BoundObject>,
) -> Result<(String, Timestamp), IdentityError> {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let got = sas
        .create_subresource::<TokenRequest, TokenRequest>(
            "token",
            account,
            &PostParams::default(),
            &token_request(bound),
        )
        .await
        .map_err(|source| IdentityError::Refused {
            namespace: namespace.to_string(),
            account: account.to_string(),
            source,
        })?;
    let status = got.status.unwrap_or_default();
    match (status.token, status.expiration_timestamp) {
        (Some(token), Some(expires)) if !token.is_empty() => Ok((token, expires.0)),
        _ => Err(IdentityError::Empty {
            namespace: namespace.to_string(),
            account: account.to_string(),
        }),
    }
}

/// When to renew a token issued at `now` that expires at `expires`.
pub fn renew_after(now: Timestamp, expires: Timestamp) -> Duration {
    let life = expires.duration_since(now).as_secs_f64().max(0.0);
    Duration::try_from_secs_f64(life * RENEW_AT).unwrap_or(Duration::ZERO)
}

/// Fetches the first token of `namespace/account`, bound to `bound` (an
/// error here stops start-up), and keeps renewing it until `stop`. A failed renewal is retried with
/// back-off while the old token is still valid.
///
/// `every` replaces the renewal time (tests only: API tokens live at least
/// ten minutes, too long to watch one renew). The time left on a token is
/// read on `clock`.
pub async fn service_account_token(
    client: kube::Client,
    namespace: &str,
    account: &str,
    bound: Option<BoundObject>,
    stop: CancellationToken,
    every: Option<Duration>,
    clock: Clock,
) -> Result<TokenSource, IdentityError> {
    let (token, mut expires) = request_token(&client, namespace, account, bound.as_ref()).await?;
    let source = TokenSource::new(namespace, account, &token)?;
    let renewing = source.clone();
    let next = move |expires| every.unwrap_or_else(|| renew_after(clock.now(), expires));
    tokio::spawn(async move {
        let mut wait = next(expires);
        let mut backoff = Duration::from_secs(1);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
            let (ns, account) = (renewing.namespace(), renewing.account());
            match request_token(&client, ns, account, bound.as_ref()).await {
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
        let s = TokenSource::new("kube-system", "job-controller", "abc").expect("token");
        assert!(s.header().is_sensitive());
        assert_eq!(s.header(), "Bearer abc");
        s.set("def").expect("token");
        assert_eq!(s.header(), "Bearer def");
        assert!(format!("{:?}", s.header()).contains("Sensitive"));
        assert!(TokenSource::new("ns", "x", "bad\ntoken").is_err());
        assert_eq!(s.user(), "system:serviceaccount:kube-system:job-controller");
    }

    fn pod(ns: Option<&str>) -> InPod {
        InPod {
            name: Some("kcm-rs-7d9f-abcde".into()),
            uid: Some("0b6c".into()),
            namespace: ns.map(str::to_string),
        }
    }

    #[test]
    fn the_accounts_namespace_is_the_flag_then_the_pod_then_kube_system() {
        let ns = |flag, p: &InPod| accounts_namespace(flag, p);
        assert_eq!(ns(Some("ops"), &pod(Some("kcm"))), ("ops".into(), "flag"));
        assert_eq!(ns(None, &pod(Some("kcm"))), ("kcm".into(), "pod"));
        assert_eq!(ns(Some(""), &pod(Some("kcm"))), ("kcm".into(), "pod"));
        assert_eq!(ns(None, &pod(None)), ("kube-system".into(), "default"));
        assert_eq!(ns(None, &InPod::default()).0, KCM_NAMESPACE);
    }

    #[test]
    fn a_token_request_binds_to_the_anchor_secret_by_name_and_uid() {
        let anchor = BoundObject {
            kind: "Secret",
            name: anchor_name("kcm-rs-7d9f-abcde"),
            uid: Some("5e1f".into()),
        };
        let req = serde_json::to_value(token_request(Some(&anchor))).expect("json");
        assert_eq!(
            req["spec"],
            serde_json::json!({
                "expirationSeconds": 600,
                "boundObjectRef": {
                    "apiVersion": "v1", "kind": "Secret",
                    "name": "kcm-rs-7d9f-abcde-controller-tokens", "uid": "5e1f"
                }
            })
        );
        let unbound = serde_json::to_value(token_request(None)).expect("json");
        assert!(unbound["spec"].get("boundObjectRef").is_none());
        assert_eq!(pod(None).pod(), Some(("kcm-rs-7d9f-abcde", "0b6c")));
        assert_eq!(InPod::default().pod(), None);
    }
}
