//! Support: skip it on first read — a pure timer that the failure paths (`recover.rs`) wait on.
//!
//! How long to wait before trying again: exponential backoff with jitter that forgets old failures.
//!
//! WORKSHOP.md, step 02 ("The state machine that never loses its place"). client-go and kube-rs agree on the shape: start
//! at 800 ms, double on each failure up to 30 s, add jitter so a fleet of operators that lost the
//! same API server does not come back in lockstep, and start over once things have been healthy
//! for about two minutes. Pure: it reads the clock you give it, so tests run on paused time.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;
use tokio::time::Instant;

/// The numbers. `Default` has client-go's reflector numbers (800 ms → 30 s, ×2, reset after 2
/// min); client-go's jitter only lengthens a delay (up to +100 %), ours spreads it ±20 %.
#[derive(Clone, Debug, PartialEq)]
pub struct BackoffPolicy {
    pub initial: Duration,
    pub max: Duration,
    pub factor: u32,
    /// Each delay is multiplied by a random factor in `1 ± jitter` (0.2: ±20 %).
    pub jitter: f64,
    /// A failure this long after the previous one starts the sequence again from `initial`.
    pub reset_after: Duration,
}

impl Default for BackoffPolicy {
    fn default() -> Self {
        BackoffPolicy {
            initial: Duration::from_millis(800),
            max: Duration::from_secs(30),
            factor: 2,
            jitter: 0.2,
            reset_after: Duration::from_secs(120),
        }
    }
}

/// The backoff state of one watch loop.
#[derive(Debug)]
pub struct Backoff {
    policy: BackoffPolicy,
    /// Failures since the last reset; the next delay is `initial * factor^failures`.
    failures: u32,
    last_failure: Option<Instant>,
    random: Xorshift,
}

impl Backoff {
    pub fn new(policy: BackoffPolicy) -> Backoff {
        Backoff::with_seed(policy, Xorshift::seed_from_process().next_u64())
    }

    /// A fixed seed gives the same jitter every run (tests).
    pub fn with_seed(policy: BackoffPolicy, seed: u64) -> Backoff {
        Backoff {
            policy,
            failures: 0,
            last_failure: None,
            random: Xorshift::new(seed),
        }
    }

    /// Something failed at `now`: how long to wait before the next attempt.
    pub fn next_delay(&mut self, now: Instant) -> Duration {
        if let Some(last) = self.last_failure {
            // Healthy since the last failure for long enough: this is a new incident.
            if now.saturating_duration_since(last) >= self.policy.reset_after {
                self.failures = 0;
            }
        }
        self.last_failure = Some(now);
        let base = self
            .policy
            .initial
            .saturating_mul(self.policy.factor.saturating_pow(self.failures))
            .min(self.policy.max);
        self.failures = self.failures.saturating_add(1);
        let spread = self.policy.jitter.clamp(0.0, 1.0) * (2.0 * self.random.unit() - 1.0);
        base.mul_f64(1.0 + spread)
    }
}

/// xorshift64: the project does not depend on `rand`; jitter needs spread, not cryptography.
#[derive(Debug, Clone)]
pub(crate) struct Xorshift(u64);

impl Xorshift {
    pub(crate) fn new(seed: u64) -> Xorshift {
        // One splitmix64 step spreads small seeds (1, 2, 3 ...) over all 64 bits; otherwise the
        // first numbers of nearby seeds are all tiny. Zero is xorshift's one fixed point.
        let mut mixed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        mixed ^= mixed >> 31;
        Xorshift(if mixed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            mixed
        })
    }

    /// Seeded from std's per-process random hasher keys.
    pub(crate) fn seed_from_process() -> Xorshift {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u64(0x5eed);
        Xorshift::new(hasher.finish())
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in [0, 1).
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [low, high].
    pub(crate) fn between(&mut self, low: Duration, high: Duration) -> Duration {
        if high <= low {
            return low;
        }
        low + (high - low).mul_f64(self.unit())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_jitter() -> BackoffPolicy {
        BackoffPolicy {
            jitter: 0.0,
            ..BackoffPolicy::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn delays_double_from_800ms_and_stop_at_30s() {
        let mut backoff = Backoff::with_seed(no_jitter(), 1);
        let mut delays = Vec::new();
        for _ in 0..8 {
            let delay = backoff.next_delay(Instant::now());
            delays.push(delay.as_millis());
            tokio::time::advance(delay).await;
        }
        assert_eq!(
            delays,
            vec![800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn two_healthy_minutes_start_the_sequence_again() {
        let mut backoff = Backoff::with_seed(no_jitter(), 1);
        for _ in 0..4 {
            let delay = backoff.next_delay(Instant::now());
            tokio::time::advance(delay).await;
        }
        // 6.4 s (the last delay) + 100 s since the last failure: still the same incident.
        tokio::time::advance(Duration::from_secs(100)).await;
        assert_eq!(
            backoff.next_delay(Instant::now()),
            Duration::from_millis(12800)
        );
        tokio::time::advance(Duration::from_secs(121)).await;
        assert_eq!(
            backoff.next_delay(Instant::now()),
            Duration::from_millis(800)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn jitter_stays_within_its_band_and_varies() {
        let mut seen = std::collections::BTreeSet::new();
        for seed in 1..50 {
            let mut backoff = Backoff::with_seed(BackoffPolicy::default(), seed);
            let delay = backoff.next_delay(Instant::now());
            assert!(delay >= Duration::from_millis(640) && delay <= Duration::from_millis(960));
            seen.insert(delay.as_micros());
        }
        assert!(seen.len() > 40, "jitter must spread the delays: {seen:?}");
    }

    #[test]
    fn between_stays_in_the_window() {
        let mut random = Xorshift::new(7);
        let low = Duration::from_secs(290);
        let high = Duration::from_secs(340);
        for _ in 0..1000 {
            let picked = random.between(low, high);
            assert!(picked >= low && picked <= high);
        }
        assert_eq!(random.between(high, low), high);
    }
}
