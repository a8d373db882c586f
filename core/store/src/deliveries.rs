//! Webhook deliveries already turned into pipelines, so that a forge's retry (or a manual
//! "redeliver") of the same delivery makes no second pipeline.
//!
//! A delivery is known by its forge-given id (`X-GitHub-Delivery` and the like), scoped to the
//! repository. The row is written in the transaction that creates the pipeline, and the check
//! runs in that transaction too, so two copies of one delivery arriving together make one
//! pipeline. Ids are kept for [`WINDOW_SECS`]; older rows go whenever a new one is written.

use crate::OptionalExtension;
use crate::Tx;
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
pub fn record(conn: &Tx, repo_id: i64, key: &str, pipeline_id: i64) -> StoreResult<()> {
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

/// Forgets a repository's deliveries (the repository is being deleted).
pub fn delete_repo(conn: &Tx, repo_id: i64) -> StoreResult<()> {
    conn.cached_exec("DELETE FROM deliveries WHERE repo_id = ?1", [repo_id])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivery_names_its_pipeline_until_it_expires() {
        let tx = Tx::in_memory_for_tests();
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
}
