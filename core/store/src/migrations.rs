//! Schema migrations, applied in order by `PRAGMA user_version`.
//!
//! **Invariant:** a released migration is never edited; a schema change is a new entry at the
//! end of `MIGRATIONS`. Each one runs in its own transaction together with the version bump.

use rusqlite::Connection;

use crate::WriteTx;

use super::{StoreError, StoreResult};

/// One schema change.
pub enum Step {
    Sql(&'static str),
    /// A change SQL alone cannot express (rebuilding tables from their stored definitions).
    /// It runs inside the migration's transaction, with foreign-key enforcement off.
    Code(fn(&WriteTx) -> StoreResult<()>),
}

use Step::{Code, Sql};

/// Migration `i` brings the schema from version `i` to `i + 1`.
const MIGRATIONS: &[Step] = &[
    // 1: users, their organisations, and the event outbox.
    Sql(r#"
    CREATE TABLE orgs (
        id        INTEGER PRIMARY KEY,
        forge_id  INTEGER NOT NULL DEFAULT 0,
        name      TEXT    NOT NULL,
        is_user   INTEGER NOT NULL DEFAULT 0,
        private   INTEGER NOT NULL DEFAULT 0,
        UNIQUE (forge_id, name)
    );
    CREATE TABLE users (
        id              INTEGER PRIMARY KEY,
        forge_id        INTEGER NOT NULL DEFAULT 0,
        forge_remote_id TEXT    NOT NULL DEFAULT '',
        login           TEXT    NOT NULL UNIQUE,
        email           TEXT    NOT NULL DEFAULT '',
        avatar_url      TEXT    NOT NULL DEFAULT '',
        admin           INTEGER NOT NULL DEFAULT 0,
        org_id          INTEGER NOT NULL DEFAULT 0,
        -- secret that signs the user's tokens; rotating it revokes them
        hash            TEXT    NOT NULL,
        created         INTEGER NOT NULL
    );
    -- The transactional outbox: one row per changed record, written in the same
    -- transaction as the change. `seq` is never reused (AUTOINCREMENT), so event ids
    -- stay strictly increasing even after retention deletes old rows.
    CREATE TABLE events (
        seq          INTEGER PRIMARY KEY AUTOINCREMENT,
        created_ms   INTEGER NOT NULL,
        record_type  TEXT    NOT NULL,
        action       TEXT    NOT NULL CHECK (action IN ('created', 'updated', 'deleted')),
        record_id    TEXT    NOT NULL,
        object       TEXT    NOT NULL,
        previous     TEXT,
        org_id       INTEGER,
        repo_id      INTEGER
    );
    CREATE INDEX events_record_type ON events (record_type, seq);
    CREATE INDEX events_org ON events (org_id, seq);
    "#),
    // 2: the CI resources: forges, repositories and permissions, secrets, registries,
    //    agents, cron jobs. Records with many settings keep them as a JSON document in
    //    `data` (the API rendering minus the indexed columns).
    Sql(r#"
    CREATE TABLE forges (
        id              INTEGER PRIMARY KEY,
        type            TEXT    NOT NULL,
        url             TEXT    NOT NULL,
        data            TEXT    NOT NULL,
        -- sealed (auth::sealing), never returned except the webhook secret to admins
        client_secret   TEXT    NOT NULL DEFAULT '',
        webhook_secret  TEXT    NOT NULL
    );
    CREATE TABLE repos (
        id               INTEGER PRIMARY KEY,
        forge_id         INTEGER NOT NULL REFERENCES forges (id),
        forge_remote_id  TEXT    NOT NULL,
        org_id           INTEGER NOT NULL,
        user_id          INTEGER NOT NULL DEFAULT 0,
        full_name        TEXT    NOT NULL,
        active           INTEGER NOT NULL DEFAULT 1,
        -- key that signs this repository's hook tokens
        hash             TEXT    NOT NULL,
        data             TEXT    NOT NULL,
        created          INTEGER NOT NULL,
        UNIQUE (forge_id, forge_remote_id)
    );
    CREATE INDEX repos_full_name ON repos (full_name);
    CREATE INDEX repos_org ON repos (org_id);
    CREATE TABLE perms (
        user_id  INTEGER NOT NULL,
        repo_id  INTEGER NOT NULL REFERENCES repos (id) ON DELETE CASCADE,
        pull     INTEGER NOT NULL DEFAULT 0,
        push     INTEGER NOT NULL DEFAULT 0,
        admin    INTEGER NOT NULL DEFAULT 0,
        synced   INTEGER NOT NULL DEFAULT 0,
        created  INTEGER NOT NULL,
        updated  INTEGER NOT NULL,
        PRIMARY KEY (user_id, repo_id)
    );
    CREATE TABLE secrets (
        id       INTEGER PRIMARY KEY,
        org_id   INTEGER NOT NULL DEFAULT 0,
        repo_id  INTEGER NOT NULL DEFAULT 0,
        name     TEXT    NOT NULL,
        value    TEXT    NOT NULL,  -- sealed
        images   TEXT    NOT NULL DEFAULT '[]',
        events   TEXT    NOT NULL DEFAULT '[]',
        note     TEXT    NOT NULL DEFAULT '',
        UNIQUE (org_id, repo_id, name)
    );
    CREATE TABLE registries (
        id        INTEGER PRIMARY KEY,
        org_id    INTEGER NOT NULL DEFAULT 0,
        repo_id   INTEGER NOT NULL DEFAULT 0,
        address   TEXT    NOT NULL,
        username  TEXT    NOT NULL,
        password  TEXT    NOT NULL,  -- sealed
        readonly  INTEGER NOT NULL DEFAULT 0,
        UNIQUE (org_id, repo_id, address)
    );
    CREATE TABLE agents (
        id            INTEGER PRIMARY KEY,
        created       INTEGER NOT NULL,
        updated       INTEGER NOT NULL,
        name          TEXT    NOT NULL,
        owner_id      INTEGER NOT NULL DEFAULT -1,
        org_id        INTEGER NOT NULL DEFAULT -1,
        token_hash    TEXT    NOT NULL UNIQUE,  -- sha256 of the token, for look-ups
        token         TEXT    NOT NULL,         -- sealed, shown to admins
        last_contact  INTEGER NOT NULL DEFAULT 0,
        last_work     INTEGER NOT NULL DEFAULT 0,
        platform      TEXT    NOT NULL DEFAULT '',
        backend       TEXT    NOT NULL DEFAULT '',
        capacity      INTEGER NOT NULL DEFAULT 0,
        version       TEXT    NOT NULL DEFAULT '',
        no_schedule   INTEGER NOT NULL DEFAULT 0,
        custom_labels TEXT    NOT NULL DEFAULT '{}'
    );
    CREATE TABLE crons (
        id          INTEGER PRIMARY KEY,
        name        TEXT    NOT NULL,
        repo_id     INTEGER NOT NULL REFERENCES repos (id) ON DELETE CASCADE,
        creator_id  INTEGER NOT NULL DEFAULT 0,
        next_exec   INTEGER NOT NULL DEFAULT 0,
        schedule    TEXT    NOT NULL,
        timezone    TEXT    NOT NULL DEFAULT 'UTC',
        created     INTEGER NOT NULL,
        branch      TEXT    NOT NULL DEFAULT '',
        enabled     INTEGER NOT NULL DEFAULT 1,
        variables   TEXT    NOT NULL DEFAULT '{}',
        UNIQUE (repo_id, name)
    );
    CREATE INDEX crons_next ON crons (enabled, next_exec);
    "#),
    // 3: participation keys (algod-compatible).
    Sql(super::partkeys::SCHEMA),
    // 4: pipelines, workflows, steps, configs and the queue.
    Sql(super::pipelines::SCHEMA),
    // 5: one-time ids of used login links (web sign-in).
    Sql(super::used_tokens::SCHEMA),
    // 6: the plugins' key-value storage.
    Sql(super::plugin_kv::SCHEMA),
    // 7: events of one repository (the feed's visibility filter for non-admins).
    Sql("CREATE INDEX events_repo ON events (repo_id, seq);"),
    // 8: repository-less events of one organisation (the other half of that filter).
    Sql("CREATE INDEX events_org_only ON events (org_id, seq) WHERE repo_id IS NULL;"),
    // 9: rows left behind by deletes of earlier versions (a removed repository's pipelines,
    //    a deleted user's permissions) are removed, so nobody can inherit them.
    Code(super::integrity::remove_orphans),
    // 10: ids are never reused: every table whose id the API shows gets AUTOINCREMENT.
    Code(super::integrity::ids_never_reused),
    // 11: pipeline records are whole `Pipeline`s of this version (the list is served from
    //     them as stored).
    Code(super::pipelines::normalise_records),
    // 12: users' forge tokens (sealed), and users found by their forge identity.
    Sql(super::forge_tokens::SCHEMA),
    // 13: pipeline records leave out empty fields as upstream does (`pr_labels`,
    //     `from_fork`, `cron`, …): stored ones are rewritten in that form.
    Code(super::pipelines::normalise_records),
    // 14: workflows' concurrency limits, kept with their queued tasks.
    Sql(
        "ALTER TABLE tasks ADD COLUMN concurrency_limit INTEGER NOT NULL DEFAULT 0;
         ALTER TABLE tasks ADD COLUMN concurrency_group TEXT NOT NULL DEFAULT '';",
    ),
    // 15: webhook deliveries that made pipelines (a redelivery makes no second one).
    Sql(super::deliveries::SCHEMA),
    // 16: facts about the database servers on it must agree on (the sealing key's
    //     fingerprint).
    Sql(super::meta::SCHEMA),
    // 17: how an agent bounds its steps' resources, as it reports it.
    Sql(super::agents::ADD_LIMITS),
    // 18: the bodies of deliveries that made pipelines (a replay with another delivery id
    //     makes no second one either).
    Sql(super::deliveries::BODY_SCHEMA),
    // 19: the last report of an agent applied to a task (reports are numbered, so a
    //     re-sent one is applied once).
    Sql(super::tasks::ADD_REPORT_SEQ),
];

/// The schema version this build writes.
pub const CURRENT_VERSION: i64 = MIGRATIONS.len() as i64;

/// Brings the main database to the current schema.
pub fn migrate(conn: &mut Connection) -> StoreResult<()> {
    migrate_with(conn, MIGRATIONS)
}

/// Brings the main database to `version` only (tests of later migrations).
#[cfg(test)]
pub fn migrate_to(conn: &mut Connection, version: usize) -> StoreResult<()> {
    migrate_with(conn, &MIGRATIONS[..version])
}

/// Applies the steps of `list` that `conn` has not seen yet (any database: main or logs).
///
/// Foreign-key enforcement is off while they run (a rebuilt table must be droppable without
/// cascading into the tables that reference it; SQLite ignores the pragma inside a
/// transaction) and each step must leave no violation behind.
pub fn migrate_with(conn: &mut Connection, list: &[Step]) -> StoreResult<()> {
    let current = list.len() as i64;
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version > current {
        return Err(StoreError::Migration(format!(
            "the database has schema version {version}, newer than this build's {current}; \
             upgrade woodlark or use another data_dir"
        )));
    }
    if version == current {
        return Ok(());
    }
    let enforced: bool = conn.query_row("PRAGMA foreign_keys", [], |r| r.get(0))?;
    conn.pragma_update(None, "foreign_keys", false)?;
    let result = apply(conn, list, version);
    conn.pragma_update(None, "foreign_keys", enforced)?;
    result
}

fn apply(conn: &mut Connection, list: &[Step], from: i64) -> StoreResult<()> {
    for (index, step) in list.iter().enumerate().skip(from as usize) {
        let next = index as i64 + 1;
        let failed = |e: rusqlite::Error| StoreError::Migration(format!("step {next}: {e}"));
        let tx = conn.transaction()?;
        match step {
            Sql(sql) => tx.execute_batch(sql).map_err(failed)?,
            Code(run) => run(&WriteTx::new(&tx))
                .map_err(|e| StoreError::Migration(format!("step {next}: {e}")))?,
        }
        let violations: i64 = tx
            .query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |r| {
                r.get(0)
            })
            .map_err(failed)?;
        if violations > 0 {
            return Err(StoreError::Migration(format!(
                "step {next} left {violations} foreign-key violations"
            )));
        }
        tx.pragma_update(None, "user_version", next)?;
        tx.commit()?;
        tracing::info!(version = next, "database migrated");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrates_from_empty_and_is_idempotent() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        migrate(&mut conn).unwrap();
        let v: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, CURRENT_VERSION);
    }

    #[test]
    fn refuses_a_newer_schema() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "user_version", CURRENT_VERSION + 1)
            .unwrap();
        assert!(matches!(migrate(&mut conn), Err(StoreError::Migration(_))));
    }
}
