//! Delegated authentication and authorization, as KCM's
//! (`k8s.io/apiserver` delegating authenticator and authorizer):
//!
//! * who: a client certificate verified against `--client-ca-file`
//!   (user = CN, groups = O), else a bearer token checked with a
//!   TokenReview; with neither the request is anonymous;
//! * may they: `system:masters` always; paths in
//!   `--authorization-always-allow-paths` for anyone (anonymous too); else
//!   a SubjectAccessReview for the non-resource URL with the lowercased
//!   HTTP method as verb.
//!
//! Both answers are cached for 10 s (KCM's default TTLs) in moka caches,
//! keyed by a hash of the token and of (user, uid, groups, extra, verb,
//! path); concurrent requests needing the same review share one call
//! (single-flight, as k8s.io/apiserver's cached token authenticator; a
//! caller that goes away hands the call to the next); errors are never
//! cached. A full cache admits a new answer only over one asked for less
//! often (TinyLFU), so a flood of bogus tokens cannot evict the answers
//! scrapers reuse. A TokenReview that fails denies (401), never allows.
//! Reviews are bounded (`review.rs`); when none can be made in time the
//! answer is 429. What was authorized for a scrape before (`known.rs`) is
//! reviewed in a lane of its own.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use prometheus::IntCounterVec;
use sha2::{Digest, Sha256};

use crate::known::Known;
use crate::review::{Gate, Lane};
use moka::future::Cache;
use tokio::sync::SemaphorePermit;

/// KCM's `--authentication-token-webhook-cache-ttl` and authorization
/// cache TTLs (allowed and denied alike).
pub const CACHE_TTL: Duration = Duration::from_secs(10);
/// Entries each cache holds at most. Past it, a new entry displaces an old
/// one only if it is asked for more often (moka's TinyLFU admission), so a
/// flood of one-off tokens cannot push out the answers scrapers reuse.
pub const CACHE_MAX: u64 = 4096;
/// The group that is always authorized.
pub const MASTERS: &str = "system:masters";
/// The paths whose authorization makes a token, a decision and a
/// connection *known* (`known.rs`, `conn.rs`): what a scrape needs, and
/// nothing every authenticated user may be allowed (`system:discovery`
/// and `system:public-info-viewer` grant `/version`, `/api/*`, `/healthz`
/// and more to anyone with a token).
pub const TRUST_PATHS: &[&str] = &["/metrics"];

/// Does an authorized request for `path` earn trust?
pub fn earns_trust(path: &str) -> bool {
    TRUST_PATHS.contains(&path)
}

/// The group every authenticated user is in.
pub const AUTHENTICATED: &str = "system:authenticated";

/// An authenticated caller.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct User {
    pub name: String,
    pub uid: Option<String>,
    pub groups: Vec<String>,
    /// TokenReview's `user.extra` (scopes, credential ids...), passed on to
    /// the SubjectAccessReview.
    pub extra: BTreeMap<String, Vec<String>>,
}

impl User {
    /// With `system:authenticated` added when missing.
    fn authenticated(mut self) -> Self {
        if !self.groups.iter().any(|g| g == AUTHENTICATED) {
            self.groups.push(AUTHENTICATED.into());
        }
        self
    }
}

/// Where a request comes from, for the review gate (`review.rs`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Origin {
    /// The client's address: unknown reviews are bounded per source.
    pub source: Option<IpAddr>,
    /// A request on this connection was authorized before: its reviews
    /// take the known lane (a scraper's keep-alive connection whose token
    /// was rotated).
    pub trusted: bool,
}

/// The outcome of authentication.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Authn {
    User(User),
    /// No credentials at all.
    Anonymous,
    /// Credentials that do not authenticate, or a TokenReview that failed.
    Denied(String),
    /// No review could be made in time (too many at once): 429.
    Overloaded,
}

/// The outcome of authorization.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Authz {
    Allowed,
    Denied(String),
    /// The SubjectAccessReview could not be made (KCM answers 500).
    Error(String),
    /// No review could be made in time (too many at once): 429.
    Overloaded,
}

/// `apiserver_delegated_authn_request_total{code}` and
/// `apiserver_delegated_authz_request_total{code}`, as k8s.io/apiserver
/// counts its TokenReview and SubjectAccessReview calls.
#[derive(Clone)]
pub struct Metrics {
    pub authn: IntCounterVec,
    pub authz: IntCounterVec,
    /// `kcm_rs_secure_serving_reviews_limited_total{review,bound}`: reviews
    /// not made because a bound refused them (`review.rs`).
    pub limited: IntCounterVec,
    /// `kcm_rs_secure_serving_untrusted_requests_total{outcome}`: requests
    /// that took turns (`pace.rs`), admitted or refused (429).
    pub untrusted: IntCounterVec,
    /// The secure port's connections (`conn.rs`).
    pub conns: crate::conn::ConnMetrics,
}

impl Metrics {
    pub fn register(registry: &prometheus::Registry) -> Self {
        let make = |name: &str, help: &str| {
            let c = IntCounterVec::new(prometheus::Opts::new(name, help), &["code"])
                .expect("constant metric options are valid");
            kcm_runtime::metrics::register(registry, c)
        };
        Metrics {
            authn: make(
                "apiserver_delegated_authn_request_total",
                "Number of HTTP requests partitioned by status code.",
            ),
            authz: make(
                "apiserver_delegated_authz_request_total",
                "Number of HTTP requests partitioned by status code.",
            ),
            limited: {
                let c = IntCounterVec::new(
                    prometheus::Opts::new(
                        "kcm_rs_secure_serving_reviews_limited_total",
                        "TokenReviews (review=token) and SubjectAccessReviews (review=access) \
                         the secure port did not make, answering 429, by the bound that \
                         refused them: the user's rate, the source's, or the whole server's.",
                    ),
                    &["review", "bound"],
                )
                .expect("constant metric options are valid");
                kcm_runtime::metrics::register(registry, c)
            },
            untrusted: {
                let c = IntCounterVec::new(
                    prometheus::Opts::new(
                        "kcm_rs_secure_serving_untrusted_requests_total",
                        "Requests on the secure port from clients not authorized for a scrape \
                         before, which take turns: admitted, or refused with 429 when no turn \
                         came in time.",
                    ),
                    &["outcome"],
                )
                .expect("constant metric options are valid");
                kcm_runtime::metrics::register(registry, c)
            },
            conns: crate::conn::ConnMetrics::register(registry),
        }
    }
}

fn code_of(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.code.to_string(),
        _ => "<error>".into(),
    }
}

/// The delegated authenticator and authorizer with their caches.
pub struct Delegate {
    authn_client: Option<kube::Client>,
    authz_client: Option<kube::Client>,
    always_allow: Vec<String>,
    /// TokenReview answers (a user, or why not), [`CACHE_TTL`] each;
    /// concurrent requests for one token share one review.
    tokens: Cache<String, Authn>,
    /// SubjectAccessReview answers (allowed, or why not), likewise.
    decisions: Cache<String, Authz>,
    /// Keys of tokens and decisions authorized before.
    known: Known,
    gate: Gate,
    metrics: Metrics,
}

impl Delegate {
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

/// A hash of `parts`, each length-prefixed so no two lists collide.
fn key_of<'a>(parts: impl IntoIterator<Item = &'a str>) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p.as_bytes());
    }
    format!("{:x}", h.finalize())
}

impl Delegate {
    pub fn new(
        authn_client: Option<kube::Client>,
        authz_client: Option<kube::Client>,
        always_allow: Vec<String>,
        metrics: Metrics,
    ) -> Self {
        Delegate {
            authn_client,
            authz_client,
            always_allow,
            tokens: answers(),
            decisions: answers(),
            known: Known::default(),
            gate: Gate::default(),
            metrics,
        }
    }

    /// Creates a review (TokenReview, SubjectAccessReview), counting the
    /// call by response code; a failure is logged and never cached.
    async fn review<K>(
        &self,
        client: &kube::Client,
        review: &K,
        counter: &IntCounterVec,
    ) -> Result<K, ()>
    where
        K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope, DynamicType = ()>
            + Clone
            + serde::Serialize
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::all(client.clone());
        match api.create(&PostParams::default(), review).await {
            Ok(r) => {
                counter.with_label_values(&["201"]).inc();
                Ok(r)
            }
            Err(e) => {
                counter.with_label_values(&[&code_of(&e)]).inc();
                tracing::warn!(kind = K::kind(&()).as_ref(), "review failed: {e}");
                Err(())
            }
        }
    }

    /// Paths served to anyone: exact, or a prefix when the entry ends in `*`.
    pub fn always_allowed(&self, path: &str) -> bool {
        self.always_allow.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => path.starts_with(prefix),
            None => p == path,
        })
    }

    /// Who the caller is: the verified client certificate's subject wins
    /// over a bearer token.
    pub async fn authenticate(&self, cert_user: Option<&User>, bearer: Option<&str>) -> Authn {
        self.authenticate_from(cert_user, bearer, Origin::default())
            .await
    }

    /// [`Delegate::authenticate`] for a request from `origin`.
    pub async fn authenticate_from(
        &self,
        cert_user: Option<&User>,
        bearer: Option<&str>,
        origin: Origin,
    ) -> Authn {
        if let Some(u) = cert_user {
            return Authn::User(u.clone().authenticated());
        }
        let Some(token) = bearer else {
            return Authn::Anonymous;
        };
        let Some(client) = &self.authn_client else {
            return Authn::Denied("token authentication is not configured".into());
        };
        let key = key_of([token]);
        let review = self.review_token(client, &key, token, origin);
        self.tokens
            .try_get_with_by_ref(&key, review)
            .await
            .unwrap_or_else(|uncached| Authn::clone(&uncached))
    }

    /// Would authenticating `bearer` wait for a review in the unknown lane
    /// (no cached answer, never authorized)?
    pub fn token_unknown(&self, bearer: &str) -> bool {
        let key = key_of([bearer]);
        self.authn_client.is_some() && !self.tokens.contains_key(&key) && !self.known.contains(&key)
    }

    /// Would authorizing wait for a review in the unknown lane?
    pub fn decision_unknown(&self, user: &User, verb: &str, path: &str) -> bool {
        if user.groups.iter().any(|g| g == MASTERS) || self.authz_client.is_none() {
            return false;
        }
        let key = decision_key(user, verb, path);
        !self.decisions.contains_key(&key) && !self.known.contains(&key)
    }

    /// Was this credential (a verified certificate's user, else a bearer
    /// token) authorized for a scrape before? A pure lookup: no review.
    pub fn known_credential(&self, cert_user: Option<&User>, bearer: Option<&str>) -> bool {
        match (cert_user, bearer) {
            (Some(u), _) => self.known.contains(&cert_key(u)),
            (None, Some(token)) => self.known.contains(&key_of([token])),
            (None, None) => false,
        }
    }

    /// `user` was just authorized to `verb` `path`, a path that earns
    /// trust (by `cert_user`'s certificate, else `bearer`): the credential
    /// and the decision take the known lane from now on.
    pub fn remember(
        &self,
        bearer: Option<&str>,
        cert_user: Option<&User>,
        user: &User,
        verb: &str,
        path: &str,
    ) {
        match (cert_user, bearer) {
            (Some(u), _) => self.known.admit(&cert_key(u), &user.name),
            (None, Some(token)) => self.known.admit(&key_of([token]), &user.name),
            (None, None) => {}
        }
        self.known
            .admit(&decision_key(user, verb, path), &user.name);
    }

    fn lane<'a>(&self, key: &str, origin: Origin, user: Option<&'a str>) -> Lane<'a> {
        if origin.trusted || self.known.contains(key) {
            Lane::Known
        } else {
            Lane::Unknown {
                source: origin.source,
                user,
            }
        }
    }

    /// A review slot, counting a refusal by the bound that refused it.
    async fn enter(&self, review: &'static str, lane: Lane<'_>) -> Option<SemaphorePermit<'_>> {
        match self.gate.enter(lane).await {
            Ok(p) => Some(p),
            Err(limit) => {
                self.metrics
                    .limited
                    .with_label_values(&[review, limit.label()])
                    .inc();
                None
            }
        }
    }

    /// A TokenReview's answer: `Ok` is cached, `Err` (no slot, no
    /// answer) is not, so the next request asks again.
    async fn review_token(
        &self,
        client: &kube::Client,
        key: &str,
        token: &str,
        origin: Origin,
    ) -> Result<Authn, Authn> {
        let Some(_slot) = self.enter("token", self.lane(key, origin, None)).await else {
            return Err(Authn::Overloaded);
        };
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = match self.review(client, &review, &self.metrics.authn).await {
            Ok(r) => r.status.unwrap_or_default(),
            Err(()) => return Err(Authn::Denied("token review failed".into())),
        };
        match (answer.authenticated, answer.user) {
            (Some(true), Some(u)) => {
                let user = User {
                    name: u.username.unwrap_or_default(),
                    uid: u.uid.filter(|s| !s.is_empty()),
                    groups: u.groups.unwrap_or_default(),
                    extra: u.extra.unwrap_or_default(),
                }
                .authenticated();
                // Not known yet: only an authorization makes it so.
                Ok(Authn::User(user))
            }
            _ => Ok(Authn::Denied(
                answer
                    .error
                    .unwrap_or_else(|| "invalid bearer token".into()),
            )),
        }
    }

    /// May `user` do `verb` on `path`?
    pub async fn authorize(&self, user: &User, verb: &str, path: &str) -> Authz {
        self.authorize_from(user, verb, path, Origin::default())
            .await
    }

    /// [`Delegate::authorize`] for a request from `origin`.
    pub async fn authorize_from(
        &self,
        user: &User,
        verb: &str,
        path: &str,
        origin: Origin,
    ) -> Authz {
        if user.groups.iter().any(|g| g == MASTERS) {
            return Authz::Allowed;
        }
        let Some(client) = &self.authz_client else {
            return Authz::Denied("no authorizer configured".into());
        };
        let key = decision_key(user, verb, path);
        let review = self.review_access(client, &key, user, (verb, path), origin);
        self.decisions
            .try_get_with_by_ref(&key, review)
            .await
            .unwrap_or_else(|uncached| Authz::clone(&uncached))
    }

    /// A SubjectAccessReview's answer: `Ok` is cached, `Err` is not.
    async fn review_access(
        &self,
        client: &kube::Client,
        key: &str,
        user: &User,
        (verb, path): (&str, &str),
        origin: Origin,
    ) -> Result<Authz, Authz> {
        let lane = self.lane(key, origin, Some(&user.name));
        let Some(_slot) = self.enter("access", lane).await else {
            return Err(Authz::Overloaded);
        };
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: user.uid.clone(),
                groups: Some(user.groups.clone()),
                extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_string()),
                    verb: Some(verb.to_string()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let status = match self.review(client, &review, &self.metrics.authz).await {
            Ok(r) => r.status.unwrap_or_default(),
            Err(()) => return Err(Authz::Error("authorization check failed".into())),
        };
        if status.allowed && status.denied != Some(true) {
            return Ok(Authz::Allowed);
        }
        let why = status
            .reason
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| format!("user \"{}\" cannot {verb} path \"{path}\"", user.name));
        Ok(Authz::Denied(why))
    }
}

/// A review-answer cache: [`CACHE_MAX`] entries, each for [`CACHE_TTL`].
fn answers<V: Clone + Send + Sync + 'static>() -> Cache<String, V> {
    Cache::builder()
        .max_capacity(CACHE_MAX)
        .time_to_live(CACHE_TTL)
        .build()
}

/// A certificate's user, as a known-list key.
fn cert_key(user: &User) -> String {
    let mut parts = vec!["certificate", user.name.as_str()];
    parts.extend(user.groups.iter().map(String::as_str));
    key_of(parts)
}

/// The authorization cache key: everything the SubjectAccessReview is
/// asked about.
fn decision_key(user: &User, verb: &str, path: &str) -> String {
    let mut parts: Vec<&str> = vec![&user.name, user.uid.as_deref().unwrap_or("")];
    let groups = user.groups.len().to_string();
    parts.push(&groups);
    parts.extend(user.groups.iter().map(String::as_str));
    let extras = user.extra.len().to_string();
    parts.push(&extras);
    let lens: Vec<String> = user.extra.values().map(|v| v.len().to_string()).collect();
    for ((k, v), n) in user.extra.iter().zip(&lens) {
        parts.push(k);
        parts.push(n);
        parts.extend(v.iter().map(String::as_str));
    }
    parts.push(verb);
    parts.push(path);
    key_of(parts)
}

/// The user a verified client certificate names, as Go's crypto/x509 reads
/// the subject: the LAST CommonName attribute (pkix.Name.CommonName), and
/// every Organization as a group. No CN (or an empty one): no user.
pub fn cert_user(der: &[u8]) -> Option<User> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .last()?
        .as_str()
        .ok()?
        .to_string();
    if name.is_empty() {
        return None;
    }
    let groups: Vec<String> = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect();
    Some(
        User {
            name,
            groups,
            ..Default::default()
        }
        .authenticated(),
    )
}
