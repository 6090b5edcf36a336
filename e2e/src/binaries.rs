//! Where the Go-built control-plane binaries live, and building them when
//! their inputs changed (the script keeps a content stamp, so this is cheap
//! when nothing changed).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::HarnessError;

/// The repository root (the parent of `e2e/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The cache folder of built binaries: `$KCM_E2E_BIN_DIR` or `target/e2e-bin`.
pub fn bin_dir() -> PathBuf {
    std::env::var_os("KCM_E2E_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target").join("e2e-bin"))
}

fn run_build(extra: &[&str]) -> Result<(), HarnessError> {
    let script = repo_root().join("e2e").join("harness").join("build.sh");
    let status = Command::new("bash")
        .arg(&script)
        .arg(bin_dir())
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

/// Ensures `kcm-e2e-apiserver` and `kcm-e2e-controller-manager` are built
/// and current; runs the build at most once per process.
pub fn ensure_built() -> Result<PathBuf, HarnessError> {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let result = BUILT.get_or_init(|| run_build(&[]).map_err(|e| e.to_string()));
    match result {
        Ok(()) => Ok(bin_dir()),
        Err(message) => Err(HarnessError::NotHealthy {
            reason: message.clone(),
            log_tail: String::new(),
        }),
    }
}

/// Like [`ensure_built`], and also builds `kcm-e2e-kubectl` (for `make run`).
pub fn ensure_built_with_kubectl() -> Result<PathBuf, HarnessError> {
    run_build(&["--with-kubectl"])?;
    Ok(bin_dir())
}
