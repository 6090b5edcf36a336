//! The Kubernetes minor kcm-rs behaves as ([`KubeVersion`], the KCM
//! "binary": the API server's own minor, read at start) and the minor its
//! feature gates are evaluated at ([`Emulation`]: `--emulated-version`, as
//! old as that KCM's floor). kcm-rs reproduces the KCM of every minor from
//! [`KubeVersion::OLDEST`] to [`KubeVersion::NEWEST`]; emulation can go
//! older (KCM 1.34 emulates 1.31 to 1.34).

use std::fmt;

/// A supported Kubernetes minor (major is always 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KubeVersion {
    minor: u32,
}

/// Why a version was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    #[error("cannot read a Kubernetes version from {0:?}")]
    Unparsable(String),
    #[error(
        "Kubernetes {0} is not supported: kcm-rs behaves as kube-controller-manager {oldest} to {newest}",
        oldest = KubeVersion::OLDEST,
        newest = KubeVersion::NEWEST
    )]
    Unsupported(String),
    /// Outside `[floor, binary]`: component-base's `EffectiveVersion.Validate`.
    #[error("{0}")]
    Emulation(String),
    /// `--emulated-version` of another component (component-base's text).
    #[error("component not registered: {0}")]
    Component(String),
    #[error("patch version not allowed, got: kube={0}")]
    Patch(String),
}

impl KubeVersion {
    pub const OLDEST: KubeVersion = KubeVersion { minor: 34 };
    pub const NEWEST: KubeVersion = KubeVersion { minor: 37 };
    /// Every supported minor, oldest first.
    pub const ALL: [KubeVersion; 4] = [
        KubeVersion { minor: 34 },
        KubeVersion { minor: 35 },
        KubeVersion { minor: 36 },
        KubeVersion { minor: 37 },
    ];

    /// `1.<minor>` if supported.
    pub fn new(minor: u32) -> Result<Self, VersionError> {
        let v = KubeVersion { minor };
        if (Self::OLDEST..=Self::NEWEST).contains(&v) {
            Ok(v)
        } else {
            Err(VersionError::Unsupported(format!("1.{minor}")))
        }
    }

    pub const fn minor(self) -> u32 {
        self.minor
    }

    /// Whether this version is `1.<minor>` or newer.
    pub const fn at_least(self, minor: u32) -> bool {
        self.minor >= minor
    }

    /// A server's `gitVersion` (`v1.35.4`, `v1.36.0-rc.1`, `v1.34.2-gke.1200`,
    /// `v1.37.2+k3s1`): major 1 and a supported minor; the rest is ignored.
    pub fn from_git_version(s: &str) -> Result<Self, VersionError> {
        let unparsable = || VersionError::Unparsable(s.to_string());
        let rest = s.trim().strip_prefix('v').ok_or_else(unparsable)?;
        let mut parts = rest.splitn(3, '.');
        let major = parts.next().ok_or_else(unparsable)?;
        let minor = parts.next().ok_or_else(unparsable)?;
        let (Ok(major), Ok(minor)) = (major.parse::<u32>(), minor.parse::<u32>()) else {
            return Err(unparsable());
        };
        // The patch must start with a digit: "v1.35" alone is not a release.
        if !parts
            .next()
            .is_some_and(|p| p.starts_with(|c: char| c.is_ascii_digit()))
        {
            return Err(unparsable());
        }
        if major != 1 {
            return Err(VersionError::Unsupported(format!("{major}.{minor}")));
        }
        Self::new(minor)
    }

    /// `--emulated-version` naming a minor kcm-rs behaves as (1.34 to 1.37).
    pub fn from_flag(s: &str) -> Result<Self, VersionError> {
        Self::new(parse_flag(s)?)
    }

    /// The oldest minor this KCM emulates: binary minus 3, never below 1.31
    /// (apiserver's `kubeEffectiveVersionFloors`: emulation began in 1.31).
    pub const fn emulation_floor(self) -> u32 {
        let floor = self.minor.saturating_sub(3);
        if floor < 31 { 31 } else { floor }
    }
}

/// `--emulated-version` as component-base takes it: `1.N`, `1.N.0` or
/// `kube=1.N` (one entry; kcm-rs has no other component); the minor.
pub fn parse_flag(s: &str) -> Result<u32, VersionError> {
    let unparsable = || VersionError::Unparsable(s.to_string());
    let v = s.trim();
    let v = match v.split_once('=') {
        Some((c, v)) if c.trim() == "kube" => v.trim(),
        Some((c, _)) => return Err(VersionError::Component(c.trim().to_string())),
        None => v,
    };
    let mut parts = v.split('.');
    let (Some(major), Some(minor)) = (parts.next(), parts.next()) else {
        return Err(unparsable());
    };
    let patch = parts.next();
    if parts.next().is_some() {
        return Err(unparsable());
    }
    let (Ok(major), Ok(minor)) = (major.parse::<u32>(), minor.parse::<u32>()) else {
        return Err(unparsable());
    };
    match patch.map(str::parse::<u32>) {
        None | Some(Ok(0)) => {}
        Some(Ok(_)) => return Err(VersionError::Patch(v.to_string())),
        Some(Err(_)) => return Err(unparsable()),
    }
    if major != 1 {
        return Err(VersionError::Unsupported(format!("{major}.{minor}")));
    }
    Ok(minor)
}

/// KCM's effective version: the minor kcm-rs behaves as (the binary, whose
/// controller code and gate table apply) and the minor its feature gates
/// are evaluated at (`--emulated-version`: the binary's own, or older down
/// to [`KubeVersion::emulation_floor`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Emulation {
    binary: KubeVersion,
    minor: u32,
}

impl Emulation {
    /// `binary` emulating itself (no `--emulated-version`).
    pub const fn of(binary: KubeVersion) -> Self {
        Emulation {
            binary,
            minor: binary.minor,
        }
    }

    /// `binary` emulating `1.<minor>`; outside `[floor, binary]` refused
    /// with component-base's `Validate` messages (the min-compatibility
    /// version, emulation - 1 floored, is checked with it).
    pub fn new(binary: KubeVersion, minor: u32) -> Result<Self, VersionError> {
        let floor = binary.emulation_floor();
        let mut errs = Vec::new();
        if minor > binary.minor || minor < floor {
            errs.push(format!(
                "emulation version 1.{minor} is not between [1.{floor}, 1.{}.0]",
                binary.minor
            ));
        }
        let min_compat = Emulation { binary, minor }.min_compatibility();
        if min_compat > minor {
            errs.push(format!(
                "minCompatibilityVersion version 1.{min_compat} is not between [1.{floor}, 1.{minor}]"
            ));
        }
        match errs.len() {
            0 => Ok(Emulation { binary, minor }),
            1 => Err(VersionError::Emulation(errs.remove(0))),
            _ => Err(VersionError::Emulation(format!("[{}]", errs.join(", ")))),
        }
    }

    /// Every valid pair, binary by binary, oldest emulation first.
    pub fn all() -> impl Iterator<Item = Emulation> {
        KubeVersion::ALL.into_iter().flat_map(|b| {
            (b.emulation_floor()..=b.minor).map(move |minor| Emulation { binary: b, minor })
        })
    }

    pub const fn binary(self) -> KubeVersion {
        self.binary
    }

    /// The minor the gates are evaluated at.
    pub const fn minor(self) -> u32 {
        self.minor
    }

    pub const fn is_emulating(self) -> bool {
        self.minor != self.binary.minor
    }

    /// component-base's default min-compatibility version: emulation - 1,
    /// not below the floor (1.35+ print it in the PreAlpha message).
    pub const fn min_compatibility(self) -> u32 {
        let floor = self.binary.emulation_floor();
        let m = self.minor.saturating_sub(1);
        if m < floor { floor } else { m }
    }

    /// The binary and emulation for a server's `gitVersion` and an optional
    /// `--emulated-version`: the server's minor is the binary, and the flag
    /// may emulate an older minor down to that KCM's floor. A server one
    /// minor newer than [`KubeVersion::NEWEST`] is KCM's own skew (the
    /// control plane upgraded first): kcm-rs behaves as the newest, with a
    /// warning and [`Chosen::newer_server`] set. kcm-rs's own override
    /// beyond upstream: a flag naming a supported minor newer than the
    /// server (or any supported minor when the server's is unsupported or
    /// unreadable) makes kcm-rs behave as that minor's KCM, with a warning.
    pub fn choose(flag: Option<&str>, server: &str) -> Result<Chosen, ChooseError> {
        let (from_server, newer_server) = match KubeVersion::from_git_version(server) {
            Err(VersionError::Unsupported(_)) => match skewed_minor(server) {
                Some(m) => (Ok(KubeVersion::NEWEST), Some(m)),
                None => (KubeVersion::from_git_version(server), None),
            },
            other => (other, None),
        };
        let skew_warning = newer_server.map(|m| {
            format!(
                "API server 1.{m} is one minor newer than the newest kube-controller-manager \
                 kcm-rs reproduces ({newest}); behaving as {newest} (within KCM's version skew: \
                 upgrade kcm-rs next)",
                newest = KubeVersion::NEWEST
            )
        });
        let Some(flag) = flag else {
            return from_server
                .map(|b| Chosen {
                    emulation: Emulation::of(b),
                    warning: skew_warning,
                    newer_server,
                })
                .map_err(|e| ChooseError::Server {
                    server: server.to_string(),
                    source: e,
                });
        };
        let flag_err = |source| ChooseError::Flag {
            flag: flag.to_string(),
            source,
        };
        let minor = parse_flag(flag).map_err(flag_err)?;
        match from_server {
            Ok(s) if minor <= s.minor => Ok(Chosen {
                emulation: Emulation::new(s, minor).map_err(flag_err)?,
                warning: skew_warning,
                newer_server,
            }),
            Ok(_) => Ok(Chosen {
                emulation: Emulation::of(KubeVersion::new(minor).map_err(flag_err)?),
                warning: Some(
                    "outside KCM's version skew (at most one minor older than the API server, \
                     never newer); behaving as that minor's kube-controller-manager"
                        .into(),
                ),
                newer_server: None,
            }),
            Err(e) => Ok(Chosen {
                emulation: Emulation::of(KubeVersion::new(minor).map_err(flag_err)?),
                warning: Some(format!("{e}; behaving as --emulated-version says")),
                newer_server: None,
            }),
        }
    }
}

/// The minor of a `v1.N.x` server exactly one minor newer than
/// [`KubeVersion::NEWEST`] (KCM may be one minor older than its API server).
fn skewed_minor(server: &str) -> Option<u32> {
    let rest = server.trim().strip_prefix("v1.")?;
    let (minor, patch) = rest.split_once('.')?;
    let minor = minor.parse::<u32>().ok()?;
    (patch.starts_with(|c: char| c.is_ascii_digit()) && minor == KubeVersion::NEWEST.minor + 1)
        .then_some(minor)
}

/// What [`Emulation::choose`] picked, and a warning to log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chosen {
    pub emulation: Emulation,
    pub warning: Option<String>,
    /// The server's minor when it is one newer than [`KubeVersion::NEWEST`]
    /// (kcm-rs then behaves as the newest).
    pub newer_server: Option<u32>,
}

/// Why no version could be chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChooseError {
    #[error(
        "API server version {server:?}: {source}; set --emulated-version=1.N (1.34 to 1.37) \
         to run as that version's kube-controller-manager anyway"
    )]
    Server {
        server: String,
        source: VersionError,
    },
    #[error("--emulated-version={flag}: {source}")]
    Flag { flag: String, source: VersionError },
}

impl fmt::Display for Emulation {
    /// The emulated minor, `1.N`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "1.{}", self.minor)
    }
}

impl fmt::Display for KubeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "1.{}", self.minor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_versions_parse_to_their_minor() {
        let v = |s| KubeVersion::from_git_version(s).map(KubeVersion::minor);
        assert_eq!(v("v1.34.4"), Ok(34));
        assert_eq!(v("v1.35.0-rc.1"), Ok(35));
        assert_eq!(v("v1.36.3-gke.1200"), Ok(36));
        assert_eq!(v("v1.37.2+k3s1"), Ok(37));
        for bad in ["", "1.34.4", "v1", "v1.x.0", "v1.35", "v1.35.", "garbage"] {
            assert!(
                matches!(v(bad), Err(VersionError::Unparsable(_))),
                "{bad:?}"
            );
        }
        for old_or_new in ["v1.33.9", "v1.38.0", "v2.0.0"] {
            assert!(
                matches!(v(old_or_new), Err(VersionError::Unsupported(_))),
                "{old_or_new}"
            );
        }
    }

    #[test]
    fn the_flag_takes_minor_versions_with_or_without_the_component() {
        let v = |s| KubeVersion::from_flag(s).map(KubeVersion::minor);
        assert_eq!(v("1.36"), Ok(36));
        assert_eq!(v("kube=1.34"), Ok(34));
        assert!(v("1.33").is_err());
        assert!(v("1.38").is_err());
        assert!(v("wardle=1.2").is_err());
        assert!(v("1").is_err());
        assert_eq!(
            KubeVersion::from_flag("1.40").map_err(|e| e.to_string()),
            Err("Kubernetes 1.40 is not supported: kcm-rs behaves as kube-controller-manager 1.34 to 1.37".into())
        );
    }

    #[test]
    fn order_and_display() {
        assert!(KubeVersion::OLDEST < KubeVersion::NEWEST);
        assert_eq!(
            KubeVersion::ALL.map(|v| v.to_string()).join(" "),
            "1.34 1.35 1.36 1.37"
        );
        assert!(KubeVersion::NEWEST.at_least(36) && !KubeVersion::OLDEST.at_least(35));
    }
}
