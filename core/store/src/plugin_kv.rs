//! The plugins' durable key-value storage (the host's `kv` capability), one namespace per
//! plugin instance. Entries may expire; an expired entry reads as absent.

use crate::OptionalExtension;
use crate::{Tx, WriteTx};
use rusqlite::params;

use super::StoreResult;

/// Schema of the table (a main-database migration).
pub const SCHEMA: &str = r#"
    CREATE TABLE plugin_kv (
        namespace   TEXT    NOT NULL,
        key         TEXT    NOT NULL,
        value       BLOB    NOT NULL,
        expires_ms  INTEGER,
        PRIMARY KEY (namespace, key)
    );
"#;

/// The value of `key`, unless it is missing or expired at `now_ms`.
pub fn get(conn: &Tx, namespace: &str, key: &str, now_ms: i64) -> StoreResult<Option<Vec<u8>>> {
    conn.cached_row(
        "SELECT value FROM plugin_kv WHERE namespace = ?1 AND key = ?2
             AND (expires_ms IS NULL OR expires_ms > ?3)",
        params![namespace, key, now_ms],
        |r| r.get::<_, Vec<u8>>(0),
    )
    .optional()
}

/// Sets `key`, replacing any value; `expires_ms` none = kept until deleted.
pub fn set(
    conn: &WriteTx,
    namespace: &str,
    key: &str,
    value: &[u8],
    expires_ms: Option<i64>,
) -> StoreResult<()> {
    conn.cached_exec(
        "INSERT INTO plugin_kv (namespace, key, value, expires_ms) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value, expires_ms = excluded.expires_ms",
        params![namespace, key, value, expires_ms],
    )?;
    Ok(())
}

/// Removes `key`; a missing key is not an error.
pub fn delete(conn: &WriteTx, namespace: &str, key: &str) -> StoreResult<()> {
    conn.cached_exec(
        "DELETE FROM plugin_kv WHERE namespace = ?1 AND key = ?2",
        params![namespace, key],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_expire_and_namespaces_are_apart() {
        let c = rusqlite::Connection::open_in_memory().unwrap();
        c.execute_batch(SCHEMA).unwrap();
        set(&WriteTx::new(&c), "a", "k", b"1", None).unwrap();
        set(&WriteTx::new(&c), "b", "k", b"2", Some(100)).unwrap();
        assert_eq!(
            get(&WriteTx::new(&c), "a", "k", 500).unwrap().as_deref(),
            Some(&b"1"[..])
        );
        assert_eq!(
            get(&WriteTx::new(&c), "b", "k", 50).unwrap().as_deref(),
            Some(&b"2"[..])
        );
        assert_eq!(get(&WriteTx::new(&c), "b", "k", 100).unwrap(), None);
        set(&WriteTx::new(&c), "a", "k", b"3", None).unwrap();
        assert_eq!(
            get(&WriteTx::new(&c), "a", "k", 0).unwrap().as_deref(),
            Some(&b"3"[..])
        );
        delete(&WriteTx::new(&c), "a", "k").unwrap();
        delete(&WriteTx::new(&c), "a", "missing").unwrap();
        assert_eq!(get(&WriteTx::new(&c), "a", "k", 0).unwrap(), None);
    }
}
