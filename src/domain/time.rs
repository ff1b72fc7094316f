//! Timestamps: nanoseconds since the Unix epoch inside, RFC 3339 UTC with nanoseconds outside.

/// Nanoseconds since the Unix epoch, as OTLP carries them.
pub type Nanos = u64;

/// Bytes of a formatted timestamp (`2026-11-22T10:00:00.123456789Z`).
pub const TIMESTAMP_BYTES: usize = 30;

/// Formats nanoseconds as fixed-width RFC 3339 UTC (`2026-11-22T10:00:00.123456789Z`), so the
/// strings sort as text in time order.
pub fn format_timestamp(nanos: Nanos) -> String {
    let bytes = timestamp_bytes(nanos);
    // Every byte written is an ASCII digit or separator: the text is taken whole (borrowed, then
    // copied once), not pushed a char at a time.
    String::from_utf8_lossy(&bytes).into_owned()
}

/// [`format_timestamp`]'s text as bytes, made without allocating (continuations write one per
/// message). Every `u64` of nanoseconds falls in years 1970–2554, so the year has four digits.
pub fn timestamp_bytes(nanos: Nanos) -> [u8; TIMESTAMP_BYTES] {
    let secs = nanos / 1_000_000_000;
    let sub = nanos % 1_000_000_000;
    let days = secs / 86_400;
    let of_day = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    let mut out = *b"0000-00-00T00:00:00.000000000Z";
    put_digits(&mut out[0..4], year);
    put_digits(&mut out[5..7], month);
    put_digits(&mut out[8..10], day);
    put_digits(&mut out[11..13], of_day / 3600);
    put_digits(&mut out[14..16], of_day % 3600 / 60);
    put_digits(&mut out[17..19], of_day % 60);
    put_digits(&mut out[20..29], sub);
    out
}

/// The nanoseconds `text` is the [`format_timestamp`] text of, if it is one (any other text,
/// even another RFC 3339 form of the same time, gives none): read field by field, then checked
/// by formatting the time again, so a day or hour out of range never passes.
pub fn parse_timestamp(text: &str) -> Option<Nanos> {
    let bytes: &[u8; TIMESTAMP_BYTES] = text.as_bytes().try_into().ok()?;
    let field = |from: usize, to: usize| -> Option<u64> {
        bytes[from..to].iter().try_fold(0u64, |n, &b| {
            b.is_ascii_digit().then(|| n * 10 + u64::from(b - b'0'))
        })
    };
    let days = days_from_civil(field(0, 4)?, field(5, 7)?, field(8, 10)?)?;
    let secs = days
        .checked_mul(86_400)?
        .checked_add(field(11, 13)? * 3600 + field(14, 16)? * 60 + field(17, 19)?)?;
    let nanos = secs
        .checked_mul(1_000_000_000)?
        .checked_add(field(20, 29)?)?;
    (timestamp_bytes(nanos) == *bytes).then_some(nanos)
}

/// The day counted from 1970-01-01 of a proleptic Gregorian date (the inverse of
/// [`civil_from_days`]); none before the epoch or for a month out of range.
fn days_from_civil(year: u64, month: u64, day: u64) -> Option<u64> {
    if !(1..=12).contains(&month) {
        return None;
    }
    let year = if month <= 2 {
        year.checked_sub(1)?
    } else {
        year
    };
    let era = year / 400;
    let yoe = year - era * 400;
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day.checked_sub(1)?;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe).checked_sub(719_468)
}

/// The two-digit decimal texts of 0 to 99, in order.
static PAIRS: [u8; 200] = {
    let mut table = [0u8; 200];
    let mut n = 0;
    while n < 100 {
        table[2 * n] = b'0' + (n / 10) as u8;
        table[2 * n + 1] = b'0' + (n % 10) as u8;
        n += 1;
    }
    table
};

/// Writes `value` in decimal into `slot`, zero-padded on the left to its width (two digits at a
/// time; higher digits than the slot holds are dropped).
fn put_digits(slot: &mut [u8], mut value: u64) {
    let mut end = slot.len();
    while end >= 2 {
        let pair = 2 * (value % 100) as usize;
        value /= 100;
        slot[end - 2..end].copy_from_slice(&PAIRS[pair..pair + 2]);
        end -= 2;
    }
    if end == 1 {
        slot[0] = b'0' + (value % 10) as u8;
    }
}

/// The proleptic Gregorian date of a day counted from 1970-01-01 (the days-to-civil algorithm
/// of H. Hinnant's date library, for days on or after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    // Shifted so eras start on 0000-03-01: 719,468 days before the epoch.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, SecondsFormat, Utc};
    use proptest::prelude::*;

    /// The same text as chrono's RFC 3339 with nanoseconds.
    fn by_chrono(nanos: Nanos) -> String {
        let secs = (nanos / 1_000_000_000) as i64;
        let sub = (nanos % 1_000_000_000) as u32;
        DateTime::<Utc>::from_timestamp(secs, sub)
            .map(|t| t.to_rfc3339_opts(SecondsFormat::Nanos, true))
            .unwrap_or_default()
    }

    #[test]
    fn fixed_width_nanoseconds() {
        assert_eq!(format_timestamp(0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(
            format_timestamp(1_795_860_000_123_456_789),
            "2026-11-28T10:00:00.123456789Z"
        );
        // Leap days, the turn of a century that is not a leap year, and the last nanosecond.
        for nanos in [
            951_782_400_000_000_000,   // 2000-02-29
            4_107_542_400_000_000_000, // 2100-03-01
            4_107_542_399_999_999_999,
            u64::MAX,
        ] {
            assert_eq!(format_timestamp(nanos), by_chrono(nanos));
        }
        assert_eq!(format_timestamp(u64::MAX), "2554-07-21T23:34:33.709551615Z");
    }

    #[test]
    fn only_canonical_texts_parse() {
        assert_eq!(parse_timestamp("1970-01-01T00:00:00.000000000Z"), Some(0));
        assert_eq!(
            parse_timestamp("2026-11-28T10:00:00.123456789Z"),
            Some(1_795_860_000_123_456_789)
        );
        assert_eq!(
            parse_timestamp("2554-07-21T23:34:33.709551615Z"),
            Some(u64::MAX)
        );
        for text in [
            "2554-07-21T23:34:33.709551616Z", // one past the last nanosecond
            "2026-02-30T10:00:00.000000000Z",
            "2026-11-28T24:00:00.000000000Z",
            "2026-13-01T10:00:00.000000000Z",
            "2026-00-01T10:00:00.000000000Z",
            "2026-11-00T10:00:00.000000000Z",
            "1969-12-31T23:59:59.999999999Z",
            "2026-11-28T10:00:00Z",
            "2026-11-28T10:00:00.123456789+00:00",
            "2026-11-28 10:00:00.123456789Z",
            "2026-11-28T10:00:00.12345678aZ",
            "+026-11-28T10:00:00.123456789Z",
            "",
        ] {
            assert_eq!(parse_timestamp(text), None, "{text}");
        }
    }

    proptest! {
        #[test]
        fn formats_as_chrono_does(nanos in any::<u64>()) {
            prop_assert_eq!(format_timestamp(nanos), by_chrono(nanos));
        }

        #[test]
        fn parses_what_it_formats(nanos in any::<u64>()) {
            prop_assert_eq!(parse_timestamp(&format_timestamp(nanos)), Some(nanos));
        }

        #[test]
        fn a_parsed_text_is_the_formatted_one(text in "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{9}Z") {
            if let Some(nanos) = parse_timestamp(&text) {
                prop_assert_eq!(format_timestamp(nanos), text);
            }
        }

        #[test]
        fn every_day_of_four_centuries_formats_as_chrono_does(day in 0u64..146_097 * 2, second in 0u64..86_400) {
            let nanos = (day * 86_400 + second) * 1_000_000_000 + 7;
            prop_assert_eq!(format_timestamp(nanos), by_chrono(nanos));
        }
    }
}
