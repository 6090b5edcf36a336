//! The Kubernetes minor version kcm-rs behaves as: the API server's own,
//! read at start, or `--emulated-version`. kcm-rs reproduces the KCM of
//! every minor from [`KubeVersion::OLDEST`] to [`KubeVersion::NEWEST`].

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

    /// `--emulated-version` as component-base takes it: `1.N` or `kube=1.N`
    /// (one entry; kcm-rs has no other component to emulate).
    pub fn from_flag(s: &str) -> Result<Self, VersionError> {
        let unparsable = || VersionError::Unparsable(s.to_string());
        let v = s.trim();
        let v = v.strip_prefix("kube=").unwrap_or(v);
        let (major, minor) = v.split_once('.').ok_or_else(unparsable)?;
        let (Ok(major), Ok(minor)) = (major.parse::<u32>(), minor.parse::<u32>()) else {
            return Err(unparsable());
        };
        if major != 1 {
            return Err(VersionError::Unsupported(format!("{major}.{minor}")));
        }
        Self::new(minor)
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
