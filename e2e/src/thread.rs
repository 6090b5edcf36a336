//! Work on a thread and tokio runtime of its own: what it measures (a
//! scraper's latency) or waits for (a warm-up pod) does not queue behind
//! the test's own tasks, and it may block the test's thread meanwhile.

use std::future::Future;
use std::thread::JoinHandle;

/// Runs the future `make` returns to completion on a new thread with a
/// current-thread runtime (timers and I/O enabled); join the handle for
/// its output.
pub fn spawn_with_runtime<T, F>(make: impl FnOnce() -> F + Send + 'static) -> JoinHandle<T>
where
    T: Send + 'static,
    F: Future<Output = T>,
{
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(make())
    })
}
