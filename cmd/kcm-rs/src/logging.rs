//! Logging as kube-controller-manager's: `-v` raises kcm-rs's own targets
//! only, and `--logging-format=json` writes klog's flat JSON lines.

use std::fmt::Write as _;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::layer::Filter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

use crate::flags::LogFormat;

/// The most verbose level kcm-rs's own crates log at for `-v=N`: klog's
/// 0-1 are info, 2-3 debug, 4 and more trace.
fn level_for(verbosity: u8) -> Level {
    match verbosity {
        0..=1 => Level::INFO,
        2..=3 => Level::DEBUG,
        _ => Level::TRACE,
    }
}

/// klog's `v` of a line at `level` (the lowest `-v` that shows it).
fn klog_v(level: Level) -> u8 {
    match level {
        Level::TRACE => 4,
        Level::DEBUG => 2,
        _ => 0,
    }
}

/// `-v` applies to kcm-rs's crates (targets `kcm_*`); dependencies (hyper,
/// h2, rustls, kube) stay at info, so their wire traces need `RUST_LOG`.
fn own_targets_filter(
    verbosity: u8,
) -> tracing_subscriber::filter::FilterFn<impl Fn(&Metadata<'_>) -> bool> {
    let own = level_for(verbosity);
    tracing_subscriber::filter::filter_fn(move |m| {
        let max = if m.target().starts_with("kcm_") {
            own
        } else {
            Level::INFO
        };
        *m.level() <= max
    })
}

/// Installs the global subscriber on stderr: `RUST_LOG` when set (any
/// target, any level), else `-v` on kcm-rs's own targets.
pub fn init(format: LogFormat, verbosity: u8) {
    match tracing_subscriber::EnvFilter::try_from_default_env() {
        Ok(env) => install(format, env),
        Err(_) => install(format, own_targets_filter(verbosity)),
    }
}

fn install<F>(format: LogFormat, filter: F)
where
    F: Filter<tracing_subscriber::Registry> + Send + Sync + 'static,
{
    use tracing_subscriber::Layer as _;
    let registry = tracing_subscriber::registry();
    match format {
        LogFormat::Text => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                    .with_filter(filter),
            )
            .init(),
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .fmt_fields(JsonFields::new())
                    .event_format(KlogJson)
                    .with_writer(std::io::stderr)
                    .with_filter(filter),
            )
            .init(),
    }
}

/// One flat JSON object per event, in klog's (zapr's) key order: `ts`
/// (epoch milliseconds as a float, component-base's encoder), `caller`
/// (file:line), `msg`, `v` (info lines) or `err` (an `error`/`err` field),
/// then the span fields outermost first and the event's fields; a key
/// already written is not written again.
pub struct KlogJson;

impl<S, N> FormatEvent<S, N> for KlogJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let meta = event.metadata();
        let mut visitor = JsonVisitor::default();
        event.record(&mut visitor);
        let mut fields = visitor.0;
        let msg = fields
            .remove("message")
            .unwrap_or(Value::String(String::new()));
        let err = fields.remove("error").or_else(|| fields.remove("err"));

        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64() * 1000.0)
            .unwrap_or_default();
        let caller = match (meta.file(), meta.line()) {
            (Some(f), Some(l)) => format!("{}:{l}", short_path(f)),
            _ => meta.target().to_string(),
        };
        let mut line = String::with_capacity(256);
        let mut seen: Vec<String> = Vec::new();
        let mut put = |line: &mut String, key: &str, value: &Value| {
            if seen.iter().any(|k| k == key) {
                return;
            }
            seen.push(key.to_string());
            line.push(if line.is_empty() { '{' } else { ',' });
            // serde_json escapes keys and values.
            line.push_str(&Value::String(key.to_string()).to_string());
            line.push(':');
            line.push_str(&value.to_string());
        };
        put(&mut line, "ts", &Value::from(ts));
        put(&mut line, "caller", &Value::String(caller));
        put(&mut line, "msg", &msg);
        if *meta.level() != Level::ERROR {
            put(&mut line, "v", &Value::from(klog_v(*meta.level())));
        }
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let ext = span.extensions();
                let Some(stored) = ext.get::<FormattedFields<N>>() else {
                    continue;
                };
                if let Ok(Value::Object(map)) = serde_json::from_str::<Value>(stored) {
                    for (k, v) in &map {
                        put(&mut line, k, v);
                    }
                }
            }
        }
        for (k, v) in &fields {
            put(&mut line, k, v);
        }
        if let Some(err) = &err {
            put(&mut line, "err", err);
        }
        line.push('}');
        writeln!(writer, "{line}")
    }
}

/// A workspace path as compiled (`crates/job/src/sync.rs`); a dependency's
/// absolute path cut to its last three components (`src/proto/h2.rs`), as
/// zap's short caller keeps the package and file.
fn short_path(file: &str) -> &str {
    if !file.starts_with('/') {
        return file;
    }
    let mut cut = file.len();
    for _ in 0..3 {
        match file[..cut].rfind('/') {
            Some(i) => cut = i,
            None => return file,
        }
    }
    &file[cut + 1..]
}

/// An event's fields as JSON values, in the order they were recorded.
#[derive(Default)]
struct JsonVisitor(Map<String, Value>);

impl Visit for JsonVisitor {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0
            .insert(field.name().into(), Value::from(value.to_string()));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let mut s = String::new();
        let _ = write!(s, "{value:?}");
        self.0.insert(field.name().into(), Value::from(s));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::ErrorKind::Other)?
                .extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn lines(verbosity: u8, log: impl FnOnce()) -> Vec<Value> {
        use tracing_subscriber::Layer as _;
        let buf = Buf::default();
        let writer = buf.clone();
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .fmt_fields(JsonFields::new())
                .event_format(KlogJson)
                .with_writer(move || writer.clone())
                .with_filter(own_targets_filter(verbosity)),
        );
        tracing::subscriber::with_default(subscriber, log);
        let bytes = buf.0.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    #[test]
    fn lines_are_flat_with_klogs_keys() {
        let out = lines(4, || {
            let span = tracing::info_span!("sync", job = "ns/pi", attempt = 2);
            let _g = span.enter();
            tracing::debug!(pods = 3, ready = true, "synced \"quoted\"");
            tracing::error!(error = "boom", "sync failed");
        });
        assert_eq!(out.len(), 2, "{out:?}");
        let d = &out[0];
        assert!(d["ts"].as_f64().is_some_and(|t| t > 1.7e12), "{d}");
        assert!(
            d["caller"]
                .as_str()
                .is_some_and(|c| c.starts_with("cmd/kcm-rs/src/logging.rs:")),
            "{d}"
        );
        assert_eq!(d["msg"], "synced \"quoted\"");
        assert_eq!(d["v"], 2);
        assert_eq!(
            (d["job"].as_str(), d["attempt"].as_i64()),
            (Some("ns/pi"), Some(2))
        );
        assert_eq!(
            (d["pods"].as_i64(), d["ready"].as_bool()),
            (Some(3), Some(true))
        );
        assert!(d.get("fields").is_none() && d.get("span").is_none(), "{d}");
        let e = &out[1];
        assert_eq!(
            (e["msg"].as_str(), e["err"].as_str()),
            (Some("sync failed"), Some("boom"))
        );
        assert!(e.get("v").is_none() && e.get("error").is_none(), "{e}");
    }

    #[test]
    fn verbosity_raises_only_kcm_targets() {
        let out = lines(4, || {
            tracing::trace!(target: "kcm_job", "own");
            tracing::trace!(target: "h2::codec", "dependency");
            tracing::debug!(target: "hyper", "dependency");
            tracing::info!(target: "kube_runtime", "dependency info");
        });
        let msgs: Vec<_> = out.iter().filter_map(|l| l["msg"].as_str()).collect();
        assert_eq!(msgs, ["own", "dependency info"]);
        assert_eq!(
            lines(0, || tracing::debug!(target: "kcm_job", "hidden")).len(),
            0
        );
    }

    #[test]
    fn dependency_paths_are_shortened() {
        assert_eq!(short_path("crates/job/src/a.rs"), "crates/job/src/a.rs");
        assert_eq!(
            short_path("/root/.cargo/registry/src/h2-0.4/src/proto/x.rs"),
            "src/proto/x.rs"
        );
        assert_eq!(short_path("/a.rs"), "/a.rs");
    }
}
