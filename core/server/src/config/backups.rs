//! `[storage]`'s scheduled-backup keys (`backup_dir`, `backup_every_hours`, `backup_keep`):
//! their checks and the interval they make (`crate::backup::schedule` runs them).

use std::time::Duration;

use super::StorageConfig;

/// The one command line that backs up a PostgreSQL store (as docs/deployment.md has it).
pub const PG_DUMP: &str = "pg_dump --format=custom --file=/backup/woodlark-$(date +%F).dump \
                           \"$WOODLARK_STORAGE_URL\"";

/// The shortest interval the configuration takes (a test's; an hour is the least sensible
/// in production).
const MIN_INTERVAL_SECS: f64 = 1.0;

/// A year: a longer interval is a mistake in the unit.
const MAX_EVERY_HOURS: f64 = 24.0 * 366.0;

/// Checks the backup keys of `[storage]`: the key and message of the first bad one.
pub fn validate(storage: &StorageConfig) -> Result<(), (&'static str, String)> {
    let hours = storage.backup_every_hours;
    if !hours.is_finite() || hours * 3600.0 < MIN_INTERVAL_SECS || hours > MAX_EVERY_HOURS {
        return Err((
            "storage.backup_every_hours",
            format!(
                "must be a number of hours from {:.6} (a second) to {MAX_EVERY_HOURS} (fractions \
                 allowed: 0.5 = every half hour), got {hours}",
                MIN_INTERVAL_SECS / 3600.0
            ),
        ));
    }
    if storage.backup_keep == 0 || storage.backup_keep > 10_000 {
        return Err((
            "storage.backup_keep",
            format!(
                "must be from 1 to 10000 (the newest backups kept), got {}",
                storage.backup_keep
            ),
        ));
    }
    if !storage.backup_dir.as_os_str().is_empty() && !storage.url.is_empty() {
        return Err((
            "storage.backup_dir",
            format!(
                "scheduled backups copy the embedded SQLite store; with storage.url set back \
                 PostgreSQL up with pg_dump instead: {} (docs/deployment.md)",
                PG_DUMP
            ),
        ));
    }
    Ok(())
}

/// The interval of `storage`'s scheduled backups.
pub fn interval(storage: &StorageConfig) -> Duration {
    Duration::from_secs_f64((storage.backup_every_hours * 3600.0).max(MIN_INTERVAL_SECS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keys_are_checked_with_clear_messages() {
        let ok = StorageConfig::default();
        assert!(validate(&ok).is_ok());
        let with = |f: &dyn Fn(&mut StorageConfig)| {
            let mut s = StorageConfig::default();
            f(&mut s);
            validate(&s)
        };
        for hours in [0.0, -1.0, f64::NAN, 0.0001, 1e6] {
            let (key, message) = with(&|s| s.backup_every_hours = hours).unwrap_err();
            assert_eq!(key, "storage.backup_every_hours");
            assert!(message.contains("fractions allowed"), "{message}");
        }
        assert!(with(&|s| s.backup_every_hours = 0.5).is_ok());
        assert!(with(&|s| s.backup_every_hours = 0.0003).is_ok());
        let (key, _) = with(&|s| s.backup_keep = 0).unwrap_err();
        assert_eq!(key, "storage.backup_keep");
        let (key, message) = with(&|s| {
            s.backup_dir = "/b".into();
            s.url = "postgres://u@h/d".into();
        })
        .unwrap_err();
        assert_eq!(key, "storage.backup_dir");
        assert!(message.contains("pg_dump"), "{message}");
        assert_eq!(
            interval(&StorageConfig {
                backup_every_hours: 0.5,
                ..StorageConfig::default()
            }),
            Duration::from_secs(1800)
        );
    }
}
