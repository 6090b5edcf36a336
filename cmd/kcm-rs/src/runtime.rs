//! The async runtime: one thread unless `KCM_RS_WORKER_THREADS` asks for
//! more.

/// The environment variable that sets the runtime's worker threads.
pub const WORKERS_ENV: &str = "KCM_RS_WORKER_THREADS";

/// Worker threads from [`WORKERS_ENV`]'s value (unset or empty: 1).
pub fn worker_threads(v: Option<&str>) -> Result<usize, String> {
    match v.map(str::trim) {
        None | Some("") => Ok(1),
        Some(v) => match v.parse::<usize>() {
            Ok(n @ 1..=256) => Ok(n),
            _ => Err(format!(
                "{WORKERS_ENV}={v:?}: must be a whole number from 1 to 256"
            )),
        },
    }
}

/// One thread runs every task unless more are asked for: the work comes
/// as small I/O-bound steps (a watch event, a request, a sync), and on one
/// thread none of them pays for waking a second worker (W1: about a fifth
/// of kcm-rs's CPU, `docs/apiserver-cost.md`). Blocking work (certificate
/// reloads) still has its own pool.
pub fn build(workers: usize) -> std::io::Result<tokio::runtime::Runtime> {
    if workers == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_thread_unless_asked() {
        assert_eq!(worker_threads(None), Ok(1));
        assert_eq!(worker_threads(Some("")), Ok(1));
        assert_eq!(worker_threads(Some(" 4 ")), Ok(4));
        for bad in ["0", "-1", "two", "257", "1.5"] {
            let e = worker_threads(Some(bad)).expect_err(bad);
            assert!(e.contains(WORKERS_ENV) && e.contains(bad), "{e}");
        }
    }

    #[test]
    fn both_kinds_run_tasks() {
        for n in [1, 3] {
            let rt = build(n).expect("runtime");
            assert_eq!(
                rt.block_on(async { tokio::spawn(async { 7 }).await }).ok(),
                Some(7)
            );
            let flavor = rt.handle().runtime_flavor();
            let want = if n == 1 {
                tokio::runtime::RuntimeFlavor::CurrentThread
            } else {
                tokio::runtime::RuntimeFlavor::MultiThread
            };
            assert_eq!(flavor, want);
        }
    }
}
