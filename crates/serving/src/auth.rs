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
//! Both answers are cached for 10 s (KCM's default TTLs), keyed by a hash
//! of the token and by (user, groups, verb, path); errors are never
//! cached. A TokenReview that fails denies (401), never allows.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use parking_lot::Mutex;
use prometheus::IntCounterVec;
use sha2::{Digest, Sha256};

/// KCM's `--authentication-token-webhook-cache-ttl` and authorization
/// cache TTLs (allowed and denied alike).
pub const CACHE_TTL: Duration = Duration::from_secs(10);
/// Entries a cache holds at most; a full cache drops expired entries, then
/// everything (a flood of distinct tokens cannot grow memory).
const CACHE_MAX: usize = 4096;
/// The group that is always authorized.
pub const MASTERS: &str = "system:masters";

/// An authenticated caller.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct User {
    pub name: String,
    pub uid: Option<String>,
    pub groups: Vec<String>,
}

/// The outcome of authentication.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Authn {
    User(User),
    /// No credentials at all.
    Anonymous,
    /// Credentials that do not authenticate, or a TokenReview that failed.
    Denied(String),
}

/// The outcome of authorization.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Authz {
    Allowed,
    Denied(String),
    /// The SubjectAccessReview could not be made (KCM answers 500).
    Error(String),
}

struct Ttl<V> {
    entries: Mutex<HashMap<String, (Instant, V)>>,
}

impl<V: Clone> Ttl<V> {
    fn new() -> Self {
        Ttl {
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn get(&self, key: &str) -> Option<V> {
        let e = self.entries.lock();
        e.get(key)
            .filter(|(at, _)| at.elapsed() < CACHE_TTL)
            .map(|(_, v)| v.clone())
    }

    fn put(&self, key: String, v: V) {
        let mut e = self.entries.lock();
        if e.len() >= CACHE_MAX {
            e.retain(|_, (at, _)| at.elapsed() < CACHE_TTL);
            if e.len() >= CACHE_MAX {
                e.clear();
            }
        }
        e.insert(key, (Instant::now(), v));
    }
}

/// `apiserver_delegated_authn_request_total{code}` and
/// `apiserver_delegated_authz_request_total{code}`, as k8s.io/apiserver
/// counts its TokenReview and SubjectAccessReview calls.
#[derive(Clone)]
pub struct Metrics {
    pub authn: IntCounterVec,
    pub authz: IntCounterVec,
}

impl Metrics {
    pub fn register(registry: &prometheus::Registry) -> Self {
        let make = |name: &str, help: &str| {
            let c = IntCounterVec::new(prometheus::Opts::new(name, help), &["code"])
                .expect("constant metric options are valid");
            // A second server in one process (tests) shares the first's.
            let _ = registry.register(Box::new(c.clone()));
            c
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
    tokens: Ttl<Result<User, String>>,
    decisions: Ttl<Result<(), String>>,
    metrics: Metrics,
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
            tokens: Ttl::new(),
            decisions: Ttl::new(),
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
        if let Some(u) = cert_user {
            return Authn::User(u.clone());
        }
        let Some(token) = bearer else {
            return Authn::Anonymous;
        };
        let Some(client) = &self.authn_client else {
            return Authn::Denied("token authentication is not configured".into());
        };
        let key = format!("{:x}", Sha256::digest(token.as_bytes()));
        if let Some(hit) = self.tokens.get(&key) {
            return hit.map_or_else(Authn::Denied, Authn::User);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = match self.review(client, &review, &self.metrics.authn).await {
            Ok(r) => r.status.unwrap_or_default(),
            // Not cached: the next request asks again.
            Err(()) => return Authn::Denied("token review failed".into()),
        };
        let result = match (answer.authenticated, answer.user) {
            (Some(true), Some(u)) => Ok(User {
                name: u.username.unwrap_or_default(),
                uid: u.uid,
                groups: u.groups.unwrap_or_default(),
            }),
            _ => Err(answer
                .error
                .unwrap_or_else(|| "invalid bearer token".into())),
        };
        self.tokens.put(key, result.clone());
        result.map_or_else(Authn::Denied, Authn::User)
    }

    /// May `user` do `verb` on `path`?
    pub async fn authorize(&self, user: &User, verb: &str, path: &str) -> Authz {
        if user.groups.iter().any(|g| g == MASTERS) {
            return Authz::Allowed;
        }
        let Some(client) = &self.authz_client else {
            return Authz::Denied("no authorizer configured".into());
        };
        let key = format!(
            "{}\u{0}{}\u{0}{}\u{0}{verb}\u{0}{path}",
            user.name,
            user.uid.as_deref().unwrap_or(""),
            user.groups.join("\u{1}")
        );
        if let Some(hit) = self.decisions.get(&key) {
            return hit.map_or_else(Authz::Denied, |()| Authz::Allowed);
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: user.uid.clone(),
                groups: Some(user.groups.clone()),
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
            Err(()) => return Authz::Error("authorization check failed".into()),
        };
        let result = if status.allowed && status.denied != Some(true) {
            Ok(())
        } else {
            Err(status
                .reason
                .filter(|r| !r.is_empty())
                .unwrap_or_else(|| format!("user \"{}\" cannot {verb} path \"{path}\"", user.name)))
        };
        self.decisions.put(key, result.clone());
        result.map_or_else(Authz::Denied, |()| Authz::Allowed)
    }
}

/// The user a verified client certificate names: CN, and O as groups.
pub fn cert_user(der: &[u8]) -> Option<User> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_string();
    if name.is_empty() {
        return None;
    }
    let mut groups: Vec<String> = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect();
    // As the x509 authenticator's union adds it.
    groups.push("system:authenticated".into());
    Some(User {
        name,
        uid: None,
        groups,
    })
}
