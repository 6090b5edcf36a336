use std::path::PathBuf;

/// Everything that can go wrong while preparing or running the local control
/// plane. Each message says what failed and what to do.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error(
        "building the control-plane binaries failed (exit {code:?}); run `{script}` to see why"
    )]
    Build { script: PathBuf, code: Option<i32> },
    #[error("cannot run {what}: {source}; is it installed and on PATH?")]
    Spawn {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the API server did not become healthy: {reason}; last log lines:\n{log_tail}")]
    NotHealthy { reason: String, log_tail: String },
    #[error("reading kubeconfig {path}: {message}")]
    Kubeconfig { path: PathBuf, message: String },
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("Kubernetes API error: {0}")]
    Kube(#[from] kube::Error),
    #[error("building an object: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the API server answered {0}")]
    Answer(String),
    #[error("decoding protobuf: {0}")]
    Protobuf(#[from] kcm_proto::ProtoError),
}
