//! Timestamps as text. The CI API speaks unix seconds; the events feed speaks RFC 3339.

/// `unix_ms` as RFC 3339 in UTC with milliseconds, e.g. `2017-06-15T21:54:10.025Z`.
pub fn rfc3339_millis(unix_ms: i64) -> String {
    let mut out = String::with_capacity(24);
    push_rfc3339_millis(&mut out, unix_ms);
    out
}

/// [`rfc3339_millis`] appended to `out`: digits written by hand, as the events feed writes
/// one per event (through `format!` it was a third of rendering an event).
pub fn push_rfc3339_millis(out: &mut String, unix_ms: i64) {
    let secs = unix_ms.div_euclid(1000);
    let millis = unix_ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    if !(0..=9999).contains(&y) {
        out.push_str(&format!(
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
            rem / 3600,
            (rem % 3600) / 60,
            rem % 60
        ));
        return;
    }
    push_digits(out, y, 4);
    let fields = [
        (i64::from(m), 2, '-'),
        (i64::from(d), 2, 'T'),
        (rem / 3600, 2, ':'),
        ((rem % 3600) / 60, 2, ':'),
        (rem % 60, 2, '.'),
        (millis, 3, 'Z'),
    ];
    let mut separator = '-';
    for (value, width, next) in fields {
        out.push(separator);
        push_digits(out, value, width);
        separator = next;
    }
    out.push(separator);
}

/// The last `width` decimal digits of `value` (0 ≤ value), zero-padded.
fn push_digits(out: &mut String, value: i64, width: u32) {
    for i in (0..width).rev() {
        let digit = (value / 10i64.pow(i)) % 10;
        out.push(char::from(b'0' + digit as u8));
    }
}

/// `unix_secs` as RFC 3339 in UTC without fractions, e.g. `2017-06-15T21:54:10Z`.
pub fn rfc3339_seconds(unix_secs: i64) -> String {
    let ms = rfc3339_millis(unix_secs.saturating_mul(1000));
    format!("{}Z", &ms[..19])
}

/// Parses an RFC 3339 time (`2024-05-01T10:00:00Z`, fractional seconds and `±HH:MM` offsets
/// allowed) into unix seconds.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = s.get(r)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut rest = &s[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let tz = &rest[1..];
            if tz.len() != 5 || tz.as_bytes()[2] != b':' {
                return None;
            }
            let oh: i64 = tz[0..2].parse().ok()?;
            let om: i64 = tz[3..5].parse().ok()?;
            sign * (oh * 3600 + om * 60)
        }
    };
    let days = days_from_civil(y, mo as u32, d as u32);
    Some(days * 86_400 + h * 3600 + mi * 60 + sec - offset)
}

/// (year, month, day) → days since 1970-01-01 (inverse of [`civil_from_days`]).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Days since 1970-01-01 → (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_by_hand_as_format_writes() {
        for ms in [
            0,
            1,
            999,
            86_399_999,
            951_782_400_000,
            1_497_563_650_025,
            253_402_300_799_999,
        ] {
            let secs = ms / 1000;
            let (y, m, d) = civil_from_days(secs / 86_400);
            let rem = secs % 86_400;
            let expected = format!(
                "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
                rem / 3600,
                (rem % 3600) / 60,
                rem % 60,
                ms % 1000
            );
            assert_eq!(rfc3339_millis(ms), expected);
        }
        // Outside four-digit years the slow path keeps `format!`'s rendering.
        assert!(rfc3339_millis(253_402_300_800_000).starts_with("10000-01-01T"));
    }

    #[test]
    fn known_instants() {
        assert_eq!(rfc3339_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339_millis(1_497_563_650_025),
            "2017-06-15T21:54:10.025Z"
        );
        assert_eq!(rfc3339_millis(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(
            rfc3339_millis(1_795_246_336_999),
            "2026-11-21T07:32:16.999Z"
        );
        assert_eq!(rfc3339_millis(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(rfc3339_seconds(1_497_563_650), "2017-06-15T21:54:10Z");
    }

    #[test]
    fn parsing() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339("2017-06-15T21:54:10.025Z"),
            Some(1_497_563_650)
        );
        assert_eq!(
            parse_rfc3339("2017-06-15T23:54:10+02:00"),
            Some(1_497_563_650)
        );
        assert_eq!(parse_rfc3339("2000-02-29T00:00:00Z"), Some(951_782_400));
        for bad in [
            "",
            "2017-06-15",
            "2017-13-01T00:00:00Z",
            "2017-06-15T21:54:10",
            "2017-06-15T21:54:10+0200",
            "x017-06-15T21:54:10Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }
}
