//! The Job controller's settings and their flags (flattened into the
//! binary's; KCM's names and defaults, plus kcm-rs's `--job-managed-by`).

use crate::conflict::OnConflict;
use crate::pods::JOB_CONTROLLER_NAME;

/// `--concurrent-job-syncs`, `--job-managed-by`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct JobSettings {
    /// Number of Job objects synced concurrently.
    #[arg(long, default_value_t = 5)]
    pub concurrent_job_syncs: u32,

    /// Run beside an unmodified kube-controller-manager: sync only the Jobs
    /// whose spec.managedBy is NAME (a domain-prefixed path, such as
    /// kcm-rs.dev/job-controller), leave every other Job, and their pods'
    /// finalizers, to KCM's job-controller. Off unless set.
    #[arg(long, value_name = "NAME", value_parser = parse_managed_by)]
    pub job_managed_by: Option<String>,

    /// What to do with a Job whose status another writer (a second Job
    /// controller, such as kube-controller-manager's job-controller)
    /// changes: stop syncing that Job until it is left alone for 2
    /// minutes, or continue. Either way it is logged, recorded as a Warning
    /// event on the Job and exported as kcm_rs_conflicting_controller.
    #[arg(long, value_enum, default_value_t = OnConflict::Stop)]
    pub on_conflict: OnConflict,
}

impl Default for JobSettings {
    fn default() -> Self {
        JobSettings {
            concurrent_job_syncs: 5,
            job_managed_by: None,
            on_conflict: OnConflict::Stop,
        }
    }
}

/// The name the docs suggest for `--job-managed-by`.
pub const SUGGESTED_MANAGED_BY: &str = "kcm-rs.dev/job-controller";

/// The API server's limit on `spec.managedBy` (batch validation).
const MAX_MANAGED_BY: usize = 63;

/// Why a `--job-managed-by` value is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManagedByError {
    #[error("must be no more than {MAX_MANAGED_BY} characters")]
    TooLong,
    #[error("must be a domain-prefixed path (such as \"acme.io/foo\")")]
    NotDomainPrefixed,
    #[error("{0:?} is not a DNS-1123 subdomain")]
    BadDomain(String),
    #[error("{0:?} is not a valid path ([A-Za-z0-9/-._~%!$&'()*+,;=:]+)")]
    BadPath(String),
    #[error(
        "{JOB_CONTROLLER_NAME} is kube-controller-manager's own name; kcm-rs replaces it without the flag"
    )]
    KcmName,
}

/// Checks `name` as the API server checks `spec.managedBy`
/// (`IsDomainPrefixedPath` and at most 63 characters), so a Job can name
/// it; refuses KCM's own name, which would make the mode a no-op.
pub fn validate_managed_by(name: &str) -> Result<(), ManagedByError> {
    let Some((host, path)) = name
        .split_once('/')
        .filter(|(h, p)| !h.is_empty() && !p.is_empty())
    else {
        return Err(ManagedByError::NotDomainPrefixed);
    };
    if !is_dns1123_subdomain(host) {
        return Err(ManagedByError::BadDomain(host.into()));
    }
    let path_ok = path
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/-._~%!$&'()*+,;=:".contains(c));
    if !path_ok {
        return Err(ManagedByError::BadPath(path.into()));
    }
    if name.len() > MAX_MANAGED_BY {
        return Err(ManagedByError::TooLong);
    }
    if name == JOB_CONTROLLER_NAME {
        return Err(ManagedByError::KcmName);
    }
    Ok(())
}

fn parse_managed_by(s: &str) -> Result<String, ManagedByError> {
    validate_managed_by(s).map(|()| s.to_string())
}

fn is_dns1123_subdomain(s: &str) -> bool {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    s.len() <= 253 && s.split('.').all(label_ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn managed_by_names_as_the_api_server_checks_them() {
        for ok in [SUGGESTED_MANAGED_BY, "a.b/c", "example.com/x/y:z", "x/y"] {
            assert_eq!(validate_managed_by(ok), Ok(()), "{ok}");
        }
        let refused = [
            ("", ManagedByError::NotDomainPrefixed),
            ("kcm-rs", ManagedByError::NotDomainPrefixed),
            ("kcm-rs.dev/", ManagedByError::NotDomainPrefixed),
            ("/x", ManagedByError::NotDomainPrefixed),
            ("Kcm.dev/x", ManagedByError::BadDomain("Kcm.dev".into())),
            ("-a.dev/x", ManagedByError::BadDomain("-a.dev".into())),
            ("a.dev/x y", ManagedByError::BadPath("x y".into())),
            (JOB_CONTROLLER_NAME, ManagedByError::KcmName),
        ];
        for (name, err) in refused {
            assert_eq!(validate_managed_by(name), Err(err), "{name}");
        }
        let long = format!("kcm-rs.dev/{}", "x".repeat(53));
        assert_eq!(validate_managed_by(&long), Err(ManagedByError::TooLong));
        assert_eq!(validate_managed_by(&long[..63]), Ok(()));
    }
}
