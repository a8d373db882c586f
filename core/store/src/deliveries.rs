//! Webhook deliveries already turned into pipelines, so that a forge's retry (or a manual
//! "redeliver") of the same delivery makes no second pipeline.
//!
//! A delivery is known by its forge-given id (`X-GitHub-Delivery` and the like), scoped to the
//! repository. The row is written in the transaction that creates the pipeline, and the check
//! runs in that transaction too, so two copies of one delivery arriving together make one
//! pipeline. Ids are kept for [`WINDOW_SECS`]; older rows go whenever a new one is written.
//!
//! The id is the forge's header, which its signature does not cover: a captured signed
//! delivery sent again with another id (or none) would pass as new. So a signed delivery is
//! also known by the SHA-256 of its body (`delivery_bodies`), which the signature does cover,
//! per repository (and so per forge), for [`BODY_WINDOW_SECS`].

use crate::OptionalExtension;
use crate::{Tx, WriteTx};
use rusqlite::params;

use super::{StoreResult, now_unix};

pub const SCHEMA: &str = r#"
    CREATE TABLE deliveries (
        repo_id     INTEGER NOT NULL,
        key         TEXT    NOT NULL,
        pipeline_id INTEGER NOT NULL,
        created     INTEGER NOT NULL,
        PRIMARY KEY (repo_id, key)
    ) WITHOUT ROWID;
    CREATE INDEX deliveries_created ON deliveries (created);
"#;

/// How long a delivery id is remembered: longer than any forge retries on its own.
pub const WINDOW_SECS: i64 = 24 * 3600;

/// The SQLite schema of the body digests (migration 18); PostgreSQL's is in `pg::schema`.
pub const BODY_SCHEMA: &str = r#"
    CREATE TABLE delivery_bodies (
        repo_id     INTEGER NOT NULL,
        sha256      BLOB    NOT NULL,
        pipeline_id INTEGER NOT NULL,
        created     INTEGER NOT NULL,
        PRIMARY KEY (repo_id, sha256)
    ) WITHOUT ROWID;
    CREATE INDEX delivery_bodies_created ON delivery_bodies (created);
"#;

/// How long a delivery's body is remembered: a replay within it makes no pipeline. Past it,
/// a captured delivery of a forge that signs nothing time-bound runs again (docs/security.md).
pub const BODY_WINDOW_SECS: i64 = 30 * 24 * 3600;

/// The pipeline delivery `key` of `repo_id` made within the window, if any: the id of the
/// pipeline, which may have been deleted since.
pub fn pipeline_of(conn: &Tx, repo_id: i64, key: &str) -> StoreResult<Option<i64>> {
    conn.cached_row(
        "SELECT pipeline_id FROM deliveries
             WHERE repo_id = ?1 AND key = ?2 AND created >= ?3",
        params![repo_id, key, now_unix() - WINDOW_SECS],
        |r| r.get(0),
    )
    .optional()
}

/// Remembers that delivery `key` made `pipeline_id`, and forgets expired deliveries.
pub fn record(conn: &WriteTx, repo_id: i64, key: &str, pipeline_id: i64) -> StoreResult<()> {
    let now = now_unix();
    conn.cached_exec(
        "DELETE FROM deliveries WHERE created < ?1",
        [now - WINDOW_SECS],
    )?;
    conn.cached_exec(
        "INSERT INTO deliveries (repo_id, key, pipeline_id, created) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (repo_id, key)
         DO UPDATE SET pipeline_id = excluded.pipeline_id, created = excluded.created",
        params![repo_id, key, pipeline_id, now],
    )?;
    Ok(())
}

/// The pipeline a delivery with this body made for `repo_id` within [`BODY_WINDOW_SECS`], if
/// any: the id of the pipeline, which may have been deleted since.
pub fn pipeline_of_body(conn: &Tx, repo_id: i64, sha256: &[u8; 32]) -> StoreResult<Option<i64>> {
    conn.cached_row(
        "SELECT pipeline_id FROM delivery_bodies
             WHERE repo_id = ?1 AND sha256 = ?2 AND created >= ?3",
        params![repo_id, &sha256[..], now_unix() - BODY_WINDOW_SECS],
        |r| r.get(0),
    )
    .optional()
}

/// Remembers that a delivery with this body made `pipeline_id`, and forgets expired bodies.
pub fn record_body(
    conn: &WriteTx,
    repo_id: i64,
    sha256: &[u8; 32],
    pipeline_id: i64,
) -> StoreResult<()> {
    let now = now_unix();
    conn.cached_exec(
        "DELETE FROM delivery_bodies WHERE created < ?1",
        [now - BODY_WINDOW_SECS],
    )?;
    conn.cached_exec(
        "INSERT INTO delivery_bodies (repo_id, sha256, pipeline_id, created) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (repo_id, sha256)
         DO UPDATE SET pipeline_id = excluded.pipeline_id, created = excluded.created",
        params![repo_id, &sha256[..], pipeline_id, now],
    )?;
    Ok(())
}

/// Forgets a repository's deliveries (the repository is being deleted).
pub fn delete_repo(conn: &WriteTx, repo_id: i64) -> StoreResult<()> {
    conn.cached_exec("DELETE FROM deliveries WHERE repo_id = ?1", [repo_id])?;
    conn.cached_exec("DELETE FROM delivery_bodies WHERE repo_id = ?1", [repo_id])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivery_names_its_pipeline_until_it_expires() {
        let tx = crate::sql::fresh_tx();
        let (repo, pipeline) = (7, 70);
        assert_eq!(pipeline_of(&tx, repo, "github:abc").unwrap(), None);
        record(&tx, repo, "github:abc", pipeline).unwrap();
        assert_eq!(
            pipeline_of(&tx, repo, "github:abc").unwrap(),
            Some(pipeline)
        );
        assert_eq!(pipeline_of(&tx, repo + 1, "github:abc").unwrap(), None);
        // Expired: not found, and gone with the next write.
        tx.execute(
            "UPDATE deliveries SET created = created - ?1",
            [WINDOW_SECS + 1],
        )
        .unwrap();
        assert_eq!(pipeline_of(&tx, repo, "github:abc").unwrap(), None);
        record(&tx, repo, "github:def", pipeline).unwrap();
        let rows: i64 = tx
            .query_row("SELECT COUNT(*) FROM deliveries", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 1);
        delete_repo(&tx, repo).unwrap();
        assert_eq!(pipeline_of(&tx, repo, "github:def").unwrap(), None);
    }

    #[test]
    fn a_body_names_its_pipeline_for_thirty_days_per_repository() {
        let tx = crate::sql::fresh_tx();
        let (repo, pipeline) = (7, 70);
        let (body, other) = ([1u8; 32], [2u8; 32]);
        assert_eq!(pipeline_of_body(&tx, repo, &body).unwrap(), None);
        record_body(&tx, repo, &body, pipeline).unwrap();
        assert_eq!(pipeline_of_body(&tx, repo, &body).unwrap(), Some(pipeline));
        assert_eq!(pipeline_of_body(&tx, repo, &other).unwrap(), None);
        assert_eq!(pipeline_of_body(&tx, repo + 1, &body).unwrap(), None);
        // A day past the id's window it is still known.
        tx.execute(
            "UPDATE delivery_bodies SET created = created - ?1",
            [WINDOW_SECS + 3600],
        )
        .unwrap();
        const { assert!(BODY_WINDOW_SECS >= 30 * 24 * 3600) };
        assert_eq!(pipeline_of_body(&tx, repo, &body).unwrap(), Some(pipeline));
        // Expired: not found, and gone with the next write.
        tx.execute(
            "UPDATE delivery_bodies SET created = created - ?1",
            [BODY_WINDOW_SECS],
        )
        .unwrap();
        assert_eq!(pipeline_of_body(&tx, repo, &body).unwrap(), None);
        record_body(&tx, repo, &other, pipeline + 1).unwrap();
        let rows: i64 = tx
            .query_row("SELECT COUNT(*) FROM delivery_bodies", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 1);
        delete_repo(&tx, repo).unwrap();
        assert_eq!(pipeline_of_body(&tx, repo, &other).unwrap(), None);
    }
}
