//! One-time tokens that have been used (login links), so that a second use fails.
//!
//! A row only has to outlive the token it records: rows whose token has expired are removed
//! on the next insert. These rows are bookkeeping, not records of the API, so they write no
//! events.

use crate::WriteTx;
use rusqlite::params;

use super::StoreResult;

/// The table, created by migration 5.
pub const SCHEMA: &str = r#"
    CREATE TABLE used_tokens (
        -- the token's one-time id (`jti`)
        id       TEXT    PRIMARY KEY,
        -- unix seconds after which the token is void anyway
        expires  INTEGER NOT NULL
    );
    CREATE INDEX used_tokens_expires ON used_tokens (expires);
"#;

/// Records token `id` (valid until `expires`) as used. `false` when it already was.
pub fn spend(conn: &WriteTx, id: &str, expires: i64, now: i64) -> StoreResult<bool> {
    conn.cached_exec("DELETE FROM used_tokens WHERE expires < ?1", [now])?;
    let inserted = conn.cached_exec(
        "INSERT INTO used_tokens (id, expires) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
        params![id, expires],
    )?;
    Ok(inserted == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_spent_once_and_expired_rows_go() {
        let mut conn = rusqlite::Connection::open_in_memory().unwrap();
        super::super::migrations::migrate(&mut conn).unwrap();
        assert!(spend(&WriteTx::new(&conn), "a", 100, 50).unwrap());
        assert!(!spend(&WriteTx::new(&conn), "a", 100, 60).unwrap());
        assert!(
            spend(&WriteTx::new(&conn), "b", 300, 200).unwrap(),
            "a expired and was removed"
        );
        let left: i64 = conn
            .query_row("SELECT count(*) FROM used_tokens", [], |r| r.get(0))
            .unwrap();
        assert_eq!(left, 1);
    }
}
