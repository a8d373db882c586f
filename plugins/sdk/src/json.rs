//! Tolerant accessors over `serde_json::Value` with JSON-pointer paths (`/repository/name`):
//! missing or mistyped fields read as empty, which is what webhook parsing wants.

use serde_json::Value;

/// The string at `ptr`, or `""`. Numbers are rendered as text (ids).
pub fn str_at(v: &Value, ptr: &str) -> String {
    match v.pointer(ptr) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    }
}

/// The first non-empty string among `ptrs`.
pub fn first_str(v: &Value, ptrs: &[&str]) -> String {
    ptrs.iter()
        .map(|p| str_at(v, p))
        .find(|s| !s.is_empty())
        .unwrap_or_default()
}

pub fn bool_at(v: &Value, ptr: &str) -> bool {
    v.pointer(ptr).and_then(Value::as_bool).unwrap_or(false)
}

pub fn u64_at(v: &Value, ptr: &str) -> Option<u64> {
    v.pointer(ptr).and_then(Value::as_u64)
}

/// The array at `ptr` (empty if absent).
pub fn array_at<'a>(v: &'a Value, ptr: &str) -> &'a [Value] {
    v.pointer(ptr)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The strings of the array at `ptr`.
pub fn strings_at(v: &Value, ptr: &str) -> Vec<String> {
    array_at(v, ptr)
        .iter()
        .filter_map(|x| x.as_str().map(str::to_string))
        .collect()
}

/// Parses an RFC 3339 timestamp (`2024-05-01T12:00:00Z`, `...+02:00`, fractions allowed)
/// into Unix seconds; 0 when it is not one.
pub fn rfc3339_to_unix(s: &str) -> i64 {
    fn num(s: &str) -> Option<i64> {
        s.parse().ok()
    }
    let b = s.as_bytes();
    // Byte slicing below must not split a character: timestamps are ASCII.
    if !s.is_ascii()
        || b.len() < 19
        || b[4] != b'-'
        || b[7] != b'-'
        || (b[10] != b'T' && b[10] != b' ')
    {
        return 0;
    }
    let (Some(y), Some(mo), Some(d), Some(h), Some(mi), Some(sec)) = (
        num(&s[0..4]),
        num(&s[5..7]),
        num(&s[8..10]),
        num(&s[11..13]),
        num(&s[14..16]),
        num(&s[17..19]),
    ) else {
        return 0;
    };
    let mut rest = &s[19..];
    if let Some(r) = rest.strip_prefix('.') {
        rest = r.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    let offset = match rest {
        "" | "Z" | "z" => 0,
        // `+02:00`, or `+0200` as Bitbucket Data Center writes it.
        r if (r.len() == 6 && r.as_bytes()[3] == b':' || r.len() == 5)
            && (r.starts_with('+') || r.starts_with('-')) =>
        {
            let sign = if r.starts_with('-') { -1 } else { 1 };
            match (num(&r[1..3]), num(&r[r.len() - 2..])) {
                (Some(oh), Some(om)) => sign * (oh * 3600 + om * 60),
                _ => return 0,
            }
        }
        _ => return 0,
    };
    // Days from civil (Howard Hinnant's algorithm).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    days * 86400 + h * 3600 + mi * 60 + sec - offset
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339() {
        assert_eq!(rfc3339_to_unix("1970-01-01T00:00:00Z"), 0);
        assert_eq!(rfc3339_to_unix("2024-05-01T12:00:00Z"), 1714564800);
        assert_eq!(rfc3339_to_unix("2024-05-01T14:00:00+02:00"), 1714564800);
        assert_eq!(rfc3339_to_unix("2024-05-01T22:00:00+1000"), 1714564800);
        assert_eq!(rfc3339_to_unix("2024-05-01T12:00:00.123Z"), 1714564800);
        assert_eq!(rfc3339_to_unix("nope"), 0);
    }
}
