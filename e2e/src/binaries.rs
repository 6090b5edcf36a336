//! Where the Go-built control-plane binaries live, and building them when
//! their inputs changed (the script keeps a content stamp, so this is cheap
//! when nothing changed).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use crate::HarnessError;

/// The repository root (the parent of `e2e/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The Kubernetes version whose binaries the harness uses unless told
/// otherwise (the module file at `e2e/harness/go.mod`).
pub const DEFAULT_K8S_VERSION: &str = "1.34";

/// Every Kubernetes minor the harness can build (`e2e/harness/versions/`).
pub const SUPPORTED_K8S_VERSIONS: &[&str] = &["1.34", "1.35", "1.36", "1.37"];

/// `"v1.37"`, `"1.37"` and `"1.37.2"` all name the minor `"1.37"`.
pub fn normalize_version(version: &str) -> String {
    let v = version.trim().trim_start_matches('v');
    v.split('.').take(2).collect::<Vec<_>>().join(".")
}

/// The minor of [`k8s_version`], e.g. 37.
pub fn k8s_minor() -> u32 {
    let v = k8s_version();
    v.trim_start_matches("1.")
        .parse()
        .unwrap_or_else(|_| panic!("KCM_E2E_K8S_VERSION {v:?} is not 1.N"))
}

/// The Kubernetes version of the control plane and upstream KCM:
/// `$KCM_E2E_K8S_VERSION` (e.g. `1.37`), else [`DEFAULT_K8S_VERSION`].
pub fn k8s_version() -> String {
    std::env::var("KCM_E2E_K8S_VERSION")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .map(|v| normalize_version(&v))
        .unwrap_or_else(|| DEFAULT_K8S_VERSION.to_string())
}

/// The cache folder of built binaries: `$KCM_E2E_BIN_DIR` or `target/e2e-bin`
/// (the default version's binaries; other versions are in a subfolder named
/// after the version, see [`bin_dir_for`]).
pub fn bin_dir() -> PathBuf {
    std::env::var_os("KCM_E2E_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target").join("e2e-bin"))
}

/// Where `build.sh` puts one version's binaries: [`bin_dir`] for the default
/// version, `bin_dir()/1.N` for the others.
pub fn bin_dir_for(version: &str) -> PathBuf {
    let version = normalize_version(version);
    if version == DEFAULT_K8S_VERSION {
        bin_dir()
    } else {
        bin_dir().join(version)
    }
}

fn run_build(version: &str, extra: &[&str]) -> Result<(), HarnessError> {
    run_build_in(&bin_dir(), version, extra)
}

fn run_build_in(out: &Path, version: &str, extra: &[&str]) -> Result<(), HarnessError> {
    let script = repo_root().join("e2e").join("harness").join("build.sh");
    let status = Command::new("bash")
        .arg(&script)
        .arg(out)
        .arg("--version")
        .arg(version)
        .args(extra)
        .status()
        .map_err(|source| HarnessError::Spawn {
            what: "bash".into(),
            source,
        })?;
    if status.success() {
        Ok(())
    } else {
        Err(HarnessError::Build {
            script,
            code: status.code(),
        })
    }
}

/// Ensures `kcm-e2e-apiserver` and `kcm-e2e-controller-manager` of the
/// version [`k8s_version`] names are built and current, and returns their
/// folder; runs the build at most once per process and version.
pub fn ensure_built() -> Result<PathBuf, HarnessError> {
    ensure_built_for(&k8s_version())
}

/// [`ensure_built`] for one Kubernetes version (`"1.37"`), whatever
/// `$KCM_E2E_K8S_VERSION` says.
pub fn ensure_built_for(version: &str) -> Result<PathBuf, HarnessError> {
    static BUILT: OnceLock<Mutex<HashMap<String, Result<(), String>>>> = OnceLock::new();
    let version = normalize_version(version);
    // Held across the build: tests asking for the same version wait for it.
    let mut built = BUILT
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let result = built
        .entry(version.clone())
        .or_insert_with(|| run_build(&version, &[]).map_err(|e| e.to_string()));
    match result {
        Ok(()) => Ok(bin_dir_for(&version)),
        Err(message) => Err(HarnessError::NotHealthy {
            reason: message.clone(),
            log_tail: String::new(),
        }),
    }
}

/// The binaries of `version` stamped to report `git_version` (`v1.38.0`)
/// on `/version`, in `bin_dir()/stamp-<git_version>` (only the link step
/// differs from the plain build: a few seconds once that version is built).
pub fn ensure_built_stamped(version: &str, git_version: &str) -> Result<PathBuf, HarnessError> {
    let version = normalize_version(version);
    let out = bin_dir().join(format!("stamp-{git_version}"));
    run_build_in(&out, &version, &["--git-version", git_version])?;
    Ok(if version == DEFAULT_K8S_VERSION {
        out
    } else {
        out.join(version)
    })
}

/// Like [`ensure_built`], and also builds `kcm-e2e-kubectl` (for `make run`).
pub fn ensure_built_with_kubectl() -> Result<PathBuf, HarnessError> {
    let version = k8s_version();
    run_build(&version, &["--with-kubectl"])?;
    Ok(bin_dir_for(&version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_name_their_minor_and_folder() {
        for v in ["1.37", "v1.37", "1.37.2", " v1.37.2 "] {
            assert_eq!(normalize_version(v), "1.37");
        }
        assert_eq!(bin_dir_for("v1.34.4"), bin_dir());
        assert_eq!(bin_dir_for("1.37.2"), bin_dir().join("1.37"));
    }

    /// Every supported version has a module file for build.sh, and no
    /// module file is missing from the list.
    #[test]
    fn supported_versions_match_the_harness_module_files() {
        let harness = repo_root().join("e2e").join("harness");
        assert!(harness.join("go.mod").is_file());
        let mut on_disk = vec![DEFAULT_K8S_VERSION.to_string()];
        let mut dirs: Vec<String> = std::fs::read_dir(harness.join("versions"))
            .expect("e2e/harness/versions")
            .filter_map(|e| e.ok())
            .filter(|e| e.path().join("go.mod").is_file())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        dirs.sort_by_key(|v| {
            normalize_version(v)
                .split('.')
                .nth(1)
                .and_then(|m| m.parse::<u32>().ok())
        });
        on_disk.extend(dirs);
        assert_eq!(on_disk, SUPPORTED_K8S_VERSIONS);
    }
}
