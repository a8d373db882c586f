//! Facts about the database itself, one value per key (`meta` table): most written once,
//! some settings every server on the database shares ([`QUEUE_PAUSED`]).
//!
//! What servers sharing the database must agree on is claimed here by the first to start,
//! and checked by every later one: the fingerprint of the key that seals secrets and signs
//! tokens ([`SEALING_KEY`]). A replica given another key file would not read the secrets
//! the others sealed, nor accept the tokens they issued, so it refuses to start instead.
//! The server's signing key is claimed the same way ([`SIGNATURE_KEY`], sealed), so every
//! replica serves and signs with one key.

use crate::{StoreResult, Tx, WriteTx};

/// Key of the sealing key's fingerprint.
pub const SEALING_KEY: &str = "sealing_key_fingerprint";

/// Key of the server's ed25519 signing key, sealed with the sealing key.
pub const SIGNATURE_KEY: &str = "signature_key";

/// Key of whether the queue is paused (`"true"`), for every replica.
pub const QUEUE_PAUSED: &str = "queue_paused";

pub(crate) const SCHEMA: &str = "
    CREATE TABLE meta (
        key    TEXT PRIMARY KEY,
        value  TEXT NOT NULL
    );";

/// Stores `value` under `key` unless a value is there already; returns the stored one.
pub fn claim(conn: &WriteTx, key: &str, value: &str) -> StoreResult<String> {
    conn.cached_exec(
        "INSERT INTO meta (key, value) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
        [key, value],
    )?;
    conn.cached_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
}

/// The value under `key`, if any.
pub fn get(conn: &Tx, key: &str) -> StoreResult<Option<String>> {
    use crate::sql::OptionalExtension;
    conn.cached_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
        .optional()
}

/// Stores `value` under `key`, replacing what was there.
pub fn set(conn: &WriteTx, key: &str, value: &str) -> StoreResult<()> {
    conn.cached_exec(
        "INSERT INTO meta (key, value) VALUES (?1, ?2) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [key, value],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_claim_wins() {
        let c = crate::sql::fresh_tx();
        assert_eq!(claim(&c, SEALING_KEY, "aa").unwrap(), "aa");
        assert_eq!(claim(&c, SEALING_KEY, "bb").unwrap(), "aa");
        assert_eq!(claim(&c, "other", "bb").unwrap(), "bb");
    }

    #[test]
    fn a_setting_is_replaced() {
        let c = crate::sql::fresh_tx();
        assert_eq!(get(&c, QUEUE_PAUSED).unwrap(), None);
        set(&c, QUEUE_PAUSED, "true").unwrap();
        set(&c, QUEUE_PAUSED, "false").unwrap();
        assert_eq!(get(&c, QUEUE_PAUSED).unwrap().as_deref(), Some("false"));
    }
}
