//! Durations as written in the config: `500ms`, `30s`, `10m`, `1h`, `30d`, `1m30s`, `1.5h`, `0`.

use std::time::Duration;

const HINT: &str = "use ms, s, m or h, e.g. \"30s\", \"10m\" or \"1m30s\"";

/// Parses a duration: one or more `<number><unit>` terms, unit `ms`, `s`, `m`, `h` or `d`, numbers
/// possibly with a fraction (`1.5h`); unit `d` is 24 hours. A bare `0` is zero. Returns a
/// message on error.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(format!("empty duration; {HINT}"));
    }
    if trimmed == "0" {
        return Ok(Duration::ZERO);
    }
    if trimmed.starts_with('-') {
        return Err(format!(
            "invalid duration {text:?}: negative durations are not allowed"
        ));
    }
    let mut total: u128 = 0;
    let mut rest = trimmed.strip_prefix('+').unwrap_or(trimmed);
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number = &rest[..number_len];
        rest = &rest[number_len..];
        if number.is_empty() {
            return Err(format!(
                "invalid duration {text:?}: expected a number before {rest:?}; {HINT}"
            ));
        }
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let unit_nanos: u128 = match unit {
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 3_600 * 1_000_000_000,
            "d" => 86_400 * 1_000_000_000,
            "" => {
                return Err(format!(
                    "invalid duration {text:?}: missing unit after {number:?}; {HINT}"
                ))
            }
            other => {
                return Err(format!(
                    "invalid duration {text:?}: unknown unit {other:?}; {HINT}"
                ))
            }
        };
        let nanos = term_nanos(number, unit_nanos).ok_or_else(|| {
            format!("invalid duration {text:?}: {number:?} is not a valid number")
        })?;
        total = total
            .checked_add(nanos)
            .ok_or_else(|| format!("invalid duration {text:?}: too large"))?;
    }
    let nanos =
        u64::try_from(total).map_err(|_| format!("invalid duration {text:?}: too large"))?;
    Ok(Duration::from_nanos(nanos))
}

/// `number` (digits with at most one `.`) times `unit_nanos`; `None` if malformed or too large.
fn term_nanos(number: &str, unit_nanos: u128) -> Option<u128> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
        return None;
    }
    let whole_value: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let mut nanos = whole_value.checked_mul(unit_nanos)?;
    // Digits past nanosecond precision of an hour (13 digits) cannot matter; ignore them.
    let fraction = &fraction[..fraction.len().min(18)];
    if !fraction.is_empty() {
        let digits: u128 = fraction.parse().ok()?;
        let scale = 10u128.checked_pow(u32::try_from(fraction.len()).ok()?)?;
        nanos = nanos.checked_add(digits.checked_mul(unit_nanos)? / scale)?;
    }
    Some(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_unit_and_combinations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(
            parse_duration("30d").unwrap(),
            Duration::from_secs(30 * 86_400)
        );
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(
            parse_duration("1h2m3s4ms").unwrap(),
            Duration::from_millis(3_723_004)
        );
        assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("0.25s").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration(" 0s ").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
    }

    #[test]
    fn rejects_malformed_durations_with_clear_messages() {
        let missing = parse_duration("10").unwrap_err();
        assert!(missing.contains("missing unit"), "{missing}");
        let unknown = parse_duration("10x").unwrap_err();
        assert!(unknown.contains("unknown unit \"x\""), "{unknown}");
        let nanos = parse_duration("10ns").unwrap_err();
        assert!(nanos.contains("unknown unit \"ns\""), "{nanos}");
        assert!(parse_duration("").unwrap_err().contains("empty duration"));
        assert!(parse_duration("-5s").unwrap_err().contains("negative"));
        assert!(parse_duration("s")
            .unwrap_err()
            .contains("expected a number"));
        assert!(parse_duration("1.2.3s")
            .unwrap_err()
            .contains("not a valid number"));
        assert!(parse_duration("99999999999999999999h")
            .unwrap_err()
            .contains("too large"));
    }
}
