//! Retryable or permanent, decided here and nowhere else; and the backoff between attempts.
//!
//! Per the OTLP specification: gRPC `UNAVAILABLE`, `CANCELLED`, `DEADLINE_EXCEEDED`,
//! `ABORTED`, `OUT_OF_RANGE` and `DATA_LOSS` are retryable, `RESOURCE_EXHAUSTED` only when the
//! server sent a `RetryInfo`; HTTP 429, 502, 503 and 504 are retryable. Everything else is
//! permanent. Transport failures (connection refused, timeout) are retryable.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use crate::config::RetryConfig;

/// Whether a gRPC answer may be retried.
pub fn grpc_is_retryable(code: tonic::Code, has_retry_info: bool) -> bool {
    use tonic::Code as C;
    match code {
        C::Unavailable
        | C::Cancelled
        | C::DeadlineExceeded
        | C::Aborted
        | C::OutOfRange
        | C::DataLoss => true,
        C::ResourceExhausted => has_retry_info,
        _ => false,
    }
}

/// Whether an HTTP answer may be retried.
pub fn http_is_retryable(status: http::StatusCode) -> bool {
    matches!(status.as_u16(), 429 | 502 | 503 | 504)
}

/// Exponential backoff with jitter: `initial × multiplier^n`, capped at `max_interval`, each
/// wait drawn uniformly in `[w·(1−f), w·(1+f)]`.
#[derive(Debug)]
pub struct Backoff {
    next: Duration,
    max: Duration,
    multiplier: f64,
    randomization: f64,
}

impl Backoff {
    /// A backoff starting at the policy's initial interval.
    pub fn new(policy: &RetryConfig) -> Self {
        Self {
            next: policy.initial_interval,
            max: policy.max_interval,
            multiplier: policy.multiplier,
            randomization: policy.randomization_factor,
        }
    }

    /// The next wait.
    pub fn next_wait(&mut self) -> Duration {
        let base = self.next;
        self.next = base.mul_f64(self.multiplier).min(self.max);
        let spread = self.randomization * (2.0 * unit_random() - 1.0);
        base.mul_f64((1.0 + spread).max(0.0))
    }
}

/// A number in `[0, 1)`, random enough for jitter (std's per-instance random hash keys).
fn unit_random() -> f64 {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    );
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_codes_follow_the_spec() {
        use tonic::Code as C;
        for code in [
            C::Unavailable,
            C::Cancelled,
            C::DeadlineExceeded,
            C::Aborted,
            C::OutOfRange,
            C::DataLoss,
        ] {
            assert!(grpc_is_retryable(code, false), "{code:?}");
        }
        assert!(!grpc_is_retryable(C::ResourceExhausted, false));
        assert!(grpc_is_retryable(C::ResourceExhausted, true));
        for code in [
            C::InvalidArgument,
            C::Unauthenticated,
            C::Internal,
            C::Unknown,
        ] {
            assert!(!grpc_is_retryable(code, false), "{code:?}");
        }
        for status in [429, 502, 503, 504] {
            assert!(http_is_retryable(
                http::StatusCode::from_u16(status).unwrap()
            ));
        }
        for status in [400, 401, 404, 413, 500] {
            assert!(!http_is_retryable(
                http::StatusCode::from_u16(status).unwrap()
            ));
        }
    }

    #[test]
    fn backoff_grows_to_its_cap_with_bounded_jitter() {
        let mut backoff = Backoff::new(&RetryConfig::default());
        let waits: Vec<Duration> = (0..8).map(|_| backoff.next_wait()).collect();
        let bases = [5.0, 7.5, 11.25, 16.875, 25.3125, 30.0, 30.0, 30.0];
        for (wait, base) in waits.iter().zip(bases) {
            let secs = wait.as_secs_f64();
            assert!(
                secs >= base * 0.5 - 1e-9 && secs <= base * 1.5 + 1e-9,
                "{secs} vs {base}"
            );
        }
    }
}
