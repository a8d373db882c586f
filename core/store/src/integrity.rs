//! Referential integrity between records: what hangs off what, and the rules that keep one
//! tenant's data from reaching another.
//!
//! Two guarantees, both needed because ids are how the API (and every permission check)
//! names records:
//! - **Ids are never reused.** Every table whose id the API shows is `AUTOINCREMENT`, so a
//!   record created after a delete never takes the deleted one's id and cannot inherit rows
//!   that still name it (events, logs, permissions of an older version).
//! - **Nothing is left behind.** Each delete removes what hangs off the record in the same
//!   transaction as its event; [`ORPHANS`] lists every such relation, so a test (and the
//!   crash test) can check that none is violated, and [`remove_orphans`] repairs databases
//!   written by versions that left rows behind.
//!
//! Step logs live in another database file (`logs.db`) and cannot share a transaction with
//! the main one; logs of steps that no longer exist are swept by the server (its
//! `sweep_orphan_logs`, over [`super::logs::step_ids_after`] and [`super::logs::delete_steps`]).

use crate::{Tx, WriteTx};

/// Tables whose `id` the API shows, with the event record type that names their ids.
pub const ID_TABLES: &[(&str, &str)] = &[
    ("orgs", "orgs"),
    ("users", "users"),
    ("forges", "forges"),
    ("repos", "repos"),
    ("secrets", "secrets"),
    ("registries", "registries"),
    ("agents", "agents"),
    ("crons", "crons"),
    ("pipelines", "pipelines"),
    ("workflows", "workflows"),
    ("steps", "steps"),
    ("configs", ""),
];

/// Rows that must not exist: `(table, condition)`; each condition names rows whose owner is
/// gone. Ordered so that deleting in this order never orphans a row later in the list.
pub const ORPHANS: &[(&str, &str)] = &[
    (
        "perms",
        "user_id NOT IN (SELECT id FROM users) OR repo_id NOT IN (SELECT id FROM repos)",
    ),
    ("crons", "repo_id NOT IN (SELECT id FROM repos)"),
    (
        "secrets",
        "(repo_id <> 0 AND repo_id NOT IN (SELECT id FROM repos)) \
         OR (org_id <> 0 AND org_id NOT IN (SELECT id FROM orgs))",
    ),
    (
        "registries",
        "(repo_id <> 0 AND repo_id NOT IN (SELECT id FROM repos)) \
         OR (org_id <> 0 AND org_id NOT IN (SELECT id FROM orgs))",
    ),
    (
        "agents",
        "org_id <> -1 AND org_id NOT IN (SELECT id FROM orgs)",
    ),
    ("configs", "repo_id NOT IN (SELECT id FROM repos)"),
    ("pipelines", "repo_id NOT IN (SELECT id FROM repos)"),
    (
        "pipeline_configs",
        "pipeline_id NOT IN (SELECT id FROM pipelines) \
         OR config_id NOT IN (SELECT id FROM configs)",
    ),
    ("workflows", "pipeline_id NOT IN (SELECT id FROM pipelines)"),
    (
        "steps",
        "pipeline_id NOT IN (SELECT id FROM pipelines) \
         OR workflow_id NOT IN (SELECT id FROM workflows)",
    ),
    (
        "tasks",
        "pipeline_id NOT IN (SELECT id FROM pipelines) \
         OR id NOT IN (SELECT id FROM workflows) \
         OR repo_id NOT IN (SELECT id FROM repos)",
    ),
    ("repos", "org_id NOT IN (SELECT id FROM orgs)"),
];

/// How many orphaned rows each relation has (only the non-zero ones).
pub fn orphans(conn: &Tx) -> crate::StoreResult<Vec<(&'static str, i64)>> {
    let mut found = Vec::new();
    for (table, condition) in ORPHANS {
        let n: i64 = conn.query_row(
            &format!("SELECT count(*) FROM {table} WHERE {condition}"),
            [],
            |r| r.get(0),
        )?;
        if n > 0 {
            found.push((*table, n));
        }
    }
    Ok(found)
}

/// Deletes every orphaned row (migration 9; older versions left them behind). Repositories
/// without an organisation are kept: they are reachable by their owner and admins, and
/// activation gives them an organisation again.
pub fn remove_orphans(conn: &WriteTx) -> crate::StoreResult<()> {
    for (table, condition) in ORPHANS.iter().filter(|(t, _)| *t != "repos") {
        let removed = conn.execute(&format!("DELETE FROM {table} WHERE {condition}"), [])?;
        if removed > 0 {
            tracing::warn!(table, removed, "removed rows whose owner was deleted");
        }
    }
    Ok(())
}

/// Rebuilds each table of [`ID_TABLES`] with `id INTEGER PRIMARY KEY AUTOINCREMENT`, from its
/// stored definition, keeping rows and indexes (migration 10). The sequence starts above the
/// highest id ever recorded in the event outbox, so ids deleted before the upgrade are not
/// handed out again either.
pub fn ids_never_reused(conn: &WriteTx) -> crate::StoreResult<()> {
    for (table, record_type) in ID_TABLES {
        let sql: String = conn.query_row(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [table],
            |r| r.get(0),
        )?;
        let rebuilt = autoincrement_definition(&sql, table).ok_or_else(|| {
            rusqlite::Error::SqlInputError {
                error: rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
                msg: format!("table {table} does not start with `id INTEGER PRIMARY KEY`"),
                sql,
                offset: 0,
            }
        })?;
        let indexes: Vec<String> = conn
            .prepare(
                "SELECT sql FROM sqlite_master
                 WHERE type = 'index' AND tbl_name = ?1 AND sql IS NOT NULL",
            )?
            .query_map([table], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        conn.execute_batch(&format!(
            "{rebuilt};
             INSERT INTO {table}__new SELECT * FROM {table};
             DROP TABLE {table};
             ALTER TABLE {table}__new RENAME TO {table};"
        ))?;
        for index in indexes {
            conn.execute_batch(&index)?;
        }
        let highest_event: i64 = if record_type.is_empty() {
            0
        } else {
            conn.query_row(
                "SELECT coalesce(max(CAST(record_id AS INTEGER)), 0) FROM events
                 WHERE record_type = ?1",
                [record_type],
                |r| r.get(0),
            )?
        };
        let highest_row: i64 = conn.query_row(
            &format!("SELECT coalesce(max(id), 0) FROM {table}"),
            [],
            |r| r.get(0),
        )?;
        conn.execute("DELETE FROM sqlite_sequence WHERE name = ?1", [table])?;
        conn.execute(
            "INSERT INTO sqlite_sequence (name, seq) VALUES (?1, ?2)",
            rusqlite::params![table, highest_event.max(highest_row)],
        )?;
    }
    Ok(())
}

/// `CREATE TABLE t (id INTEGER PRIMARY KEY, …)` → `CREATE TABLE t__new (id INTEGER PRIMARY
/// KEY AUTOINCREMENT, …)` (any spacing); `None` if the definition does not start that way.
fn autoincrement_definition(sql: &str, table: &str) -> Option<String> {
    let open = sql.find('(')?;
    let head: Vec<&str> = sql[..open].split_whitespace().collect();
    if head != ["CREATE", "TABLE", table] {
        return None;
    }
    let body = &sql[open + 1..];
    // The first column definition must be `id INTEGER PRIMARY KEY`.
    let mut rest = body;
    for word in ["id", "INTEGER", "PRIMARY", "KEY"] {
        rest = rest.trim_start().strip_prefix(word)?;
        if !rest.starts_with(|c: char| c.is_whitespace() || c == ',') {
            return None;
        }
    }
    if rest.trim_start().starts_with("AUTOINCREMENT") {
        return None;
    }
    let key_end = body.len() - rest.len();
    Some(format!(
        "CREATE TABLE {table}__new ({} AUTOINCREMENT{rest}",
        &body[..key_end]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migrations::migrate;
    use rusqlite::Connection;

    #[test]
    fn definitions_are_rewritten_or_refused() {
        assert_eq!(
            autoincrement_definition("CREATE TABLE t (\n  id INTEGER PRIMARY KEY,\n  x INT)", "t")
                .unwrap(),
            "CREATE TABLE t__new (\n  id INTEGER PRIMARY KEY AUTOINCREMENT,\n  x INT)"
        );
        assert_eq!(
            autoincrement_definition("CREATE TABLE t (id    INTEGER PRIMARY KEY, x INT)", "t")
                .unwrap(),
            "CREATE TABLE t__new (id    INTEGER PRIMARY KEY AUTOINCREMENT, x INT)"
        );
        assert_eq!(
            autoincrement_definition("CREATE TABLE t (id INTEGER PRIMARY KEY AUTOINCREMENT)", "t"),
            None
        );
        assert_eq!(
            autoincrement_definition("CREATE TABLE t (x INT, id INTEGER PRIMARY KEY)", "t"),
            None
        );
        assert_eq!(
            autoincrement_definition("CREATE TABLE u (id INTEGER PRIMARY KEY)", "t"),
            None
        );
    }

    #[test]
    fn every_id_table_autoincrements_after_migration() {
        let mut c = Connection::open_in_memory().unwrap();
        migrate(&mut c).unwrap();
        for (table, _) in ID_TABLES {
            let sql: String = c
                .query_row(
                    "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?1",
                    [table],
                    |r| r.get(0),
                )
                .unwrap();
            assert!(sql.contains("AUTOINCREMENT"), "{table}: {sql}");
        }
        // The rebuilt tables keep their indexes.
        let n: i64 = c
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = 'repos_full_name'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 1);
        assert!(orphans(&WriteTx::new(&c)).unwrap().is_empty());
    }

    #[test]
    fn an_upgrade_keeps_rows_and_skips_ids_seen_in_events() {
        let mut c = Connection::open_in_memory().unwrap();
        super::super::migrations::migrate_to(&mut c, 9).unwrap();
        c.execute_batch(
            "INSERT INTO orgs (id, name) VALUES (1, 'alice');
             INSERT INTO users (id, login, hash, created, org_id) VALUES (1, 'alice', 'h', 0, 1);
             INSERT INTO events (created_ms, record_type, action, record_id, object)
                 VALUES (0, 'users', 'deleted', '7', '{}');",
        )
        .unwrap();
        migrate(&mut c).unwrap();
        let login: String = c
            .query_row("SELECT login FROM users WHERE id = 1", [], |r| r.get(0))
            .unwrap();
        assert_eq!(login, "alice");
        c.execute(
            "INSERT INTO users (login, hash, created) VALUES ('bob', 'h', 0)",
            [],
        )
        .unwrap();
        assert_eq!(
            c.last_insert_rowid(),
            8,
            "above the highest id ever recorded"
        );
    }

    #[test]
    fn orphans_are_found_and_removed() {
        let mut c = Connection::open_in_memory().unwrap();
        migrate(&mut c).unwrap();
        // What an older version left behind (it did not delete these with their owners).
        c.execute_batch(
            "PRAGMA foreign_keys = OFF;
             INSERT INTO perms (user_id, repo_id, created, updated) VALUES (5, 6, 0, 0);
             INSERT INTO pipelines (repo_id, number, status, event, branch, ref, created, data)
                 VALUES (9, 1, 'success', 'push', 'main', 'refs/heads/main', 0, '{}');",
        )
        .unwrap();
        let found = orphans(&WriteTx::new(&c)).unwrap();
        assert_eq!(found, vec![("perms", 1), ("pipelines", 1)]);
        remove_orphans(&WriteTx::new(&c)).unwrap();
        assert!(orphans(&WriteTx::new(&c)).unwrap().is_empty());
    }
}
