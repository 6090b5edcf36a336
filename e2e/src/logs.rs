//! Captures the `tracing` events at `info` and above (what kcm-rs prints at
//! the default `-v=0`) of the controllers running in this test process, so
//! a test can assert that a bad input produced a clear log line.
//!
//! [`capture`] installs a process-wide subscriber; call it before any
//! controller starts (it does nothing if another subscriber came first,
//! and [`Captured::wait_for`] then says so).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};

/// The captured lines: `"<LEVEL> <target>: <message> k=v ..."`.
pub struct Captured {
    lines: Mutex<Vec<String>>,
    installed: bool,
}

struct Sink {
    next_span: AtomicU64,
}

static CAPTURED: OnceLock<Captured> = OnceLock::new();

struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, " {value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            let _ = write!(self.0, " {value}");
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }
}

impl Subscriber for Sink {
    fn register_callsite(&self, m: &'static Metadata<'static>) -> Interest {
        if self.enabled(m) {
            Interest::always()
        } else {
            Interest::never()
        }
    }
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        *m.level() <= Level::INFO
    }
    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::INFO)
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(self.next_span.fetch_add(1, Ordering::Relaxed) + 1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let m = event.metadata();
        let mut line = Line(format!("{} {}:", m.level(), m.target()));
        event.record(&mut line);
        if let Some(c) = CAPTURED.get()
            && let Ok(mut lines) = c.lines.lock()
        {
            lines.push(line.0);
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// Installs the capturing subscriber (once per process) and returns it.
pub fn capture() -> &'static Captured {
    CAPTURED.get_or_init(|| {
        let sink = Sink {
            next_span: AtomicU64::new(0),
        };
        let installed = tracing::subscriber::set_global_default(sink).is_ok();
        Captured {
            lines: Mutex::new(Vec::new()),
            installed,
        }
    })
}

impl Captured {
    /// Every line captured so far that contains all of `parts`.
    pub fn matching(&self, parts: &[&str]) -> Vec<String> {
        self.lines
            .lock()
            .map(|l| {
                l.iter()
                    .filter(|line| parts.iter().all(|p| line.contains(p)))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Polls until a line contains all of `parts`; returns it, or panics
    /// after `timeout` with what was captured.
    pub async fn wait_for(&self, parts: &[&str], timeout: Duration) -> String {
        assert!(
            self.installed,
            "another tracing subscriber was installed first"
        );
        let start = Instant::now();
        loop {
            if let Some(line) = self.matching(parts).into_iter().next() {
                return line;
            }
            assert!(
                start.elapsed() < timeout,
                "no log line with {parts:?} within {timeout:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
