//! Untrusted requests take turns. A request is *trusted* when its
//! connection was authorized for a scrape before, or its credential was
//! (`known.rs`, `auth::TRUST_PATHS`); any other request, whatever it asks
//! (a path kcm-rs does not serve, `/version`, a random token), waits for a
//! turn: at most [`SOURCE_PER_SECOND`] per source address (an IPv6 /64
//! counts as one; refused at once beyond) and [`UNTRUSTED_PER_SECOND`] for
//! the whole server, booked in arrival order. A request whose turn would
//! come more than [`PACE_WAIT`] after it began is refused with a 429, sent
//! when that wait is over (`server.rs`): a connection then sends at most
//! one request per [`PACE_WAIT`] while refused.
//!
//! Why: answering costs CPU even when the answer is a 404 (TLS, HTTP/2
//! framing), and any token holder (every ServiceAccount) can send requests
//! back to back on thousands of connections or streams. Unpaced, one token
//! bought a whole core and crowded out the scrapes; paced, what all
//! untrusted clients together make kcm-rs spend is bounded, and a trusted
//! scrape never waits behind them.

use std::net::IpAddr;
use std::time::Duration;

use tokio::time::Instant;

use crate::rate::{KeyedRate, Rate};
use crate::review::source_of;

/// Untrusted requests started per second at most, all sources together,
/// and their burst.
pub const UNTRUSTED_PER_SECOND: u32 = 200;
pub const UNTRUSTED_BURST: u32 = 100;
/// Untrusted requests started per second at most from one source, and
/// their burst: one source cannot take every turn.
pub const SOURCE_PER_SECOND: u32 = 50;
pub const SOURCE_BURST: u32 = 50;
/// Sources whose rates are remembered at most.
pub const SOURCE_KEYS: usize = 4096;
/// How long a request waits for its turn at most.
pub const PACE_WAIT: Duration = crate::review::REVIEW_WAIT;

pub struct Pacer {
    all: Rate,
    per_source: KeyedRate<IpAddr>,
}

impl Default for Pacer {
    fn default() -> Self {
        Pacer {
            all: Rate::new(UNTRUSTED_PER_SECOND, UNTRUSTED_BURST),
            per_source: KeyedRate::new(SOURCE_PER_SECOND, SOURCE_BURST, SOURCE_KEYS),
        }
    }
}

impl Pacer {
    /// Waits for the turn of a request from `source` that began at
    /// `began`; `false` when it gets none within [`PACE_WAIT`].
    pub async fn turn(&self, source: Option<IpAddr>, began: Instant) -> bool {
        if let Some(ip) = source
            && !self.per_source.allow(source_of(ip))
        {
            return false;
        }
        self.all.turn(began + PACE_WAIT).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn untrusted_requests_are_paced_and_refused_past_the_wait() {
        let p = Pacer::default();
        let began = Instant::now();
        // From many sources: the burst, then the server's rate until the wait ends.
        let mut admitted = 0u32;
        for i in 0..2 * UNTRUSTED_PER_SECOND * 3 {
            let ip = IpAddr::from([
                10,
                1,
                u8::try_from(i / 250).expect("small"),
                u8::try_from(i % 250).expect("small"),
            ]);
            if p.all.book(began + PACE_WAIT).is_some() && p.per_source.allow(ip) {
                admitted += 1;
            }
        }
        let secs = u32::try_from(PACE_WAIT.as_secs()).expect("small");
        assert_eq!(admitted, UNTRUSTED_BURST + UNTRUSTED_PER_SECOND * secs);
        assert!(!p.turn(None, began).await, "no turn left within the wait");
        assert_eq!(began.elapsed(), Duration::ZERO, "refused at once");
    }

    #[tokio::test(start_paused = true)]
    async fn one_source_gets_its_share_only() {
        let p = Pacer::default();
        let began = Instant::now();
        let a: IpAddr = "10.0.0.1".parse().expect("ip");
        let b: IpAddr = "10.0.0.2".parse().expect("ip");
        let mut turns = 0;
        for _ in 0..SOURCE_BURST + 10 {
            turns += u32::from(p.turn(Some(a), began).await);
        }
        assert_eq!(turns, SOURCE_BURST);
        assert!(
            p.turn(Some(b), began).await,
            "another source still has turns"
        );
    }
}
