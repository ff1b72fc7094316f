//! Retryable or permanent, decided here and nowhere else; the backoff between attempts; and
//! the retry loop itself ([`with_retries`], backon's).
//!
//! Per the OTLP specification: gRPC `UNAVAILABLE`, `CANCELLED`, `DEADLINE_EXCEEDED`,
//! `ABORTED`, `OUT_OF_RANGE` and `DATA_LOSS` are retryable, `RESOURCE_EXHAUSTED` only when the
//! server sent a `RetryInfo`; HTTP 429, 502, 503 and 504 are retryable. Everything else is
//! permanent. Transport failures (connection refused, timeout) are retryable.

use std::future::Future;
use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder, Retryable};

use super::error::ExportError;
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

/// Exponential backoff with jitter, as the OTLP exporters' `retry_on_failure` defines it:
/// `initial × multiplier^n`, capped at `max_interval` (backon's [`ExponentialBackoff`]), each
/// wait drawn uniformly in `[w·(1−f), w·(1+f)]` for the randomization factor `f` (with
/// `fastrand`: backon's own jitter only adds up to `w`, which is not the OTLP rule). Endless:
/// `max_elapsed_time` is checked by [`with_retries`], against the time since the first
/// attempt, which includes the attempts themselves.
#[derive(Debug)]
pub struct Backoff {
    base: ExponentialBackoff,
    rng: fastrand::Rng,
    randomization: f64,
}

impl Backoff {
    /// A backoff starting at the policy's initial interval.
    pub fn new(policy: &RetryConfig) -> Self {
        Self::with_rng(policy, fastrand::Rng::new())
    }

    fn with_rng(policy: &RetryConfig, rng: fastrand::Rng) -> Self {
        let base = ExponentialBuilder::new()
            .with_min_delay(policy.initial_interval)
            .with_max_delay(policy.max_interval)
            // At least 1, checked when the configuration is read.
            .with_factor(policy.multiplier as f32)
            .without_max_times()
            .build();
        Self {
            base,
            rng,
            randomization: policy.randomization_factor,
        }
    }

    /// The next wait.
    pub fn next_wait(&mut self) -> Duration {
        // Never ends: no max_times, no total delay.
        let base = self.base.next().unwrap_or(Duration::ZERO);
        let spread = self.randomization * (2.0 * self.rng.f64() - 1.0);
        base.mul_f64((1.0 + spread).max(0.0))
    }
}

impl Iterator for Backoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.next_wait())
    }
}

/// Runs `attempt` until it succeeds, fails for good, or `max_elapsed_time` would be passed,
/// with backon's retry loop: waits per [`Backoff`], or as long as the backend asked
/// (`Retry-After`, gRPC `RetryInfo`), which is honoured as it is. `before_retry` is told of
/// each failure that will be retried, with the wait. Returns the last error when giving up.
pub async fn with_retries<T, F, Fut>(
    config: &RetryConfig,
    attempt: F,
    mut before_retry: impl FnMut(&ExportError, Duration),
) -> Result<T, ExportError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ExportError>>,
{
    let started = Instant::now();
    attempt
        .retry(Backoff::new(config))
        .when(|error: &ExportError| config.enabled && error.is_retryable())
        .adjust(|error: &ExportError, backoff| {
            let wait = error.retry_after().or(backoff)?;
            match config.max_elapsed_time {
                Some(limit) if started.elapsed() + wait > limit => {
                    tracing::warn!("giving up after {limit:?} of retries");
                    None
                }
                _ => Some(wait),
            }
        })
        .notify(|error, wait| before_retry(error, wait))
        .await
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

    fn policy(initial_ms: u64, max_ms: u64, randomization: f64) -> RetryConfig {
        RetryConfig {
            initial_interval: Duration::from_millis(initial_ms),
            max_interval: Duration::from_millis(max_ms),
            randomization_factor: randomization,
            ..RetryConfig::default()
        }
    }

    #[test]
    fn without_randomization_the_waits_are_the_exponential_sequence() {
        let config = RetryConfig {
            randomization_factor: 0.0,
            ..RetryConfig::default()
        };
        let waits: Vec<f64> = Backoff::new(&config)
            .take(8)
            .map(|w| w.as_secs_f64())
            .collect();
        let bases = [5.0, 7.5, 11.25, 16.875, 25.3125, 30.0, 30.0, 30.0];
        for (wait, base) in waits.iter().zip(bases) {
            assert!((wait - base).abs() < 1e-6, "{waits:?}");
        }
    }

    #[test]
    fn jitter_covers_the_band_and_stays_in_it() {
        let config = policy(1000, 1000, 0.5);
        let draws: Vec<f64> = (0..2000)
            .map(|_| Backoff::new(&config).next_wait().as_secs_f64())
            .collect();
        let (low, high) = draws
            .iter()
            .fold((f64::MAX, f64::MIN), |(l, h), &d| (l.min(d), h.max(d)));
        assert!(low >= 0.5 - 1e-9 && high <= 1.5 + 1e-9, "{low} {high}");
        // Uniform over [0.5, 1.5]: 2,000 draws all in the middle fifth would be a broken source.
        assert!(low < 0.6 && high > 1.4, "{low} {high}");
        let mut seeded = Backoff::with_rng(&config, fastrand::Rng::with_seed(7));
        let mut again = Backoff::with_rng(&config, fastrand::Rng::with_seed(7));
        assert_eq!(seeded.next_wait(), again.next_wait());
    }

    fn unavailable(retry_after: Option<Duration>) -> ExportError {
        ExportError::Refused {
            status: "HTTP 503".into(),
            message: "busy".into(),
            retryable: true,
            retry_after,
        }
    }

    /// Runs `with_retries` over `answers` (one per attempt, the last repeated); returns the
    /// result, the attempts made, the waits announced and the time it took.
    async fn run(
        config: &RetryConfig,
        answers: Vec<fn() -> Result<u32, ExportError>>,
    ) -> (Result<u32, ExportError>, usize, Vec<Duration>, Duration) {
        let attempts = std::sync::atomic::AtomicUsize::new(0);
        let mut waits = Vec::new();
        let started = Instant::now();
        let result = with_retries(
            config,
            || {
                let n = attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let answer = answers[n.min(answers.len() - 1)];
                async move { answer() }
            },
            |_, wait| waits.push(wait),
        )
        .await;
        (result, attempts.into_inner(), waits, started.elapsed())
    }

    #[tokio::test]
    async fn retryable_failures_are_retried_until_success() {
        let config = policy(2, 8, 0.5);
        let (result, attempts, waits, _) = run(
            &config,
            vec![
                || Err(unavailable(None)),
                || Err(ExportError::Transport("refused".into())),
                || Ok(7),
            ],
        )
        .await;
        assert_eq!(result.unwrap(), 7);
        assert_eq!(attempts, 3);
        assert_eq!(waits.len(), 2);
        assert!(waits[0] >= Duration::from_millis(1) && waits[0] <= Duration::from_millis(3));
    }

    #[tokio::test]
    async fn permanent_errors_and_disabled_retries_stop_at_once() {
        let (result, attempts, waits, _) = run(
            &policy(2, 8, 0.0),
            vec![|| Err(ExportError::Payload("bad".into()))],
        )
        .await;
        assert!(matches!(result, Err(ExportError::Payload(_))));
        assert_eq!((attempts, waits.len()), (1, 0));
        let disabled = RetryConfig {
            enabled: false,
            ..policy(2, 8, 0.0)
        };
        let (result, attempts, _, _) = run(&disabled, vec![|| Err(unavailable(None))]).await;
        assert!(result.is_err());
        assert_eq!(attempts, 1);
    }

    #[tokio::test]
    async fn the_backends_delay_is_honoured_over_the_backoff() {
        let (result, attempts, waits, took) = run(
            &policy(1, 1, 0.0),
            vec![|| Err(unavailable(Some(Duration::from_millis(60)))), || {
                Ok(1)
            }],
        )
        .await;
        assert_eq!(result.unwrap(), 1);
        assert_eq!(attempts, 2);
        assert_eq!(waits, [Duration::from_millis(60)]);
        assert!(took >= Duration::from_millis(60), "{took:?}");
    }

    #[tokio::test]
    async fn max_elapsed_time_ends_the_retries() {
        // A backend delay beyond the limit: given up at once, without waiting.
        let limited = RetryConfig {
            max_elapsed_time: Some(Duration::from_millis(40)),
            ..policy(5, 5, 0.0)
        };
        let (result, attempts, _, took) = run(
            &limited,
            vec![|| Err(unavailable(Some(Duration::from_secs(60))))],
        )
        .await;
        assert!(result.unwrap_err().is_retryable());
        assert_eq!(attempts, 1);
        assert!(took < Duration::from_secs(5), "{took:?}");
        // Backoff waits of 5 ms: several attempts, none starting a wait past 40 ms.
        let (result, attempts, waits, took) = run(&limited, vec![|| Err(unavailable(None))]).await;
        assert!(result.is_err());
        assert!(attempts >= 2, "{attempts}");
        assert_eq!(waits.len(), attempts - 1);
        assert!(
            took < Duration::from_millis(40) + Duration::from_secs(1),
            "{took:?}"
        );
    }
}
