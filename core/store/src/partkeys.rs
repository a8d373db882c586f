//! Participation keys (algod's `/v2/participation`): the registry of installed keys.
//!
//! Public values (address, rounds, public keys, usage rounds) are plain columns; private key
//! material arrives here already sealed (`auth::sealing`, bound to the key's id) and is stored
//! as opaque text, never rendered. Rounds are unsigned 64-bit in the API and stored in SQLite's
//! signed 64-bit integers by bit pattern (`as i64` / `as u64`), so every value round-trips.
//!
//! Every change appends its `participation_keys.*` event in the same transaction; the event
//! object is the key as `GET /v2/participation/{id}` renders it.

use crate::{OptionalExtension, Row};
use crate::{Tx, WriteTx};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rusqlite::params;
use serde::Serialize;

use super::events::{self, Action, Owner};
use super::{StoreError, StoreResult, now_unix};

pub const RECORD_TYPE: events::RecordType = events::RecordType::ParticipationKeys;

/// The schema of the participation-key tables (to be added as a migration).
pub const SCHEMA: &str = r#"
    -- Installed participation keys. `id` is the base32 participation id; public values are
    -- columns, secrets are sealed text bound to the id (never rendered).
    CREATE TABLE participation_keys (
        seq                 INTEGER PRIMARY KEY AUTOINCREMENT,
        id                  TEXT    NOT NULL UNIQUE,
        address             TEXT    NOT NULL,
        first_valid         INTEGER NOT NULL,
        last_valid          INTEGER NOT NULL,
        key_dilution        INTEGER NOT NULL,
        selection_key       BLOB    NOT NULL,
        vote_key            BLOB    NOT NULL,
        -- state-proof commitment (64 bytes), NULL when the key has no state-proof data
        state_proof_key     BLOB,
        effective_first     INTEGER NOT NULL DEFAULT 0,
        effective_last      INTEGER NOT NULL DEFAULT 0,
        last_vote           INTEGER NOT NULL DEFAULT 0,
        last_block_proposal INTEGER NOT NULL DEFAULT 0,
        last_state_proof    INTEGER NOT NULL DEFAULT 0,
        -- sealed msgpack VRF secrets and voting secrets
        vrf_secrets         TEXT    NOT NULL,
        voting_secrets      TEXT    NOT NULL,
        -- msgpack state-proof secrets (public Merkle tree data), NULL without state proofs
        state_proof_data    BLOB,
        created             INTEGER NOT NULL
    );
    CREATE INDEX participation_keys_address ON participation_keys (address);
    -- State-proof signing keys (sealed msgpack Falcon signers), one per round.
    CREATE TABLE participation_state_proof_keys (
        key_seq  INTEGER NOT NULL REFERENCES participation_keys (seq) ON DELETE CASCADE,
        round    INTEGER NOT NULL,
        signer   TEXT    NOT NULL,
        PRIMARY KEY (key_seq, round)
    );
"#;

/// `AccountParticipation` as algod renders it (fields in algod's order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AccountParticipation {
    /// base64 of the 32-byte VRF public key.
    #[serde(rename = "selection-participation-key")]
    pub selection_participation_key: String,
    /// base64 of the 64-byte state-proof commitment, when the key has one.
    #[serde(rename = "state-proof-key", skip_serializing_if = "Option::is_none")]
    pub state_proof_key: Option<String>,
    #[serde(rename = "vote-first-valid")]
    pub vote_first_valid: u64,
    #[serde(rename = "vote-key-dilution")]
    pub vote_key_dilution: u64,
    #[serde(rename = "vote-last-valid")]
    pub vote_last_valid: u64,
    /// base64 of the 32-byte voting root public key.
    #[serde(rename = "vote-participation-key")]
    pub vote_participation_key: String,
}

/// `ParticipationKey` as algod renders it: optional rounds are left out when 0, except that
/// `effective-first-valid: 0` is sent when `effective-last-valid` is set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ParticipationKey {
    pub address: String,
    #[serde(
        rename = "effective-first-valid",
        skip_serializing_if = "Option::is_none"
    )]
    pub effective_first_valid: Option<u64>,
    #[serde(
        rename = "effective-last-valid",
        skip_serializing_if = "Option::is_none"
    )]
    pub effective_last_valid: Option<u64>,
    pub id: String,
    pub key: AccountParticipation,
    #[serde(
        rename = "last-block-proposal",
        skip_serializing_if = "Option::is_none"
    )]
    pub last_block_proposal: Option<u64>,
    #[serde(rename = "last-state-proof", skip_serializing_if = "Option::is_none")]
    pub last_state_proof: Option<u64>,
    #[serde(rename = "last-vote", skip_serializing_if = "Option::is_none")]
    pub last_vote: Option<u64>,
}

/// A key to install: public values plus sealed secrets.
#[derive(Debug, Clone)]
pub struct NewPartKey {
    pub id: String,
    pub address: String,
    pub first_valid: u64,
    pub last_valid: u64,
    pub key_dilution: u64,
    pub selection_key: [u8; 32],
    pub vote_key: [u8; 32],
    pub state_proof_key: Option<[u8; 64]>,
    pub sealed_vrf: String,
    pub sealed_voting: String,
    pub state_proof_data: Option<Vec<u8>>,
    /// (round, sealed msgpack Falcon signer)
    pub state_proof_keys: Vec<(u64, String)>,
}

/// The sealed material of an installed key (for export).
#[derive(Debug, Clone)]
pub struct Secrets {
    pub key: ParticipationKey,
    pub sealed_vrf: String,
    pub sealed_voting: String,
    pub state_proof_data: Option<Vec<u8>>,
    pub state_proof_keys: Vec<(u64, String)>,
}

/// algod's message for a second install of the same key.
pub const DUPLICATE: &str = "ParticipationRegistry: cannot register duplicate participation key";

const COLUMNS: &str = "id, address, first_valid, last_valid, key_dilution, selection_key, vote_key, \
     state_proof_key, effective_first, effective_last, last_vote, last_block_proposal, last_state_proof";

fn nonzero(v: i64) -> Option<u64> {
    (v != 0).then_some(v as u64)
}

fn from_row(r: &Row<'_>) -> rusqlite::Result<ParticipationKey> {
    let effective_first: i64 = r.get(8)?;
    let effective_last: i64 = r.get(9)?;
    let state_proof: Option<Vec<u8>> = r.get(7)?;
    Ok(ParticipationKey {
        id: r.get(0)?,
        address: r.get(1)?,
        key: AccountParticipation {
            selection_participation_key: STANDARD.encode(r.get::<_, Vec<u8>>(5)?),
            state_proof_key: state_proof.map(|b| STANDARD.encode(b)),
            vote_first_valid: r.get::<_, i64>(2)? as u64,
            vote_key_dilution: r.get::<_, i64>(4)? as u64,
            vote_last_valid: r.get::<_, i64>(3)? as u64,
            vote_participation_key: STANDARD.encode(r.get::<_, Vec<u8>>(6)?),
        },
        effective_first_valid: if effective_last != 0 && effective_first == 0 {
            Some(0)
        } else {
            nonzero(effective_first)
        },
        effective_last_valid: nonzero(effective_last),
        last_vote: nonzero(r.get(10)?),
        last_block_proposal: nonzero(r.get(11)?),
        last_state_proof: nonzero(r.get(12)?),
    })
}

fn seq_of(conn: &Tx, id: &str) -> StoreResult<i64> {
    conn.cached_row(
        "SELECT seq FROM participation_keys WHERE id = ?1",
        [id],
        |r| r.get(0),
    )
    .optional()?
    .ok_or(StoreError::NotFound)
}

/// Installs a key; `Conflict(DUPLICATE)` if a key with the same id is installed.
pub fn insert(conn: &WriteTx, new: &NewPartKey) -> StoreResult<ParticipationKey> {
    let exists: Option<i64> = conn
        .cached_row(
            "SELECT seq FROM participation_keys WHERE id = ?1",
            [&new.id],
            |r| r.get(0),
        )
        .optional()?;
    if exists.is_some() {
        return Err(StoreError::Conflict(DUPLICATE.into()));
    }
    conn.cached_exec(
        "INSERT INTO participation_keys (id, address, first_valid, last_valid, key_dilution,
             selection_key, vote_key, state_proof_key, vrf_secrets, voting_secrets,
             state_proof_data, created)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        params![
            new.id,
            new.address,
            new.first_valid as i64,
            new.last_valid as i64,
            new.key_dilution as i64,
            &new.selection_key[..],
            &new.vote_key[..],
            new.state_proof_key.as_ref().map(|k| &k[..]),
            new.sealed_vrf,
            new.sealed_voting,
            new.state_proof_data,
            now_unix(),
        ],
    )?;
    let seq = conn.last_insert_rowid()?;
    insert_signers(conn, seq, &new.state_proof_keys)?;
    let key = get(conn, &new.id)?;
    events::append(
        conn,
        RECORD_TYPE,
        Action::Created,
        &key.id,
        &key,
        Owner::default(),
    )?;
    Ok(key)
}

fn insert_signers(conn: &WriteTx, seq: i64, keys: &[(u64, String)]) -> StoreResult<()> {
    let mut stmt = conn.prepare_cached(
        "INSERT INTO participation_state_proof_keys (key_seq, round, signer) VALUES (?1, ?2, ?3)",
    )?;
    for (round, sealed) in keys {
        match stmt.execute(params![seq, *round as i64, sealed]) {
            Ok(_) => {}
            Err(e) if e.is_constraint_violation() => {
                return Err(StoreError::Conflict(format!(
                    "a state proof key for round {round} is already installed"
                )));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Every installed key, oldest first.
pub fn list(conn: &Tx) -> StoreResult<Vec<ParticipationKey>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM participation_keys ORDER BY seq"
    ))?;
    let rows = stmt.query_map([], from_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub fn get(conn: &Tx, id: &str) -> StoreResult<ParticipationKey> {
    conn.cached_row(
        &format!("SELECT {COLUMNS} FROM participation_keys WHERE id = ?1"),
        [id],
        from_row,
    )
    .optional()?
    .ok_or(StoreError::NotFound)
}

/// Deletes a key and its state-proof keys.
pub fn delete(conn: &WriteTx, id: &str) -> StoreResult<ParticipationKey> {
    let key = get(conn, id)?;
    let seq = seq_of(conn, id)?;
    conn.cached_exec(
        "DELETE FROM participation_state_proof_keys WHERE key_seq = ?1",
        [seq],
    )?;
    conn.cached_exec("DELETE FROM participation_keys WHERE seq = ?1", [seq])?;
    events::append(
        conn,
        RECORD_TYPE,
        Action::Deleted,
        &key.id,
        &key,
        Owner::default(),
    )?;
    Ok(key)
}

/// Adds state-proof signing keys to an installed key; `Conflict` if a round is taken.
///
/// The rendered key does not change (the API shows no state-proof key count), so the event
/// is an `updated` event carrying the key without `previous_attributes`.
pub fn append_state_proof_keys(
    conn: &WriteTx,
    id: &str,
    keys: &[(u64, String)],
) -> StoreResult<ParticipationKey> {
    let seq = seq_of(conn, id)?;
    insert_signers(conn, seq, keys)?;
    let key = get(conn, id)?;
    events::append(
        conn,
        RECORD_TYPE,
        Action::Updated,
        &key.id,
        &key,
        Owner::default(),
    )?;
    Ok(key)
}

/// The sealed material of a key, for writing it back out as a partkey file.
pub fn secrets(conn: &Tx, id: &str) -> StoreResult<Secrets> {
    let key = get(conn, id)?;
    let (seq, sealed_vrf, sealed_voting, state_proof_data) = conn.cached_row(
        "SELECT seq, vrf_secrets, voting_secrets, state_proof_data FROM participation_keys WHERE id = ?1",
        [id],
        |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, Option<Vec<u8>>>(3)?,
            ))
        },
    )?;
    let mut stmt = conn.prepare_cached(
        "SELECT round, signer FROM participation_state_proof_keys WHERE key_seq = ?1 ORDER BY round",
    )?;
    let state_proof_keys = stmt
        .query_map([seq], |r| {
            Ok((r.get::<_, i64>(0)? as u64, r.get::<_, String>(1)?))
        })?
        .collect::<Result<_, _>>()?;
    Ok(Secrets {
        key,
        sealed_vrf,
        sealed_voting,
        state_proof_data,
        state_proof_keys,
    })
}

/// Number of state-proof keys installed for a key.
pub fn state_proof_key_count(conn: &Tx, id: &str) -> StoreResult<u64> {
    let seq = seq_of(conn, id)?;
    let n: i64 = conn.cached_row(
        "SELECT count(*) FROM participation_state_proof_keys WHERE key_seq = ?1",
        [seq],
        |r| r.get(0),
    )?;
    Ok(n as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    fn conn() -> WriteTx<'static> {
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::migrations::migrate(&mut conn).unwrap();
        // Until the lead adds SCHEMA as a migration, apply it here when it is missing.
        let present: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE name = 'participation_keys'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        if present == 0 {
            conn.execute_batch(SCHEMA).unwrap();
        }
        conn.pragma_update(None, "foreign_keys", "ON").unwrap();
        WriteTx::owned(conn)
    }

    fn new_key(id: &str) -> NewPartKey {
        NewPartKey {
            id: id.into(),
            address: "ADDR".into(),
            first_valid: 1,
            last_valid: u64::MAX,
            key_dilution: 10,
            selection_key: [1; 32],
            vote_key: [2; 32],
            state_proof_key: None,
            sealed_vrf: "v1:vrf".into(),
            sealed_voting: "v1:voting".into(),
            state_proof_data: None,
            state_proof_keys: vec![(256, "v1:s".into())],
        }
    }

    #[test]
    fn insert_get_list_delete_with_events() {
        let c = conn();
        let key = insert(&c, &new_key("A")).unwrap();
        assert_eq!(key.key.vote_last_valid, u64::MAX);
        assert_eq!(
            key.key.selection_participation_key,
            STANDARD.encode([1u8; 32])
        );
        let json = serde_json::to_value(&key).unwrap();
        assert!(json.get("effective-first-valid").is_none());
        assert!(json["key"].get("state-proof-key").is_none());
        assert!(json.to_string().find("v1:").is_none());
        assert!(matches!(
            insert(&c, &new_key("A")),
            Err(StoreError::Conflict(m)) if m == DUPLICATE
        ));
        insert(&c, &new_key("B")).unwrap();
        assert_eq!(
            list(&c)
                .unwrap()
                .iter()
                .map(|k| k.id.as_str())
                .collect::<Vec<_>>(),
            vec!["A", "B"]
        );
        assert!(matches!(
            append_state_proof_keys(&c, "A", &[(256, "x".into())]),
            Err(StoreError::Conflict(_))
        ));
        append_state_proof_keys(&c, "A", &[(512, "x".into())]).unwrap();
        assert_eq!(state_proof_key_count(&c, "A").unwrap(), 2);
        assert_eq!(secrets(&c, "A").unwrap().state_proof_keys.len(), 2);
        delete(&c, "A").unwrap();
        assert!(matches!(get(&c, "A"), Err(StoreError::NotFound)));
        assert!(matches!(delete(&c, "A"), Err(StoreError::NotFound)));
        let left: i64 = c
            .cached_row(
                "SELECT count(*) FROM participation_state_proof_keys",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(left, 1);
        let events = events::list_after(&c, 0, 100).unwrap();
        let types: Vec<String> = events.iter().map(|e| e.event_type()).collect();
        assert_eq!(
            types,
            vec![
                "participation_keys.created",
                "participation_keys.created",
                "participation_keys.updated",
                "participation_keys.deleted"
            ]
        );
        assert_eq!(events[0].record_id, "A");
        assert!(!events.iter().any(|e| e.object.to_string().contains("v1:")));
    }

    #[test]
    fn effective_first_zero_rule() {
        let c = conn();
        insert(&c, &new_key("A")).unwrap();
        c.cached_exec(
            "UPDATE participation_keys SET effective_last = 50, last_vote = 7",
            [],
        )
        .unwrap();
        let json = serde_json::to_value(get(&c, "A").unwrap()).unwrap();
        assert_eq!(json["effective-first-valid"], 0);
        assert_eq!(json["effective-last-valid"], 50);
        assert_eq!(json["last-vote"], 7);
        assert!(json.get("last-block-proposal").is_none());
    }
}
