//! The wall clock the controller reads, replaceable in tests by one that
//! follows tokio's (pausable) time.

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};

/// Returns "now".
#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> Timestamp + Send + Sync>);

impl Clock {
    /// The system clock.
    pub fn system() -> Self {
        Clock(Arc::new(Timestamp::now))
    }

    /// `start` plus the tokio time elapsed since this call: under
    /// `tokio::time::pause` it only moves when the test advances it.
    pub fn tokio(start: Timestamp) -> Self {
        let origin = tokio::time::Instant::now();
        Clock(Arc::new(move || {
            let elapsed = SignedDuration::try_from(origin.elapsed()).unwrap_or(SignedDuration::MAX);
            start.checked_add(elapsed).unwrap_or(Timestamp::MAX)
        }))
    }

    pub fn now(&self) -> Timestamp {
        (self.0)()
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Clock")
    }
}
