//! `--feature-gates` as kube-controller-manager of each minor takes it:
//! syntax first ([`FeatureGates::parse`]), then, once the version is known,
//! the checks of component-base's `featureGate.Set` against that minor's
//! gate table at the emulation version ([`FeatureGates::resolve_at`]).

use std::collections::BTreeMap;
use std::fmt;

use crate::table::{Stage, Table};
use crate::{Emulation, Feature, KubeVersion, Support};

/// Why a `--feature-gates` value was rejected. The texts are
/// component-base's where upstream has the same check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeatureGateError {
    #[error("unrecognized feature gate: {name}")]
    Unrecognized { name: String },
    #[error("missing bool value for {name}")]
    MissingValue { name: String },
    #[error("missing feature gate name in {token:?}")]
    MissingName { token: String },
    #[error(
        "invalid value of {name}={value}, err: strconv.ParseBool: parsing {value:?}: invalid syntax"
    )]
    InvalidValue { name: String, value: String },
    #[error("cannot set feature gate {name} to {value}, feature is locked to {locked_to}")]
    Locked {
        name: String,
        value: bool,
        locked_to: bool,
    },
    /// A gate the binary has that is not yet available at the emulated
    /// version (1.35+ also print the min-compatibility version).
    #[error(
        "cannot set feature gate {name} to {value}, feature is PreAlpha at emulated version 1.{emulated}{}",
        .min_compat.map(|m| format!(", min compatibility version 1.{m}")).unwrap_or_default()
    )]
    PreAlpha {
        name: String,
        value: bool,
        emulated: u32,
        min_compat: Option<u32>,
    },
    #[error("{name} is enabled, but depends on features that are disabled: [{}]", .deps.join(" "))]
    Dependency { name: String, deps: Vec<String> },
    #[error(
        "kcm-rs implements {name} only as {default}, not {value} (a gate of kube-controller-manager \
         {version} that kcm-rs reads){}", .why.map(|w| format!(": {w}")).unwrap_or_default()
    )]
    Unsupported {
        name: String,
        value: bool,
        default: bool,
        version: KubeVersion,
        /// Why, when the gate is implemented on another minor.
        why: Option<&'static str>,
    },
    #[error("component not registered: {0}")]
    Component(String),
    #[error(
        "set kube feature gates with default empty prefix or kube: prefix consistently, do not mix use"
    )]
    MixedPrefix,
    #[error("[{}]", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))]
    Several(Vec<FeatureGateError>),
}

impl FeatureGateError {
    fn join(mut errs: Vec<FeatureGateError>) -> Result<(), FeatureGateError> {
        match errs.len() {
            0 => Ok(()),
            1 => Err(errs.remove(0)),
            _ => Err(FeatureGateError::Several(errs)),
        }
    }
}

/// The gates of one KCM minor, at its emulation version, with what
/// `--feature-gates` set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeatureGates {
    emulation: Emulation,
    /// An emulated minor asked for before the binary was known
    /// ([`FeatureGates::emulating`]); [`FeatureGates::at_version`] applies it.
    requested: Option<u32>,
    /// Explicit settings by name (last one wins).
    set: BTreeMap<String, bool>,
}

impl Default for FeatureGates {
    /// The defaults of the oldest supported minor.
    fn default() -> Self {
        FeatureGates::defaults(KubeVersion::OLDEST)
    }
}

/// Go's `strconv.ParseBool`: exactly these twelve spellings.
fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

impl FeatureGates {
    /// Every gate of `version` at its default.
    pub fn defaults(version: KubeVersion) -> Self {
        FeatureGates::defaults_at(Emulation::of(version))
    }

    /// Every gate of a binary at an emulation version at its default.
    pub fn defaults_at(emulation: Emulation) -> Self {
        FeatureGates {
            emulation,
            requested: None,
            set: BTreeMap::new(),
        }
    }

    /// The syntax of a `--feature-gates` value (`A=true,kube:B=false`):
    /// names are checked by [`FeatureGates::resolve`] once the version is
    /// known. Empty items are skipped; a name set twice takes the last value.
    pub fn parse(value: &str) -> Result<FeatureGates, FeatureGateError> {
        let mut gates = FeatureGates::default();
        gates.apply(value)?;
        Ok(gates)
    }

    /// [`FeatureGates::parse`] and [`FeatureGates::resolve`] in one.
    pub fn parse_for(version: KubeVersion, value: &str) -> Result<FeatureGates, FeatureGateError> {
        FeatureGates::parse(value)?.resolve(version)
    }

    /// [`FeatureGates::parse`] and [`FeatureGates::resolve_at`] in one.
    pub fn parse_at(emulation: Emulation, value: &str) -> Result<FeatureGates, FeatureGateError> {
        FeatureGates::parse(value)?.resolve_at(emulation)
    }

    /// Adds a `--feature-gates` value (the flag may repeat); on error `self`
    /// is unchanged.
    pub fn apply(&mut self, value: &str) -> Result<(), FeatureGateError> {
        let mut next = self.set.clone();
        let (mut plain, mut prefixed) = (false, false);
        for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let pair = match item.split_once(':') {
                Some((component, rest)) => {
                    if component.trim() != "kube" {
                        return Err(FeatureGateError::Component(component.trim().into()));
                    }
                    prefixed = true;
                    rest.trim()
                }
                None => {
                    plain = true;
                    item
                }
            };
            let Some((name, raw)) = pair.split_once('=') else {
                return Err(FeatureGateError::MissingValue { name: pair.into() });
            };
            let (name, raw) = (name.trim(), raw.trim());
            if name.is_empty() {
                return Err(FeatureGateError::MissingName { token: item.into() });
            }
            let Some(on) = parse_go_bool(raw) else {
                return Err(FeatureGateError::InvalidValue {
                    name: name.into(),
                    value: raw.into(),
                });
            };
            next.insert(name.to_string(), on);
        }
        if plain && prefixed {
            return Err(FeatureGateError::MixedPrefix);
        }
        self.set = next;
        Ok(())
    }

    /// [`FeatureGates::resolve_at`] of `version` not emulating.
    pub fn resolve(self, version: KubeVersion) -> Result<FeatureGates, FeatureGateError> {
        self.resolve_at(Emulation::of(version))
    }

    /// The checks of KCM's `featureGate.Set` for its binary at the
    /// emulation version: every name the binary registers (or one of
    /// kcm-rs's own), none PRE-ALPHA at the emulation version, locked gates
    /// only at their value there, (1.35+) every enabled gate's dependencies
    /// enabled; and kcm-rs's own rule: a gate its controllers read is
    /// refused at a value kcm-rs does not implement.
    pub fn resolve_at(mut self, emulation: Emulation) -> Result<FeatureGates, FeatureGateError> {
        self.emulation = emulation;
        let version = emulation.binary();
        let table = Table::at(emulation);
        let mut errs = Vec::new();
        for (name, &value) in &self.set {
            let feature = Feature::from_name(name);
            if feature.is_some_and(Feature::is_own) {
                continue;
            }
            if !table.is_known(name) {
                errs.push(FeatureGateError::Unrecognized { name: name.clone() });
                // Upstream stops at the first unknown name.
                return FeatureGateError::join(errs).map(|()| self);
            }
            let Some(spec) = table.get(name) else {
                errs.push(FeatureGateError::PreAlpha {
                    name: name.clone(),
                    value,
                    emulated: emulation.minor(),
                    min_compat: version.at_least(35).then(|| emulation.min_compatibility()),
                });
                continue;
            };
            if spec.locked && value != spec.default {
                errs.push(FeatureGateError::Locked {
                    name: name.clone(),
                    value,
                    locked_to: spec.default,
                });
                continue;
            }
            if let Some(f) = feature
                && f.support(version) == Support::DefaultOnly
                && value != f.default_at(version)
            {
                errs.push(FeatureGateError::Unsupported {
                    name: name.clone(),
                    value,
                    default: f.default_at(version),
                    version,
                    why: f.unsupported_why(version),
                });
            }
        }
        FeatureGateError::join(errs)?;
        let mut errs = Vec::new();
        for spec in table.gates() {
            if !self.upstream_enabled(spec.name) {
                continue;
            }
            let off: Vec<String> = table
                .deps(spec.name)
                .iter()
                .filter(|d| !self.upstream_enabled(d))
                .map(|d| d.to_string())
                .collect();
            if !off.is_empty() {
                errs.push(FeatureGateError::Dependency {
                    name: spec.name.into(),
                    deps: off,
                });
            }
        }
        FeatureGateError::join(errs)?;
        Ok(self)
    }

    /// The same settings read as another minor's, unchecked (tests that
    /// follow the control plane's version); an emulated minor asked for
    /// with [`FeatureGates::emulating`] applies when that binary can
    /// emulate it.
    #[must_use]
    pub fn at_version(mut self, version: KubeVersion) -> Self {
        let minor = self.requested.unwrap_or(version.minor());
        self.emulation = Emulation::new(version, minor).unwrap_or(Emulation::of(version));
        self
    }

    /// Asks for `--emulated-version=1.<minor>` (tests): applied now if the
    /// current binary can emulate it, and by [`FeatureGates::at_version`].
    #[must_use]
    pub fn emulating(mut self, minor: u32) -> Self {
        self.requested = Some(minor);
        if let Ok(e) = Emulation::new(self.emulation.binary(), minor) {
            self.emulation = e;
        }
        self
    }

    /// The binary minor (the KCM kcm-rs behaves as).
    pub fn version(&self) -> KubeVersion {
        self.emulation.binary()
    }

    pub fn emulation(&self) -> Emulation {
        self.emulation
    }

    /// Gates kcm-rs reads whose upstream default at the emulation version
    /// is not what kcm-rs implements (each [`Support::DefaultOnly`] gate
    /// runs as the binary's default): (gate, kcm-rs's value).
    pub fn emulation_deviations(&self) -> Vec<(Feature, bool)> {
        Feature::ALL
            .into_iter()
            .filter(|f| {
                f.support(self.version()) == Support::DefaultOnly
                    && !self.set.contains_key(f.name())
            })
            .filter(|f| f.default_in(self.emulation) != self.enabled(*f))
            .map(|f| (f, self.enabled(f)))
            .collect()
    }

    /// `AllAlpha`/`AllBeta`'s value for a gate of `stage`, when set.
    fn all_of(&self, stage: Stage) -> Option<bool> {
        match stage {
            Stage::Alpha => self.set.get("AllAlpha").copied(),
            Stage::Beta => self.set.get("AllBeta").copied(),
            _ => None,
        }
    }

    /// A gate's value as upstream KCM of this minor would have it.
    fn upstream_enabled(&self, name: &str) -> bool {
        if let Some(v) = self.set.get(name) {
            return *v;
        }
        let Some(spec) = Table::at(self.emulation).get(name) else {
            return false;
        };
        self.all_of(spec.stage).unwrap_or(spec.default)
    }

    /// Whether `feature` is on. `AllAlpha`/`AllBeta` reach only gates kcm-rs
    /// implements both ways; the others stay at the binary's default, which
    /// is all kcm-rs implements of them, under emulation too.
    pub fn enabled(&self, feature: Feature) -> bool {
        if let Some(v) = self.set.get(feature.name()) {
            return *v;
        }
        if feature.support(self.version()) == Support::DefaultOnly {
            return feature.default_at(self.version());
        }
        if let Some(spec) = Table::at(self.emulation).get(feature.name())
            && let Some(all) = self.all_of(spec.stage)
        {
            return all;
        }
        feature.default_in(self.emulation)
    }

    /// Names set explicitly that no kcm-rs controller reads (KCM accepts
    /// them; kcm-rs accepts and ignores them).
    pub fn ignored(&self) -> Vec<&str> {
        self.set
            .keys()
            .map(String::as_str)
            .filter(|n| Feature::from_name(n).is_none() && !matches!(*n, "AllAlpha" | "AllBeta"))
            .collect()
    }

    /// Turns `feature` on or off (tests and programmatic set-up).
    pub fn set(&mut self, feature: Feature, enabled: bool) {
        self.set.insert(feature.name().to_string(), enabled);
    }

    /// Builder form of [`FeatureGates::set`].
    #[must_use]
    pub fn with(mut self, feature: Feature, enabled: bool) -> Self {
        self.set(feature, enabled);
        self
    }
}

impl std::str::FromStr for FeatureGates {
    type Err = FeatureGateError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FeatureGates::parse(s)
    }
}

impl fmt::Display for FeatureGates {
    /// Every gate kcm-rs reads that exists at this minor, as `Name=bool`
    /// in name order; parses back to the same values.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for feature in Feature::ALL {
            if !feature.exists_in(self.emulation) {
                continue;
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            write!(f, "{}={}", feature.name(), self.enabled(feature))?;
        }
        Ok(())
    }
}
