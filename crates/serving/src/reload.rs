//! The certificate, key and client CA files reloaded when they change, as
//! KCM's dynamic serving content does: each file's metadata (mtime, size,
//! inode: a Secret volume's symlink swap changes the inode) is polled; on a
//! change the whole TLS configuration is rebuilt and swapped in for new
//! connections. A file that does not load (unreadable, unparsable, a key
//! that does not match the certificate, half-written) keeps the previous
//! configuration, logged once per change.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::{Mutex, RwLock};
use tokio_util::sync::CancellationToken;

use crate::ServeError;
use crate::tls::{self, Built, Pair, TlsOptions};

/// How often the files' metadata is polled.
pub const RELOAD_POLL: Duration = Duration::from_secs(2);

/// What identifies one version of a file; `None`: missing or unreadable.
type Stamp = Option<(SystemTime, u64, u64)>;

fn stamp(path: &PathBuf) -> Stamp {
    let m = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let ino = std::os::unix::fs::MetadataExt::ino(&m);
    #[cfg(not(unix))]
    let ino = 0;
    Some((m.modified().ok()?, m.len(), ino))
}

fn copy(p: &Pair) -> Pair {
    (p.0.clone(), p.1.clone_key())
}

pub struct Reloader {
    opts: TlsOptions,
    current: RwLock<Arc<Built>>,
    /// The generated pair, reused when only the CA changes.
    generated: Option<Pair>,
    /// Stamps of the loaded files, and of the last version that failed.
    stamps: Mutex<(Vec<Stamp>, Vec<Stamp>)>,
}

impl Reloader {
    /// Loads (or generates) everything once; errors are start-up errors.
    pub fn new(opts: &TlsOptions) -> Result<Self, ServeError> {
        let before = Self::stamps_of(opts);
        let pair = tls::serving_pair(opts)?;
        let generated = opts.cert_file.is_none().then(|| copy(&pair));
        let built = tls::build(opts, pair)?;
        Ok(Reloader {
            opts: opts.clone(),
            current: RwLock::new(Arc::new(built)),
            generated,
            stamps: Mutex::new((before, Vec::new())),
        })
    }

    fn watched(o: &TlsOptions) -> impl Iterator<Item = &PathBuf> {
        [&o.cert_file, &o.key_file, &o.client_ca_file]
            .into_iter()
            .flatten()
    }

    fn stamps_of(o: &TlsOptions) -> Vec<Stamp> {
        Self::watched(o).map(stamp).collect()
    }

    /// The configuration for a new connection.
    pub fn current(&self) -> Arc<Built> {
        Arc::clone(&self.current.read())
    }

    /// Reloads when a watched file changed; true when it swapped.
    pub fn check(&self) -> bool {
        let now = Self::stamps_of(&self.opts);
        let mut stamps = self.stamps.lock();
        if now == stamps.0 || now == stamps.1 {
            return false;
        }
        let pair = match &self.generated {
            Some(p) => Ok(copy(p)),
            None => tls::serving_pair(&self.opts),
        };
        match pair.and_then(|p| tls::build(&self.opts, p)) {
            Ok(built) => {
                *self.current.write() = Arc::new(built);
                *stamps = (now, Vec::new());
                tracing::info!("serving certificate, key or client CA reloaded");
                true
            }
            Err(e) => {
                stamps.1 = now;
                tracing::warn!(
                    "reloading the serving files failed, keeping the previous ones: {e}"
                );
                false
            }
        }
    }

    /// Polls until `stop` (nothing to do without files to watch).
    pub fn spawn_poll(self: Arc<Self>, stop: CancellationToken) {
        if Self::watched(&self.opts).next().is_none() {
            return;
        }
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(RELOAD_POLL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = tick.tick() => {}
                }
                // File reads and parsing block: off the async workers.
                let me = Arc::clone(&self);
                let _ = tokio::task::spawn_blocking(move || me.check()).await;
            }
        });
    }
}
