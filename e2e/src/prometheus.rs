//! A real Prometheus server and `promtool` for the monitoring tests: both
//! come from the Debian package `prometheus` (2.42 on bookworm), which
//! `.ci/run` installs. `$PROMETHEUS` and `$PROMTOOL` override the binaries.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::control_plane::tail;

#[derive(Debug, thiserror::Error)]
pub enum PromError {
    #[error(
        "{tool} is not installed (not on PATH, ${var} unset): install the Debian package \
         `prometheus` (apt-get install --no-install-recommends prometheus); .ci/run does"
    )]
    NotInstalled {
        tool: &'static str,
        var: &'static str,
    },
    #[error("cannot run {what}: {source}")]
    Spawn {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("Prometheus did not become ready: {reason}; last log lines:\n{log_tail}")]
    NotReady { reason: String, log_tail: String },
    #[error("HTTP {path}: {reason}")]
    Http { path: String, reason: String },
    #[error("query `{expr}`: {reason}")]
    Query { expr: String, reason: String },
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

/// `promtool`: `$PROMTOOL`, else the first on `PATH`.
pub fn promtool() -> Result<PathBuf, PromError> {
    find("promtool", "PROMTOOL")
}

/// The `prometheus` server: `$PROMETHEUS`, else the first on `PATH`.
pub fn prometheus() -> Result<PathBuf, PromError> {
    find("prometheus", "PROMETHEUS")
}

fn find(tool: &'static str, var: &'static str) -> Result<PathBuf, PromError> {
    if let Some(p) = std::env::var_os(var) {
        return Ok(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .ok_or(PromError::NotInstalled { tool, var })
}

/// One scrape target: `host:port` and the target labels Prometheus attaches
/// (the ServiceMonitor's scrape adds `job`, `namespace`, `pod`, ...).
#[derive(Debug, Clone)]
pub struct Target {
    pub address: String,
    pub labels: Vec<(String, String)>,
}

/// A Prometheus server on 127.0.0.1 scraping [`Target`]s every
/// `scrape_interval`; killed and its data removed on drop.
pub struct Prometheus {
    child: Child,
    port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts Prometheus and waits for `/-/ready`. `rules` is a rule file
    /// (`{"groups": [...]}`, a PrometheusRule's `spec`) to load, if any.
    pub async fn start(
        targets: &[Target],
        scrape_interval: &str,
        rules: Option<&Value>,
    ) -> Result<Self, PromError> {
        let static_configs: Vec<Value> = targets
            .iter()
            .map(|t| {
                let labels: serde_json::Map<String, Value> = t
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect();
                serde_json::json!({ "targets": [t.address], "labels": labels })
            })
            .collect();
        // The job name is overridden by each target's `job` label, if any.
        let config = serde_json::json!({
            "global": { "scrape_interval": scrape_interval, "evaluation_interval": scrape_interval },
            "scrape_configs": [{ "job_name": "kcm-rs", "static_configs": static_configs,
                // kcm-rs serves HTTPS with a self-signed certificate.
                "scheme": "https", "tls_config": { "insecure_skip_verify": true } }],
        });
        Self::start_config(config, rules).await
    }

    /// Starts Prometheus with a whole `config` (`prometheus.yml` as JSON;
    /// `rule_files` is set from `rules`) and waits for `/-/ready`.
    pub async fn start_config(mut config: Value, rules: Option<&Value>) -> Result<Self, PromError> {
        let bin = prometheus()?;
        let dir = tempfile::Builder::new().prefix("kcm-prom-").tempdir()?;
        if let Some(rules) = rules {
            let path = dir.path().join("rules.yaml");
            std::fs::write(&path, rules.to_string())?;
            config["rule_files"] = serde_json::json!([path]);
        }
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config.to_string())?;
        let port = free_port()?;
        let log = dir.path().join("prometheus.log");
        let child = Command::new(&bin)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&log)?))
            .spawn()
            .map_err(|source| PromError::Spawn {
                what: bin.display().to_string(),
                source,
            })?;
        let mut prom = Prometheus {
            child,
            port,
            log,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = prom.child.try_wait() {
                return Err(prom.not_ready(format!("exited ({status})")));
            }
            if matches!(http_get(port, "/-/ready").await, Ok((200, _))) {
                return Ok(prom);
            }
            if Instant::now() > deadline {
                return Err(prom.not_ready("/-/ready not 200 after 60s".into()));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn not_ready(&self, reason: String) -> PromError {
        PromError::NotReady {
            reason,
            log_tail: tail(&self.log, 30),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn log(&self) -> &Path {
        &self.log
    }

    /// `GET /api/v1/<path>?<params>`: the `data` of a success answer, else
    /// the error type and message Prometheus gives.
    pub async fn api(&self, path: &str, params: &[(&str, &str)]) -> Result<Value, PromError> {
        let query: Vec<String> = params
            .iter()
            .map(|(k, v)| format!("{k}={}", urlencode(v)))
            .collect();
        let full = format!("/api/v1/{path}?{}", query.join("&"));
        let (_code, body) = http_get(self.port, &full).await?;
        let v: Value = serde_json::from_str(&body).map_err(|e| PromError::Http {
            path: full.clone(),
            reason: format!("{e}: {body}"),
        })?;
        if v["status"] == "success" {
            Ok(v["data"].clone())
        } else {
            Err(PromError::Http {
                path: full,
                reason: format!("{}: {}", v["errorType"], v["error"]),
            })
        }
    }

    /// An instant query at now: the result vector (or scalar as one element).
    pub async fn query(&self, expr: &str) -> Result<Vec<Value>, PromError> {
        let data = self
            .api("query", &[("query", expr)])
            .await
            .map_err(|e| match e {
                PromError::Http { reason, .. } => PromError::Query {
                    expr: expr.to_string(),
                    reason,
                },
                other => other,
            })?;
        match &data["result"] {
            Value::Array(a) if data["resultType"] != "scalar" => Ok(a.clone()),
            other => Ok(vec![other.clone()]),
        }
    }

    /// The active targets' health (`up`, `down`, `unknown`) and last error.
    pub async fn targets(&self) -> Result<Vec<(String, String)>, PromError> {
        let data = self.api("targets", &[("state", "active")]).await?;
        let active = data["activeTargets"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        Ok(active
            .iter()
            .map(|t| {
                let health = t["health"].as_str().unwrap_or_default().to_string();
                (
                    health,
                    t["lastError"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect())
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> std::io::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
pub fn urlencode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A plain HTTP/1.0 GET on 127.0.0.1: status code and body.
pub async fn http_get(port: u16, path: &str) -> Result<(u16, String), PromError> {
    let err = |e: std::io::Error| PromError::Http {
        path: path.to_string(),
        reason: e.to_string(),
    };
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(err)?;
    let req = format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
    s.write_all(req.as_bytes()).await.map_err(err)?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.map_err(err)?;
    let buf = String::from_utf8_lossy(&buf);
    let code = buf.split_whitespace().nth(1).and_then(|c| c.parse().ok());
    let body = buf.split_once("\r\n\r\n").map(|(_, b)| b.to_string());
    Ok((code.unwrap_or(0), body.unwrap_or_default()))
}

/// Runs `promtool <args>` with `stdin` (if any) and returns (success,
/// stdout + stderr).
pub fn run_promtool(args: &[&str], stdin: Option<&str>) -> Result<(bool, String), PromError> {
    use std::io::Write;
    let bin = promtool()?;
    let mut child = Command::new(&bin)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| PromError::Spawn {
            what: bin.display().to_string(),
            source,
        })?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((out.status.success(), text))
}
