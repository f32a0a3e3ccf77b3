//! Timestamps and ages, the way the Kubernetes API writes them: RFC 3339 in UTC, and the
//! short "5m10s" ages kubectl prints in its AGE column.
//!
//! Part of WORKSHOP.md "Set-up: the sandbox". We write the calendar arithmetic by
//! hand (no chrono): days since 1970 become a civil date with Howard Hinnant's
//! `civil_from_days`, and back with `days_from_civil`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

const SECONDS_PER_DAY: i64 = 86_400;

/// The current time as Kubernetes writes `metadata.creationTimestamp`: `2026-11-22T10:00:00Z`.
pub fn now_rfc3339() -> String {
    format_rfc3339(SystemTime::now())
}

/// Formats `time` to whole seconds in UTC.
///
/// `metav1.Time` serialises with second precision and a `Z` suffix, so that is what kubectl
/// and every client expect in `creationTimestamp`, `lastTimestamp` and condition times.
pub fn format_rfc3339(time: SystemTime) -> String {
    let (seconds, _nanos) = split_unix(time);
    format_unix_seconds(seconds)
}

/// Parses an RFC 3339 timestamp: `2026-11-22T10:00:00Z`, with optional fractional seconds and
/// either `Z` or a numeric offset (`+01:00`). Returns `None` for anything else.
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let bytes = text.as_bytes();
    if bytes.len() < 20 {
        return None;
    }
    let number = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = text.get(range)?;
        if !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        part.parse().ok()
    };
    let year = number(0..4)?;
    let month = number(5..7)?;
    let day = number(8..10)?;
    let hour = number(11..13)?;
    let minute = number(14..16)?;
    let second = number(17..19)?;
    if bytes[4] != b'-' || bytes[7] != b'-' || bytes[13] != b':' || bytes[16] != b':' {
        return None;
    }
    if !matches!(bytes[10], b'T' | b't') {
        return None;
    }
    // Leap seconds (60) are allowed by RFC 3339; Go folds them into the next minute, and so do we.
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }

    let mut rest = &text[19..];
    let mut nanos: u32 = 0;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        // Keep nanosecond precision; further digits cannot be represented and are dropped.
        for (position, digit) in fraction.bytes().take(digits).enumerate() {
            if position < 9 {
                nanos = nanos * 10 + u32::from(digit - b'0');
            }
        }
        for _ in digits..9 {
            nanos *= 10;
        }
        rest = &fraction[digits..];
    }

    let offset_seconds = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let offset = rest.get(1..)?;
            if offset.len() != 5 || offset.as_bytes()[2] != b':' {
                return None;
            }
            let hours: i64 = offset[..2].parse().ok()?;
            let minutes: i64 = offset[3..].parse().ok()?;
            if hours > 23 || minutes > 59 {
                return None;
            }
            sign * (hours * 3600 + minutes * 60)
        }
    };

    let days = days_from_civil(year, month as u32, day as u32);
    let local_seconds = days * SECONDS_PER_DAY + hour * 3600 + minute * 60 + second;
    let utc_seconds = local_seconds - offset_seconds;
    from_unix(utc_seconds, nanos)
}

/// How long ago something happened, in kubectl's AGE style: a port of apimachinery's
/// `duration.HumanDuration` (k8s.io/apimachinery/pkg/util/duration), which gives two or three
/// significant figures: `45s`, `119s`, `5m10s`, `15m`, `2h5m`, `10h`, `3d4h`, `20d`, `2y30d`, `9y`.
pub fn format_age(age: Duration) -> String {
    let seconds = age.as_secs();
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let remainder = seconds % 60;
        if remainder == 0 {
            return format!("{minutes}m");
        }
        return format!("{minutes}m{remainder}s");
    } else if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let remainder = minutes % 60;
        if remainder == 0 {
            return format!("{hours}h");
        }
        return format!("{hours}h{remainder}m");
    } else if hours < 48 {
        return format!("{hours}h");
    } else if hours < 24 * 8 {
        let remainder = hours % 24;
        if remainder == 0 {
            return format!("{}d", hours / 24);
        }
        return format!("{}d{}h", hours / 24, remainder);
    } else if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    } else if hours < 24 * 365 * 8 {
        let days_in_year = (hours / 24) % 365;
        if days_in_year == 0 {
            return format!("{}y", hours / 24 / 365);
        }
        return format!("{}y{}d", hours / 24 / 365, days_in_year);
    }
    format!("{}y", hours / 24 / 365)
}

/// The AGE of an object created at `created`, seen at `now`.
///
/// apimachinery tolerates clocks that disagree by under two seconds: a creation time up to
/// 1.999s in the future still prints `0s`; further in the future prints `<invalid>`.
pub fn format_age_between(created: SystemTime, now: SystemTime) -> String {
    match now.duration_since(created) {
        Ok(age) => format_age(age),
        Err(ahead) if ahead.duration().as_secs() < 2 => "0s".to_string(),
        Err(_) => "<invalid>".to_string(),
    }
}

/// The AGE column for an RFC 3339 `creationTimestamp`; `<unknown>` if it does not parse,
/// which is what kubectl prints for a missing timestamp.
pub fn format_age_of_timestamp(timestamp: &str, now: SystemTime) -> String {
    match parse_rfc3339(timestamp) {
        Some(created) => format_age_between(created, now),
        None => "<unknown>".to_string(),
    }
}

fn split_unix(time: SystemTime) -> (i64, u32) {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => (after.as_secs() as i64, after.subsec_nanos()),
        Err(before) => {
            let before = before.duration();
            let mut seconds = -(before.as_secs() as i64);
            let mut nanos = before.subsec_nanos();
            if nanos > 0 {
                seconds -= 1;
                nanos = 1_000_000_000 - nanos;
            }
            (seconds, nanos)
        }
    }
}

fn from_unix(seconds: i64, nanos: u32) -> Option<SystemTime> {
    if seconds >= 0 {
        UNIX_EPOCH.checked_add(Duration::new(seconds as u64, nanos))
    } else {
        UNIX_EPOCH
            .checked_sub(Duration::from_secs(seconds.unsigned_abs()))?
            .checked_add(Duration::new(0, nanos))
    }
}

fn format_unix_seconds(seconds: i64) -> String {
    let days = seconds.div_euclid(SECONDS_PER_DAY);
    let second_of_day = seconds.rem_euclid(SECONDS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        year,
        month,
        day,
        second_of_day / 3600,
        (second_of_day % 3600) / 60,
        second_of_day % 60
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar.
/// Howard Hinnant's algorithm: count in 400-year eras whose years start on March 1st, so the
/// leap day falls at the end of the year and month lengths follow a simple pattern.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let shifted = days + 719_468; // days from 0000-03-01 to 1970-01-01
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097); // [0, 146096]
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153; // [0, 11]
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// (year, month, day) to days since 1970-01-01; the inverse of [`civil_from_days`].
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month_from_march = i64::from(if month > 2 { month - 3 } else { month + 9 });
    let day_of_year = (153 * month_from_march + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        _ => 28,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds)
    }

    /// The epoch and a known modern instant format exactly as Kubernetes writes them.
    #[test]
    fn formats_known_instants() {
        assert_eq!(format_rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        // date -u -d @1795341600 → Sun Nov 22 10:00:00 UTC 2026
        assert_eq!(format_rfc3339(at(1_795_341_600)), "2026-11-22T10:00:00Z");
        // A leap day.
        assert_eq!(format_rfc3339(at(951_782_400)), "2000-02-29T00:00:00Z");
        assert_eq!(
            format_rfc3339(at(1_795_341_600) + Duration::from_millis(1500)),
            "2026-11-22T10:00:01Z"
        );
    }

    /// Times before 1970 format and parse too (SystemTime can hold them).
    #[test]
    fn before_the_epoch() {
        let time = UNIX_EPOCH - Duration::from_secs(1);
        assert_eq!(format_rfc3339(time), "1969-12-31T23:59:59Z");
        assert_eq!(parse_rfc3339("1969-12-31T23:59:59Z"), Some(time));
    }

    /// Parsing accepts Z, fractions and numeric offsets, and folds offsets into UTC.
    #[test]
    fn parses_variants() {
        let ten = at(1_795_341_600);
        assert_eq!(parse_rfc3339("2026-11-22T10:00:00Z"), Some(ten));
        assert_eq!(parse_rfc3339("2026-11-22t10:00:00z"), Some(ten));
        assert_eq!(
            parse_rfc3339("2026-11-22T10:00:00.5Z"),
            Some(ten + Duration::from_millis(500))
        );
        assert_eq!(
            parse_rfc3339("2026-11-22T10:00:00.123456789123Z"),
            Some(ten + Duration::from_nanos(123_456_789))
        );
        assert_eq!(parse_rfc3339("2026-11-22T11:30:00+01:30"), Some(ten));
        assert_eq!(parse_rfc3339("2026-11-22T08:00:00-02:00"), Some(ten));
    }

    /// Malformed timestamps are rejected rather than guessed at.
    #[test]
    fn rejects_malformed() {
        for bad in [
            "",
            "2026-11-22",
            "2026-11-22 10:00:00Z",
            "2026-13-22T10:00:00Z",
            "2026-02-29T10:00:00Z",
            "2026-11-22T24:00:00Z",
            "2026-11-22T10:00:00",
            "2026-11-22T10:00:00.Z",
            "2026-11-22T10:00:00+0100",
            "2026-11-22T10:00:00Zjunk",
            "２026-11-22T10:00:00Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad:?} should not parse");
        }
    }

    /// Every branch of apimachinery's HumanDuration, at and around its boundaries.
    #[test]
    fn age_matches_human_duration() {
        let cases: &[(u64, &str)] = &[
            (0, "0s"),
            (45, "45s"),
            (119, "119s"),
            (120, "2m"),
            (310, "5m10s"),
            (599, "9m59s"),
            (600, "10m"),
            (179 * 60 + 59, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 5 * 60, "3h5m"),
            (7 * 3600 + 59 * 60, "7h59m"),
            (8 * 3600, "8h"),
            (47 * 3600, "47h"),
            (48 * 3600, "2d"),
            (3 * 86_400 + 4 * 3600, "3d4h"),
            (8 * 86_400, "8d"),
            (729 * 86_400, "729d"),
            (730 * 86_400, "2y"),
            (760 * 86_400, "2y30d"),
            (8 * 365 * 86_400, "8y"),
            (20 * 365 * 86_400 + 100 * 86_400, "20y"),
        ];
        for (seconds, expected) in cases {
            assert_eq!(
                format_age(Duration::from_secs(*seconds)),
                *expected,
                "{seconds}s"
            );
        }
    }

    /// Clock skew under two seconds reads as "0s"; more is flagged as invalid.
    #[test]
    fn age_tolerates_small_skew() {
        let now = at(1_000_000);
        assert_eq!(
            format_age_between(now + Duration::from_millis(1900), now),
            "0s"
        );
        assert_eq!(
            format_age_between(now + Duration::from_secs(2), now),
            "<invalid>"
        );
        assert_eq!(
            format_age_between(now - Duration::from_secs(310), now),
            "5m10s"
        );
        assert_eq!(format_age_of_timestamp("garbage", now), "<unknown>");
    }

    /// `now_rfc3339` produces something `parse_rfc3339` reads back.
    #[test]
    fn now_round_trips() {
        let now = now_rfc3339();
        assert!(parse_rfc3339(&now).is_some(), "{now}");
    }

    proptest! {
        /// Formatting then parsing gives back the same whole second, from year 0001 to 9999.
        #[test]
        fn format_parse_round_trip(seconds in -62_135_596_800i64..253_402_300_799i64) {
            let time = from_unix(seconds, 0).unwrap();
            let text = format_rfc3339(time);
            prop_assert_eq!(parse_rfc3339(&text), Some(time), "{}", text);
        }

        /// civil_from_days and days_from_civil are inverses.
        #[test]
        fn calendar_round_trip(days in -800_000i64..800_000i64) {
            let (year, month, day) = civil_from_days(days);
            prop_assert!((1..=12).contains(&month));
            prop_assert!(day >= 1 && i64::from(day) <= days_in_month(year, i64::from(month)));
            prop_assert_eq!(days_from_civil(year, month, day), days);
        }
    }
}
