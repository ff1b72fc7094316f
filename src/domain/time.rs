//! Timestamps: nanoseconds since the Unix epoch inside, RFC 3339 UTC with nanoseconds outside.

use chrono::{DateTime, SecondsFormat, Utc};

/// Nanoseconds since the Unix epoch, as OTLP carries them.
pub type Nanos = u64;

/// Formats nanoseconds as fixed-width RFC 3339 UTC (`2026-11-22T10:00:00.123456789Z`), so the
/// strings sort as text in time order.
pub fn format_timestamp(nanos: Nanos) -> String {
    let secs = (nanos / 1_000_000_000) as i64;
    let sub = (nanos % 1_000_000_000) as u32;
    match DateTime::<Utc>::from_timestamp(secs, sub) {
        Some(t) => t.to_rfc3339_opts(SecondsFormat::Nanos, true),
        None => "1970-01-01T00:00:00.000000000Z".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_width_nanoseconds() {
        assert_eq!(format_timestamp(0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(
            format_timestamp(1_795_860_000_123_456_789),
            "2026-11-28T10:00:00.123456789Z"
        );
    }
}
