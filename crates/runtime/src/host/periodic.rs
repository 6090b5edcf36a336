//! The periodic variant of the worker loop: a pass every period (pod GC).

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::Span;

use super::{Guarded, Host, Progress};

impl Host {
    /// Runs `pass` at once and then `period` after each pass ends
    /// (upstream's sliding `wait.Until`), until `stop`; a pass in flight
    /// when `stop` comes finishes first. Each pass runs under
    /// [`Host::guard`] inside `span()`, with a [`Progress`] to tick after
    /// each step: the sync timeout and the stall bound count from its last
    /// tick. A timed-out or panicking pass is logged and counted, and the
    /// next one runs after the period as usual.
    pub async fn run_periodic<F, Fut>(
        &self,
        what: &str,
        period: Duration,
        span: impl Fn() -> Span,
        pass: F,
        stop: &CancellationToken,
    ) where
        F: Fn(Progress) -> Fut,
        Fut: Future<Output = ()>,
    {
        let activity = self.activity(what, None);
        activity.start();
        loop {
            let slot = activity.begin("a pass".to_string());
            let progress = slot.progress();
            let then = "the next pass runs after the period";
            match self.guard(&slot, &span(), then, || pass(progress)).await {
                Guarded::Finished(()) => slot.finish(true),
                Guarded::TimedOut | Guarded::Panicked(_) => drop(slot),
            }
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(period) => {}
            }
        }
    }
}
