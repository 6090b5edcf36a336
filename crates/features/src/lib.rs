//! Feature gates of kcm-rs, set with kube-controller-manager's
//! `--feature-gates` syntax.
//!
//! Only the gates kcm-rs actually implements are known:
//! [`Feature::JobPodFailurePolicy`] and [`Feature::PodDisruptionConditions`],
//! both enabled by default (they are GA upstream). Parsing is strict like
//! component-base's `featureGate.Set`: a name kcm-rs does not know is an
//! error (`unrecognized feature gate: X`), never silently ignored.
//!
//! ```
//! use kcm_features::{Feature, FeatureGates};
//!
//! let gates = FeatureGates::parse("JobPodFailurePolicy=false").unwrap();
//! assert!(!gates.enabled(Feature::JobPodFailurePolicy));
//! assert!(gates.enabled(Feature::PodDisruptionConditions));
//! assert_eq!(gates.to_string(), "JobPodFailurePolicy=false,PodDisruptionConditions=true");
//! ```

pub mod version;

use std::fmt;
use std::str::FromStr;

pub use version::{KubeVersion, VersionError};

/// A feature gate kcm-rs knows about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Feature {
    /// Job `spec.podFailurePolicy` (KEP-3329): failed pods are matched
    /// against the policy's rules (FailJob, FailIndex, Ignore, Count).
    JobPodFailurePolicy,
    /// The `DisruptionTarget` pod condition (KEP-3329) added before a pod is
    /// deleted by taint eviction, pod GC or preemption, and the disruption
    /// controller's clean-up of stale `DisruptionTarget` conditions.
    PodDisruptionConditions,
}

impl Feature {
    /// Every known gate, in the order [`FeatureGates`] displays them
    /// (alphabetical, as component-base lists gates).
    pub const ALL: [Feature; 2] = [
        Feature::JobPodFailurePolicy,
        Feature::PodDisruptionConditions,
    ];

    /// The gate's name as written on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Feature::JobPodFailurePolicy => "JobPodFailurePolicy",
            Feature::PodDisruptionConditions => "PodDisruptionConditions",
        }
    }

    /// Whether the gate is on when not set. Both gates are GA upstream
    /// (Kubernetes 1.31) and default to true there.
    pub const fn default_enabled(self) -> bool {
        match self {
            Feature::JobPodFailurePolicy | Feature::PodDisruptionConditions => true,
        }
    }

    /// Looks a gate up by its exact (case-sensitive) name, as component-base does.
    pub fn from_name(name: &str) -> Option<Feature> {
        Feature::ALL.into_iter().find(|f| f.name() == name)
    }

    const fn index(self) -> usize {
        match self {
            Feature::JobPodFailurePolicy => 0,
            Feature::PodDisruptionConditions => 1,
        }
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a `--feature-gates` value was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeatureGateError {
    /// The name is not a gate kcm-rs implements.
    #[error("unrecognized feature gate: {name} (known feature gates: {known})")]
    Unrecognized {
        /// The name as given (trimmed).
        name: String,
        /// The known gates, comma-separated.
        known: String,
    },
    /// A `Name` token without `=value`.
    #[error("missing bool value for {name}")]
    MissingValue {
        /// The name as given (trimmed).
        name: String,
    },
    /// A `=value` token without a name.
    #[error("missing feature gate name in {token:?}")]
    MissingName {
        /// The whole token as given.
        token: String,
    },
    /// The value is not a Go `strconv.ParseBool` boolean.
    #[error(
        "invalid value of {name}={value}, err: strconv.ParseBool: parsing {value:?}: invalid syntax \
         (expected one of 1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False)"
    )]
    InvalidValue {
        /// The gate name (trimmed).
        name: String,
        /// The value as given (trimmed).
        value: String,
    },
}

/// The state of every known gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeatureGates {
    enabled: [bool; Feature::ALL.len()],
}

impl Default for FeatureGates {
    /// Every gate at its default ([`Feature::default_enabled`]).
    fn default() -> Self {
        let mut enabled = [false; Feature::ALL.len()];
        for f in Feature::ALL {
            enabled[f.index()] = f.default_enabled();
        }
        FeatureGates { enabled }
    }
}

impl FeatureGates {
    /// Parses a `--feature-gates` value (`A=true,B=false`) on top of the
    /// defaults. Empty tokens are skipped and whitespace around names and
    /// values is ignored; a gate set twice takes the last value. The whole
    /// value is rejected on the first bad token.
    pub fn parse(value: &str) -> Result<FeatureGates, FeatureGateError> {
        let mut gates = FeatureGates::default();
        gates.apply(value)?;
        Ok(gates)
    }

    /// Applies a `--feature-gates` value on top of the current state. On
    /// error `self` is left unchanged.
    pub fn apply(&mut self, value: &str) -> Result<(), FeatureGateError> {
        let mut next = *self;
        for token in value.split(',') {
            if token.trim().is_empty() {
                continue;
            }
            let Some((name, raw)) = token.split_once('=') else {
                return Err(FeatureGateError::MissingValue {
                    name: token.trim().to_owned(),
                });
            };
            let name = name.trim();
            if name.is_empty() {
                return Err(FeatureGateError::MissingName {
                    token: token.to_owned(),
                });
            }
            let Some(feature) = Feature::from_name(name) else {
                return Err(FeatureGateError::Unrecognized {
                    name: name.to_owned(),
                    known: known_names(),
                });
            };
            let raw = raw.trim();
            let Some(on) = parse_go_bool(raw) else {
                return Err(FeatureGateError::InvalidValue {
                    name: name.to_owned(),
                    value: raw.to_owned(),
                });
            };
            next.set(feature, on);
        }
        *self = next;
        Ok(())
    }

    /// Whether `feature` is on.
    pub fn enabled(&self, feature: Feature) -> bool {
        self.enabled[feature.index()]
    }

    /// Turns `feature` on or off (for tests and programmatic set-up).
    pub fn set(&mut self, feature: Feature, enabled: bool) {
        self.enabled[feature.index()] = enabled;
    }

    /// Builder form of [`FeatureGates::set`].
    #[must_use]
    pub fn with(mut self, feature: Feature, enabled: bool) -> Self {
        self.set(feature, enabled);
        self
    }
}

impl FromStr for FeatureGates {
    type Err = FeatureGateError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FeatureGates::parse(s)
    }
}

impl fmt::Display for FeatureGates {
    /// Every gate as `Name=bool`, comma-separated, in [`Feature::ALL`] order.
    /// The output parses back to the same gates.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, feature) in Feature::ALL.into_iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}={}", feature.name(), self.enabled(feature))?;
        }
        Ok(())
    }
}

/// Go's `strconv.ParseBool`: exactly these twelve spellings, nothing else
/// (no "yes", no "on", no mixed case like "tRUE").
fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

fn known_names() -> String {
    Feature::ALL.map(Feature::name).join(", ")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_all_on() {
        let g = FeatureGates::default();
        assert!(g.enabled(Feature::JobPodFailurePolicy));
        assert!(g.enabled(Feature::PodDisruptionConditions));
        assert_eq!(FeatureGates::parse("").unwrap(), g);
    }

    #[test]
    fn parses_pairs_and_keeps_unset_defaults() {
        let g = FeatureGates::parse("JobPodFailurePolicy=false").unwrap();
        assert!(!g.enabled(Feature::JobPodFailurePolicy));
        assert!(g.enabled(Feature::PodDisruptionConditions));

        let g =
            FeatureGates::parse("JobPodFailurePolicy=false,PodDisruptionConditions=false").unwrap();
        assert!(!g.enabled(Feature::JobPodFailurePolicy));
        assert!(!g.enabled(Feature::PodDisruptionConditions));
    }

    #[test]
    fn tolerates_whitespace_and_empty_tokens() {
        let g =
            FeatureGates::parse("  JobPodFailurePolicy = false , ,PodDisruptionConditions=\tF ,")
                .unwrap();
        assert!(!g.enabled(Feature::JobPodFailurePolicy));
        assert!(!g.enabled(Feature::PodDisruptionConditions));
    }

    #[test]
    fn last_value_wins() {
        let g = FeatureGates::parse("JobPodFailurePolicy=false,JobPodFailurePolicy=true").unwrap();
        assert!(g.enabled(Feature::JobPodFailurePolicy));
    }

    #[test]
    fn accepts_every_go_bool_spelling() {
        for v in ["1", "t", "T", "TRUE", "true", "True"] {
            let g = FeatureGates::parse(&format!(
                "PodDisruptionConditions=false,PodDisruptionConditions={v}"
            ));
            assert!(g.unwrap().enabled(Feature::PodDisruptionConditions), "{v}");
        }
        for v in ["0", "f", "F", "FALSE", "false", "False"] {
            let g = FeatureGates::parse(&format!("PodDisruptionConditions={v}"));
            assert!(!g.unwrap().enabled(Feature::PodDisruptionConditions), "{v}");
        }
    }

    #[test]
    fn rejects_other_bool_spellings() {
        for v in ["yes", "on", "tRUE", "2", "", "truee", "-1"] {
            let err = FeatureGates::parse(&format!("JobPodFailurePolicy={v}")).unwrap_err();
            assert_eq!(
                err,
                FeatureGateError::InvalidValue {
                    name: "JobPodFailurePolicy".into(),
                    value: v.into()
                },
                "{v}"
            );
            assert!(err.to_string().contains("JobPodFailurePolicy="), "{err}");
        }
    }

    #[test]
    fn unknown_gate_is_an_error_naming_it_and_the_known_ones() {
        let err = FeatureGates::parse("JobPodFailurePolicy=true,JobBackoffLimitPerIndex=true")
            .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("unrecognized feature gate: JobBackoffLimitPerIndex"),
            "{msg}"
        );
        assert!(msg.contains("JobPodFailurePolicy"), "{msg}");
        assert!(msg.contains("PodDisruptionConditions"), "{msg}");
    }

    #[test]
    fn names_are_case_sensitive() {
        let err = FeatureGates::parse("jobpodfailurepolicy=true").unwrap_err();
        assert!(
            matches!(err, FeatureGateError::Unrecognized { ref name, .. } if name == "jobpodfailurepolicy")
        );
    }

    #[test]
    fn malformed_pairs_are_clear_errors() {
        assert_eq!(
            FeatureGates::parse("JobPodFailurePolicy").unwrap_err(),
            FeatureGateError::MissingValue {
                name: "JobPodFailurePolicy".into()
            }
        );
        assert_eq!(
            FeatureGates::parse("JobPodFailurePolicy")
                .unwrap_err()
                .to_string(),
            "missing bool value for JobPodFailurePolicy"
        );
        assert!(matches!(
            FeatureGates::parse(" =true").unwrap_err(),
            FeatureGateError::MissingName { .. }
        ));
        // The value keeps everything after the first '=', so "a=b=c" is a bad bool.
        assert!(matches!(
            FeatureGates::parse("JobPodFailurePolicy=true=false").unwrap_err(),
            FeatureGateError::InvalidValue { .. }
        ));
    }

    #[test]
    fn apply_is_all_or_nothing() {
        let mut g = FeatureGates::default();
        assert!(g.apply("JobPodFailurePolicy=false,Nope=true").is_err());
        assert_eq!(g, FeatureGates::default());
        g.apply("JobPodFailurePolicy=false").unwrap();
        assert!(!g.enabled(Feature::JobPodFailurePolicy));
    }

    #[test]
    fn display_lists_all_gates_and_round_trips() {
        assert_eq!(
            FeatureGates::default().to_string(),
            "JobPodFailurePolicy=true,PodDisruptionConditions=true"
        );
        let g = FeatureGates::default().with(Feature::PodDisruptionConditions, false);
        assert_eq!(
            g.to_string(),
            "JobPodFailurePolicy=true,PodDisruptionConditions=false"
        );
        assert_eq!(g.to_string().parse::<FeatureGates>().unwrap(), g);
    }

    #[test]
    fn feature_names_round_trip() {
        for f in Feature::ALL {
            assert_eq!(Feature::from_name(f.name()), Some(f));
            assert_eq!(f.to_string(), f.name());
        }
        assert_eq!(Feature::from_name("Bogus"), None);
    }
}
