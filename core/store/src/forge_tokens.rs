//! Users' forge tokens: what a user signed in with on their forge gives the server to act as
//! them (list their repositories, read permissions, create webhooks, post commit statuses).
//!
//! The tokens are sealed by the caller (the store never sees them in clear) and live apart
//! from `users` so that no read of a user — the API, the events — can carry them. Changing
//! them writes no event: they are secrets, not records of the API.

use crate::OptionalExtension;
use crate::{Tx, WriteTx};
use rusqlite::params;

use super::{StoreResult, now_unix};

/// The table, created by migration 12.
pub const SCHEMA: &str = r#"
    CREATE TABLE forge_tokens (
        user_id  INTEGER PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
        -- the forge that issued them: they are sent to no other
        forge_id INTEGER NOT NULL,
        -- sealed
        access   TEXT    NOT NULL,
        -- sealed; '' when the forge gave none
        refresh  TEXT    NOT NULL DEFAULT '',
        -- unix seconds the access token stops working; 0 = never
        expiry   INTEGER NOT NULL DEFAULT 0,
        updated  INTEGER NOT NULL
    );
    CREATE INDEX users_forge_identity ON users (forge_id, forge_remote_id);
"#;

/// A user's forge tokens, sealed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SealedTokens {
    /// The forge that issued them.
    pub forge_id: i64,
    pub access: String,
    pub refresh: String,
    pub expiry: i64,
}

/// User `user_id`'s tokens, if they signed in through their forge.
pub fn get(conn: &Tx, user_id: i64) -> StoreResult<Option<SealedTokens>> {
    conn.cached_row(
        "SELECT forge_id, access, refresh, expiry FROM forge_tokens WHERE user_id = ?1",
        [user_id],
        |r| {
            Ok(SealedTokens {
                forge_id: r.get(0)?,
                access: r.get(1)?,
                refresh: r.get(2)?,
                expiry: r.get(3)?,
            })
        },
    )
    .optional()
}

/// Stores (or replaces) user `user_id`'s tokens.
pub fn set(conn: &WriteTx, user_id: i64, tokens: &SealedTokens) -> StoreResult<()> {
    conn.cached_exec(
        "INSERT INTO forge_tokens (user_id, forge_id, access, refresh, expiry, updated)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (user_id) DO UPDATE SET
            forge_id = excluded.forge_id, access = excluded.access, refresh = excluded.refresh,
            expiry = excluded.expiry, updated = excluded.updated",
        params![
            user_id,
            tokens.forge_id,
            tokens.access,
            tokens.refresh,
            tokens.expiry,
            now_unix()
        ],
    )?;
    Ok(())
}

/// Removes user `user_id`'s tokens if forge `forge_id` issued them (the forge refused them:
/// they are of no use, and a browser session made by signing in with them ends with them);
/// `true` when there were some.
pub fn delete(conn: &WriteTx, user_id: i64, forge_id: i64) -> StoreResult<bool> {
    let gone = conn.cached_exec(
        "DELETE FROM forge_tokens WHERE user_id = ?1 AND forge_id = ?2",
        params![user_id, forge_id],
    )?;
    Ok(gone > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migrations::migrate;
    use crate::users::{self, EnvAdmins, NewUser};

    #[test]
    fn tokens_are_kept_per_user_and_go_with_the_user() {
        let mut conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "foreign_keys", true).unwrap();
        migrate(&mut conn).unwrap();
        let c = &WriteTx::new(&conn);
        let env = EnvAdmins::default();
        let new = NewUser {
            login: "alice".into(),
            forge_id: 3,
            forge_remote_id: "42".into(),
            token_seed: "seed".into(),
            ..NewUser::default()
        };
        let alice = users::create(c, &env, &new).unwrap().user;
        assert_eq!(get(c, alice.id).unwrap(), None);
        let first = SealedTokens {
            forge_id: 3,
            access: "a1".into(),
            refresh: "r1".into(),
            expiry: 100,
        };
        set(c, alice.id, &first).unwrap();
        assert_eq!(get(c, alice.id).unwrap(), Some(first));
        let second = SealedTokens {
            forge_id: 3,
            access: "a2".into(),
            ..SealedTokens::default()
        };
        set(c, alice.id, &second).unwrap();
        assert_eq!(get(c, alice.id).unwrap(), Some(second.clone()));
        // Another forge's refusal leaves them; their own forge's removes them.
        assert!(!delete(c, alice.id, 4).unwrap());
        assert_eq!(get(c, alice.id).unwrap(), Some(second.clone()));
        assert!(delete(c, alice.id, 3).unwrap());
        assert_eq!(get(c, alice.id).unwrap(), None);
        set(c, alice.id, &second).unwrap();
        let found = users::by_forge_identity(c, &env, 3, "42").unwrap().unwrap();
        assert_eq!(found.user.id, alice.id);
        assert!(
            users::by_forge_identity(c, &env, 4, "42")
                .unwrap()
                .is_none()
        );
        users::delete(c, &env, "alice").unwrap();
        assert_eq!(get(c, alice.id).unwrap(), None);
    }
}
