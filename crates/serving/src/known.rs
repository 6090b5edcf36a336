//! The tokens and decisions that were authorized before: their reviews take
//! the known lane (`review::Gate`), so a scraper whose cached answer expired
//! is never queued behind a flood of unknown tokens.
//!
//! Only a successful authorization admits an entry (a valid token alone,
//! which any ServiceAccount can mint by the thousand, does not). Entries are
//! partitioned by user: one user holds at most [`PER_USER`] of them and,
//! when over, loses its own least recently used; when the whole list is
//! full, expired entries go, then the least recently used. An entry unused
//! for [`KNOWN_TTL`] is forgotten. So no client, authorized or not, can
//! flush another user's entries.

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// How long an entry is kept without use.
pub const KNOWN_TTL: Duration = Duration::from_secs(3600);
/// Entries at most, all users together.
pub const MAX_KNOWN_ENTRIES: usize = 4096;
/// Entries at most per user (a few rotated tokens and the paths scraped).
pub const PER_USER: usize = 32;

struct Entry {
    user: String,
    used: Instant,
    /// Order of last use (ties of `used` broken).
    seq: u64,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    per_user: HashMap<String, usize>,
    seq: u64,
}

impl Inner {
    fn remove(&mut self, key: &str) {
        if let Some(e) = self.entries.remove(key)
            && let Some(n) = self.per_user.get_mut(&e.user)
        {
            *n -= 1;
            if *n == 0 {
                self.per_user.remove(&e.user);
            }
        }
    }

    /// The least recently used key, of `user` only if given.
    fn oldest(&self, user: Option<&str>) -> Option<String> {
        self.entries
            .iter()
            .filter(|(_, e)| user.is_none_or(|u| e.user == u))
            .min_by_key(|(_, e)| e.seq)
            .map(|(k, _)| k.clone())
    }
}

/// Keys (hashes) of tokens and decisions authorized before, by user.
#[derive(Default)]
pub struct Known {
    inner: Mutex<Inner>,
}

impl Known {
    /// Was `key` authorized within [`KNOWN_TTL`] of its last use?
    pub fn contains(&self, key: &str) -> bool {
        let inner = self.inner.lock();
        inner
            .entries
            .get(key)
            .is_some_and(|e| e.used.elapsed() < KNOWN_TTL)
    }

    /// `key` was just authorized for `user`: kept, or refreshed.
    pub fn admit(&self, key: &str, user: &str) {
        let now = Instant::now();
        let mut inner = self.inner.lock();
        inner.seq += 1;
        let seq = inner.seq;
        if let Some(e) = inner.entries.get_mut(key) {
            if e.user == user {
                e.used = now;
                e.seq = seq;
                return;
            }
            // The same key for another user cannot happen (the keys hash
            // what was reviewed); start over rather than miscount.
            inner.remove(key);
        }
        if inner.per_user.get(user).copied().unwrap_or(0) >= PER_USER
            && let Some(k) = inner.oldest(Some(user))
        {
            inner.remove(&k);
        }
        if inner.entries.len() >= MAX_KNOWN_ENTRIES {
            let stale: Vec<String> = inner
                .entries
                .iter()
                .filter(|(_, e)| e.used.elapsed() >= KNOWN_TTL)
                .map(|(k, _)| k.clone())
                .collect();
            for k in stale {
                inner.remove(&k);
            }
            if inner.entries.len() >= MAX_KNOWN_ENTRIES
                && let Some(k) = inner.oldest(None)
            {
                inner.remove(&k);
            }
        }
        inner.entries.insert(
            key.to_string(),
            Entry {
                user: user.to_string(),
                used: now,
                seq,
            },
        );
        *inner.per_user.entry(user.to_string()).or_default() += 1;
    }

    pub fn len(&self) -> usize {
        self.inner.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_user_churns_only_its_own_entries() {
        let k = Known::default();
        k.admit("scraper-token", "prometheus");
        k.admit("scraper-decision", "prometheus");
        for i in 0..10 * MAX_KNOWN_ENTRIES {
            k.admit(&format!("minted-{i}"), "tenant");
        }
        assert!(k.contains("scraper-token"));
        assert!(k.contains("scraper-decision"));
        assert_eq!(k.len(), 2 + PER_USER);
        // The tenant keeps its most recent ones.
        assert!(k.contains(&format!("minted-{}", 10 * MAX_KNOWN_ENTRIES - 1)));
        assert!(!k.contains("minted-0"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_list_drops_the_least_recently_used() {
        let k = Known::default();
        let users = MAX_KNOWN_ENTRIES / PER_USER;
        for u in 0..users {
            for i in 0..PER_USER {
                k.admit(&format!("{u}-{i}"), &format!("user-{u}"));
                tokio::time::advance(Duration::from_millis(1)).await;
            }
        }
        assert_eq!(k.len(), MAX_KNOWN_ENTRIES);
        // Used again: recent, so kept.
        k.admit("0-0", "user-0");
        k.admit("new", "newcomer");
        assert_eq!(k.len(), MAX_KNOWN_ENTRIES);
        assert!(k.contains("0-0"));
        assert!(!k.contains("0-1"), "the least recently used went");
        assert!(k.contains("new"));
    }

    #[tokio::test(start_paused = true)]
    async fn entries_unused_for_the_ttl_are_forgotten() {
        let k = Known::default();
        k.admit("a", "u");
        tokio::time::advance(KNOWN_TTL - Duration::from_secs(1)).await;
        assert!(k.contains("a"));
        k.admit("a", "u");
        tokio::time::advance(KNOWN_TTL - Duration::from_secs(1)).await;
        assert!(k.contains("a"), "use refreshes");
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(!k.contains("a"));
    }
}
