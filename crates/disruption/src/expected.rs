//! Expected and desired pod counts of a PDB (`getExpectedPodCount`,
//! `getExpectedScale`): integer `minAvailable` counts the selected pods;
//! `maxUnavailable` and percentage `minAvailable` sum the scale of the
//! pods' distinct controllers. Lookups first ([`Scales::fetch`] through
//! [`Finder`]s: caches and scale subresource GETs), then the arithmetic,
//! pure over the fetched [`Scales`].

use std::collections::HashMap;
use std::future::Future;

use k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kcm_pod::CachedPod;

/// Why the expected count could not be computed; the text is what upstream
/// puts in the event and the `SyncFailed` condition message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExpectedError {
    #[error("invalid value for IntOrString: {0}")]
    IntOrPercent(String),
    #[error("found no controllers for pod {0:?}")]
    NoController(String),
    #[error("unexpected GroupVersion string: {0}")]
    GroupVersion(String),
    /// A lookup failed (RESTMapping, scale GET, discovery); already worded.
    #[error("{0}")]
    Lookup(String),
}

/// A controller that claimed a pod, keyed by its UID, with its desired
/// replica count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerScale {
    pub uid: String,
    pub replicas: i32,
}

/// Finds the scale of a pod's controller: `Ok(None)` when no finder claims
/// it (unknown kind, not found, UID mismatch).
pub trait Finder {
    fn find(
        &self,
        owner: &OwnerReference,
        namespace: &str,
    ) -> impl Future<Output = Result<Option<ControllerScale>, ExpectedError>> + Send;
}

/// The outcome of [`expected_pod_count`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expected {
    pub expected_count: i32,
    pub desired_healthy: i32,
    /// Names of selected pods without a controller (only looked for when
    /// the scale is needed).
    pub unmanaged: Vec<String>,
}

/// `intstr.GetScaledValueFromIntOrPercent(v, total, roundUp=true)`.
pub fn scaled_value(v: &IntOrString, total: i32) -> Result<i32, ExpectedError> {
    match v {
        IntOrString::Int(i) => Ok(*i),
        IntOrString::String(s) => {
            let Some(num) = s.strip_suffix('%') else {
                return Err(ExpectedError::IntOrPercent(
                    "invalid type: string is not a percentage".into(),
                ));
            };
            let p: i64 = parse_atoi(num).ok_or_else(|| {
                ExpectedError::IntOrPercent(format!(
                    "invalid value {s:?}: strconv.Atoi: parsing {num:?}: invalid syntax"
                ))
            })?;
            // Go computes in float64 and ceils (round up) before int().
            let v = (p as f64 * f64::from(total) / 100.0).ceil();
            Ok(v.clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i32)
        }
    }
}

/// `strconv.Atoi`: optional sign and decimal digits only.
fn parse_atoi(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Whether the PDB's arithmetic needs its pods' controllers' scale:
/// `maxUnavailable`, or a percentage `minAvailable`.
pub fn needs_scale(spec: &PodDisruptionBudgetSpec) -> bool {
    spec.max_unavailable.is_some() || matches!(spec.min_available, Some(IntOrString::String(_)))
}

/// The scales of the pods' controllers, fetched before the arithmetic:
/// keyed by the pod's controllerRef UID; `None` when no finder claims the
/// owner. Fetching stops at the first owner that fails or that nobody
/// claims, in pod order, as upstream's loop returns there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scales {
    found: HashMap<String, Option<ControllerScale>>,
    failed: Option<(String, ExpectedError)>,
}

impl Scales {
    /// Looks up each distinct controller of `pods` (the I/O half).
    pub async fn fetch<F: Finder>(pods: &[&CachedPod], finder: &F) -> Scales {
        let mut out = Scales::default();
        for pod in pods {
            let Some(owner) = pod.controller() else {
                continue;
            };
            if out.found.contains_key(&*owner.uid) {
                continue;
            }
            match finder
                .find(&owner.to_owner_reference(), pod.namespace())
                .await
            {
                Ok(found) => {
                    let stop = found.is_none();
                    out.found.insert(owner.uid.to_string(), found);
                    if stop {
                        break;
                    }
                }
                Err(e) => {
                    out.failed = Some((owner.uid.to_string(), e));
                    break;
                }
            }
        }
        out
    }

    /// Scales given directly (tests, tools).
    pub fn from_found(found: impl IntoIterator<Item = (String, Option<ControllerScale>)>) -> Self {
        Scales {
            found: found.into_iter().collect(),
            failed: None,
        }
    }
}

/// Sum of the distinct controllers' scale over `pods`, plus the names of
/// pods without a controller; the first owner that failed or that nobody
/// claims aborts (pure: the lookups were done by [`Scales::fetch`]).
pub fn expected_scale(
    pods: &[&CachedPod],
    scales: &Scales,
) -> Result<(i32, Vec<String>), ExpectedError> {
    let mut sums: HashMap<&str, i32> = HashMap::new();
    let mut unmanaged = Vec::new();
    for pod in pods {
        let name = pod.name().to_string();
        let Some(owner) = pod.controller() else {
            unmanaged.push(name);
            continue;
        };
        if let Some((uid, e)) = &scales.failed
            && **uid == *owner.uid
        {
            return Err(e.clone());
        }
        match scales.found.get(&*owner.uid) {
            // Keyed by the UID the finder reports: a Deployment's, for pods
            // of its ReplicaSets, so sibling ReplicaSets count it once.
            Some(Some(s)) => {
                sums.insert(&s.uid, s.replicas);
            }
            // Not claimed, or never looked up because fetching stopped at
            // an earlier failure (which returned above).
            Some(None) | None => return Err(ExpectedError::NoController(name)),
        }
    }
    let total = sums.values().fold(0i32, |a, b| a.wrapping_add(*b));
    Ok((total, unmanaged))
}

/// `getExpectedPodCount`, over scales fetched beforehand (see [`needs_scale`]).
pub fn expected_pod_count(
    spec: &PodDisruptionBudgetSpec,
    pods: &[&CachedPod],
    scales: &Scales,
) -> Result<Expected, ExpectedError> {
    if let Some(max_unavailable) = &spec.max_unavailable {
        let (expected_count, unmanaged) = expected_scale(pods, scales)?;
        let max = scaled_value(max_unavailable, expected_count)?;
        return Ok(Expected {
            expected_count,
            desired_healthy: expected_count.saturating_sub(max).max(0),
            unmanaged,
        });
    }
    match &spec.min_available {
        Some(IntOrString::Int(min)) => Ok(Expected {
            expected_count: i32::try_from(pods.len()).unwrap_or(i32::MAX),
            desired_healthy: *min,
            unmanaged: Vec::new(),
        }),
        Some(min @ IntOrString::String(_)) => {
            let (expected_count, unmanaged) = expected_scale(pods, scales)?;
            Ok(Expected {
                expected_count,
                desired_healthy: scaled_value(min, expected_count)?,
                unmanaged,
            })
        }
        None => Ok(Expected::default()),
    }
}

/// `schema.ParseGroupVersion`: "" and "/" are the empty version, "v1" has
/// the empty group, "g/v" splits, more slashes are an error.
pub fn parse_group_version(api_version: &str) -> Result<(&str, &str), ExpectedError> {
    if api_version.is_empty() || api_version == "/" {
        return Ok(("", ""));
    }
    match api_version.matches('/').count() {
        0 => Ok(("", api_version)),
        1 => Ok(api_version.split_once('/').unwrap_or(("", api_version))),
        _ => Err(ExpectedError::GroupVersion(api_version.to_string())),
    }
}

#[cfg(test)]
mod tests;
