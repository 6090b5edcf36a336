//! The one clock every controller reads: wall time ([`Timestamp`]) for what
//! the API sees (condition times, `disruptedPods`, toleration deadlines)
//! and monotonic time (tokio's [`Instant`]) for timers, expectations and
//! the host's bounds. Production reads the system's wall clock; tests use
//! [`Clock::following_tokio`], whose wall time moves with tokio's, so
//! `tokio::time::pause` and `advance` move both together, or
//! [`Clock::from_fn`] to set wall time by hand.

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use tokio::time::Instant;

/// Cloning shares the source of wall time.
#[derive(Clone)]
pub struct Clock {
    wall: Arc<dyn Fn() -> Timestamp + Send + Sync>,
}

impl Clock {
    /// The system's wall clock and tokio's monotonic one.
    pub fn system() -> Self {
        Clock {
            wall: Arc::new(Timestamp::now),
        }
    }

    /// Wall time `start` plus the tokio time elapsed since this call: under
    /// `tokio::time::pause` it only moves when the test advances it.
    pub fn following_tokio(start: Timestamp) -> Self {
        let origin = Instant::now();
        Clock {
            wall: Arc::new(move || {
                let elapsed =
                    SignedDuration::try_from(origin.elapsed()).unwrap_or(SignedDuration::MAX);
                start.checked_add(elapsed).unwrap_or(Timestamp::MAX)
            }),
        }
    }

    /// Wall time read from `wall`, for tests and tools that drive time
    /// themselves (a model world's `now`); monotonic time stays tokio's.
    pub fn from_fn(wall: impl Fn() -> Timestamp + Send + Sync + 'static) -> Self {
        Clock {
            wall: Arc::new(wall),
        }
    }

    /// Wall time now.
    pub fn now(&self) -> Timestamp {
        (self.wall)()
    }

    /// Monotonic time now (tokio's: paused and advanced in tests).
    pub fn instant(&self) -> Instant {
        Instant::now()
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::system()
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Clock")
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn wall_and_monotonic_move_together_under_pause() {
        let start = Timestamp::from_second(1_000).expect("valid");
        let c = Clock::following_tokio(start);
        let t0 = c.instant();
        assert_eq!(c.now(), start);
        tokio::time::advance(Duration::from_secs(90)).await;
        assert_eq!(c.now(), Timestamp::from_second(1_090).expect("valid"));
        assert_eq!(c.instant() - t0, Duration::from_secs(90));
    }
}
