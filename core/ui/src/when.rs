//! Times as people read them: "3 minutes ago", "1m 05s".

/// How long ago `then` was at `now` (unix seconds); "" for no time.
pub fn ago(now: i64, then: i64) -> String {
    if then <= 0 {
        return String::new();
    }
    let secs = (now - then).max(0);
    let (n, unit) = match secs {
        0..60 => return "just now".to_string(),
        60..3_600 => (secs / 60, "minute"),
        3_600..86_400 => (secs / 3_600, "hour"),
        86_400..2_592_000 => (secs / 86_400, "day"),
        2_592_000..31_536_000 => (secs / 2_592_000, "month"),
        _ => (secs / 31_536_000, "year"),
    };
    format!("{n} {unit}{} ago", if n == 1 { "" } else { "s" })
}

/// How long something that started at `started` ran (until `finished`, or `now` while it
/// runs); "" when it has not started.
pub fn duration(now: i64, started: i64, finished: i64) -> String {
    if started <= 0 {
        return String::new();
    }
    let end = if finished > 0 { finished } else { now };
    let secs = (end - started).max(0);
    match secs {
        0..60 => format!("{secs}s"),
        60..3_600 => format!("{}m {:02}s", secs / 60, secs % 60),
        _ => format!("{}h {:02}m", secs / 3_600, secs % 3_600 / 60),
    }
}

/// `unix` as RFC 3339 (for `<time datetime>`); "" for no time.
pub fn iso(unix: i64) -> String {
    if unix <= 0 {
        return String::new();
    }
    woodlark_stdx::timefmt::rfc3339_seconds(unix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_times_and_durations() {
        assert_eq!(ago(1_000, 0), "");
        assert_eq!(ago(1_000, 990), "just now");
        assert_eq!(ago(1_000, 2_000), "just now", "a clock behind ours");
        assert_eq!(ago(10_000, 10_000 - 60), "1 minute ago");
        assert_eq!(ago(10_000, 10_000 - 7_300), "2 hours ago");
        assert_eq!(ago(10_000_000, 10_000_000 - 3 * 86_400), "3 days ago");
        assert_eq!(duration(100, 0, 0), "");
        assert_eq!(duration(100, 90, 0), "10s", "still running");
        assert_eq!(duration(0, 100, 165), "1m 05s");
        assert_eq!(duration(0, 100, 100 + 3_600 + 120), "1h 02m");
        assert_eq!(iso(0), "");
        assert_eq!(iso(1), "1970-01-01T00:00:01Z");
    }
}
