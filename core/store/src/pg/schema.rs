//! PostgreSQL schema migrations: numbered scripts, applied in order, once.
//!
//! Replicas starting together all call [`migrate`]; the first takes a session advisory lock
//! ([`MIGRATION_LOCK`]) and applies what is missing, the others wait on the lock and then find
//! nothing to do. Each script runs in its own transaction with its version row, so a failure
//! leaves the database at the last complete version. A database newer than this build is
//! refused: an old replica must not write under a schema it does not know.

use super::PgError;

/// Advisory lock key of migrations ("wl-migr" in ASCII): any constant other code never takes.
pub const MIGRATION_LOCK: i64 = 0x0077_6c2d_6d69_6772;

/// The scripts, version `i + 1` at index `i`.
const MIGRATIONS: &[&str] = &[
    // 1: the event outbox. `seq` comes from `events_seq`, drawn only under the outbox's
    // transaction lock (see `outbox`), so ids increase in commit order.
    r#"
    CREATE SEQUENCE events_seq;
    CREATE TABLE events (
        seq          BIGINT PRIMARY KEY,
        created_ms   BIGINT NOT NULL,
        record_type  TEXT   NOT NULL,
        action       TEXT   NOT NULL CHECK (action IN ('created', 'updated', 'deleted')),
        record_id    TEXT   NOT NULL,
        object       TEXT   NOT NULL,
        previous     TEXT,
        org_id       BIGINT,
        repo_id      BIGINT
    );
    CREATE INDEX events_record_type ON events (record_type, seq);
    CREATE INDEX events_org ON events (org_id, seq);
    "#,
];

/// The newest version this build knows.
pub fn latest() -> i64 {
    MIGRATIONS.len() as i64
}

/// Brings the database to [`latest`]; returns how many scripts it applied.
pub fn migrate(client: &mut postgres::Client) -> Result<usize, PgError> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .map_err(PgError::query("take the migration lock"))?;
    let applied = apply_missing(client);
    // Unlocked whatever happened; the session ending would release it too.
    let unlocked = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .map_err(PgError::query("release the migration lock"));
    let applied = applied?;
    unlocked?;
    Ok(applied)
}

fn apply_missing(client: &mut postgres::Client) -> Result<usize, PgError> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS woodlark_schema (
                 version    BIGINT PRIMARY KEY,
                 applied_ms BIGINT NOT NULL
             )",
        )
        .map_err(PgError::query("create the version table"))?;
    let current = version(client)?;
    if current > latest() {
        return Err(PgError::NewerSchema {
            found: current,
            known: latest(),
        });
    }
    let mut applied = 0;
    for (i, script) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        let version = i as i64 + 1;
        let fail = |source| PgError::Migration { version, source };
        let mut tx = client.transaction().map_err(fail)?;
        tx.batch_execute(script).map_err(fail)?;
        tx.execute(
            "INSERT INTO woodlark_schema (version, applied_ms) VALUES ($1, $2)",
            &[&version, &crate::now_unix_ms()],
        )
        .map_err(fail)?;
        tx.commit().map_err(fail)?;
        tracing::info!(version, "PostgreSQL schema migrated");
        applied += 1;
    }
    Ok(applied)
}

/// The database's schema version (0 before the first migration).
pub fn version(client: &mut postgres::Client) -> Result<i64, PgError> {
    let row = client
        .query_one("SELECT COALESCE(MAX(version), 0) FROM woodlark_schema", &[])
        .map_err(PgError::query("read the schema version"))?;
    Ok(row.get(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pg::testing::Cluster;

    #[test]
    fn replicas_starting_together_migrate_once_and_a_newer_schema_is_refused() {
        let cluster = Cluster::start();
        let url = cluster.database("migrate");
        let runs: Vec<usize> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..4)
                .map(|_| {
                    let url = url.clone();
                    s.spawn(move || migrate(&mut crate::pg::connect(&url).unwrap()).unwrap())
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        assert_eq!(runs.iter().sum::<usize>(), MIGRATIONS.len(), "{runs:?}");
        let mut client = crate::pg::connect(&url).unwrap();
        assert_eq!(version(&mut client).unwrap(), latest());
        assert_eq!(migrate(&mut client).unwrap(), 0);

        client
            .execute(
                "INSERT INTO woodlark_schema (version, applied_ms) VALUES ($1, 0)",
                &[&(latest() + 1)],
            )
            .unwrap();
        let err = migrate(&mut client).unwrap_err();
        assert!(matches!(err, PgError::NewerSchema { .. }), "{err}");
        // The lock was given back: another session can take it at once.
        let mut other = crate::pg::connect(&url).unwrap();
        let row = other
            .query_one("SELECT pg_try_advisory_lock($1)", &[&MIGRATION_LOCK])
            .unwrap();
        assert!(row.get::<_, bool>(0));
    }
}
