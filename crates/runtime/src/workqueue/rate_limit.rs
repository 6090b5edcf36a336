//! Retry pacing for [`super::WorkQueue::add_rate_limited`]: a per-key
//! exponential backoff combined with an optional process-wide token bucket,
//! the worse of the two winning (client-go's `MaxOfRateLimiter` over an
//! `ItemExponentialFailureRateLimiter` and a `BucketRateLimiter`).

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

/// Settings of a global token bucket: `qps` tokens are added per second, up
/// to `burst` tokens in hand.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketLimit {
    /// Refill rate in tokens per second. Zero or negative means "never
    /// refills": once the burst is used up every retry waits
    /// [`RetryRateLimit::max_delay`].
    pub qps: f64,
    /// Bucket size; also the number of tokens the bucket starts with.
    pub burst: u32,
}

/// How a queue paces retries of failed keys (client-go's workqueue
/// `TypedRateLimiter`); not the client's limit on requests
/// ([`crate::client::ClientRateLimit`], client-go's `flowcontrol`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryRateLimit {
    /// Delay of a key's first retry; each further retry doubles it.
    pub base_delay: Duration,
    /// Cap of the per-key delay.
    pub max_delay: Duration,
    /// Optional overall limit shared by every key of the queue.
    pub bucket: Option<BucketLimit>,
}

impl RetryRateLimit {
    /// client-go's `DefaultControllerRateLimiter`: per key 5 ms doubling up to
    /// 1000 s, and overall 10 retries per second with a burst of 100. The
    /// disruption and taint-eviction queues use it.
    pub const fn controller_default() -> Self {
        Self {
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_secs(1000),
            bucket: Some(BucketLimit {
                qps: 10.0,
                burst: 100,
            }),
        }
    }

    /// Only a per-key exponential backoff, no global bucket; the Job queue
    /// uses `per_key(1 s, 1 min)` (`DefaultJobApiBackOff`, `MaxJobApiBackOff`).
    pub const fn per_key(base_delay: Duration, max_delay: Duration) -> Self {
        Self {
            base_delay,
            max_delay,
            bucket: None,
        }
    }
}

impl Default for RetryRateLimit {
    fn default() -> Self {
        Self::controller_default()
    }
}

/// A token bucket in the style of `golang.org/x/time/rate`: a reservation
/// always succeeds and may drive the balance negative; the caller waits for
/// the deficit to refill.
#[derive(Debug)]
struct TokenBucket {
    limit: BucketLimit,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    fn new(limit: BucketLimit, now: Instant) -> Self {
        Self {
            limit,
            tokens: f64::from(limit.burst),
            last: now,
        }
    }

    /// Takes one token and returns how long the caller must wait for it.
    fn reserve(&mut self, now: Instant, max_delay: Duration) -> Duration {
        let burst = f64::from(self.limit.burst);
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        if self.limit.qps > 0.0 {
            self.tokens = (self.tokens + elapsed * self.limit.qps).min(burst);
        }
        if now > self.last {
            self.last = now;
        }
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            return Duration::ZERO;
        }
        if self.limit.qps <= 0.0 {
            // Never refills; hand back the token so the balance stays bounded.
            self.tokens += 1.0;
            return max_delay;
        }
        Duration::try_from_secs_f64(-self.tokens / self.limit.qps).unwrap_or(max_delay)
    }
}

/// Per-key failure counts plus the shared bucket; owned by one queue.
#[derive(Debug)]
pub(super) struct RetryRateLimiter<K> {
    config: RetryRateLimit,
    failures: HashMap<K, u32>,
    bucket: Option<TokenBucket>,
}

impl<K: Eq + Hash + Clone> RetryRateLimiter<K> {
    pub(super) fn new(config: RetryRateLimit, now: Instant) -> Self {
        Self {
            config,
            failures: HashMap::new(),
            bucket: config.bucket.map(|b| TokenBucket::new(b, now)),
        }
    }

    /// Records one more failure of `key` and returns how long to wait before
    /// its retry: the larger of its exponential backoff and the bucket's wait.
    pub(super) fn when(&mut self, key: &K, now: Instant) -> Duration {
        let count = self.failures.entry(key.clone()).or_insert(0);
        let exp = *count;
        *count = count.saturating_add(1);
        let per_key = self.backoff(exp);
        let overall = match self.bucket.as_mut() {
            Some(b) => b.reserve(now, self.config.max_delay),
            None => Duration::ZERO,
        };
        per_key.max(overall)
    }

    /// `base * 2^exp`, capped at `max_delay` (also when the product would not
    /// fit in a `Duration`).
    fn backoff(&self, exp: u32) -> Duration {
        let secs = self.config.base_delay.as_secs_f64() * 2f64.powf(f64::from(exp));
        match Duration::try_from_secs_f64(secs) {
            Ok(d) => d.min(self.config.max_delay),
            Err(_) => self.config.max_delay,
        }
    }

    pub(super) fn forget(&mut self, key: &K) {
        self.failures.remove(key);
    }

    pub(super) fn num_requeues(&self, key: &K) -> u32 {
        self.failures.get(key).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let now = Instant::now();
        let mut rl = RetryRateLimiter::new(
            RetryRateLimit::per_key(Duration::from_secs(1), Duration::from_secs(60)),
            now,
        );
        let key = "ns/a".to_string();
        let got: Vec<u64> = (0..8).map(|_| rl.when(&key, now).as_secs()).collect();
        assert_eq!(got, vec![1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(rl.num_requeues(&key), 8);
        rl.forget(&key);
        assert_eq!(rl.num_requeues(&key), 0);
        assert_eq!(rl.when(&key, now), Duration::from_secs(1));
    }

    #[test]
    fn huge_exponent_is_capped() {
        let now = Instant::now();
        let mut rl = RetryRateLimiter::new(RetryRateLimit::controller_default(), now);
        let key = 1u32;
        rl.failures.insert(key, 5000);
        assert_eq!(rl.backoff(5000), Duration::from_secs(1000));
        assert_eq!(rl.when(&key, now), Duration::from_secs(1000));
    }

    #[test]
    fn bucket_waits_after_burst_and_refills() {
        let now = Instant::now();
        let limit = BucketLimit {
            qps: 10.0,
            burst: 3,
        };
        let mut b = TokenBucket::new(limit, now);
        let max = Duration::from_secs(1000);
        for _ in 0..3 {
            assert_eq!(b.reserve(now, max), Duration::ZERO);
        }
        assert_eq!(b.reserve(now, max), Duration::from_millis(100));
        assert_eq!(b.reserve(now, max), Duration::from_millis(200));
        // A second later the debt is repaid and 8 more tokens accrued, capped
        // at the burst of 3.
        let later = now + Duration::from_secs(1);
        for _ in 0..3 {
            assert_eq!(b.reserve(later, max), Duration::ZERO);
        }
        assert_eq!(b.reserve(later, max), Duration::from_millis(100));
    }

    #[test]
    fn zero_qps_bucket_waits_max() {
        let now = Instant::now();
        let mut b = TokenBucket::new(BucketLimit { qps: 0.0, burst: 1 }, now);
        let max = Duration::from_secs(7);
        assert_eq!(b.reserve(now, max), Duration::ZERO);
        assert_eq!(b.reserve(now, max), max);
        assert_eq!(b.reserve(now, max), max);
    }
}
